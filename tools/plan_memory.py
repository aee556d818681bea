#!/usr/bin/python3
"""Device memory of one training rank (issue 45), array by array as the CUDA step allocates
it: what `multiscreen plan` adds up per layout. A model on paper, not a measurement: each
term below names the code that allocates it, with the array's shape; bytes are exact for
those arrays (the emulated device's Buffers), and the two terms outside Buffers (the CUDA
context, NCCL's buffers) are estimates named as such.

The step of one rank (trainer/trainer.cc, parallel/step.cc, parallel/pipeline.cc):
  - the trainer's flat buffers over the rank's ParamLayout (P elements): fp32 parameters
    (the masters), fp32 gradients, AdamW's m and v (fp32) and its decay mask (uint8), the
    last three over the rank's ZeRO-1 shard ⌈P/dp⌉ with --zero=1;
  - a pipeline stage keeps one model instance per micro-batch in flight,
    slots = min(pp − stage, grad_accum) (parallel/pipeline_schedule.cc InFlightLimit), and
    each instance (model/multiscreen.h) holds its own compute copies of the weights, its
    activations, its backward buffers and its own kernel table (a cuBLASLt workspace and
    the kernels' scratch); the stage adds x and ∂x [B·T, d_E] fp32 per slot.
So the first stage (slots = min(pp, grad_accum)) holds the most; `rank_memory` adds the
terms for each stage and `peak` takes the largest.

Sizes: rows = micro_batch · T; nt = ⌈N_H/tp⌉ tiles and V_l = ⌈V/tp⌉ vocabulary rows (tp
rank 0 holds the extra ones: model/param_layout.cc SplitRange), L_s = layers of the stage
(stage 0 the extra ones), C = P's columns per tile = 2 d_K + d_V (+ d_V with the output
gate) (kernels/screening_types.h p_cols). Under bf16 (and fp16) a GEMM operand is also
kept as a 16-bit copy (kernels/cuda/cuda_kernel_table.cu HalfOperand: PackRounded,
PackOperand, PackAsGemm); under fp32 the GEMMs read the fp32 arrays themselves.
"""

# kernels/cuda/gemm.cu kWorkspaceBytes: one cuBLASLt workspace per kernel table.
CUBLAS_WORKSPACE = 32 << 20
# kernels/cuda/elementwise.h kReduceScratch doubles per kernel table (Dot and friends).
REDUCE_SCRATCH = 1025 * 8
# kernels/cuda/cross_entropy.h kHeadChunkRows, model/model_stage.h head_chunk_rows.
HEAD_CHUNK_ROWS = 512
# kernels/cuda/cross_entropy.h kHeadGroupBytes: the budget of the single-rank head's ∂Z
# buffer, the gradient rows [group, V] it keeps for its two backward products.
HEAD_GROUP_BYTES = 512 << 20
# kernels/cuda/screening.h kScreeningParts: per-token gradient parts of the screening backward (double).
SCREENING_PARTS = 4
# parallel/data_parallel.h bucket_elements (--dp_bucket_mb=16): fp32 elements per collective.
DP_BUCKET_ELEMENTS = 1 << 22
# Estimates of what no Buffer holds. The CUDA context with cuBLAS/cuBLASLt loaded: about
# 0.5 GiB on an H100 (module images, the context's own heaps); NCCL: per communicator of
# more than one rank, NCCL_BUFFSIZE (4 MiB, NCCL's documented default) for each of up to
# 16 channels, send and receive: 128 MiB.
CUDA_CONTEXT = 512 << 20
NCCL_BYTES_PER_COMM = 2 * 16 * (4 << 20)

