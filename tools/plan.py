#!/usr/bin/python3
"""`multiscreen plan` (issue 45): the tp × pp × dp layouts of a model on N GPUs,
each rank's device memory broken down (tools/plan_memory.py) and whether it fits, and the
layouts that fit ranked by modelled time per optimizer step. Every figure is modelled,
none measured.

Time of one optimizer step of a layout (all seconds, per rank):
  compute   tools/perf_model.py's per-op roofline model of the rank's shard (its layers,
            tiles or heads and vocabulary rows; bf16, the tiled screening kernels or
            FlashAttention-2), per micro-batch, and the once-per-step ops (BeginStep's
            packing in every in-flight slot, AdamW);
  tp        per micro-batch, all-reduces of [rows, d_E] fp32: Multiscreen one per layer
            forward (Δ) and one backward (∂x through W_cat), the Transformer two each way
            (attention and FFN); the embedding on the first stage (Multiscreen's again for
            ∂s_E, a Transformer's with sio); ∂y and three per-row statistics on the last
            (model/multiscreen.cc, model/transformer.cc, model/sharded_head.cc);
  pp        1F1B: (grad_accum + pp − 1) slots of the slowest stage's micro-batch, each with
            the send of x forward and of ∂x backward ([rows, d_E] fp32, point to point);
            the bubble is (pp − 1)/(grad_accum + pp − 1) of it;
  dp        the gradient reduction after the backward, not overlapped: the NCCL path the
            GPUs take does not overlap it yet (docs/parallelism.md "Overlapping the dp
            reduction"); all-reduce of the rank's fp32 gradients in 16 MiB buckets, or under
            ZeRO-1 reduce-scatter and the parameters' all-gather (the same bus volume); and
            with pp > 1 the W_E gradient summed between the first and last stage.
A collective of S bytes over n ranks takes α + S·f(n)/B, with f = 2(n − 1)/n for an
all-reduce and 1 for a send (nccl-tests doc/PERFORMANCE.md's bus bandwidth), B and α
those of NVLink when every rank of the group lies in one node, else of InfiniBand (GPU
constants below, sourced in docs/parallelism.md "Choosing tp, pp, dp"); the slowest group
of a kind sets its time. Ranks lie in the trainer's order, world rank r =
(dp_i·pp + pp_i)·tp + tp_i (parallel/process_grid.h), gpus_per_node consecutive ranks a
node: tp groups are neighbours, a replica's stages tp apart, and a replica that straddles
two nodes (tp1 pp3 on nodes of 8: ranks 6–8) sends over InfiniBand (group_links).

Run: /usr/bin/python3 tools/plan.py --dims=JSON --gpus=N [--seq_len=4096 --gpu=h100|h200|a100
     --gpus_per_node=8 --global_batch=TOKENS --precision=bf16|fp32|fp16 --windows=trained|init
     --top=10 --json]   (`multiscreen plan --model=M` passes --dims for the model it loads)
Exit status: 0 when a layout fits; 2 (NONE_FITS) when the plan was printed but none fits,
said in one line on stderr after it; 1 for a bad flag or no layout at all (one line, nothing
printed).
"""
import argparse
import copy
import json
import math
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_model  # noqa: E402  (the compute model: the same code, not a copy)
import plan_memory  # noqa: E402


class Gpu:
    """A GPU preset: memory (what nvidia-smi reports as the total), perf_model's compute
    constants, and the links' NCCL bus bandwidths and latencies (docs/parallelism.md)."""

    def __init__(self, name, memory_mib, peak_tflops, hbm_tbs, sms, clock_ghz, nvlink_gbs, ib_gbs,
                 nvlink_us=10.0, ib_us=20.0):
        self.name, self.memory = name, memory_mib * 2**20
        self.peak_tflops, self.hbm_tbs, self.sms, self.clock_ghz = peak_tflops, hbm_tbs, sms, clock_ghz
        self.nvlink = (nvlink_us * 1e-6, nvlink_gbs * 1e9)  # (α s, B bytes/s)
        self.ib = (ib_us * 1e-6, ib_gbs * 1e9)


GPUS = {
    "h100": Gpu("H100 SXM 80 GB", 81559, 989.0, 3.35, 132, 1.83, nvlink_gbs=360, ib_gbs=40),
    "h200": Gpu("H200 SXM 141 GB", 143771, 989.0, 4.8, 132, 1.83, nvlink_gbs=360, ib_gbs=40),
    "a100": Gpu("A100 SXM 80 GB", 81920, 312.0, 2.039, 108, 1.41, nvlink_gbs=230, ib_gbs=20),
}


