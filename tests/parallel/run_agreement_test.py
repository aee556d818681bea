#!/usr/bin/python3
"""Ranks that would train different runs end the job at start-up in one line naming
what differs (issue 31 §1): MPMD launch lines with another --steps (rank 0 finished,
rank 1 waited for ever in its step-11 collective) or another --lr (the replicas trained
different runs and the job exited 0), another file at the same relative path (the
run file agrees; the data's fingerprint does not), and node-local model files that differ
in a switch (issue 43 §1); one model or run directory spelled two ways agrees. A user error (a bad flag) that every
rank meets, or only one, is said once for the job (issue 31 §6).

Run: /usr/bin/python3 tests/parallel/run_agreement_test.py --multiscreen=build/multiscreen --source=. [--mpirun=mpirun]
"""
import argparse
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from train_e2e_test import SyntheticCorpusCase, synthetic_shards  # noqa: E402

BIN = SRC = MPIRUN = None


class RunAgreementTest(SyntheticCorpusCase):

    def mpmd(self, name, flags0, flags1, wdirs=None, data=None, env=None):
        run_dir = os.path.join(self.tmp.name, name)
        base = [BIN, "train", f"--config={self.config}", f"--data={data or self.data}", f"--run_dir={run_dir}"]
        cmd = [MPIRUN, "--oversubscribe", "--allow-run-as-root"]
        for i, flags in enumerate((flags0, flags1)):
            if i:
                cmd.append(":")
            cmd += ["-np", "1"] + (["--wdir", wdirs[i]] if wdirs else []) + base + flags
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})))
        self.assertEqual(r.returncode, 1, r.stderr[-2000:])
        ours = [l for l in (r.stdout + r.stderr).splitlines() if l.startswith("multiscreen")]
        self.assertEqual(len(ours), 1, r.stdout[-2000:] + r.stderr[-2000:])
        # Every rank exited 1 on its own: no rank aborted the job (Open MPI's MPI_ABORT banner).
        self.assertNotIn("MPI_ABORT", r.stdout + r.stderr)
        return ours[0]

    def test_another_steps_on_one_rank_is_named(self):
        line = self.mpmd("steps", ["--steps=10"], ["--steps=20"])
        self.assertIn("ranks disagree on steps: rank 0 has 10, rank 1 has 20", line)

    def test_another_lr_on_one_rank_is_named(self):
        line = self.mpmd("lr", ["--steps=4"], ["--steps=4", "--lr=0.001"])
        self.assertIn("ranks disagree on optimizer.lr: rank 0 has 0.0625, rank 1 has 0.001 ", line)

    def test_a_cpu_rank_whose_bf16_step_would_run_fp32_is_named(self):
        # (rank 1 under --isa=avx2 trained its fp32 fallback beside rank 0's bf16, with no word)
        with open("/proc/cpuinfo") as f:
            if "avx512_bf16" not in f.read():
                self.skipTest("no AVX512_BF16 here: every rank's bf16 step runs fp32 alike")
        line = self.mpmd("bf16", ["--steps=2", "--precision=bf16"], ["--steps=2", "--precision=bf16", "--isa=avx2"])
        self.assertIn("ranks disagree on the step's precision (bf16 on the CPU needs the avx512 path with AVX512_BF16): "
                      "rank 0 has bf16, rank 1 has fp32: no bf16 dot products on the avx2 path of this CPU", line)

    def node_local_models(self, name, rank1_line):
        """Two working directories, each with its own models/m.textproto: tiny_psi4, and on
        rank 1 with `rank1_line` appended (a node-local copy of one model file that differs)."""
        with open(os.path.join(SRC, "configs", "models", "tiny_psi4.textproto")) as f:
            text = f.read()
        wdirs = []
        for rank, extra in enumerate(("", rank1_line)):
            wdir = os.path.join(self.tmp.name, f"{name}_node{rank}")
            os.makedirs(os.path.join(wdir, "models"))
            with open(os.path.join(wdir, "models", "m.textproto"), "w") as f:
                f.write(text + extra + "\n")
            wdirs.append(wdir)
        return wdirs

    def test_a_model_switch_that_differs_between_node_local_files_is_named(self):
        # Issue 43 §1: the agreement compared the model's name, sizes and parameter count, so
        # ranks whose copies of one model file differed in a switch trained different models
        # and averaged their gradients (the job exited 0).
        for switch, line1, values in (("position", "position: ROPE", "rank 0 has mipe, rank 1 has rope"),
                                      ("tanh_norm", "tanh_norm: false", "rank 0 has true, rank 1 has false"),
                                      ("output_gate", "output_gate: false", "rank 0 has true, rank 1 has false")):
            with self.subTest(switch=switch):
                wdirs = self.node_local_models(switch, line1)
                line = self.mpmd(switch, ["--steps=2", "--model=models/m.textproto"],
                                 ["--steps=2", "--model=models/m.textproto"], wdirs=wdirs)
                self.assertIn(f"ranks disagree on the model's {switch}: {values} ", line)

    def test_one_model_and_one_run_directory_spelled_two_ways_agree(self):
        # Issue 43 §1: a name and the path of its file, a relative run directory and its
        # absolute path, were refused as different runs; so was the path with a trailing
        # slash while the directory did not exist yet (the fresh-eyes pass).
        name = "spelled_two_ways"
        run_dir = os.path.join(self.tmp.name, name)
        model_file = os.path.join(SRC, "configs", "models", "tiny_psi4.textproto")
        base = [BIN, "train", f"--config={self.config}", f"--data={self.data}", "--steps=2"]
        r = subprocess.run([MPIRUN, "--oversubscribe", "--allow-run-as-root",
                            "-np", "1", "--wdir", self.tmp.name, *base, f"--run_dir={name}", "--model=tiny_psi4",
                            ":", "-np", "1", *base, f"--run_dir={run_dir}/", f"--model={model_file}"],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertTrue(os.path.exists(os.path.join(run_dir, "metrics.jsonl")), os.listdir(run_dir))

    def test_a_user_error_on_every_rank_is_said_once(self):
        # Issue 31 §6: a bad flag under mpirun was printed by every rank.
        line = self.mpmd("bad_flag_everywhere", ["--steps=-3"], ["--steps=-3"])
        self.assertRegex(line, r"^multiscreen train: .*steps")
        self.assertNotIn("rank ", line)

    def test_a_bad_isa_variable_or_a_value_absl_cannot_read_is_said_once_with_exit_1(self):
        # Issue 43: a bad MULTISCREEN_ISA ended every rank with exit 2 and an "error:" line
        # each; --steps=abc printed absl's error on every rank.
        line = self.mpmd("bad_isa", ["--steps=2"], ["--steps=2"], env={"MULTISCREEN_ISA": "sse9"})
        self.assertEqual(line, "multiscreen train: MULTISCREEN_ISA=sse9: unknown instruction-set path 'sse9' "
                               "(expected generic, avx2, avx512 or native)")
        line = self.mpmd("steps_abc", ["--steps=abc"], ["--steps=abc"])
        self.assertRegex(line, r"^multiscreen train: --steps=abc: expected ")

    def test_a_user_error_on_one_rank_is_said_once_naming_it(self):
        line = self.mpmd("bad_flag_on_rank_1", ["--steps=4"], ["--steps=4", "--precision=fp64x"])
        self.assertRegex(line, r"^multiscreen train: rank 1 of 2: .*precision")

    def test_a_layout_or_device_error_is_said_once_and_every_rank_exits_1(self):
        # A field report: these printed "multiscreen: fatal on rank R of 2 ..." once per rank,
        # then Open MPI's MPI_ABORT banner.
        self.assertEqual(self.mpmd("layout", ["--tp=4"], ["--tp=4"]),
                         "multiscreen train: --tp=4 × --pp=1 = 4 does not divide the 2 ranks of this job")
        self.assertEqual(self.mpmd("device", ["--device=tpu"], ["--device=tpu"]),
                         "multiscreen train: --device=tpu: expected cpu, cuda or auto")

    def test_shards_of_another_tokenizer_are_said_once_and_every_rank_exits_1(self):
        # Every rank meets ids past V in its first windows (each its own): rank 0's is said.
        big = os.path.join(self.tmp.name, "big_ids")
        synthetic_shards(big, vocab=5000)
        os.remove(os.path.join(big, "val_000000.bin"))  # the training windows' check, at the first step
        line = self.mpmd("big_ids_run", ["--steps=2"], ["--steps=2"], data=big)
        self.assertRegex(line, r"^multiscreen train: \S+train_000000.bin: token \d+: training window 0 holds token id "
                               r"\d+, outside the vocabulary V = 97 of model tiny_psi4")

    def test_held_out_shards_of_another_tokenizer_are_said_once_and_every_rank_exits_1(self):
        # The held-out windows are scanned at start (each rank its dp shard's): that printed
        # once per rank, then Open MPI's MPI_ABORT banner.
        big = os.path.join(self.tmp.name, "big_val_ids")
        synthetic_shards(big, vocab=5000)
        line = self.mpmd("big_val_ids_run", ["--steps=2"], ["--steps=2"], data=big)
        self.assertRegex(line, r"^multiscreen train: \S+val_000000.bin: token \d+: validation window \d+ holds token "
                               r"id \d+, outside the vocabulary V = 97 of model tiny_psi4")

    def test_the_same_files_at_other_paths_agree(self):
        other = os.path.join(self.tmp.name, "copy_elsewhere")
        shutil.copytree(self.data, other)
        run_dir = os.path.join(self.tmp.name, "paths")
        base = [BIN, "train", f"--config={self.config}", f"--run_dir={run_dir}", "--steps=2"]
        r = subprocess.run([MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", "1", *base, f"--data={self.data}",
                            ":", "-np", "1", *base, f"--data={other}"], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])

    def test_another_file_at_the_same_path_is_named(self):
        a, b = os.path.join(self.tmp.name, "node_a"), os.path.join(self.tmp.name, "node_b")
        shutil.copytree(self.data, os.path.join(a, "shards"))
        synthetic_shards(os.path.join(b, "shards"), seed=7)  # same names, other tokens
        line = self.mpmd("same_path", ["--steps=4"], ["--steps=4"], wdirs=(a, b), data="shards")
        self.assertIn("ranks disagree on the data as opened: rank 0 has train: 30000 tokens, fingerprint ", line)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--mpirun", default="mpirun")
    args, rest = p.parse_known_args()
    BIN, SRC, MPIRUN = os.path.abspath(args.multiscreen), os.path.abspath(args.source), args.mpirun
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