# The terms in the order they are printed, with a line of what each holds.
TERMS = {
    "weights": "fp32 parameters, the masters (trainer.cc state_.params) [P]",
    "gradients": "fp32 gradients (trainer.cc grads_) [P], and each slot's ∂Ē [V_l, d_E] (multiscreen.cc d_e_bar_)",
    "adam_moments": "AdamW m, v fp32 and the decay mask uint8 (trainer/adamw.cc) [P, or ⌈P/dp⌉ with ZeRO-1]",
    "compute_copies": "per slot: W_cat [d_E, nt·C], W_O [nt·d_V, d_E], Ē and its norms, Ē rounded (bf16) fp32 "
                      "(multiscreen.cc BeginStep)",
    "bf16_copies": "per slot: the 16-bit GEMM operands of W_cat, W_O, Ē (HalfOperand; none under fp32)",
    "activations": "per slot and local layer: x_in [rows, d_E], P, U, q̃, k̃, v̄, h, 3 norms, and x_in, U as 16-bit "
                   "operands (multiscreen.cc LayersForward); x, ∂x [rows, d_E] (pipeline.cc)",
    "backward_buffers": "per slot: ∂U, ∂P [rows, nt·(d_V, C)] (no fp32 ∂P on the tiled bf16 path), ∂W_cat "
                        "[d_E, nt·C], ∂Δ and ∂P 16-bit, the tp product scratch [rows, d_E], the embedding's x⁰ "
                        "(multiscreen.cc LayersBackward)",
    "head": "last stage: PLNorm's y, its rounded copy, ∂y [rows, d_E]; the logits chunk [512, V_l] fp32, the ∂Z "
            "group [group, V_l] 16-bit (fp32, holding the logits, under fp32; group: whole chunks within 512 MiB), "
            "y 16-bit (cross_entropy.cu HeadLoss); with tp > 1 z [512, V_l], Ēᵀ's gradient "
            "[d_E, V_l], the chunk's 16-bit GEMM operands (sharded_head.cc)",
    "workspaces": "per kernel table (one per slot, one for the trainer): cuBLASLt 32 MiB, reductions; per slot the "
                  "screening backward's ∂h and parts (screening.cu) and the screening tables, one entry per local "
                  "layer (screening_table_cache.h); ZeRO-1's "
                  "bucket scratch (data_parallel.cc)",
    "nccl_buffers": "estimate: 128 MiB per NCCL communicator of more than one rank (tp, pp, dp, the W_E pair)",
    "cuda_context": "estimate: the CUDA context with cuBLAS loaded (no Buffer holds it)",
}
# The Transformer's own lines where they differ (model/transformer.cc).
TRANSFORMER_TERMS = dict(TERMS, **{
    "gradients": "fp32 gradients (trainer.cc grads_) [P], and each slot's ∂ of the table [V_l, d_E] "
                 "(transformer.cc d_table_)",
    "compute_copies": "per slot: W_qkv [d_E, 3 d_l], W_O, W_gu [2 F_l, d_E], W_down; the table (a copy of W_E, Ē "
                      "under sio), its rounded copy (bf16) fp32 (transformer.cc BeginStep)",
    "bf16_copies": "per slot: the 16-bit GEMM operands of the four weights and the table (none under fp32)",
    "activations": "per slot and local layer: x_in, xn1, x_mid, xn2 [rows, d_E], qkv, q, k, v, o, gu, h, the norms' "
                   "statistics, and xn1, o, xn2, h as 16-bit operands (transformer.cc LayersForward); x, ∂x "
                   "[rows, d_E] (pipeline.cc)",
    "backward_buffers": "per slot: ∂h, ∂gu, ∂a, ∂o, ∂q ∂k ∂v, ∂qkv, ∂W_qkv, their 16-bit operands, the tp product "
                        "scratch (transformer.cc LayersBackward)",
    "workspaces": "per kernel table (one per slot, one for the trainer): cuBLASLt 32 MiB, reductions; per slot the "
                  "attention's statistics, RoPE's table or turned q, k, the gains' partial sums "
                  "(cuda_transformer_kernels.cu); ZeRO-1's bucket scratch (data_parallel.cc)",
})


def terms_of(dims):
    """What each term holds, for dims' family."""
    return TRANSFORMER_TERMS if dims.get("family", "MULTISCREEN") == "TRANSFORMER" else TERMS


# The terms no Buffer holds (left out of what the emulated device's peak counts).
OUTSIDE_BUFFERS = ("nccl_buffers", "cuda_context")


def split(n, parts, i):
    """Elements of part i when n is split into `parts` (model/param_layout.cc SplitRange)."""
    base, extra = divmod(n, parts)
    return base + (1 if i < extra else 0)