# The exit status when the plan was printed but no layout fits (1: an error, nothing printed).
NONE_FITS = 2


class PlanError(Exception):
    """A bad flag or an impossible request: one line naming the flag."""


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dims", required=True, help="the model's sizes as JSON (what `multiscreen params --json` prints)")
    p.add_argument("--gpus", type=int, default=0, help="GPUs of the job (tp·pp·dp)")
    p.add_argument("--seq_len", type=int, default=4096, help="tokens per sequence T")
    p.add_argument("--gpu", default="h100", help="h100 | h200 | a100")
    p.add_argument("--gpus_per_node", type=int, default=8, help="GPUs per node (NVLink within, InfiniBand across)")
    p.add_argument("--global_batch", type=int, default=1 << 22, help="tokens per optimizer step (default 2^22)")
    p.add_argument("--precision", default="bf16", help="bf16 | fp16 | fp32: the memory of the step in that precision")
    p.add_argument("--windows", default="trained", help="trained (perf_model's assumed trained windows) | init")
    p.add_argument("--device_memory", type=int, default=0,
                   help="bytes of each GPU, in place of the preset's (train's --device_memory); 0: the preset's")
    p.add_argument("--top", type=int, default=10, help="layouts printed (--json lists all)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the tables")
    a = p.parse_args(argv)
    try:
        a.dims = json.loads(a.dims)
    except ValueError as e:
        raise PlanError(f"--dims is not JSON: {e}")
    if a.gpus < 1:
        raise PlanError(f"--gpus={a.gpus}: give the number of GPUs of the job, at least 1")
    if a.gpus > MAX_GPUS:  # the layouts are enumerated over the divisors of --gpus
        raise PlanError(f"--gpus={a.gpus}: more than {MAX_GPUS:,} GPUs is not planned")
    if a.gpus_per_node < 1:
        raise PlanError(f"--gpus_per_node={a.gpus_per_node} must be at least 1")
    if a.gpus > a.gpus_per_node and a.gpus % a.gpus_per_node:
        raise PlanError(f"--gpus={a.gpus} is not a whole number of nodes of --gpus_per_node={a.gpus_per_node}")
    if a.seq_len < 1:
        raise PlanError(f"--seq_len={a.seq_len} must be at least 1")
    a.gpu = a.gpu.lower()  # as train reads its flags: H100 = h100
    a.precision = a.precision.lower()
    if a.gpu not in GPUS:
        raise PlanError(f"--gpu={a.gpu} is not a known GPU (h100, h200, a100)")
    if a.device_memory < 0:
        raise PlanError(f"--device_memory={a.device_memory} must be a positive number of bytes")
    if a.precision not in ("bf16", "fp16", "fp32"):
        raise PlanError(f"--precision={a.precision} is not bf16, fp16 or fp32")
    if a.windows not in ("trained", "init"):
        raise PlanError(f"--windows={a.windows} is not trained or init")
    if a.global_batch < 1 or a.global_batch % a.seq_len:
        raise PlanError(f"--global_batch={a.global_batch} tokens is not a positive whole number of sequences of "
                        f"--seq_len={a.seq_len}")
    if a.top < 1:
        raise PlanError(f"--top={a.top} must be at least 1")
    return a


# The largest job planned (2^20 GPUs): layouts are enumerated over the divisors of --gpus
# by trial division, seconds at this size; a typo such as 10^12 would not end.
MAX_GPUS = 1 << 20


def transformer(dims):
    return dims.get("family", "MULTISCREEN") == "TRANSFORMER"


def divisors(n):
    return [k for k in range(1, n + 1) if n % k == 0]


