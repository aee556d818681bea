#!/usr/bin/python3
"""`multiscreen train --dp_overlap=on|off` under mpirun (issue 15): with buckets small
enough that several are reduced during the backward, dp = 2 trains the same losses and
gradient norms bit for bit with the overlap on and off, plain and ZeRO-1, and every
metrics row carries comm_exposed_s >= 0; a bad --dp_overlap is one line naming it.

Run: /usr/bin/python3 tests/parallel/train_dp_overlap_test.py --multiscreen=build/multiscreen --source=. [--mpirun=mpirun]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from train_e2e_test import SyntheticCorpusCase  # noqa: E402

BIN = SRC = MPIRUN = None


def rows(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if '"loss"' in line and '"step"' in line]


class TrainDpOverlapTest(SyntheticCorpusCase):

    def train(self, name, *flags):
        run_dir = os.path.join(self.tmp.name, name)
        cmd = [MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", "2", BIN, "train", f"--config={self.config}",
               f"--data={self.data}", f"--run_dir={run_dir}", "--steps=6", "--eval_every=0", "--checkpoint_every=0",
               "--dp_bucket_mb=0.002", *flags]  # 524-element buckets: ~20 of them for tiny_psi4's layers
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.assertEqual(r.returncode, 0, f"{' '.join(cmd)}:\n{r.stderr[-3000:]}")
        return rows(run_dir)

    def test_overlap_on_and_off_train_the_same_bits(self):
        for zero in ("0", "1"):
            with self.subTest(zero=zero):
                off = self.train(f"off_z{zero}", "--dp_overlap=off", f"--zero={zero}")
                on = self.train(f"on_z{zero}", "--dp_overlap=on", f"--zero={zero}")
                self.assertEqual([r["step"] for r in on], list(range(1, 7)))
                self.assertEqual([(r["loss"], r["grad_norm"]) for r in on], [(r["loss"], r["grad_norm"]) for r in off])
                for r in on + off:
                    self.assertIn("comm_exposed_s", r)
                    self.assertTrue(math.isfinite(r["comm_exposed_s"]) and r["comm_exposed_s"] >= 0, r)

    def test_a_bad_dp_overlap_is_one_line(self):
        r = subprocess.run([BIN, "train", f"--config={self.config}", f"--data={self.data}", "--dp_overlap=maybe",
                            f"--run_dir={os.path.join(self.tmp.name, 'bad')}"], capture_output=True, text=True,
                           timeout=60)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("--dp_overlap", r.stderr)
        self.assertIn("must be on or off", r.stderr)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--mpirun", default="mpirun")
    args, rest = p.parse_known_args()
    BIN, SRC, MPIRUN = os.path.abspath(args.multiscreen), os.path.abspath(args.source), args.mpirun
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
