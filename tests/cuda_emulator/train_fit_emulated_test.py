#!/usr/bin/python3
"""`multiscreen train --device=cuda` refuses a layout that cannot fit (issue 45 item 3), on
the emulated device: before it reads its data or makes its run directory, on every rank at
once under mpirun (both ranks exit, none waits), in one line naming the layout's flags, the
modelled bytes per rank (tools/plan_memory.py's, the figure `multiscreen plan` prints) and
--device_memory, after the plan's breakdown term by term; and the nearest layout it
suggests then fits and trains a step.

--device_memory is set between the plan's figures for micro_batch 8 and 16 (tiny_psi4,
T = 64, dp = 2), so the refusal and the suggestion follow from the plan, not from numbers
written here.

Run (emulated build): /usr/bin/python3 tests/cuda_emulator/train_fit_emulated_test.py
     --multiscreen=build-emulated/multiscreen --source=. --mpirun=mpirun
     (MULTISCREEN_CONFIG_DIR pointing at configs/)
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import plan_memory  # noqa: E402

MULTISCREEN = SOURCE = MPIRUN = None
# configs/models/tiny_psi4.textproto (what `multiscreen plan --json` prints under dims)
TINY = {"name": "tiny_psi4", "family": "MULTISCREEN", "n_layers": 4, "n_heads": 4, "d_e": 16, "d_k": 8, "d_v": 16,
        "vocab": 97, "w_th": 16.0, "position": "mipe", "output_gate": True}


class TrainFitTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        sys.path.insert(0, os.path.join(SOURCE, "tests", "trainer"))
        import train_e2e_test
        train_e2e_test.SRC = SOURCE
        self.data = os.path.join(self.tmp.name, "data")
        train_e2e_test.synthetic_shards(self.data)

    def tearDown(self):
        self.tmp.cleanup()

    def train(self, run_dir, device_memory, *flags):
        if MPIRUN is None:
            self.skipTest("no mpirun")
        return subprocess.run(
            [MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", "2", MULTISCREEN, "train",
             f"--config={os.path.join(SOURCE, 'configs', 'train', 'tiny_test.textproto')}", f"--data={self.data}",
             f"--run_dir={run_dir}", "--steps=1", "--device=cuda", "--comm=nccl", "--seq_len=64", "--eval_every=0",
             "--checkpoint_every=0", f"--device_memory={device_memory}", *flags],
            capture_output=True, text=True, timeout=300,
            env=dict(os.environ, MULTISCREEN_EMULATED_GPUS="2", OMP_NUM_THREADS="1"))

    def test_a_layout_that_cannot_fit_is_refused_on_both_ranks_and_the_suggestion_trains(self):
        def need(micro_batch, grad_accum):
            return plan_memory.rank_memory(TINY, 64, micro_batch, grad_accum, 1, 1, 2, 0, "fp32")["bytes"]
        big, half = need(16, 1), need(8, 2)
        self.assertLess(half, big)
        device_memory = (big + half) // 2
        run_dir = os.path.join(self.tmp.name, "new", "run")
        r = self.train(run_dir, device_memory, "--micro_batch=16", "--grad_accum=1")
        self.assertNotEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertFalse(os.path.exists(os.path.dirname(run_dir)), "the run directory was made")
        refusals = [l for l in r.stderr.splitlines() if l.startswith("multiscreen train: ")]
        self.assertEqual(len(refusals), 1, r.stderr[-3000:])  # said once, by rank 0
        self.assertIn(f"tp=1 pp=1 dp=2 zero=0 --micro_batch=16 --grad_accum=1 --seq_len=64 of tiny_psi4 (fp32) needs a "
                      f"modelled {big} bytes", refusals[0])
        self.assertIn(f"more than the device's {device_memory} bytes", refusals[0])
        self.assertIn("--device_memory", refusals[0])
        self.assertIn("  activations ", r.stderr)  # the plan's breakdown, term by term
        self.assertIn("  cuda_context ", r.stderr)
        self.assertNotIn("out of memory", r.stderr)
        nearest = re.search(r"nearest layouts that fit: ([^(;]+) \(", refusals[0])
        self.assertIsNotNone(nearest, refusals[0])
        flags = nearest.group(1).split()
        self.assertTrue(flags and all(f.startswith("--") for f in flags), flags)
        # The suggestion fits the same device and trains.
        layout = dict({"--micro_batch": "16", "--grad_accum": "1"}, **dict(f.split("=") for f in flags))
        r = self.train(run_dir, device_memory, *(f"{k}={v}" for k, v in layout.items()))
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("final train_loss", r.stdout)

    def test_the_smallest_gpu_of_the_job_decides(self):
        # Rank 1's GPU is smaller than rank 0's (MPMD: each rank its own emulated memory),
        # no --device_memory: rank 0 checks against rank 1's total and names it (rank 0
        # alone checked its own and passed a layout rank 1 cannot hold).
        if MPIRUN is None:
            self.skipTest("no mpirun")
        need = plan_memory.rank_memory(TINY, 64, 16, 1, 1, 1, 2, 0, "fp32")["bytes"]
        small = need - (1 << 20)
        run_dir = os.path.join(self.tmp.name, "mixed", "run")
        common = [MULTISCREEN, "train", f"--config={os.path.join(SOURCE, 'configs', 'train', 'tiny_test.textproto')}",
                  f"--data={self.data}", f"--run_dir={run_dir}", "--steps=1", "--device=cuda", "--comm=nccl",
                  "--seq_len=64", "--eval_every=0", "--checkpoint_every=0", "--micro_batch=16", "--grad_accum=1"]
        r = subprocess.run([MPIRUN, "--oversubscribe", "--allow-run-as-root",
                            "-np", "1", "-x", f"MULTISCREEN_EMULATED_GPU_MEMORY={8 << 30}", *common, ":",
                            "-np", "1", "-x", f"MULTISCREEN_EMULATED_GPU_MEMORY={small}", *common],
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, MULTISCREEN_EMULATED_GPUS="2", OMP_NUM_THREADS="1"))
        self.assertNotEqual(r.returncode, 0, r.stderr[-3000:])
        refusals = [l for l in r.stderr.splitlines() if l.startswith("multiscreen train: ")]
        self.assertEqual(len(refusals), 1, r.stderr[-3000:])
        self.assertIn(f"needs a modelled {need} bytes", refusals[0])
        self.assertIn(f"more than the device's {small} bytes", refusals[0])
        self.assertIn("the smallest GPU's total (rank 1)", refusals[0])
        self.assertFalse(os.path.exists(os.path.dirname(run_dir)), "the run directory was made")

    def test_without_the_planner_train_warns_and_trains(self):
        # A configs/ with no tools/ beside it (an install without the Python tools): the check
        # is skipped with a warning, not the run.
        os.symlink(os.path.join(SOURCE, "configs"), os.path.join(self.tmp.name, "configs"))
        r = subprocess.run([MULTISCREEN, "train", f"--config={os.path.join(SOURCE, 'configs', 'train', 'tiny_test.textproto')}",
                            f"--data={self.data}", f"--run_dir={self.tmp.name}/alone", "--device=cuda", "--steps=1",
                            "--micro_batch=2", "--seq_len=64", "--eval_every=0", "--device_memory=1M"],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, MULTISCREEN_CONFIG_DIR=os.path.join(self.tmp.name, "configs"),
                                    OMP_NUM_THREADS="2"))
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertIn("the layout's device memory was not checked up front: "
                      f"{os.path.join(self.tmp.name, 'tools', 'plan_fit.py')} not found", r.stderr)

    def single(self, name, *flags):
        """One process of train on tiny_test's config, its run directory `name` under the test's."""
        return subprocess.run([MULTISCREEN, "train", f"--config={os.path.join(SOURCE, 'configs', 'train', 'tiny_test.textproto')}",
                               f"--data={self.data}", f"--run_dir={self.tmp.name}/{name}", *flags],
                              capture_output=True, text=True, timeout=60)

    def test_a_bad_device_memory_is_one_line_naming_the_flag(self):
        r = self.single("bad", "--device=cuda", "--device_memory=80 GB")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip().splitlines(), ["multiscreen train: --device_memory=80 GB: expected bytes with an "
                                                         "optional K, M, G or T suffix (e.g. 1G)"])

    def test_device_memory_on_the_cpu_is_refused_as_ignored(self):
        # (`--device=cpu --device_memory=1K` trained with no word: the flag sized nothing)
        r = self.single("cpu", "--device=cpu", "--device_memory=1K")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip().splitlines(), ["multiscreen train: --device_memory=1K sizes a GPU for the fit "
                                                         "check of --device=cuda; this run's step runs on the cpu"])
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "cpu")))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiscreen", required=True)
    parser.add_argument("--source", default=ROOT)
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    args, rest = parser.parse_known_args()
    MULTISCREEN, SOURCE, MPIRUN = os.path.abspath(args.multiscreen), os.path.abspath(args.source), args.mpirun
    unittest.main(argv=[sys.argv[0], *rest])
