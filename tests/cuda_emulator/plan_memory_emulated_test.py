#!/usr/bin/python3
"""`multiscreen plan`'s memory (tools/plan_memory.py, issue 45 item 2) against what the
emulated device allocates: for tiny models, bf16 and fp32, the Buffers `bench train
--device=cuda` holds at its peak (peak_device_bytes) equal plan_memory.bench_memory's sum
within 1 % (the issue asks 5 %; they agree within a few hundred bytes, the AddHost staging
the plan leaves out), at shapes where the activations are about 10 % of the total, so that
the plan without its activation term is refused. One process (bench train); the Transformer's
step is not modelled yet.

Run (emulated build): /usr/bin/python3 tests/cuda_emulator/plan_memory_emulated_test.py
     --multiscreen=build-emulated/multiscreen   (MULTISCREEN_CONFIG_DIR pointing at configs/)
"""
import argparse
import json
import os
import subprocess
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import plan_memory  # noqa: E402

MULTISCREEN = None
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
        # ones under bf16); psi8: the real vocabulary.
        for model, seq, batch in (("tiny_psi4", 128, 8), ("tiny_tiled", 256, 8), ("psi8", 128, 2)):
            dims = dims_of(model, seq)
            for precision in ("bf16", "fp32"):
                with self.subTest(model=model, precision=precision):
                    terms = plan_memory.bench_memory(dims, seq, batch, precision)
                    plan, device = sum(terms.values()), measured(model, seq, batch, precision)
                    self.assertLess(abs(plan - device), TOLERANCE * device, f"plan {plan}, device {device}: {terms}")
                    without = plan - terms["activations"]
                    self.assertGreater(abs(without - device), TOLERANCE * device, "activations too small to matter")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiscreen", required=True)
    args, rest = parser.parse_known_args()
    MULTISCREEN = os.path.abspath(args.multiscreen)
    unittest.main(argv=[sys.argv[0], *rest])
