#!/usr/bin/python3
"""YaRN at inference (issue 30) end to end: `eval ppl --yarn_factor=F` of a tiny
Transformer against the PyTorch twin (tools/transformer_twin.py) whose RoPE frequencies
and attention scores are replaced here by YaRN written out from the paper (Peng et al.
2023, §3.2 NTK-by-parts, §3.4 the temperature), independently of kernels/cpu/rope.cc;
the full pass and the decoding cache agree; F = 1 is the plain model; auto is
context-matched (seq_len / train_len, and in a grid each cell's prompt); with qk_norm the temperature still applies (it is
on the scores, after the unit rows). A Multiscreen model with position: ROPE takes YaRN's
frequencies and no temperature (docs/ablations.md): its losses against the Multiscreen twin
(tools/multiscreen_twin.py) whose RoPE is replaced here by YaRN's frequencies; MIPE and
NOPE models refuse the flag in one line. --yarn_ramp=code (issue 43) against the twin with a
Python transcription of the YaRN authors' reference code's frequencies.

Run: /usr/bin/python3 tests/eval/yarn_cli_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import transformer_twin as twin  # noqa: E402
import multiscreen_twin as ms_twin  # noqa: E402
from random_tokens import write_tokens  # noqa: E402
sys.path.insert(0, os.path.join(HERE, ".."))
from cli_errors import OneLineErrors  # noqa: E402

BIN = None
SOURCE = None


def run(*args, timeout=120):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout)


def yarn_twin_losses(path, tokens, batch, seq_len, factor, train_len, frequencies=None):
    """The twin's token losses [B, T] with YaRN: θ'_d = (1 − γ) θ_d / F + γ θ_d,
    γ = clamp((L/λ_d − 1)/(32 − 1), 0, 1), λ_d = 2π/θ_d (`frequencies`, default
    yarn_frequencies); scores times (0.1 ln F + 1)²."""
    plain_rope, plain_weights = twin.rope, twin.weights
    frequencies = frequencies or yarn_frequencies

    def rope(z):
        T, d_h = z.shape[2], z.shape[3]
        half = d_h // 2
        freq = frequencies(d_h, factor, train_len)
        phi = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]
        cos, sin = torch.cos(phi).to(z.dtype), torch.sin(phi).to(z.dtype)
        a, b = z[..., :half], z[..., half:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    def weights(cfg, p, z):
        return plain_weights(cfg, p, z * (0.1 * math.log(factor) + 1) ** 2)

    twin.rope, twin.weights = rope, weights
    try:
        cfg, params = twin.load_weights(path)
        return twin.loss_and_grads(cfg, params, tokens, batch, seq_len)["token_losses"]
    finally:
        twin.rope, twin.weights = plain_rope, plain_weights


def yarn_frequencies(d, factor, train_len):
    """YaRN's NTK-by-parts θ'_p, p < d/2 (Peng et al. 2023 §3.2, α = 1, β = 32)."""
    theta = 10000.0 ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
    r = train_len / (2 * math.pi / theta)
    gamma = torch.clamp((r - 1.0) / (32.0 - 1.0), 0.0, 1.0)
    return (1 - gamma) * theta / factor + gamma * theta


def reference_code_yarn_frequencies(d, factor, train_len, beta_fast=32, beta_slow=1, base=10000):
    """θ'_p as YaRN's authors' code computes them (jquesnelle/yarn,
    scaled_rope/LlamaYaRNScaledRotaryEmbedding.py: find_correction_dim,
    find_correction_range with math.floor/ceil, linear_ramp_mask over the pair index;
    Hugging Face's _compute_yarn_parameters is the same), transcribed in float64."""
    def correction_dim(rotations):
        return (d * math.log(train_len / (rotations * 2 * math.pi))) / (2 * math.log(base))
    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), d - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low), 0, 1)
    mask = 1 - ramp  # inv_freq_mask, extrapolation_factor 1
    pos_freqs = base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    return (1.0 / (factor * pos_freqs)) * (1 - mask) + (1.0 / pos_freqs) * mask