def layouts(dims, gpus, gpus_per_node, sequences, seq):
    """Every (tp, pp, dp, zero, micro_batch, grad_accum): tp·pp·dp = gpus, tp dividing N_H and
    lying within a node, pp dividing N_L, micro_batch·grad_accum·dp = sequences, ZeRO-1 only
    where dp > 1, and a rank's step at most 2^31 − 1 tokens (common/config.h kMaxBatchTokens)."""
    out = []
    for tp in divisors(gpus):
        if dims["n_heads"] % tp or tp > gpus_per_node or (gpus > gpus_per_node and gpus_per_node % tp):
            continue
        for pp in divisors(gpus // tp):
            if dims["n_layers"] % pp:
                continue
            dp = gpus // (tp * pp)
            if sequences % dp:
                continue
            per_rank = sequences // dp
            if per_rank * (seq + 1) > (1 << 31) - 1:
                continue
            for micro_batch in divisors(per_rank):
                grad_accum = per_rank // micro_batch
                for zero in ((0, 1) if dp > 1 else (0,)):
                    out.append({"tp": tp, "pp": pp, "dp": dp, "zero": zero, "micro_batch": micro_batch,
                                "grad_accum": grad_accum})
    return out


def no_layout_reason(dims, a, sequences):
    """Why `layouts` found none. tp = pp = 1 is always a shape, so the shapes (tp | N_H within
    a node, pp | N_L) are never all that is missing: either no shape's dp divides the
    batch's sequences, or a rank's step would hold more than the 2^31 − 1 tokens one may
    (common/config.h kMaxBatchTokens)."""
    n_h, n_l, gpus, per_node = dims["n_heads"], dims["n_layers"], a.gpus, a.gpus_per_node
    dps = sorted({gpus // (tp * pp) for tp in divisors(gpus) for pp in divisors(gpus // tp)
                  if not (n_h % tp or tp > per_node or (gpus > per_node and per_node % tp) or n_l % pp)})
    whole = [dp for dp in dps if sequences % dp == 0]
    if not whole:
        return (f"--global_batch={a.global_batch}: its {sequences} sequence{'' if sequences == 1 else 's'} of "
                f"--seq_len={a.seq_len} split over no dp this model allows on --gpus={gpus} "
                f"(dp = {', '.join(map(str, dps))}: tp divides N_H = {n_h} within a node of {per_node}, pp N_L = {n_l})")
    per_rank = sequences // max(whole)
    return (f"--seq_len={a.seq_len}: a rank's step of {per_rank} sequence{'' if per_rank == 1 else 's'} holds "
            f"{per_rank * (a.seq_len + 1):,} tokens (T + 1 each), over the {(1 << 31) - 1:,} one step may hold "
            f"(2^31 − 1); lower --seq_len or --global_batch, or raise --gpus")


def collective(nbytes, ranks, link, factor):
    """α + S·f/B seconds of one collective of `nbytes` over `ranks` on `link` = (α, B)."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    alpha, bw = link
    return alpha + nbytes * factor / bw


def allreduce(nbytes, ranks, link):
    return collective(nbytes, ranks, link, 2 * (ranks - 1) / ranks)


def shard_windows(windows, ranks):
    """The windows of one rank's tiles when `ranks` = tp·pp ranks share them: every ranks-th,
    so each rank gets the same mix (the windows are spread evenly over the ranks)."""
    return windows[::ranks] or windows[:1]


def stage_compute(dims, seq, lay, stage, windows, hw, chunk_rows):
    """(seconds per micro-batch, seconds once per step) of tp rank 0 of `stage`, from
    perf_model's ops of its shard."""
    tp, pp, dp = lay["tp"], lay["pp"], lay["dp"]
    sh = plan_memory.Shard(dims, seq, lay["micro_batch"], tp, pp, "bf16", stage)
    if transformer(dims):
        params = plan_memory.transformer_params(dims, sh)
    else:
        params = plan_memory.shard_params(dims, sh.tiles, sh.layers, sh.vocab, sh.embed, sh.head)
    if lay["zero"]:
        params = -(-params // dp)
    shard = {"layers": sh.layers, "tiles": sh.tiles, "vocab": sh.vocab, "embed": sh.embed, "head": sh.head,
             "params": params}
    if transformer(dims):
        ops, syncs = perf_model.transformer_ops(dims["name"], seq, lay["micro_batch"], chunk_rows, shard=shard)
    else:
        ops, syncs, _, _ = perf_model.multiscreen_ops(dims["n_heads"], seq, lay["micro_batch"], windows, chunk_rows,
                                                      1.0, d_e=dims["d_e"], shard=shard)
    _, busy, overhead, _, once = perf_model.totals(ops, syncs, hw)
    # Each in-flight slot's model packs its own weights in BeginStep (parallel/pipeline.cc).
    slots = min(pp - stage, lay["grad_accum"])
    begin = sum(op.calls * op.time(hw)[0] for op in ops if "(BeginStep)" in op.name)
    return busy + overhead - once, once + (slots - 1) * begin


def tp_comm(dims, seq, lay, stage, link):
    """Seconds of tp all-reduces per micro-batch on `stage`."""
    tp, pp = lay["tp"], lay["pp"]
    if tp == 1:
        return 0.0
    rows = lay["micro_batch"] * seq
    x = 4 * rows * dims["d_e"]
    per_layer, embeds = (4, 1 + int(dims.get("sio", False))) if transformer(dims) else (2, 2)
    n = (per_layer * plan_memory.split(dims["n_layers"], pp, stage) + (embeds if stage == 0 else 0)
         + (1 if stage == pp - 1 else 0))
    t = n * allreduce(x, tp, link)
    if stage == pp - 1:
        t += 3 * allreduce(8 * rows, tp, link)  # row max, row sums, target logits (double)
    return t


def group_links(tp, pp, dp, gpus_per_node):
    """The link of each kind of group of the layout: {"tp", "pp", "embed", "dp"} → "nvlink" or
    "infiniband". Ranks lie in the trainer's order, world rank r = (dp_i·pp + pp_i)·tp + tp_i
    (parallel/process_grid.h), gpus_per_node consecutive ranks a node. A group is on NVLink
    only if all its ranks are on one node, and a kind of group is as slow as its slowest
    group: tp the tp groups, pp the sends between consecutive stages of a replica, embed the
    W_E pair (first and last stage of a tp rank), dp the replicas of one shard. Each group is
    an arithmetic run of ranks, on one node iff its first and last are; whether it is depends
    only on its first rank modulo gpus_per_node, so dp_i < gpus_per_node covers every case."""
    g = gpus_per_node
    def rank(d, p, t):
        return (d * pp + p) * tp + t
    straddles = {"tp": False, "pp": False, "embed": False, "dp": False}
    for d in range(min(dp, g)):
        for p in range(pp):
            for t in range(tp):
                first = rank(d, p, t)
                if t == 0 and tp > 1:
                    straddles["tp"] |= first // g != rank(d, p, tp - 1) // g
                if p + 1 < pp:
                    straddles["pp"] |= first // g != rank(d, p + 1, t) // g
                if p == 0 and pp > 1:
                    straddles["embed"] |= first // g != rank(d, pp - 1, t) // g
                if d == 0 and dp > 1:
                    straddles["dp"] |= first // g != rank(dp - 1, p, t) // g
    return {k: "infiniband" if v else "nvlink" for k, v in straddles.items()}


def step_time(dims, seq, lay, windows, gpu, gpus_per_node, hw, chunk_rows):
    """Modelled seconds of one optimizer step and its parts, and the link each kind of group
    uses (group_links)."""
    tp, pp, dp, M = lay["tp"], lay["pp"], lay["dp"], lay["grad_accum"]
    links = group_links(tp, pp, dp, gpus_per_node)
    tp_link, pp_link, embed_link, dp_link = (gpu.nvlink if links[k] == "nvlink" else gpu.ib
                                             for k in ("tp", "pp", "embed", "dp"))
    rows = lay["micro_batch"] * seq
    send = collective(4 * rows * dims["d_e"], 2, pp_link, 1.0) if pp > 1 else 0.0
    per_mb, once, tp_t = [], [], []
    for stage in sorted({0, pp // 2, pp - 1}):
        c, o = stage_compute(dims, seq, lay, stage, windows, hw, chunk_rows)
        t = tp_comm(dims, seq, lay, stage, tp_link)
        per_mb.append(c + t)
        tp_t.append(t)
        once.append(o)
    slot = max(per_mb) + 2 * send
    pipeline = (M + pp - 1) * slot
    bubble = (pp - 1) * slot
    grads = 4 * plan_memory.rank_memory(dims, seq, lay["micro_batch"], M, tp, pp, dp, lay["zero"], "bf16")["params"]
    buckets = max(1, math.ceil(grads / (4 * plan_memory.DP_BUCKET_ELEMENTS)))
    dp_t = 0.0
    if dp > 1:
        alpha, bw = dp_link
        dp_t = buckets * alpha + grads * 2 * (dp - 1) / dp / bw
        if lay["zero"]:
            dp_t += buckets * alpha  # the all-gather's collectives (its bytes are in the factor 2 above)
    if pp > 1:
        vocab = plan_memory.split(dims["vocab"], tp, 0)
        dp_t += allreduce(4 * vocab * dims["d_e"], 2, embed_link)
    total = pipeline + max(once) + dp_t
    compute = M * (max(per_mb) - tp_t[per_mb.index(max(per_mb))]) + max(once)
    return {"step_s": total, "compute_s": compute, "tp_s": M * tp_t[per_mb.index(max(per_mb))],
            "pp_s": bubble + M * 2 * send, "dp_s": dp_t, "slot_s": slot, "once_s": max(once),
            "bubble_fraction": (pp - 1) / (M + pp - 1), "links": links}


def limit_of(t):
    """What the step waits for beyond its compute: the largest communication part, or compute."""
    parts = {"tp all-reduces": t["tp_s"], "pp bubble and sends": t["pp_s"], "dp reduction": t["dp_s"]}
    name = max(parts, key=parts.get)
    share = parts[name] / t["step_s"]
    return f"{name} ({100 * share:.0f} %)" if share >= 0.05 else "compute"


def plan(a):
    """The plan as one dict: the request, the layouts (all, fitting first, by step time)."""
    dims, gpu = a.dims, copy.copy(GPUS[a.gpu])
    if a.device_memory > 0:  # train's --device_memory: the same GPU with that much memory
        gpu.memory = a.device_memory
        gpu.name = f"{gpu.name}, --device_memory={a.device_memory}"
    perf_model.use_architecture(dims["vocab"], dims["d_k"], dims["d_v"], float(dims.get("w_th", 256.0)))
    if transformer(dims):  # perf_model's Transformers by name: this one's sizes
        perf_model.TRANSFORMERS[dims["name"]] = (dims["n_layers"], dims["n_heads"], dims["d_e"])
    hw = perf_model.Hardware(perf_model.parse_args([f"--peak-tflops={gpu.peak_tflops}", f"--hbm-tbs={gpu.hbm_tbs}",
                                                    f"--sms={gpu.sms}", f"--clock-ghz={gpu.clock_ghz}"]))
    n_l, n_h, seq = dims["n_layers"], dims["n_heads"], a.seq_len
    if a.windows == "init":
        windows = perf_model.initial_windows(n_l, n_h)
    else:
        windows = perf_model.trained_windows(n_l, n_h, seq, 0.125)
    if transformer(dims):
        flops_per_token = perf_model.transformer_model_flops(dims["name"], seq)
    else:
        flops_per_token = perf_model.multiscreen_model_flops(n_h, seq, windows, d_e=dims["d_e"], tiles=n_l * n_h)
    sequences = a.global_batch // seq
    rows = []
    for lay in layouts(dims, a.gpus, a.gpus_per_node, sequences, seq):
        mem = plan_memory.rank_memory(dims, seq, lay["micro_batch"], lay["grad_accum"], lay["tp"], lay["pp"], lay["dp"],
                                      lay["zero"], a.precision)
        t = step_time(dims, seq, lay, shard_windows(windows, lay["tp"] * lay["pp"]), gpu, a.gpus_per_node, hw,
                      perf_model.parse_args([]).head_chunk_rows)
        tokens_per_s = a.global_batch / t["step_s"]
        rows.append(dict(lay, peak_bytes_per_rank=mem["bytes"], fits=mem["bytes"] <= gpu.memory,
                         step_ms=1e3 * t["step_s"], tokens_per_s=tokens_per_s,
                         mfu=flops_per_token * tokens_per_s / (a.gpus * gpu.peak_tflops * 1e12),
                         limited_by=limit_of(t),
                         time_ms={k[:-2] + "_ms": 1e3 * v for k, v in t.items() if k.endswith("_s")},
                         bubble_fraction=t["bubble_fraction"], links=t["links"],
                         memory={"stage": mem["stage"], "slots": mem["slots"], "buffers_bytes": mem["buffers"],
                                 "breakdown": mem["breakdown"]}))
    if not rows:
        raise PlanError(no_layout_reason(dims, a, sequences))
    rows.sort(key=lambda r: (not r["fits"], r["step_ms"] if r["fits"] else r["peak_bytes_per_rank"]))
    return {"modelled": True, "model": dims.get("name"), "dims": dims, "seq_len": seq, "global_batch_tokens": a.global_batch,
            "global_batch_sequences": sequences, "gpu": a.gpu, "gpu_name": gpu.name, "device_memory_bytes": gpu.memory,
            "gpus": a.gpus, "gpus_per_node": a.gpus_per_node, "precision": a.precision,
            "windows": None if transformer(dims) else a.windows,
            "model_flops_per_token": flops_per_token, "terms": plan_memory.terms_of(dims), "layouts": rows}


def ms(x):
    """Milliseconds for the tables: whole ones from 100 on, three significant digits below."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def print_plan(p, top):
    gib = plan_memory.gib
    fit = [r for r in p["layouts"] if r["fits"]]
    print(f"multiscreen plan (every figure modelled, none measured): {p['model']}, T = {p['seq_len']}, global batch "
          f"{p['global_batch_tokens']:,} tokens ({p['global_batch_sequences']} sequence"
          f"{'' if p['global_batch_sequences'] == 1 else 's'}), {p['gpus']} × "
          f"{p['gpu_name']} ({p['gpus_per_node']} per node), {p['precision']}"
          + (f", windows {p['windows']}" if p["windows"] else "")
          + ("" if p["precision"] == "bf16" else f" (memory of {p['precision']}; times modelled for bf16's kernels)"))
    print(f"{len(p['layouts'])} layouts, {len(fit)} fit in {gib(p['device_memory_bytes']):.1f} GiB per GPU"
          + (f"; the fastest {min(top, len(fit))}:" if fit else "; none fits, the smallest:"))
    shown = (fit or p["layouts"])[:top]
    print("| tp | pp | dp | zero | micro_batch | grad_accum | modelled GiB/rank | modelled step ms | "
          "modelled tokens/s | modelled MFU | modelled limit |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in shown:
        print(f"| {r['tp']} | {r['pp']} | {r['dp']} | {r['zero']} | {r['micro_batch']} | {r['grad_accum']} | "
              f"{gib(r['peak_bytes_per_rank']):.1f}{'' if r['fits'] else ' (does not fit)'} | {ms(r['step_ms'])} | "
              f"{r['tokens_per_s']:,.0f} | {100 * r['mfu']:.1f} % | {r['limited_by']} |")
    r = shown[0]
    m = r["memory"]
    print(f"\nmodelled memory of tp={r['tp']} pp={r['pp']} dp={r['dp']} zero={r['zero']} micro_batch={r['micro_batch']} "
          f"grad_accum={r['grad_accum']}, per rank of pipeline stage {m['stage']} ({m['slots']} "
          f"micro-batch{'es' if m['slots'] > 1 else ''} in flight):")
    unit, scale = ("GiB", 2**30) if r["peak_bytes_per_rank"] >= 2**30 else ("MiB", 2**20)
    for name, nbytes in m["breakdown"].items():
        print(f"  {name:17s} {nbytes / scale:8.2f} {unit}  {p['terms'][name]}")
    print(f"  {'total':17s} {r['peak_bytes_per_rank'] / scale:8.2f} {unit} of {gib(p['device_memory_bytes']):.1f} GiB")
    tm = r["time_ms"]
    print(f"modelled step {ms(tm['step_ms'])} ms: compute {ms(tm['compute_ms'])}, tp {ms(tm['tp_ms'])}, "
          f"pp bubble and sends {ms(tm['pp_ms'])} (bubble {100 * r['bubble_fraction']:.0f} %), dp {ms(tm['dp_ms'])}")


def main(argv=None):
    try:
        a = parse_args(argv)
        p = plan(a)
    except PlanError as e:
        print(f"multiscreen plan: {e}", file=sys.stderr)
        return 1
    try:
        if a.json:
            json.dump(p, sys.stdout, ensure_ascii=False)
            print()
        else:
            print_plan(p, a.top)
        sys.stdout.flush()
        if not any(r["fits"] for r in p["layouts"]):
            smallest = p["layouts"][0]
            print(f"multiscreen plan: no layout fits: the smallest (tp={smallest['tp']} pp={smallest['pp']} "
                  f"dp={smallest['dp']} zero={smallest['zero']} micro_batch={smallest['micro_batch']}) needs a "
                  f"modelled {plan_memory.gib(smallest['peak_bytes_per_rank']):.1f} GiB per rank, more than the "
                  f"{plan_memory.gib(p['device_memory_bytes']):.1f} GiB of --gpu={a.gpu}; raise --gpus, take a larger "
                  f"--gpu or lower --seq_len", file=sys.stderr)
            return NONE_FITS
    except BrokenPipeError:  # `plan … | head`: the reader went away; end as a pipe's writer does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGPIPE)
    except (OSError, AttributeError) as e:  # a full disk, a closed stdout (sys.stdout is None)
        reason = "it is closed" if sys.stdout is None else (e.strerror or str(e)) if isinstance(e, OSError) else str(e)
        print(f"multiscreen plan: cannot write the plan to standard output: {reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
