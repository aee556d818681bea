#!/usr/bin/python3
"""Whether one training layout fits the device (issue 45 item 3): what `multiscreen train
--device=cuda` asks before it loads its data or a checkpoint. The rank that holds the most
(tools/plan_memory.py rank_memory: the first pipeline stage with its micro-batches in
flight) against the device's bytes, and, whether it fits or not, the nearest layouts of the
same job that fit: the same ranks (tp·pp·dp) and the same sequences per optimizer step
(dp·micro_batch·grad_accum), from tools/plan.py's `layouts` (tp dividing N_H within a node,
pp dividing N_L, ZeRO-1 where dp > 1, at most 2^31 − 1 tokens a rank's step). Nearest: the
fewest of tp, pp, zero, micro_batch changed, then the smallest change (|log2| of each
ratio), then the least memory. Every figure modelled, none measured.

Run: /usr/bin/python3 tools/plan_fit.py --dims=JSON --tp=1 --pp=1 --dp=1 --zero=0
     --micro_batch=B --grad_accum=M --seq_len=T --precision=bf16|fp16|fp32
     --device_memory=BYTES [--gpus_per_node=8 --nearest=3]
Prints one JSON object: fits, peak_bytes_per_rank, device_memory_bytes, stage, slots,
breakdown {term: bytes}, terms {term: what it holds}, nearest [{tp, pp, dp, zero,
micro_batch, grad_accum, peak_bytes_per_rank}]; exit 0. A bad flag: one line, exit 1.
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plan  # noqa: E402  (the layouts `multiscreen plan` enumerates)
import plan_memory  # noqa: E402

FIELDS = ("tp", "pp", "dp", "zero", "micro_batch", "grad_accum")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dims", required=True, help="the model's sizes as JSON (`multiscreen plan --json`'s dims)")
    for name in FIELDS:
        p.add_argument(f"--{name}", type=int, default=0 if name == "zero" else 1)
    p.add_argument("--seq_len", type=int, required=True, help="tokens per sequence T")
    p.add_argument("--precision", default="bf16", help="bf16 | fp16 | fp32")
    p.add_argument("--device_memory", type=int, required=True, help="bytes of one device")
    p.add_argument("--gpus_per_node", type=int, default=8, help="ranks per node (tp lies within one)")
    p.add_argument("--nearest", type=int, default=3, help="layouts that fit to suggest")
    a = p.parse_args(argv)
    a.dims = json.loads(a.dims)
    for name in FIELDS + ("seq_len", "device_memory", "gpus_per_node"):
        if getattr(a, name) < (0 if name == "zero" else 1):
            raise ValueError(f"--{name}={getattr(a, name)} is out of range")
    if a.precision not in ("bf16", "fp16", "fp32"):
        raise ValueError(f"--precision={a.precision} is not bf16, fp16 or fp32")
    return a


def memory(dims, lay, seq, precision):
    """rank_memory of one layout (a dict with FIELDS)."""
    return plan_memory.rank_memory(dims, seq, lay["micro_batch"], lay["grad_accum"], lay["tp"], lay["pp"], lay["dp"],
                                   lay["zero"], precision)


def distance(lay, cur):
    """How far `lay` is from `cur`: (fields changed among tp, pp, zero, micro_batch; the sum
    of |log2| of their ratios and zero's change). dp and grad_accum follow from the others."""
    keys = ("tp", "pp", "zero", "micro_batch")
    changed = sum(lay[k] != cur[k] for k in keys)
    size = sum(abs(math.log2(lay[k] / cur[k])) for k in ("tp", "pp", "micro_batch")) + abs(lay["zero"] - cur["zero"])
    return changed, size


def fit(a):
    """The verdict for a's layout and its nearest layouts that fit."""
    cur = {k: getattr(a, k) for k in FIELDS}
    mem = memory(a.dims, cur, a.seq_len, a.precision)
    gpus, sequences = a.tp * a.pp * a.dp, a.dp * a.micro_batch * a.grad_accum
    candidates = []
    for lay in plan.layouts(a.dims, gpus, max(a.gpus_per_node, a.tp), sequences, a.seq_len):
        if lay == cur:
            continue
        peak = memory(a.dims, lay, a.seq_len, a.precision)["bytes"]
        if peak <= a.device_memory:
            candidates.append((distance(lay, cur), peak, dict(lay, peak_bytes_per_rank=peak)))
    candidates.sort(key=lambda c: (c[0], c[1]))
    return {"modelled": True, "fits": mem["bytes"] <= a.device_memory, "peak_bytes_per_rank": mem["bytes"],
            "device_memory_bytes": a.device_memory, "stage": mem["stage"], "slots": mem["slots"],
            "breakdown": mem["breakdown"], "terms": plan_memory.terms_of(a.dims),
            "nearest": [c[2] for c in candidates[:a.nearest]]}


def main(argv=None):
    try:
        a = parse_args(argv)
    except (ValueError, KeyError) as e:
        print(f"plan_fit.py: {e}", file=sys.stderr)
        return 1
    json.dump(fit(a), sys.stdout, ensure_ascii=False)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