def multiscreen_yarn_twin_losses(path, tokens, batch, seq_len, factor, train_len):
    """The Multiscreen twin's token losses [B, T] with position ROPE turned by YaRN's θ'_p
    (pairs (p, p + d_K/2) at position t by t θ'_p) and nothing else: no temperature."""
    plain_rope = ms_twin.rope_rotate

    def rope(z):
        T, d_k = z.shape[-2], z.shape[-1]
        half = d_k // 2
        phi = torch.arange(T, dtype=torch.float64)[:, None] * yarn_frequencies(d_k, factor, train_len)[None, :]
        cos, sin = torch.cos(phi).to(z.dtype), torch.sin(phi).to(z.dtype)
        a, b = z[..., :half], z[..., half:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    ms_twin.rope_rotate = rope
    try:
        cfg, params = ms_twin.load_weights(path)
        return ms_twin.loss_and_grads(cfg, params, tokens, batch, seq_len)["token_losses"]
    finally:
        ms_twin.rope_rotate = plain_rope


MULTISCREEN_TINY = "family: MULTISCREEN\npsi: 4\nd_k: 8\nd_v: 16\nvocab: 97\nw_th: 16\n"


class YarnCliTest(OneLineErrors):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def init(self, body, name):
        path = os.path.join(self.dir, f"{name}.textproto")
        with open(path, "w") as f:
            f.write(f'name: "{name}"\n' + body)
        w = os.path.join(self.dir, f"{name}.h5")
        r = run("init", f"--model={path}", "--seed=5", f"--out={w}")
        self.assertEqual(r.returncode, 0, r.stderr)
        return w

    def ppl(self, *args):
        out = os.path.join(self.dir, "ppl")
        shutil.rmtree(out, ignore_errors=True)  # results already in --out are refused without --resume
        r = run("eval", "ppl", f"--out={out}", *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "ppl.json")) as f:
            return json.load(f), r

    def check(self, body, name, factor=4, seed=7, extra=(), yarn_losses=None, plain_twin=twin):
        """eval ppl of a fresh model against its twin: --yarn_factor=`factor` (full pass and
        decoding), auto (48 / 8 = 6, context-matched) and 1 (the plain twin, which YaRN must
        move). yarn_losses(w, tokens, B, T, F, L): the twin with YaRN (default the Transformer's)."""
        yarn_losses = yarn_losses or yarn_twin_losses
        w = self.init(body, name)
        B, T, L = 2, 48, 8
        tokens = np.random.default_rng(seed).integers(0, 96, size=B * (T + 1))  # no EOS (96)
        t = os.path.join(self.dir, "t.bin")
        write_tokens(t, tokens)
        common = (f"--weights={w}", f"--data={t}", f"--seq_len={T}", "--stream", f"--train_len={L}", *extra)
        want = yarn_losses(w, tokens, B, T, float(factor), L).mean(axis=0)
        full, r = self.ppl(*common, f"--yarn_factor={factor}", "--method=full")
        self.assertIn(f"YaRN factor {factor}", r.stdout)
        self.assertEqual(full["yarn_factor"], float(factor))
        np.testing.assert_allclose(full["mean_loss"], want, rtol=0, atol=2e-6)
        decode, _ = self.ppl(*common, f"--yarn_factor={factor}", "--method=decode")
        np.testing.assert_allclose(decode["mean_loss"], want, rtol=0, atol=2e-6)
        # auto: 48 / 8 = 6, context-matched.
        auto, r = self.ppl(*common, "--yarn_factor=auto", "--method=full")
        self.assertEqual((auto["yarn_factor"], auto["yarn_context_matched"]), (6.0, True))
        np.testing.assert_allclose(auto["mean_loss"], yarn_losses(w, tokens, B, T, 6.0, L).mean(axis=0),
                                   rtol=0, atol=2e-6)
        # F = 1 (the default) is the plain twin, and differs from F = factor.
        plain, _ = self.ppl(*common, "--method=full")
        cfg, params = plain_twin.load_weights(w)
        plain_want = plain_twin.loss_and_grads(cfg, params, tokens, B, T)["token_losses"].mean(axis=0)
        np.testing.assert_allclose(plain["mean_loss"], plain_want, rtol=0, atol=2e-6)
        # (errors against the twin: ~2e-7; YaRN's effect on these random-init models: 2e-4, 3e-2 with qk_norm)
        self.assertGreater(np.abs(np.array(plain["mean_loss"]) - want).max(), 1e-4)

    def test_transformer_with_yarn_equals_the_twin_with_yarn(self):
        self.check("family: TRANSFORMER\nvocab: 97\nn_layers: 2\nn_heads: 2\nd_e: 32\n", "yarn_tiny")

    def test_the_code_ramp_equals_the_twin_with_the_reference_codes_frequencies(self):
        # --yarn_ramp=code (issue 43): head width 32, L = 16: the reference's correction
        # range is pairs [0, 2] (the paper's ramp: γ = 0.05, 0.01 there), F = 3.
        w = self.init("family: TRANSFORMER\nvocab: 97\nn_layers: 2\nn_heads: 1\nd_e: 32\n", "yarn_code")
        B, T, L, F = 2, 48, 16, 3.0
        tokens = np.random.default_rng(11).integers(0, 96, size=B * (T + 1))
        t = os.path.join(self.dir, "t.bin")
        write_tokens(t, tokens)
        common = (f"--weights={w}", f"--data={t}", f"--seq_len={T}", "--stream", f"--train_len={L}", "--yarn_factor=3")
        want = yarn_twin_losses(w, tokens, B, T, F, L, reference_code_yarn_frequencies).mean(axis=0)
        for method in ("full", "decode"):
            code, r = self.ppl(*common, "--yarn_ramp=code", f"--method={method}")
            self.assertIn("the authors' code's ramp", r.stdout)
            self.assertEqual(code["yarn_ramp"], "code")
            np.testing.assert_allclose(code["mean_loss"], want, rtol=0, atol=2e-6)
        paper, r = self.ppl(*common, "--method=full")  # the default: the paper's ramp, another result
        self.assertIn("the paper's ramp", r.stdout)
        self.assertNotIn("yarn_ramp", paper)
        paper_want = yarn_twin_losses(w, tokens, B, T, F, L).mean(axis=0)
        np.testing.assert_allclose(paper["mean_loss"], paper_want, rtol=0, atol=2e-6)
        self.assertGreater(np.abs(paper_want - want).max(), 1e-4)
        r = run("eval", "ppl", *common[:-1], "--yarn_ramp=code", f"--out={self.dir}/o")
        self.assert_one_line_error(r, "--yarn_ramp=code: YaRN is off (no --yarn_factor, or 1)")

    def test_the_temperature_applies_with_unit_q_and_k(self):
        self.check("family: TRANSFORMER\nvocab: 97\nn_layers: 2\nn_heads: 2\nd_e: 32\nqk_norm: true\n", "yarn_qk")

    def test_auto_in_a_grid_matches_each_cells_prompt(self):
        # Context-matched per cell: F = (prompt tokens + the 8 generated) / train_len.
        w = self.init("family: TRANSFORMER\nn_layers: 1\nn_heads: 2\nd_e: 16\n", "gpt2_t")
        out = os.path.join(self.dir, "pk")
        tok = os.path.join(SOURCE, "data_cache", "gpt2")
        r = run("eval", "passkey", f"--weights={w}", "--contexts=120,240", "--depths=0", "--instances=1",
                "--yarn_factor=auto", "--train_len=32", f"--out={out}", f"--tokenizer={tok}", timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "passkey.json")) as f:
            cells = json.load(f)["cells"]
        self.assertEqual(len(cells), 2)
        for cell in cells:
            self.assertEqual(cell["yarn_factor"], (cell["mean_prompt_tokens"] + 8) / 32)
            self.assertGreater(cell["yarn_factor"], 3)

    def test_multiscreen_rope_takes_yarns_frequencies_and_no_temperature(self):
        # The paper's Figs. 21-22 (the RoPE ablation with fixed and context-matched YaRN).
        # --as_learned: the twin has no window expansion.
        self.check(MULTISCREEN_TINY + "position: ROPE\n", "ms_rope", factor=2, seed=9, extra=("--as_learned",),
                   yarn_losses=multiscreen_yarn_twin_losses, plain_twin=ms_twin)

    def test_multiscreen_without_rope_refuses_yarn(self):
        w = os.path.join(self.dir, "ms.h5")
        r = run("init", "--model=tiny_psi2", "--seed=1", f"--out={w}")
        self.assertEqual(r.returncode, 0, r.stderr)
        t = os.path.join(self.dir, "t.bin")
        write_tokens(t, np.arange(40) % 30)
        r = run("eval", "ppl", f"--weights={w}", f"--data={t}", "--seq_len=16", "--stream", "--yarn_factor=2",
                f"--out={self.dir}/o")
        self.assert_one_line_error(r, "--yarn_factor=2: model tiny_psi2 is Multiscreen with position: MIPE, which has no "
                                      "RoPE for YaRN to rescale (--yarn_factor takes a RoPE Transformer or a Multiscreen "
                                      "model with position: ROPE)")
        r = run("generate", f"--weights={w}", "--prompt=hi", "--yarn_factor=auto")
        self.assert_one_line_error(r, "--yarn_factor=auto: model tiny_psi2 is Multiscreen with position: MIPE, which has "
                                      "no RoPE")
        w_nope = self.init(MULTISCREEN_TINY + "position: NOPE\n", "ms_nope")
        r = run("eval", "ppl", f"--weights={w_nope}", f"--data={t}", "--seq_len=16", "--stream", "--yarn_factor=auto",
                f"--out={self.dir}/o")
        self.assert_one_line_error(r, "--yarn_factor=auto: model ms_nope is Multiscreen with position: NOPE, which has "
                                      "no RoPE")
        # --yarn_factor=1 (plain RoPE: nothing asked) stays accepted for every model.
        r = run("eval", "ppl", f"--weights={w}", f"--data={t}", "--seq_len=16", "--stream", "--yarn_factor=1",
                f"--out={self.dir}/o1")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_flag_errors_and_resume(self):
        t = os.path.join(self.dir, "t.bin")
        write_tokens(t, np.arange(40) % 30)
        w2 = self.init("family: TRANSFORMER\nvocab: 97\nn_layers: 1\nn_heads: 2\nd_e: 16\n", "t1")
        # A decimal in [1, 1024]: strtod's hex, inf and nan were taken ("0x2" as 2), and any size.
        for factor in ("0.5", "0x2", "inf", "nan", "2048"):
            r = run("eval", "ppl", f"--weights={w2}", f"--data={t}", "--seq_len=16", "--stream",
                    f"--yarn_factor={factor}", f"--out={self.dir}/o")
            self.assert_one_line_error(r, f"--yarn_factor={factor}: expected a decimal number in [1, 1024]")
        # auto is held to the same bound: a context of 1100 over --train_len=1 is F = 1100.
        r = run("eval", "ttft", f"--weights={w2}", "--context=1100", "--train_len=1", "--yarn_factor=auto",
                f"--out={self.dir}/ttft")
        self.assert_one_line_error(r, "--yarn_factor=auto: the context-matched factor 1100 / 1 = 1100 (evaluation length "
                                      "/ training length) is above 1024, the largest factor YaRN takes")
        # --resume with another factor is refused, and the refusal names --yarn_factor.
        out = os.path.join(self.dir, "resumed")
        r = run("eval", "ppl", f"--weights={w2}", f"--data={t}", "--seq_len=16", "--stream", f"--out={out}")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run("eval", "ppl", f"--weights={w2}", f"--data={t}", "--seq_len=16", "--stream", "--yarn_factor=2", "--resume",
                f"--out={out}")
        self.assert_one_line_error(r, "is of another evaluation: yarn_factor = 1.0 there, 2.0 here")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    args, rest = p.parse_known_args()
    BIN, SOURCE = os.path.abspath(args.multiscreen), os.path.abspath(args.source)
    unittest.main(argv=[sys.argv[0]] + rest)