def p_cols(dims):
    """P's columns per tile: 2 d_K + d_V, + d_V with the output gate."""
    return 2 * dims["d_k"] + (2 if dims.get("output_gate", True) else 1) * dims["d_v"]


def shard_params(dims, tiles, layers, vocab_rows, embed, head):
    """Elements of one rank's ParamLayout (model/param_layout.cc): W_E's rows where it embeds or
    owns the head, s_E, s_F, and per layer the tiles' W_Q, W_K, W_V, (W_G), W_O, s_w, s_r, s_O."""
    d_e, d_k, d_v = dims["d_e"], dims["d_k"], dims["d_v"]
    per_tile = d_e * (2 * d_k + (3 if dims.get("output_gate", True) else 2) * d_v) + 3
    return (vocab_rows * d_e if embed or head else 0) + int(embed) + int(head) + layers * tiles * per_tile


class Shard:
    """The sizes of tp rank 0 of one pipeline stage: its layers, tiles (heads), vocabulary
    rows, whether it embeds and owns the head, rows = micro_batch·T, and the byte widths of
    the precision (half: a 16-bit operand copy, 0 under fp32; rounded: fp32 arrays that hold
    rounded copies)."""

    def __init__(self, dims, seq, micro_batch, tp, pp, precision, stage):
        self.layers = split(dims["n_layers"], pp, stage)
        self.tiles = split(dims["n_heads"], tp, 0)
        self.vocab = split(dims["vocab"], tp, 0)
        self.embed, self.head = stage == 0, stage == pp - 1
        self.ends = self.embed or self.head
        self.rows, self.batch, self.seq, self.tp = micro_batch * seq, micro_batch, seq, tp
        self.half = 2 if precision in ("bf16", "fp16") else 0
        self.rounded = precision in ("bf16", "fp16")
        self.precision = precision


