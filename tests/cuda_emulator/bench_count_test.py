#!/usr/bin/python3
"""`multiscreen bench train --device=cuda --count` on the emulated device
(MULTISCREEN_CUDA=EMULATED): the table of what one training step runs, per kernel and
cuBLAS product, and tools/perf_model.py --counted beside it. Its GEMMs' m·n·k add up to 3·T·B·N (2·m·n·k FLOPs: 6·N·T, N the matrix
parameters) for tiny_psi4 in fp32 and tiny_tiled in bf16; the tiled path's step counts
mma.sync and the simple one none; host synchronizations and copies show; --count on the CPU
is refused in one line. The model's GEMMs (launches, FLOPs) equal the counted ones on the bf16
tiled path of tiny_tiled and tiny_transformer_tiled, and so do the bytes of the ops it models
as the code runs them (BYTES_AGREE); a 20 % change of one of those in the model fails. The
host synchronizations of a Multiscreen step equal the model's (3, at T = 256 and 1024, and with
two micro-batches: the loss is read once per step), and its launches the counts pinned in
LAUNCHES; a micro-batch copies nothing from pageable host memory.

Run: /usr/bin/python3 tests/cuda_emulator/bench_count_test.py --multiscreen=build-emulated/multiscreen --source=.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import unittest

BIN = SRC = None


def bench(*args, seq=256):
    return subprocess.run([BIN, "bench", "train", f"--seq_len={seq}", "--micro_batch=1", *args], capture_output=True,
                          text=True, timeout=600)


def counted(model, precision, seq=256, grad_accum=1):
    r = bench(f"--model={model}", f"--precision={precision}", "--device=cuda", "--count", "--json",
              f"--grad_accum={grad_accum}", seq=seq)
    if r.returncode != 0:
        raise AssertionError(f"bench train --count --model={model} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def matrix_params(model):
    """V·d_E + N_L·N_H·d_E·(2d_K + 3d_V) of a Multiscreen config (the GEMMs' weights)."""
    cfg = {}
    with open(os.path.join(SRC, "configs", "models", model + ".textproto")) as f:
        for line in f:
            if ":" in line and not line.lstrip().startswith("#"):
                k, v = line.split(":", 1)
                cfg[k.strip()] = v.strip().strip('"')
    psi = int(cfg["psi"])
    d, dk, dv, vocab = int(cfg.get("d_e", psi * psi)), int(cfg["d_k"]), int(cfg["d_v"]), int(cfg["vocab"])
    return vocab * d + psi * psi * d * (2 * dk + 3 * dv)


# Ops whose bytes tools/perf_model.py models as the code moves them (bf16 tiled path, T = 256):
# within 1 % of the counted bytes (32-byte sectors of columns of 16+ elements: exact here).
# The other ops disagree; docs/performance.md ("The model against the counts") lists them.
BYTES_AGREE = {
    "tiny_tiled": ["x += U·W_O (GEMM, β = 1 into fp32 x)", "logits z = e^{s_F}·y·Ēᵀ (GEMM, fp32 out)",
                   "dy = ∂Z·Ē (GEMM per ∂Z group)", "∂Ē += ∂Zᵀ·Y (GEMM, fp32 accumulate per ∂Z group)",
                   "∂W_O = Uᵀ·∂x (GEMM, fp32, β = 0)", "∂W_cat = x_inᵀ·∂P (GEMM, fp32)",
                   "∂x += ∂P·W_catᵀ (GEMM, β = 1)", "AdamW (fp32 master, m, v)",
                   "pack W_cat, W_O from the parameters into bf16 (BeginStep)", "unpack ∂W_cat into the gradients",
                   # P, U and ∂U at the code's widths (issue 42 part 1, 2026-12-07: the model had them
                   # all bf16, 0.36, 0.72, 1.22, 0.79, 0.16 MB against the fp32 code's 0.69, 1.18,
                   # 1.80, 0.98, 0.29; P and U are now bf16 in both, ∂U fp32; the passes' ∂P bf16
                   # in both since 2026-12-07)
                   "P = x_in·W_cat (GEMM)", "∂U = ∂x·W_Oᵀ (GEMM)",
                   "screening forward, tiled (steps 5–13, normalize fused)",
                   "screening backward, tiled query pass (gate, TanhNorm → ∂h, ∂g; ∂q̃ → ∂P, ∂r, ∂w parts)",
                   "screening backward, tiled key pass (∂k̃, ∂v̄ → ∂P)"],
    "tiny_transformer_tiled": ["x += o·W_O (GEMM, β = 1)", "x += h·W_down (GEMM, β = 1)",
                               "logits z = e^{s_F}·y·Ēᵀ (GEMM, fp32 out)", "dy = ∂Z·Ē (GEMM per ∂Z group)",
                               "∂Ē += ∂Zᵀ·Y (GEMM, fp32 accumulate per ∂Z group)", "AdamW (fp32 master, m, v)"],
}


def disagreements(model, counted_json):
    """What tools/perf_model.py's model of `counted_json`'s step gets wrong against the counts:
    a GEMM op's launches or FLOPs not equal, or a BYTES_AGREE op's bytes off by more than 1 %."""
    sys.path.insert(0, os.path.join(SRC, "tools"))
    import perf_model
    ops, syncs = perf_model.model_ops_for(counted_json, os.path.join(SRC, "configs", "models"))
    return check_ops(model, perf_model.compare_counted(counted_json, ops, syncs), ops)


def check_ops(model, c, ops):
    kinds = {op.name: op.kind for op in ops}
    wrong = []
    for o in c["ops"]:
        if kinds[o["op"]] == "gemm":
            if o["model_launches"] != o["counted_launches"] or o["model_flops"] != o["counted_flops"]:
                wrong.append(f"{o['op']}: launches {o['model_launches']} vs {o['counted_launches']}, "
                             f"FLOPs {o['model_flops']} vs {o['counted_flops']}")
        if o["op"] in BYTES_AGREE[model] and abs(o["counted_bytes"] - o["model_bytes"]) > 0.01 * o["model_bytes"]:
            wrong.append(f"{o['op']}: bytes {o['model_bytes']} vs {o['counted_bytes']}")
    return wrong


# Kernel launches (kernels and cuBLASLt products) of one counted Multiscreen step, T = 256,
# B = 1 (issue 42 part 2: 82, 136 and 104 before ∂s_E, ∂s_F and the tile scalars' gradients
# stayed on the device; 81, 135, 103 and 85 before W_cat's pack and unpack became one
# Copy2DJobs launch each per layer instead of four; 69, 111, 79 and 73 before the dot
# products of ∂s_E and ∂s_F became one launch each; 67, 109, 77 and 71 before W_cat and
# W_O went from the parameters into their bf16 operands in one launch each, PackJobsRounded,
# instead of a pack or copy and a RoundPack; tiny_tiled 65 and 69 then, before the tiled
# backward's query and key passes finished the unit-norm backward in their epilogues; 63 and
# 67 before the tiled forward normalized its rows in its own loads, one launch per layer
# instead of NormalizeKernel's and the aggregate kernel's; at T = 1024, 65 before the head's
# dy and ∂Ē products ran once per ∂Z group, the whole call here, instead of once per chunk;
# 61, 105, 77 and 63 before the head's loss stayed on the device: one MeanLossKernel per
# micro-batch sums its rows' losses there, where the host summed the downloaded statistics;
# under bf16 62, 106 and 64 before BeginStep's Ē went to its 16-bit operand in one RoundPack
# instead of a Round and a Pack; tiny_tiled 61 and 63 before the tiled backward's output pass
# ran in the query pass's prologue, one launch per layer instead of OutputBackwardKernel's
# and the query pass's; tiny_tiled 59 and 61 before P's GEMM wrote it in bf16, the RoundKernel
# pass over P per layer gone (issue 42); tiny_tiled 57 and 59 before the tiled forward wrote U
# as W_O's bf16 operand itself, the RoundPackKernel pass over U per layer gone (issue 42), and
# 55 and 57 before the query and key passes wrote ∂P as the projections' bf16 operand, the
# PackKernel pass over ∂P per layer gone;
# tiny_psi4, d_K = 8, runs the simple kernels). The
# model's launches still differ
# (docs/performance.md, "The model against the counts"): these pin the code's, so that a
# launch added to the step shows.
LAUNCHES = {("tiny_tiled", "bf16", 256): 53, ("tiny_psi4", "bf16", 256): 105, ("tiny_psi4", "fp32", 256): 78,
            ("tiny_tiled", "bf16", 1024): 55}  # T = 1024: two head chunks, one group, one wait still
# cudaMemcpyAsync calls of the same steps (from pinned and pageable host memory and device to
# device): 27, 43, 45 and 27 before the screening tables were kept on the device (issue 42,
# kernels/cuda/screening_table_cache.h: one upload per layer and step instead of 7 per layer and
# micro-batch); 15, 19, 21 and 15 before the head's loss stayed on the device (its two downloads
# of every row's log Σ exp and target logit became one read of the step's loss sum) and the
# embedding backward's three index arrays went up as one pinned CSR; 12, 16, 18 and 12 before the
# embedding backward's recomputed e^{s_E}·Ē[ids] read the forward's device copy of the ids
# instead of uploading them again (kernels/cuda/mirrored_upload.h).
ASYNC_COPIES = {("tiny_tiled", "bf16", 256): 11, ("tiny_psi4", "bf16", 256): 15, ("tiny_psi4", "fp32", 256): 17,
                ("tiny_tiled", "bf16", 1024): 11}
PAGEABLE = "cudaMemcpyAsync (pageable host memory)"  # the emulator's name for those


def async_copies(counted_json):
    """The counted step's cudaMemcpyAsync calls (uploads, downloads and device copies)."""
    return sum(r["calls"] for r in counted_json["counted"]["ops"] if r["name"] in ("cudaMemcpyAsync", PAGEABLE))


def pageable_copies(counted_json):
    """The counted step's cudaMemcpyAsync calls between the device and pageable host memory."""
    return sum(r["calls"] for r in counted_json["counted"]["ops"] if r["name"] == PAGEABLE)


class BenchCountTest(unittest.TestCase):
    def test_a_second_micro_batch_copies_its_tokens_and_no_tables_and_waits_for_nothing(self):
        # Issue 42: the screening tile tables are uploaded once per step and layer (the first
        # micro-batch's forward) and kept on the device (kernels/cuda/screening_table_cache.h). A
        # second micro-batch (bench --grad_accum=2, T = 256, B = 1, bf16) adds 3 uploads, all from
        # pinned memory (its token ids once: the embedding backward's recomputed e^{s_E}·Ē[ids]
        # reads the embedding's device copy; its targets for the head; the embedding backward's CSR
        # of touched rows, offsets and positions), and device-to-device copies: each layer's kept
        # input and the head's one: 4 + N_L; no host wait and no download (the head adds its loss
        # to a device sum that the step reads once). Before, 5 + N_L with the ids uploaded twice;
        # before that, 9 + N_L: the CSR in three uploads and
        # the head's 2 downloads and wait; before that, each layer's forward and backward uploaded
        # its tables again per micro-batch (7 copies per layer: 9 + 8 N_L, 25 and 41 here).
        for model in ("tiny_tiled", "tiny_psi4"):
            with self.subTest(model=model):
                layers = int(re.search(r"^psi: (\d+)", open(os.path.join(SRC, "configs", "models", model + ".textproto")).read(), re.M).group(1))
                one, two = (counted(model, "bf16", grad_accum=m) for m in (1, 2))
                self.assertEqual(async_copies(two) - async_copies(one), 4 + layers)
                self.assertEqual(two["counted"]["totals"]["syncs"], one["counted"]["totals"]["syncs"])
                self.assertEqual(two["counted"]["totals"]["bytes_to_host"], one["counted"]["totals"]["bytes_to_host"])
                # The one pageable copy of a step: BeginStep's scalars, read into a std::vector.
                self.assertEqual(pageable_copies(one), 1)
                self.assertEqual(pageable_copies(two), 1)

    def test_host_syncs_per_step_equal_the_models_and_launches_and_copies_stay_put(self):
        sys.path.insert(0, os.path.join(SRC, "tools"))
        import perf_model
        for (model, precision, seq), launches in LAUNCHES.items():
            with self.subTest(model=model, precision=precision, seq=seq):
                j = counted(model, precision, seq)
                _, syncs = perf_model.model_ops_for(j, os.path.join(SRC, "configs", "models"))
                # BeginStep's one read of the host scalars, the step's end, the loss's one read
                # (ModelStage::TakeLoss; the head keeps it on the device).
                self.assertEqual(syncs, 3)
                self.assertEqual(j["counted"]["totals"]["syncs"], syncs)
                ops = j["counted"]["ops"]
                self.assertEqual(sum(r["calls"] for r in ops if r["kind"] in ("kernel", "library")), launches)
                self.assertEqual(async_copies(j), ASYNC_COPIES[(model, precision, seq)])

    def test_the_heads_backward_products_run_once_over_two_chunks_as_the_model_has_them(self):
        # T = 1024: the head's logits in two chunks of 512, then dy = ∂Z·Ē and ∂Ē += ∂Zᵀ·Y once
        # over both (one ∂Z group, kernels/cuda/cross_entropy.h): ∂Ē read and written once, not twice.
        sys.path.insert(0, os.path.join(SRC, "tools"))
        import perf_model
        j = counted("tiny_tiled", "bf16", seq=1024)
        ops, syncs = perf_model.model_ops_for(j, os.path.join(SRC, "configs", "models"))
        c = {o["op"]: o for o in perf_model.compare_counted(j, ops, syncs)["ops"]}
        for name, launches in (("logits z = e^{s_F}·y·Ēᵀ (GEMM, fp32 out)", 2), ("dy = ∂Z·Ē (GEMM per ∂Z group)", 1),
                               ("∂Ē += ∂Zᵀ·Y (GEMM, fp32 accumulate per ∂Z group)", 1)):
            with self.subTest(op=name):
                self.assertEqual(c[name]["counted_launches"], launches)
                self.assertEqual(c[name]["model_launches"], launches)
                self.assertAlmostEqual(c[name]["counted_bytes"], c[name]["model_bytes"], delta=0.01 * c[name]["model_bytes"])

    def test_the_tiled_forward_writes_h_and_u_only_and_the_backward_reads_no_saved_rows(self):
        # Issue 42: the tiled backward recomputes q̃, k̃, v̄ and their norms from P's columns
        # (kernels/cuda/screening_tiled.h), so the one-launch forward writes only saved h and
        # U, 64 + 64 fp32 per (token, tile), where it also wrote q̃, k̃, v̄ and 3 norms (99 fp32
        # more: 929,792 bytes here before, 524,288 now). The passes read P's q, k, v columns
        # (fp32 in this code) where they read the saved rows (fp32): the same bytes but the
        # norms, 1 fp32 (query pass) and 2 (key pass) per (token, tile): 1,184,512 → 1,180,416
        # and 664,000 → 655,808 bytes read here (32-byte sectors of 16+ float columns: exact).
        # Since the GEMM writes P in bf16 and the kernels read it so (2026-12-07), P's reads
        # halve: the query pass's 1,180,416 → 852,736 (160 of its 1,152 bytes read per (token,
        # tile) were P's q, k, v, g at 4 bytes, now 2), the key pass's 655,808 → 459,200 (96
        # columns), the forward's 655,808 → 328,128; and the kernels run on bf16 P (their names
        # end in __nv_bfloat16). Since the forward writes U as W_O's bf16 operand itself
        # (2026-12-07), its writes are h fp32 and U bf16: 524,288 → 393,216 (its name's last
        # argument, U's element, __nv_bfloat16). Since the passes write ∂P in bf16 as the
        # projections' operand (2026-12-07; their last template argument), ∂P's writes halve: the
        # query pass's ∂P g and q columns 80 · 4 → 80 · 2 bytes per (token, tile) beside ∂h's
        # 64 · 4 and the 4 fp64 parts, 622,592 → 458,752 bytes written; the key pass's ∂P k and v
        # columns 80 · 4 → 80 · 2, 327,680 → 163,840.
        text = open(os.path.join(SRC, "configs", "models", "tiny_tiled.textproto")).read()
        psi = int(re.search(r"^psi: (\d+)", text, re.M).group(1))
        token_tiles = 256 * psi  # T = 256, B = 1, Ψ tiles per layer
        ops = {r["name"].split(" (")[0]: r for r in counted("tiny_tiled", "bf16")["counted"]["ops"]}
        forward = ops["TiledAggregateKernel<true, true, __nv_bfloat16, __nv_bfloat16>"]
        self.assertEqual(forward["calls"], psi)  # one per layer
        self.assertEqual(forward["bytes_written"], psi * token_tiles * (64 * 4 + 64 * 2))
        self.assertEqual(forward["bytes_read"], 328128)
        query = ops["TiledQueryBackwardKernel<true, true, true, __nv_bfloat16, __nv_bfloat16>"]
        key = ops["TiledKeyBackwardKernel<true, true, __nv_bfloat16, __nv_bfloat16>"]
        self.assertEqual(query["bytes_read"], 852736)
        self.assertEqual(key["bytes_read"], 459200)
        self.assertEqual(query["bytes_written"], psi * token_tiles * (64 * 4 + 80 * 2 + 4 * 8))
        self.assertEqual(key["bytes_written"], psi * token_tiles * 80 * 2)

    def test_the_models_gemms_and_agreeing_bytes_equal_the_counts(self):
        for model in BYTES_AGREE:
            with self.subTest(model=model):
                j = counted(model, "bf16")
                self.assertEqual(disagreements(model, j), [])
                # An op's bytes changed by 20 % in the model is caught.
                import perf_model
                ops, syncs = perf_model.model_ops_for(j, os.path.join(SRC, "configs", "models"))
                for op in ops:
                    if op.name == BYTES_AGREE[model][0]:
                        op.bytes *= 1.2
                wrong = check_ops(model, perf_model.compare_counted(j, ops, syncs), ops)
                self.assertEqual(len(wrong), 1, wrong)
                self.assertIn(BYTES_AGREE[model][0], wrong[0])

    def test_gemms_add_up_to_six_n_t_and_the_table_has_every_kind(self):
        for model, precision, tiled in (("tiny_psi4", "fp32", False), ("tiny_tiled", "bf16", True)):
            with self.subTest(model=model):
                j = counted(model, precision)
                c = j["counted"]
                self.assertEqual(c["granularity_bytes"], 32)
                t = c["totals"]
                self.assertEqual(t["gemm_mnk"], 3 * 256 * matrix_params(model))
                self.assertEqual(t["gemm_flops"], 2 * t["gemm_mnk"])
                ops = c["ops"]
                self.assertEqual(t["calls"], sum(r["calls"] for r in ops))
                kinds = {r["kind"] for r in ops}
                self.assertTrue({"kernel", "library", "copy", "sync"} <= kinds, kinds)
                gemms = [r for r in ops if r["kind"] == "library"]
                self.assertTrue(all(r["name"].startswith("cublasLtMatmul ") for r in gemms), gemms)
                # Every kernel and product touches memory; syncs are the step's own (no profile syncs).
                for r in ops:
                    if r["kind"] in ("kernel", "library"):
                        self.assertGreater(r["bytes_read"] + r["bytes_written"], 0, r["name"])
                self.assertGreater(t["syncs"], 0)
                self.assertEqual(t["syncs"], sum(r["calls"] for r in ops if r["kind"] == "sync"))
                mma = sum(r["mma"] for r in ops if "Tiled" in r["name"])
                self.assertEqual(mma > 0, tiled)
                self.assertEqual(t["mma"], mma)
                self.assertGreater(t["bytes_to_device"], 0)  # the tokens, at least
                self.assertEqual(j["steps"], 1)
                self.assertEqual(j["warmup"], 1)

    def test_the_text_table_has_a_row_per_op_and_totals(self):
        r = bench("--model=tiny_psi4", "--device=cuda", "--count")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("counted on the emulated device", r.stdout)
        self.assertIn("AdamWKernel (adamw.cu)", r.stdout)
        self.assertRegex(r.stdout, r"\n +\d+ +\d+ +\d+ +\d+ +13774848 .* total\n")  # 3·T·N, tiny_psi4

    def test_count_on_the_cpu_is_refused_in_one_line(self):
        r = bench("--model=tiny_psi4", "--device=cpu", "--count")
        self.assertNotEqual(r.returncode, 0)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("--count counts the device's work: add --device=cuda", lines[0])


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    a, rest = p.parse_known_args()
    BIN, SRC = os.path.abspath(a.multiscreen), os.path.abspath(a.source)
    unittest.main(argv=[sys.argv[0], *rest])
