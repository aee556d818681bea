#!/usr/bin/python3
"""`multiscreen plan`'s memory (tools/plan_memory.py, issue 45 item 2) against what the
emulated device allocates, within 1 % (the issue asks 5 %; they agree within a few hundred
bytes, the AddHost staging the plan leaves out), at shapes where the activations are about
10 % of the total, so that the plan without its activation term is refused:
  - one process: the Buffers `bench train --device=cuda` holds at its peak
    (peak_device_bytes) against plan_memory.bench_memory, tiny Multiscreen models and tiny
    Transformers (the simple and the tiled attention with RoPE fused, qk_norm and sio),
    bf16 and fp32;
  - the trainer under mpirun, a GPU per rank over NCCL: each rank's peak (train's "peak
    device memory" line) against the plan's Buffers for its stage, for tp × pp × dp layouts
    up to 4 ranks, ZeRO-1 among them, Multiscreen and a Transformer.

Run (emulated build): /usr/bin/python3 tests/cuda_emulator/plan_memory_emulated_test.py
     --multiscreen=build-emulated/multiscreen --source=. [--mpirun=mpirun]
     (MULTISCREEN_CONFIG_DIR pointing at configs/)
"""
import argparse
import json
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
TOLERANCE = 0.01


def dims_of(model, seq):
    """The model's sizes as `multiscreen plan` loads them (its JSON's dims)."""
    r = subprocess.run([MULTISCREEN, "plan", f"--model={model}", "--gpus=1", f"--seq_len={seq}",
                        f"--global_batch={seq}", "--json"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError(r.stderr)
    return json.loads(r.stdout)["dims"]


def measured(model, seq, batch, precision):
    r = subprocess.run([MULTISCREEN, "bench", "train", f"--model={model}", "--device=cuda", f"--seq_len={seq}",
                        f"--micro_batch={batch}", "--steps=1", "--warmup=0", "--peak_tflops=1",
                        f"--precision={precision}", "--threads=2", "--json"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise AssertionError(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])["peak_device_bytes"]


class PlanMemoryEmulatedTest(unittest.TestCase):
    def test_the_plans_buffers_equal_the_emulated_devices_peak(self):
        # tiny_psi4: d_K 8 (the simple screening kernels); tiny_tiled: d_K 16, d_V 64 (the tiled
        # ones under bf16); psi8: the real vocabulary; tiny_transformer_tiled: head width 64 (the
        # tiled attention with RoPE fused under bf16); tiny_transformer_all: qk_norm and sio.
        for model, seq, batch in (("tiny_psi4", 128, 8), ("tiny_tiled", 256, 8), ("psi8", 128, 2),
                                  ("tiny_transformer_tiled", 128, 4), ("tiny_transformer_all", 64, 32)):
            dims = dims_of(model, seq)
            for precision in ("bf16", "fp32"):
                with self.subTest(model=model, precision=precision):
                    terms = plan_memory.bench_memory(dims, seq, batch, precision)
                    plan, device = sum(terms.values()), measured(model, seq, batch, precision)
                    self.assertLess(abs(plan - device), TOLERANCE * device, f"plan {plan}, device {device}: {terms}")
                    without = plan - terms["activations"]
                    self.assertGreater(abs(without - device), TOLERANCE * device, "activations too small to matter")

    def test_each_ranks_plan_equals_the_trainers_peak_under_mpirun(self):
        if MPIRUN is None:
            self.skipTest("no mpirun")
        sys.path.insert(0, os.path.join(SOURCE, "tests", "trainer"))
        import train_e2e_test
        train_e2e_test.SRC = SOURCE
        config = os.path.join(SOURCE, "configs", "train", "tiny_test.textproto")
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(tmp, "data")
            train_e2e_test.synthetic_shards(data)
            # (model, tp, pp, dp, zero, grad_accum, precision); 8 sequences of 128 tokens per micro-batch
            for model, tp, pp, dp, zero, accum, precision in (
                    ("tiny_psi4", 1, 2, 1, 0, 4, "bf16"), ("tiny_psi4", 2, 1, 1, 0, 1, "bf16"),
                    ("tiny_psi4", 1, 1, 2, 1, 1, "bf16"), ("tiny_psi4", 2, 2, 1, 0, 4, "fp32"),
                    ("tiny_transformer_train", 2, 2, 1, 0, 4, "bf16"), ("tiny_transformer_train", 1, 1, 2, 1, 1, "fp32")):
                dims = dims_of(model, 128)
                ranks = tp * pp * dp
                r = subprocess.run(
                    [MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", str(ranks), MULTISCREEN, "train",
                     f"--config={config}", f"--model={model}", f"--data={data}",
                     f"--run_dir={tmp}/{model}_{tp}{pp}{dp}{zero}", "--steps=1",
                     "--device=cuda", "--comm=nccl", "--peak_tflops=1", "--micro_batch=8", f"--grad_accum={accum}",
                     "--seq_len=128", f"--precision={precision}", "--eval_every=0", f"--tp={tp}", f"--pp={pp}",
                     f"--zero={zero}"],
                    capture_output=True, text=True, timeout=600,
                    env=dict(os.environ, MULTISCREEN_EMULATED_GPUS=str(ranks), OMP_NUM_THREADS="1"))
                self.assertEqual(r.returncode, 0, r.stderr[-3000:])
                peaks = re.findall(r"rank (\d+) of \d+: dp \d+, pp (\d+), tp (\d+) .*: peak device memory (\d+) bytes",
                                   r.stderr)
                self.assertEqual(len(peaks), ranks, r.stderr[-3000:])
                for rank, stage, tp_rank, device in peaks:
                    with self.subTest(model=model, layout=(tp, pp, dp, zero), rank=rank):
                        terms, _ = plan_memory.stage_memory(dims, 128, 8, accum, tp, pp, dp, zero, precision, int(stage))
                        plan = sum(v for k, v in terms.items() if k not in plan_memory.OUTSIDE_BUFFERS)
                        self.assertLess(abs(plan - int(device)), TOLERANCE * int(device), f"plan {plan}: {terms}")
                        without = plan - terms["activations"]
                        self.assertGreater(abs(without - int(device)), TOLERANCE * int(device))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiscreen", required=True)
    parser.add_argument("--source", default=ROOT)
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    args, rest = parser.parse_known_args()
    MULTISCREEN, SOURCE, MPIRUN = os.path.abspath(args.multiscreen), os.path.abspath(args.source), args.mpirun
    unittest.main(argv=[sys.argv[0], *rest])