def screening_tables(dims, tiles, seq):
    """Device bytes of one layer's tile tables kept by the CUDA kernel table
    (kernels/cuda/screening_table_cache.cc ScreeningTablesDeviceBytes): params [tiles] (32 bytes each), the
    Softmask tables m(d), ∂m/∂w(d) [tiles, keys] fp32 with keys ≤ ⌈w⌉ ≤ w_th + 2 at initialization (w grows
    in training), the chain-rule factors [tiles, 6] double and ROPE's frequencies [d_K/2] double, each section
    256-byte aligned. One entry per local layer: a step's layers have distinct tables."""
    align = lambda n: -(-n // 256) * 256
    keys = min(seq, int(dims.get("w_th", 256)) + 2)
    pairs = dims["d_k"] // 2 if str(dims.get("position", "MIPE")).upper() == "ROPE" else 0
    return align(32 * tiles) + 2 * align(4 * tiles * keys) + align(8 * 6 * tiles) + align(8 * pairs)


def gradient_operand_only(dims, sh):
    """Whether the step holds ∂P only as its 16-bit GEMM operand, no fp32 ∂P: the CUDA table's
    bf16 path with the tiled screening kernels (their widths d_K 16, d_V 64, MiPE and the gate),
    whose query and key passes write ∂P as that operand (KernelTable::ScreeningBackwardToOperand)."""
    return (sh.precision == "bf16" and dims["d_k"] == 16 and dims["d_v"] == 64 and dims.get("output_gate", True)
            and str(dims.get("position", "MIPE")).upper() == "MIPE" and sh.seq < 2 ** 27)


def multiscreen_slot(dims, sh):
    """A Multiscreen instance's terms (model/multiscreen.cc) and its shard's parameter count."""
    d_e, d_k, d_v, nt, rows, half = dims["d_e"], dims["d_k"], dims["d_v"], sh.tiles, sh.rows, sh.half
    C = p_cols(dims)
    t = {}
    # The layers' packed weights W_cat [d_E, nt·C], W_O [nt·d_V, d_E] (fp32, then 16-bit); Ē, its norms, Ē rounded.
    w_layer = d_e * nt * C + nt * d_v * d_e
    t["compute_copies"] = 4 * sh.layers * w_layer + ((4 + (4 if sh.rounded else 0)) * sh.vocab * d_e + 4 * sh.vocab
                                                      if sh.ends else 0)
    t["bf16_copies"] = half * (sh.layers * w_layer + (sh.vocab * d_e if sh.head else 0))
    # Per layer: x_in; P; U, v̄, h; q̃, k̃; three norms (fp32); x_in and U 16-bit.
    t["activations"] = sh.layers * (4 * rows * (d_e + nt * (C + 3 * d_v + 2 * d_k + 3)) + half * rows * (d_e + nt * d_v))
    # ∂U, ∂P (none on the tiled bf16 path), ∂W_cat; ∂Δ and ∂P 16-bit; fp16's ∂Δ copy; the tp product scratch;
    # the embedding's x⁰.
    dp = 0 if gradient_operand_only(dims, sh) else C
    t["backward_buffers"] = (4 * rows * nt * (d_v + dp) + 4 * d_e * nt * C + half * rows * (d_e + nt * C)
                             + (4 * rows * d_e if sh.precision == "fp16" else 0) + (4 * rows * d_e if sh.tp > 1 else 0)
                             + (4 * rows * d_e if sh.embed else 0))
    # The screening backward's ∂h, parts and their sums (the tiled kernels keep no ∂q̃ ∂k̃ ∂v̄: their query and key
    # passes finish those rows in their epilogues, kernels/cuda/screening_tiled.h); the screening tables, one
    # entry per local layer (screening_tables).
    scratch = 4 * rows * nt * d_v + 8 * rows * nt * SCREENING_PARTS + 8 * sh.batch * nt * SCREENING_PARTS
    scratch += sh.layers * screening_tables(dims, nt, sh.seq)
    t["workspaces"] = scratch
    return t, shard_params(dims, nt, sh.layers, sh.vocab, sh.embed, sh.head)


def transformer_params(dims, sh):
    """Elements of a Transformer rank's ParamLayout (model/param_layout.cc): W_E's rows, s_E and
    s_F with sio, and per layer the gains, the local heads' W_Q W_K W_V W_O (and their scalars),
    the local hidden units' W_gate W_up W_down."""
    d_e, d_h, H = dims["d_e"], dims["d_k"], sh.tiles
    f_l = H * transformer_ffn(dims) // dims["n_heads"]
    scalars = H * (int(dims.get("qk_norm", False)) + int(dims.get("attention") == "ssmax")
                   + 2 * int(dims.get("attention") == "screening"))
    sio = dims.get("sio", False)
    return ((sh.vocab * d_e if sh.ends else 0) + int(sio and sh.embed) + int(sio and sh.head)
            + sh.layers * (2 * d_e + 4 * H * d_e * d_h + scalars + 3 * f_l * d_e))


def transformer_ffn(dims):
    """d_ff = ⌊8 d_E / 3⌋ (common/config.h ModelDims::d_ff)."""
    return 8 * dims["d_e"] // 3


def transformer_slot(dims, sh):
    """A Transformer instance's terms (model/transformer.cc, kernels/cuda/cuda_transformer_kernels.cu)
    and its shard's parameter count. H_l local heads of width d_h (d_l = H_l·d_h), F_l hidden units."""
    d_e, d_h, H, rows, half = dims["d_e"], dims["d_k"], sh.tiles, sh.rows, sh.half
    d_l, f_l = H * d_h, H * transformer_ffn(dims) // dims["n_heads"]
    attention = dims.get("attention", "softmax")
    screening, sio = attention == "screening", dims.get("sio", False)
    t = {}
    # W_qkv [d_E, 3 d_l], W_O [d_l, d_E], W_gu [2 F_l, d_E], W_down [F_l, d_E] (fp32, then 16-bit); the table
    # (Ē under sio, else a copy of W_E), its norms (sio), its rounded copy.
    w_layer = d_e * (4 * d_l + 3 * f_l)
    t["compute_copies"] = 4 * sh.layers * w_layer + ((4 + (4 if sh.rounded else 0)) * sh.vocab * d_e
                                                      + (4 * sh.vocab if sio else 0) if sh.ends else 0)
    t["bf16_copies"] = half * (sh.layers * w_layer + (sh.vocab * d_e if sh.head else 0))
    # Per layer: x_in, xn1, x_mid, xn2 [d_E]; rstd1, rstd2; qkv, q, k, v, o [d_l each but qkv 3]; gu, h;
    # qk_norm's norms or screening's three and its h; xn1, o, xn2, h 16-bit.
    norms = 3 * H + d_l if screening else (2 * H if dims.get("qk_norm", False) else 0)
    t["activations"] = sh.layers * (4 * rows * (4 * d_e + 2 + 7 * d_l + 3 * f_l + norms)
                                    + half * rows * (2 * d_e + d_l + f_l))
    # ∂h, ∂gu, ∂a, ∂o, ∂q ∂k ∂v, ∂qkv, ∂W_qkv; ∂out, ∂gu, ∂qkv 16-bit; fp16's copy; the tp scratch; sio's x⁰.
    t["backward_buffers"] = (4 * rows * (3 * f_l + d_e + 7 * d_l) + 4 * d_e * 3 * d_l
                             + half * rows * (d_e + 2 * f_l + 3 * d_l)
                             + (4 * rows * d_e if sh.precision == "fp16" else 0) + (4 * rows * d_e if sh.tp > 1 else 0)
                             + (4 * rows * d_e if sh.embed and sio else 0))
    # The attention's scratch: scales, lse, delta, parts [B·H_l·T] (double); RoPE: its table [T, d_h] where the
    # tiled kernel fuses it (bf16, softmax, d_h 64), else turned copies of q and k; the gains' partial sums.
    rows_h = sh.batch * H * sh.seq
    scratch = 8 * (2 * H + 3 * rows_h)
    if screening:
        scratch = 4 * rows * H * d_h + 8 * rows * H * SCREENING_PARTS + 8 * sh.batch * H * SCREENING_PARTS
        scratch += sh.layers * screening_tables(dims, H, sh.seq)
    elif sh.precision != "fp32" and attention == "softmax" and d_h == 64:
        scratch += 4 * sh.seq * d_h
    else:
        scratch += 2 * 4 * rows * d_l
    chunks = -(-rows // max(64, -(-rows // 65535)))
    scratch += 8 * chunks * d_e
    t["workspaces"] = scratch
    return t, transformer_params(dims, sh)


def head_group_rows(rows, vocab, elem_bytes, chunk_rows=HEAD_CHUNK_ROWS, group_bytes=HEAD_GROUP_BYTES):
    """Rows of each ∂Z group of the single-rank head but the last (kernels/cuda/cross_entropy.cu
    HeadGroupRows): the most whole chunks whose [group, vocab] rows of elem_bytes each fit
    group_bytes, at least one chunk, at most rows."""
    chunk = min(rows, max(1, chunk_rows))
    return min(rows, max(1, group_bytes // (vocab * elem_bytes) // chunk) * chunk)


def stage_memory(dims, seq, micro_batch, grad_accum, tp, pp, dp, zero, precision, stage):
    """Bytes per term (TERMS) of tp rank 0 of pipeline stage `stage`, and its facts. The model
    instance's own terms come from multiscreen_slot or transformer_slot (by dims' family), once
    per micro-batch in flight; the rest is the trainer's, the stage's and the head's."""
    sh = Shard(dims, seq, micro_batch, tp, pp, precision, stage)
    transformer = dims.get("family", "MULTISCREEN") == "TRANSFORMER"
    slot, P = (transformer_slot if transformer else multiscreen_slot)(dims, sh)
    d_e, rows, v_l, half = dims["d_e"], sh.rows, sh.vocab, sh.half
    slots = min(pp - stage, grad_accum)
    p_opt = -(-P // dp) if zero else P
    t = dict.fromkeys(TERMS, 0)
    t["weights"] = 4 * P
    t["gradients"] = 4 * P + slots * (4 * v_l * d_e if sh.ends else 0)  # + each slot's ∂Ē (∂ of the table)
    t["adam_moments"] = (4 + 4 + 1) * p_opt
    for k in ("compute_copies", "bf16_copies", "activations", "backward_buffers"):
        t[k] = slots * slot[k]
    t["activations"] += slots * 2 * 4 * rows * d_e  # the stage's x and ∂x (pipeline.cc)
    if sh.head:
        chunk = min(rows, HEAD_CHUNK_ROWS)
        # PLNorm's (or the final norm's) y, its rounded copy, ∂y [rows, d_E], its per-row statistic.
        t["head"] = 4 * rows * d_e * (3 if sh.rounded else 2) + 4 * rows
        if tp > 1:  # z, Ēᵀ's gradient; the chunk's statistics, targets, its products' 16-bit operands (gemm.cu)
            t["head"] += 4 * chunk * v_l + 4 * d_e * v_l + (8 + 8 + 8) * chunk + half * 2 * chunk * v_l
        elif half:  # the logits chunk fp32, y 16-bit, the ∂Z group 16-bit (cross_entropy.cu HeadLoss)
            t["head"] += 4 * chunk * v_l + half * (rows * d_e + head_group_rows(rows, v_l, half) * v_l) + 3 * 8 * rows
        else:  # fp32: the logits computed in the ∂Z group's rows, one buffer
            t["head"] += 4 * head_group_rows(rows, v_l, 4) * v_l + 3 * 8 * rows
    # ids [rows] int32; the backward's touched rows int32, offsets int64 (≤ V_l of them), positions int64 (embedding.cu)
    embedding = 4 * rows + 12 * min(v_l, rows) + 8 + 8 * rows if sh.embed else 0
    tables = slots + 1
    t["workspaces"] = tables * (CUBLAS_WORKSPACE + REDUCE_SCRATCH) + slots * (slot["workspaces"] + embedding)
    if zero and dp > 1:  # [dp, piece] fp32, piece = min(bucket/dp, the rank's shard ⌈P/dp⌉)
        t["workspaces"] += 4 * dp * min(max(1, DP_BUCKET_ELEMENTS // dp), p_opt)
    comms = (tp > 1) + (pp > 1) + (dp > 1) + (pp > 1 and sh.ends)
    t["nccl_buffers"] = comms * NCCL_BYTES_PER_COMM
    t["cuda_context"] = CUDA_CONTEXT
    facts = {"stage": stage, "slots": slots, "layers": sh.layers, "tiles": sh.tiles, "vocab_rows": v_l, "params": P,
             "optimizer_params": p_opt}
    return t, facts


def rank_memory(dims, seq, micro_batch, grad_accum, tp, pp, dp, zero, precision):
    """The stage whose rank holds the most: {"bytes": total, "buffers": the Buffers' part,
    "breakdown": {term: bytes}, and the stage's facts}."""
    best = None
    for stage in sorted({0, pp // 2, pp - 1}):
        terms, facts = stage_memory(dims, seq, micro_batch, grad_accum, tp, pp, dp, zero, precision, stage)
        total = sum(terms.values())
        if best is None or total > best["bytes"]:
            best = dict(facts, bytes=total, breakdown=terms,
                        buffers=total - sum(terms[k] for k in OUTSIDE_BUFFERS))
    return best


def bench_memory(dims, seq, micro_batch, precision):
    """The Buffers `bench train --device=cuda` holds (cli/bench_command.cc RunTrain): one model
    instance and its kernel table, a second table, fp32 parameters, gradients, m and v: the
    trainer's rank at tp = pp = dp = 1 without AdamW's decay mask, NCCL or the CUDA context.
    What its peak_device_bytes reports (kernels/buffer.h BufferBytesPeak)."""
    terms, facts = stage_memory(dims, seq, micro_batch, 1, 1, 1, 1, 0, precision, 0)
    terms["adam_moments"] -= facts["params"]  # no decay mask
    for k in OUTSIDE_BUFFERS:
        terms[k] = 0
    return terms


def gib(n):
    """Bytes in GiB, for the tables."""
    return n / 2**30


if __name__ == "__main__":
    raise SystemExit("plan_memory.py is a module: run tools/plan.py (or `multiscreen plan`)")
