#!/usr/bin/python3
"""Reads a run's metrics.jsonl as it stands (docs/training.md "Training").

The trainer only ever appends to metrics.jsonl. When a run resumes from step S
(or restarts from step 0) while the file holds rows of steps after S, it appends
{"resumed_from": S, "superseded_rows": N}: the N rows above it with a step after
S are superseded by the rows that follow. A line that is not JSON (a row cut
short by a crash, or one being written) is skipped.

  python3 tools/metrics.py RUN_DIR/metrics.jsonl   # prints the standing rows
"""
import json
import sys


def read_metrics(path):
    """The standing rows of metrics.jsonl at `path`, in order: training rows
    (with "loss") and validation rows (with "val_loss"); no markers."""
    rows = []
    with open(path) as f:
        for line in f:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(row, dict):
                continue
            if "resumed_from" in row:
                rows = [r for r in rows if r.get("step", 0) <= row["resumed_from"]]
            elif "step" in row:
                rows.append(row)
    return rows


if __name__ == "__main__":
    for row in read_metrics(sys.argv[1]):
        print(json.dumps(row))
