#!/usr/bin/python3
"""Parity of `multiscreen forward` (C++) with the Transformer twin (tools/transformer_twin.py)
for every combination of the switches qk_norm, sio, pl_norm, and each attention mechanism
(issue 30: softmax1, ssmax, sigmoid, entmax15, screening plain; ssmax also with qk_norm and
sio; screening also with sio and pl_norm; sigmoid with each sigmoid_bias, issue 43).

For each combination: a tiny Transformer model file (2 layers, 2 heads of width 4,
d_E = 8, d_ff = 21, V = 37) with the switches set, `multiscreen init`, weights perturbed
so that every part is exercised (matrices ×12 so that attention is far from uniform and
SwiGLU far from linear, gains, s_QK, s_E, s_F moved off their init), the C++ forward at
fp64 and fp32 against the twin at float64: loss, token losses and every gradient.
T = 70 > the attention block (64), so queries and keys span two blocks.

Run by ctest from the source directory:
    /usr/bin/python3 tests/model/transformer_twin_parity_test.py --multiscreen=build/multiscreen
Exits 77 (skipped) where this interpreter lacks torch/h5py/numpy.
"""
import argparse
import itertools
import os
import subprocess
import sys
import tempfile

try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIPPED: the twin needs torch, h5py and numpy in {sys.executable}: {e}")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import transformer_twin as twin  # noqa: E402
from random_tokens import write_tokens  # noqa: E402

B, T = 2, 70
# Relative errors: loss; token losses (max); gradients as ||cpp - twin|| / max(||twin||,
# FLOOR * ||all twin grads||) (the floor only guards a gradient that is exactly zero).
TOL = {"fp64": 1e-10, "fp32": 1e-4}
FLOOR = 1e-9

MODEL = """name: "tiny_transformer_{tag}"
family: TRANSFORMER
n_layers: 2
n_heads: 2
d_e: 8
vocab: 37
qk_norm: {qk_norm}
sio: {sio}
pl_norm: {pl_norm}
attention: {attention}
{extra}"""


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stdout}{p.stderr}")


def perturb(path, rng):
    with h5py.File(path, "r+") as f:
        def edit(name, obj):
            if not isinstance(obj, h5py.Dataset):
                return
            leaf = name.rsplit("/", 1)[1]
            v = obj[()]
            if leaf.startswith("W_"):
                v = v * 12.0
            elif leaf in ("attn_norm", "ffn_norm"):
                v = v * rng.uniform(0.5, 1.5, v.shape)
            else:  # s_QK, s_SS, s_w, s_r, s_E, s_F
                v = v + rng.normal(0.0, 0.4, np.shape(v))
            obj[...] = np.asarray(v, dtype=np.float32)
        f.visititems(edit)
        del f.attrs["params_crc32c"]


def read_forward(path):
    with h5py.File(path, "r") as f:
        grads = {}
        f["grad"].visititems(lambda n, o: grads.__setitem__(n, np.array(o[()], dtype=np.float64))
                             if isinstance(o, h5py.Dataset) else None)
        return float(f["loss"][()]), np.array(f["token_losses"][()], dtype=np.float64), grads


def compare(ref, got):
    loss, tokens, grads = got
    errs = {"loss": abs(loss - ref["loss"]) / abs(ref["loss"]),
            "token_losses": float(np.max(np.abs(tokens - ref["token_losses"]) / np.abs(ref["token_losses"])))}
    g_all = np.sqrt(sum(float(np.sum(g * g)) for g in ref["grads"].values()))
    if set(grads) != set(ref["grads"]):
        raise RuntimeError(f"gradient names differ: {sorted(set(grads) ^ set(ref['grads']))}")
    for name, g in ref["grads"].items():
        diff = np.linalg.norm((grads[name].reshape(g.shape) - g).ravel())
        errs[f"grad/{name}"] = diff / max(np.linalg.norm(g.ravel()), FLOOR * g_all)
    return errs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--multiscreen", required=True)
    exe = os.path.abspath(p.parse_args().multiscreen)
    failures, summary = [], []
    with tempfile.TemporaryDirectory(prefix="transformer_parity_") as tmp:
        cases = [(qk, sio, pl, "SOFTMAX") for qk, sio, pl in itertools.product((0, 1), repeat=3)]
        cases += [(0, 0, 0, kind) for kind in ("SOFTMAX1", "SSMAX", "SIGMOID", "ENTMAX15", "SCREENING")]
        cases += [(1, 1, 0, "SSMAX"), (0, 1, 1, "SCREENING")]
        # Sigmoid's per-query bias (sigmoid_bias: PER_QUERY); the case above is the default,
        # one bias -log T for every query (issue 43).
        cases += [(0, 0, 0, "SIGMOID PER_QUERY")]
        for i, (qk, sio, pl, switch) in enumerate(cases):
            attention, _, bias = switch.partition(" ")
            tag = (f"qk{qk}_sio{sio}_pl{pl}" + ("" if attention == "SOFTMAX" else f"_{attention.lower()}")
                   + (f"_{bias.lower()}" if bias else ""))
            rng = np.random.default_rng(100 + i)
            model = os.path.join(tmp, f"{tag}.textproto")
            with open(model, "w") as f:
                f.write(MODEL.format(tag=tag, qk_norm=str(bool(qk)).lower(), sio=str(bool(sio)).lower(),
                                     pl_norm=str(bool(pl)).lower(), attention=attention,
                                     extra=f"sigmoid_bias: {bias}\n" if bias else ""))
            weights = os.path.join(tmp, f"{tag}.h5")
            run([exe, "init", f"--model={model}", f"--seed={7 + i}", f"--out={weights}"])
            perturb(weights, rng)
            cfg, params = twin.load_weights(weights)
            assert (cfg["qk_norm"], cfg["sio"], cfg["pl_norm"]) == (bool(qk), bool(sio), bool(pl))
            assert cfg["attention"] == attention.lower(), cfg["attention"]
            if attention == "SIGMOID":
                assert cfg["sigmoid_bias"] == (bias.lower() or "train_length"), cfg["sigmoid_bias"]
            tokens_path = os.path.join(tmp, f"{tag}.bin")
            write_tokens(tokens_path, rng.integers(0, cfg["vocab"], size=B * (T + 1)))
            ref = twin.loss_and_grads(cfg, params, twin.read_tokens(tokens_path), B, T)
            line = [tag, f"twin loss {ref['loss']:.6f}"]
            for precision in ("fp64", "fp32"):
                out = os.path.join(tmp, f"{tag}_{precision}.h5")
                run([exe, "forward", f"--weights={weights}", f"--tokens={tokens_path}", f"--micro_batch={B}",
                     f"--seq_len={T}", f"--out={out}", f"--precision={precision}", "--device=cpu"])
                errs = compare(ref, read_forward(out))
                worst = max(errs, key=errs.get)
                line.append(f"{precision} max rel err {errs[worst]:.2e} ({worst})")
                for name, e in errs.items():
                    if not e <= TOL[precision]:
                        failures.append(f"{tag} {precision}: {name} rel err {e:.3e} > {TOL[precision]:.0e}")
            summary.append("  ".join(line))
    print("\n".join(summary))
    if failures:
        print(f"FAILED ({len(failures)}):\n  " + "\n  ".join(failures))
        return 1
    print(f"PASSED: every switch combination and attention mechanism within {TOL['fp64']:.0e} (fp64) and {TOL['fp32']:.0e} (fp32)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
