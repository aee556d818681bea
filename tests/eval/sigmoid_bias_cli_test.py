#!/usr/bin/python3
"""Sigmoid attention's bias b = -log n at inference (issue 43) end to end: `eval ppl` of a
tiny Transformer with attention: SIGMOID against the PyTorch twin (tools/transformer_twin.py,
whose training forward over T tokens uses n = T for sigmoid_bias train_length, Ramapuram et
al.'s form, and n_i = i + 1 for per_query). By default eval keeps the training length
(--train_len) as n, --sigmoid_bias_length=N sets it, auto sets it to the evaluation's length
(so that a window of T tokens is the twin's forward over T); the full pass and the decoding
cache agree. A weights file written before the switch (no sigmoid_bias attribute) reads as
per_query, the form it was trained with. The flag is refused in one line where it sets
nothing (another attention, per_query), and a --resume with another n names the field.

Run: /usr/bin/python3 tests/eval/sigmoid_bias_cli_test.py --multiscreen=build/multiscreen
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import transformer_twin as twin  # noqa: E402
from random_tokens import write_tokens  # noqa: E402
sys.path.insert(0, os.path.join(HERE, ".."))
from cli_errors import OneLineErrors  # noqa: E402

BIN = None
SIGMOID = "family: TRANSFORMER\nvocab: 97\nn_layers: 2\nn_heads: 2\nd_e: 16\nattention: SIGMOID\n"
B, T, L = 2, 40, 8  # windows of T tokens, a model "trained" on L


def run(*args, timeout=120):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout)


class SigmoidBiasCliTest(OneLineErrors):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.tokens = np.random.default_rng(3).integers(0, 96, size=B * (T + 1))
        self.data = os.path.join(self.dir, "t.bin")
        write_tokens(self.data, self.tokens)

    def tearDown(self):
        self.tmp.cleanup()

    def init(self, body, name):
        path = os.path.join(self.dir, f"{name}.textproto")
        with open(path, "w") as f:
            f.write(f'name: "{name}"\n' + body)
        w = os.path.join(self.dir, f"{name}.h5")
        r = run("init", f"--model={path}", "--seed=5", f"--out={w}")
        self.assertEqual(r.returncode, 0, r.stderr)
        with h5py.File(w, "r+") as f:  # W ×6: attention far from uniform, so n shows
            def scale(n, o):
                if isinstance(o, h5py.Dataset) and n.rsplit("/", 1)[-1].startswith("W_"):
                    o[...] = (o[()] * 6).astype(np.float32)
            f.visititems(scale)
            del f.attrs["params_crc32c"]
        return w

    def ppl(self, w, *args):
        out = os.path.join(self.dir, "ppl")
        shutil.rmtree(out, ignore_errors=True)
        r = run("eval", "ppl", f"--weights={w}", f"--data={self.data}", f"--seq_len={T}", "--stream",
                f"--train_len={L}", f"--out={out}", *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "ppl.json")) as f:
            return json.load(f), r

    def twin_losses(self, w):
        cfg, params = twin.load_weights(w)
        return twin.loss_and_grads(cfg, params, self.tokens, B, T)["token_losses"].mean(axis=0), cfg

    def test_the_bias_length_is_the_training_length_unless_set(self):
        w = self.init(SIGMOID, "sig")
        want, cfg = self.twin_losses(w)  # n = T
        self.assertEqual(cfg["sigmoid_bias"], "train_length")
        for flag in ("--sigmoid_bias_length=auto", f"--sigmoid_bias_length={T}"):
            for method in ("full", "decode"):
                got, r = self.ppl(w, flag, f"--method={method}")
                self.assertEqual(got["sigmoid_bias_length"], T)
                self.assertEqual(got["sigmoid_bias_context_matched"], flag.endswith("auto"))
                np.testing.assert_allclose(got["mean_loss"], want, rtol=0, atol=2e-6, err_msg=f"{flag} {method}")
        self.assertIn(f"sigmoid bias -log {T} (--sigmoid_bias_length)", r.stdout)
        default, r = self.ppl(w)  # n = L, the training length: not the twin's n = T
        self.assertEqual((default["sigmoid_bias_length"], default["sigmoid_bias_context_matched"]), (L, False))
        self.assertIn(f"sigmoid bias -log {L} (the training length)", r.stdout)
        self.assertGreater(np.abs(np.array(default["mean_loss"]) - want).max(), 1e-3)
        # --resume with another n names the field.
        out = os.path.join(self.dir, "resumed")
        common = (f"--weights={w}", f"--data={self.data}", f"--seq_len={T}", "--stream", f"--train_len={L}",
                  f"--out={out}")
        self.assertEqual(run("eval", "ppl", *common).returncode, 0)
        r = run("eval", "ppl", *common, "--sigmoid_bias_length=16", "--resume")
        self.assert_one_line_error(r, f"sigmoid_bias_length = {L} there, 16 here")

    def test_per_query_and_files_before_the_switch_use_each_querys_key_count(self):
        w = self.init(SIGMOID + "sigmoid_bias: PER_QUERY\n", "sig_pq")
        want, cfg = self.twin_losses(w)
        self.assertEqual(cfg["sigmoid_bias"], "per_query")
        got, _ = self.ppl(w)
        np.testing.assert_allclose(got["mean_loss"], want, rtol=0, atol=2e-6)
        self.assertNotIn("sigmoid_bias_length", got)
        r = run("eval", "ppl", f"--weights={w}", f"--data={self.data}", f"--seq_len={T}", "--stream",
                "--sigmoid_bias_length=8", f"--out={self.dir}/o")
        self.assert_one_line_error(r, "--sigmoid_bias_length=8: model sig_pq has sigmoid_bias per_query (each query's n "
                                      "is its own key count): there is no length to set")
        # A train_length file without the attribute is a file from before it: per query.
        old = self.init(SIGMOID, "sig_old")
        with h5py.File(old, "r+") as f:
            del f.attrs["sigmoid_bias"]
        want, cfg = self.twin_losses(old)
        self.assertEqual(cfg["sigmoid_bias"], "per_query")
        got, _ = self.ppl(old)
        np.testing.assert_allclose(got["mean_loss"], want, rtol=0, atol=2e-6)

    def test_models_without_sigmoid_attention_refuse_the_flag(self):
        w = self.init("family: TRANSFORMER\nvocab: 97\nn_layers: 1\nn_heads: 2\nd_e: 16\n", "soft")
        r = run("eval", "ppl", f"--weights={w}", f"--data={self.data}", f"--seq_len={T}", "--stream",
                "--sigmoid_bias_length=auto", f"--out={self.dir}/o")
        self.assert_one_line_error(r, "--sigmoid_bias_length=auto: model soft has attention softmax; the flag sets the "
                                      "bias of attention: SIGMOID")
        r = run("generate", f"--weights={w}", "--prompt=hi", "--sigmoid_bias_length=0")
        self.assert_one_line_error(r, "--sigmoid_bias_length=0: expected a whole number of tokens in [1, 2^40]")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    args, rest = p.parse_known_args()
    BIN = os.path.abspath(args.multiscreen)
    unittest.main(argv=[sys.argv[0]] + rest)
