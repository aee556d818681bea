#!/usr/bin/python3
"""tools/stability_report.py on a synthetic stability sweep (issue 18; ctest label unit).

Two families x two lrs plus one switch row at the high lr; one run diverged with a NaN
loss (its trainer stopped), one with a loss above its initial one after warmup, one run
resumed (its superseded rows must not count for the final validation loss). Checks every
table row against the synthetic values, the figures as PNG files, and that a status file
lacking a run of the manifest is refused in one line naming it.
Run: /usr/bin/python3 tests/tools/stability_report_test.py --source=.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE = "."


def write_run(root, name, rows):
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "metrics.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return d


def healthy(start, end, val, steps=10):
    rows = [{"step": s, "loss": start + (end - start) * (s - 1) / (steps - 1), "grad_norm": 1.0 / s} for s in range(1, steps + 1)]
    rows.append({"step": steps, "val_loss": val})
    return rows


class StabilityReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        root = self.tmp.name
        runs = []

        def add(name, family, model, lr, rows, state, diverged=None):
            d = write_run(root, name, rows)
            runs.append(({"name": name, "dir": d, "family": family, "model": model, "lr": lr,
                          "non_embedding_params": 1000 if family == "multiscreen" else 1024,
                          "weight_decay": 0.1 if family == "transformer" else 0.0,
                          "grad_clip": 1.0 if family == "transformer" else 0.0, "warmup_steps": 2, "steps": 10},
                         {"name": name, "state": state, "step": rows[-1]["step"], "steps": 10, "detail": "",
                          "diverged": diverged is not None, "diverged_step": diverged, "initial_loss": rows[0]["loss"]}))

        add("ms_lo", "multiscreen", "ms", 2.0 ** -6, healthy(11, 7, 7.5), "done")
        # Resumed from step 5: the first attempt's val_loss 1.0 at step 10 is superseded.
        resumed = healthy(11, 6, 1.0)[:5] + [{"step": 10, "val_loss": 1.0}, {"resumed_from": 5}] + healthy(11, 6, 6.5)[5:]
        add("ms_hi", "multiscreen", "ms", 2.0 ** -4, resumed, "done")
        add("tf_lo", "transformer", "tf", 2.0 ** -6, healthy(11, 8, 8.25), "done")
        nan = healthy(11, 9, 9.0)[:4] + [{"step": 5, "loss": None, "grad_norm": None, "skipped": True}]
        add("tf_hi", "transformer", "tf", 2.0 ** -4, nan, "diverged", 5)
        above = [{"step": 1, "loss": 10.0, "grad_norm": 1.0}, {"step": 2, "loss": 9.0, "grad_norm": 5.0},
                 {"step": 3, "loss": 10.5, "grad_norm": 40.0}, {"step": 4, "loss": 9.5, "grad_norm": 3.0},
                 {"step": 4, "val_loss": 9.75}]
        add("tf_sw", "transformer", "tf_switch", 2.0 ** -4, above, "diverged", 3)
        self.manifest = os.path.join(root, "sweep.json")
        with open(self.manifest, "w") as f:
            json.dump({"runs": [m for m, _ in runs]}, f)
        self.status = os.path.join(root, "status.json")
        with open(self.status, "w") as f:
            json.dump({"runs": [s for _, s in runs]}, f)
        self.figures = os.path.join(root, "figures")

    def tearDown(self):
        self.tmp.cleanup()

    def report(self, *extra):
        return subprocess.run([sys.executable, os.path.join(SOURCE, "tools", "stability_report.py"),
                               f"--manifest={self.manifest}", f"--status={self.status}", *extra],
                              capture_output=True, text=True, timeout=300)

    def test_tables_and_figures(self):
        r = self.report(f"--figures={self.figures}")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertIn("| multiscreen (ms) | 1,000 | 0 | 0 | 2^-6 | stable | 7.500 |", lines)
        self.assertIn("| multiscreen (ms) | 1,000 | 0 | 0 | 2^-4 | stable | 6.500 |", lines)  # not the superseded 1.0
        self.assertIn("| transformer (tf) | 1,024 | 0.1 | 1 | 2^-6 | stable | 8.250 |", lines)
        self.assertIn("| transformer (tf) | 1,024 | 0.1 | 1 | 2^-4 | diverged (step 5) | — |", lines)
        # The switch row is in the lr table only as a row at 2^-4 (one lr: no family sweep).
        self.assertFalse(any(l.startswith("| transformer (tf_switch)") for l in lines))
        at = lines[lines.index("At peak lr 2^-4:"):]
        self.assertIn("| ms | stable | 6.500 | 0.333 | 0.155 | 6.000 |", at)
        self.assertIn("| tf | diverged (step 5) | — | 0.333 | 0.292 | — |", at)
        self.assertIn("| tf_switch | diverged (step 3) | 9.750 | 40 | 21.5 | 9.500 |", at)
        for name in ("stability_lr.png", "stability_trajectories.png"):
            with open(os.path.join(self.figures, name), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_a_status_without_a_run_is_refused_naming_it(self):
        with open(self.status) as f:
            status = json.load(f)
        status["runs"] = status["runs"][1:]
        with open(self.status, "w") as f:
            json.dump(status, f)
        r = self.report()
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip(), f"stability_report: {self.status}: no run ms_lo of {self.manifest}")

    def test_a_malformed_manifest_is_refused_naming_it(self):
        with open(self.manifest, "w") as f:
            f.write("{")
        r = self.report()
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stderr.startswith(f"stability_report: {self.manifest}: cannot read the manifest"), r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--source", default=".")
    args, rest = p.parse_known_args()
    SOURCE = args.source
    unittest.main(argv=[sys.argv[0]] + rest)
