#!/usr/bin/python3
"""What a training run has reached, from its metrics.jsonl: steps and tokens, the final
training loss (mean of the last 10 finite steps), the last validation loss, and the
unigram entropy of a token shard to compare them with. scripts/demo prints it after
training. A run stopped early (before its first validation pass, or before its first
step) gets what exists, and a line saying what does not, instead of an error.

Run: /usr/bin/python3 tools/run_summary.py RUN_DIR/metrics.jsonl TRAIN_SHARD.bin
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metrics import read_metrics  # noqa: E402


def standing_rows(path):
    """metrics.jsonl's standing rows (tools/metrics.py: superseded rows and cut lines left
    out); [] when the file does not exist."""
    return read_metrics(path) if os.path.exists(path) else []


def unigram_entropy(shard):
    """Entropy in nats of the token frequencies of an llm.c .bin shard (version 1: uint16
    tokens, 2: uint32, after a 256 x int32 header)."""
    header = np.fromfile(shard, dtype=np.int32, count=256)
    tokens = np.fromfile(shard, dtype=np.uint16 if header[1] == 1 else np.uint32, offset=1024)
    p = np.bincount(tokens).astype(np.float64)
    p = p[p > 0] / tokens.size
    return float(-(p * np.log(p)).sum())


def summary_lines(metrics_path, shard):
    """The summary as lines of text; every line is there whatever the run reached."""
    rows = standing_rows(metrics_path)
    train = [r for r in rows if "loss" in r]
    val = [r for r in rows if "val_loss" in r]
    lines = []
    if not train:
        why = "does not exist" if not os.path.exists(metrics_path) else "has no training step"
        lines.append(f"no training steps: {metrics_path} {why} (the run stopped before its first step)")
    else:
        last = train[-1]
        lines.append(f"steps {last['step']}, tokens {last['tokens']:,}")
        finite = [r["loss"] for r in train[-10:] if r["loss"] is not None and math.isfinite(r["loss"])]
        if finite:
            lines.append(f"final training loss   {np.mean(finite):.3f} nats (mean of the last {len(finite)} steps)")
        else:
            lines.append("final training loss   none (the last steps were non-finite and skipped)")
    if val:
        lines.append(f"final validation loss {val[-1]['val_loss']:.3f} nats (at step {val[-1]['step']})")
    else:
        lines.append("final validation loss none (the run stopped before its first validation pass)")
    if os.path.exists(shard):
        lines.append(f"unigram entropy       {unigram_entropy(shard):.3f} nats (of the training shard's tokens)")
    else:
        lines.append(f"unigram entropy       none ({shard} does not exist)")
    return lines


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: run_summary.py RUN_DIR/metrics.jsonl TRAIN_SHARD.bin")
    print("\n".join(summary_lines(sys.argv[1], sys.argv[2])))


if __name__ == "__main__":
    main()
