#!/usr/bin/python3
"""tools/run_summary.py (what scripts/demo prints after training) on fake run
directories: a finished run, one interrupted before its first validation pass, one
interrupted before its first step, and one whose last line was cut short.

Run: /usr/bin/python3 tests/tools/run_summary_test.py
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "tools", "run_summary.py")
sys.path.insert(0, os.path.join(ROOT, "tools"))
from random_tokens import write_tokens  # noqa: E402


def summary(metrics, shard):
    """Runs the script as scripts/demo does; returns its stdout (it must succeed)."""
    r = subprocess.run([sys.executable, SCRIPT, metrics, shard], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError(f"run_summary.py failed:\n{r.stderr}")
    return r.stdout


class RunSummaryTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.shard = os.path.join(self.tmp.name, "train_000000.bin")
        write_tokens(self.shard, [0, 1, 1, 2, 2, 2, 2, 3])  # p = 1/8, 2/8, 4/8, 1/8
        self.entropy = -sum(p * math.log(p) for p in (1 / 8, 2 / 8, 4 / 8, 1 / 8))
        self.metrics = os.path.join(self.tmp.name, "metrics.jsonl")

    def tearDown(self):
        self.tmp.cleanup()

    def write_metrics(self, rows, tail=""):
        with open(self.metrics, "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows) + tail)

    def steps(self, losses):
        return [{"step": i + 1, "loss": l, "tokens": 1024 * (i + 1), "skipped": l is None}
                for i, l in enumerate(losses)]

    def test_a_finished_run_gets_every_number(self):
        rows = self.steps([9.0, 8.0] + [5.0] * 10)
        rows.insert(2, {"step": 2, "val_loss": 7.5})
        rows.append({"step": 12, "val_loss": 4.25})
        self.write_metrics(rows)
        out = summary(self.metrics, self.shard)
        self.assertIn("steps 12, tokens 12,288\n", out)
        self.assertIn("final training loss   5.000 nats (mean of the last 10 steps)\n", out)
        self.assertIn("final validation loss 4.250 nats (at step 12)\n", out)
        self.assertIn(f"unigram entropy       {self.entropy:.3f} nats", out)

    def test_rows_superseded_by_a_resume_are_left_out(self):
        # Steps 1-3 and a validation at 3, then a resume from step 2 (tools/metrics.py's marker).
        rows = self.steps([9.0, 8.0, 99.0]) + [{"step": 3, "val_loss": 98.0},
                                               {"resumed_from": 2, "superseded_rows": 2}]
        rows += [{"step": 3, "loss": 7.0, "tokens": 3072, "skipped": False}]
        self.write_metrics(rows)
        out = summary(self.metrics, self.shard)
        self.assertIn("steps 3, tokens 3,072\n", out)
        self.assertIn("final training loss   8.000 nats (mean of the last 3 steps)\n", out)
        self.assertIn("final validation loss none", out)

    def test_a_run_stopped_before_its_first_validation_pass_prints_what_exists(self):
        self.write_metrics(self.steps([9.0, None, 7.0]))  # a skipped (non-finite) step too
        out = summary(self.metrics, self.shard)
        self.assertIn("steps 3, tokens 3,072\n", out)
        self.assertIn("final training loss   8.000 nats (mean of the last 2 steps)\n", out)
        self.assertIn("final validation loss none (the run stopped before its first validation pass)\n", out)
        self.assertIn(f"unigram entropy       {self.entropy:.3f} nats", out)

    def test_a_run_stopped_before_its_first_step_prints_what_exists(self):
        out = summary(self.metrics, self.shard)
        self.assertIn(f"no training steps: {self.metrics} does not exist", out)
        self.assertIn("final validation loss none", out)
        self.write_metrics([])
        self.assertIn("has no training step", summary(self.metrics, self.shard))
        self.assertIn("unigram entropy       none", summary(self.metrics, self.shard + ".missing"))

    def test_a_line_cut_short_by_the_interrupt_is_left_out(self):
        self.write_metrics(self.steps([9.0, 8.0]), tail='{"step": 3, "lo')
        out = summary(self.metrics, self.shard)
        self.assertIn("steps 2, tokens 2,048\n", out)
        self.assertIn("final training loss   8.500 nats (mean of the last 2 steps)\n", out)


if __name__ == "__main__":
    unittest.main()
