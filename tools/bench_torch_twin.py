#!/usr/bin/python3
"""Training-step speed of the dense eager PyTorch twin against `multiscreen bench train`,
measured in the same run.

The baseline is tools/multiscreen_twin.py's model (dense [B, N_H, T, T] relevance maps,
[B, T, V] logits, autograd) with torch.optim.AdamW (betas 0.9/0.95, eps 1e-8, no weight
decay), in float32, from the weights `multiscreen init` writes for the same model and
seed, on random tokens: the same model, the same optimizer, the same thread count.
The two are run alternately `--repeats` times; each run reports its median step, and the
summary is the median over runs and the ratio of tokens/s.

    /usr/bin/python3 tools/bench_torch_twin.py --multiscreen=build/multiscreen \
        --model=psi8 --seq_len=256 --micro_batch=4 --threads=2 [--steps=5 --warmup=2
        --repeats=3 --json]

With --torch_only the C++ side is skipped (the weights still come from `multiscreen init`).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import multiscreen_twin as twin  # noqa: E402


def torch_bench(cfg, params, B, T, steps, warmup, lr, seed):
    """Median seconds of a twin training step (forward, backward, AdamW)."""
    leaves = {name: torch.tensor(np.asarray(value, dtype=np.float32))
              .reshape(twin.expected_shape(cfg, name)).requires_grad_(True)
              for name, value in params.items()}
    opt = torch.optim.AdamW(list(leaves.values()), lr=lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.0)
    rng = np.random.default_rng(seed)
    times, losses = [], []
    for step in range(warmup + steps):
        seqs = torch.from_numpy(rng.integers(0, cfg["vocab"], size=(B, T + 1)))
        inputs, targets = seqs[:, :-1], seqs[:, 1:]
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss, _ = twin.forward(cfg, leaves, inputs, targets)
        loss.backward()
        opt.step()
        seconds = time.perf_counter() - start
        if step >= warmup:
            times.append(seconds)
            losses.append(float(loss.detach()))
    return statistics.median(times), losses


def cpp_bench(multiscreen, a):
    cmd = [multiscreen, "bench", "train", f"--model={a.model}", f"--seq_len={a.seq_len}",
           f"--micro_batch={a.micro_batch}", f"--steps={a.steps}", f"--warmup={a.warmup}",
           f"--threads={a.threads}", f"--seed={a.seed}", f"--lr={a.lr}", "--precision=fp32", "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--multiscreen", required=True, help="path to build/multiscreen")
    p.add_argument("--model", default="psi8")
    p.add_argument("--seq_len", type=int, default=256)
    p.add_argument("--micro_batch", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.0625)
    p.add_argument("--torch_only", action="store_true")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, "w.h5")
        subprocess.run([a.multiscreen, "init", f"--model={a.model}", f"--seed={a.seed}", f"--out={weights}"],
                       check=True, capture_output=True)
        cfg, params = twin.load_weights(weights)
    tokens = a.micro_batch * a.seq_len
    torch_s, cpp_s, cpp_runs = [], [], []
    for _ in range(a.repeats):
        if not a.torch_only:
            run = cpp_bench(a.multiscreen, a)
            cpp_runs.append(run)
            cpp_s.append(run["step_seconds"])
        seconds, _ = torch_bench(cfg, params, a.micro_batch, a.seq_len, a.steps, a.warmup, a.lr, a.seed)
        torch_s.append(seconds)
    result = {
        "model": a.model, "seq_len": a.seq_len, "micro_batch": a.micro_batch, "threads": a.threads,
        "torch_version": torch.__version__, "torch_step_seconds": torch_s,
        "torch_tokens_per_s": tokens / statistics.median(torch_s),
        "torch_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    if cpp_s:
        result.update({
            "cpp_step_seconds": cpp_s,
            "cpp_tokens_per_s": tokens / statistics.median(cpp_s),
            "cpp_mfu": statistics.median(r["mfu"] for r in cpp_runs),
            "cpp_peak_rss_bytes": max(r["peak_rss_bytes"] for r in cpp_runs),
            "speedup": statistics.median(torch_s) / statistics.median(cpp_s),
        })
    if a.json:
        print(json.dumps(result))
        return 0
    print(f"{a.model} T={a.seq_len} B={a.micro_batch}, fp32, {a.threads} threads, "
          f"{a.repeats} alternating runs of {a.steps} steps after {a.warmup} warm-up")
    print(f"  PyTorch twin (eager, torch {torch.__version__}): median step "
          f"{statistics.median(torch_s):.4f} s, {result['torch_tokens_per_s']:.0f} tokens/s  "
          f"(runs: {', '.join(f'{s:.4f}' for s in torch_s)})")
    if cpp_s:
        print(f"  multiscreen bench train:  median step {statistics.median(cpp_s):.4f} s, "
              f"{result['cpp_tokens_per_s']:.0f} tokens/s  (runs: {', '.join(f'{s:.4f}' for s in cpp_s)})")
        print(f"  speedup (tokens/s, multiscreen / PyTorch): {result['speedup']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
