#!/usr/bin/python3
"""A dense PyTorch reference ("twin") of the Transformer baseline.

Written from the spec's "Transformer baseline" section (shared/spec/MULTISCREEN.md) and
the model file's switches, independently of the C++ code (model/transformer.cc), so that
the two can check each other; gradients come from autograd. Dense [B, N_H, T, T]
attention maps and [B, T, V] logits: small models and short sequences only.

The model, for tokens t and x [B, T, d_E]:
  x0 = W_E[t]                         (sio: e^{s_E} * unit_rows(W_E)[t])
  per layer:  a = rms_norm(x) * attn_norm;  q, k, v = a W_Q, a W_K, a W_V per head
              q, k = rope(q), rope(k)   (theta 10,000, half-split pairs p, p + d_h/2)
              qk_norm: q, k = unit rows, scale_h = e^{s_QK,h};  else scale = 1/sqrt(d_h)
              x = x + weights_causal(scale q k^T) v W_O, weights by the `attention` attribute
              (issue 30; n_i = i + 1 keys seen by query i):
                softmax;  softmax1: a zero logit appended to each row, then dropped;
                ssmax: softmax(z * s_SS,h * log n_i);
                sigmoid: sigmoid(z - log n), n by the `sigmoid_bias` attribute: train_length
                  n = T, the sequence length trained on (Ramapuram et al.'s b = -log n, one
                  constant), per_query n = n_i (absent in files before it: per_query);
                entmax15: relu(z/2 - tau)^2, tau from the sorted row's closed form
              screening (the paper's Table 7 last row): per head the screening unit of
              tools/multiscreen_twin.py (spec steps 4-11) in place of RoPE, scale and
              weights: q, k, v unit rows, MiPE by w_h = e^{s_w,h} + 1, s = q~ k~^T,
              o = tanh_norm((trim(s, sigmoid(s_r,h)) * softmask(w_h)) v_bar); no gate
              f = rms_norm(x) * ffn_norm;  x = x + (silu(f W_gate^T) * f W_up^T) W_down
  y = rms_norm(x) (no gain)           (pl_norm: y = x / ||x||)
  logits = y W_E^T                    (sio: e^{s_F} * y unit_rows(W_E)^T)
rms_norm(x) = x / sqrt(mean(x^2) + 1e-6).

Importable (the same interface as tools/multiscreen_twin.py):
    cfg, params = load_weights("W.h5")
    out = loss_and_grads(cfg, params, tokens, micro_batch=2, seq_len=16)
Command line (writes the same datasets as `multiscreen forward`):
    /usr/bin/python3 tools/transformer_twin.py --weights=W.h5 --tokens=F.bin \\
        --micro_batch=B --seq_len=T --out=O.h5 [--dtype=float64|float32]
"""
import argparse
import math
import sys

import h5py
import numpy as np
import torch

from multiscreen_twin import (batch_from_tokens, mipe_angles, mipe_rotate, read_tokens, softmask,  # noqa: F401
                              tanh_norm, trim, unit_rows, write_output)

RMS_EPS = 1e-6
ROPE_THETA = 10000.0
ATTENTIONS = ("softmax", "softmax1", "ssmax", "sigmoid", "entmax15", "screening")
SIGMOID_BIASES = ("train_length", "per_query")
W_TH = 256.0  # the MiPE threshold (spec "Symbols"; a Transformer model file cannot change it)


def load_weights(path):
    """Reads a consolidated weights file of a Transformer (root attribute family =
    "transformer"). Returns (cfg, params) with cfg's sizes and switches as python values."""
    with h5py.File(path, "r") as f:
        cfg = {}
        for key, value in f.attrs.items():
            if isinstance(value, bytes):
                value = value.decode()
            elif isinstance(value, np.ndarray) and value.size == 1:
                value = value.reshape(()).item()
            elif isinstance(value, np.generic):
                value = value.item()
            cfg[key] = value
        if cfg.get("family") != "transformer":
            raise ValueError(f"{path}: family is {cfg.get('family')!r}, not 'transformer'")
        for key in ("n_layers", "n_heads", "d_e", "vocab"):
            cfg[key] = int(cfg[key])
        for key in ("qk_norm", "sio", "pl_norm"):
            cfg[key] = bool(int(cfg[key]))
        cfg["attention"] = cfg.get("attention", "softmax")  # absent in older files
        if cfg["attention"] not in ATTENTIONS:
            raise ValueError(f"{path}: attention is {cfg['attention']!r}, not one of {ATTENTIONS}")
        # absent in files written before it, when a sigmoid model was trained per query
        cfg["sigmoid_bias"] = cfg.get("sigmoid_bias", "per_query" if cfg["attention"] == "sigmoid" else "train_length")
        if cfg["sigmoid_bias"] not in SIGMOID_BIASES:
            raise ValueError(f"{path}: sigmoid_bias is {cfg['sigmoid_bias']!r}, not one of {SIGMOID_BIASES}")
        cfg["d_h"] = cfg["d_e"] // cfg["n_heads"]
        cfg["d_ff"] = 8 * cfg["d_e"] // 3
        params = {}
        for name in param_names(cfg):
            if name not in f:
                raise ValueError(f"{path}: missing dataset '{name}'")
            params[name] = np.array(f[name][()])
            want = expected_shape(cfg, name)
            if tuple(params[name].shape) != want and not (want == () and params[name].shape == (1,)):
                raise ValueError(f"dataset '{name}' has shape {params[name].shape}, expected {want}")
    return cfg, params


def layer_param_names(cfg):
    names = ["attn_norm", "W_Q", "W_K", "W_V", "W_O"]
    if cfg["qk_norm"]:
        names.append("s_QK")
    if cfg.get("attention") == "ssmax":
        names.append("s_SS")
    if cfg.get("attention") == "screening":
        names += ["s_w", "s_r"]
    return names + ["ffn_norm", "W_gate", "W_up", "W_down"]


def param_names(cfg):
    names = ["embed/W_E"] + (["embed/s_E", "head/s_F"] if cfg["sio"] else [])
    for layer in range(cfg["n_layers"]):
        names += [f"layers/{layer:03d}/{p}" for p in layer_param_names(cfg)]
    return names


def expected_shape(cfg, name):
    n_h, d_e, d_h, d_ff = cfg["n_heads"], cfg["d_e"], cfg["d_h"], cfg["d_ff"]
    return {
        "W_E": (cfg["vocab"], d_e), "s_E": (), "s_F": (),
        "attn_norm": (d_e,), "ffn_norm": (d_e,), "s_QK": (n_h,), "s_SS": (n_h,), "s_w": (n_h,), "s_r": (n_h,),
        "W_Q": (n_h, d_e, d_h), "W_K": (n_h, d_e, d_h), "W_V": (n_h, d_e, d_h), "W_O": (n_h, d_h, d_e),
        "W_gate": (d_ff, d_e), "W_up": (d_ff, d_e), "W_down": (d_ff, d_e),
    }[name.rsplit("/", 1)[1]]


def rms_norm(x):
    return x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + RMS_EPS)


def rope(z):
    """z [B, H, T, d_h]: pair p with p + d_h/2 turned by t * theta^(-2p/d_h) (angles in fp64)."""
    T, d_h = z.shape[2], z.shape[3]
    half = d_h // 2
    freq = ROPE_THETA ** (-2.0 * torch.arange(half, dtype=torch.float64) / d_h)
    phi = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]
    cos, sin = torch.cos(phi).to(z.dtype), torch.sin(phi).to(z.dtype)
    a, b = z[..., :half], z[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def attention(cfg, p, a):
    """a [B, T, d_E] normed input -> attention output [B, T, d_E] (before the residual)."""
    q = torch.einsum("bte,hek->bhtk", a, p["W_Q"])
    k = torch.einsum("bte,hek->bhtk", a, p["W_K"])
    v = torch.einsum("bte,hek->bhtk", a, p["W_V"])
    if cfg["attention"] == "screening":
        return torch.einsum("bhtk,hke->bte", screening(p, q, k, v), p["W_O"])
    q, k = rope(q), rope(k)
    if cfg["qk_norm"]:
        q, k = unit_rows(q), unit_rows(k)
        scale = torch.exp(p["s_QK"])[None, :, None, None]
    else:
        scale = 1.0 / math.sqrt(cfg["d_h"])
    s = scale * torch.einsum("bhik,bhjk->bhij", q, k)
    o = torch.einsum("bhij,bhjk->bhik", weights(cfg, p, s), v)
    return torch.einsum("bhtk,hke->bte", o, p["W_O"])


def screening(p, q, k, v):
    """The screening unit per head (spec steps 4-11; no gate, no s_O): q, k, v
    [B, H, T, d_h] raw projections -> TanhNorm(h) [B, H, T, d_h]."""
    T = q.shape[2]
    w = torch.exp(p["s_w"].to(torch.float64)) + 1.0
    phi = mipe_angles(w, W_TH, T)
    q_t, k_t = mipe_rotate(unit_rows(q), phi), mipe_rotate(unit_rows(k), phi)
    alpha = trim(torch.einsum("bhik,bhjk->bhij", q_t, k_t), torch.sigmoid(p["s_r"]))
    h = torch.einsum("bhij,bhjv->bhiv", alpha * softmask(w, T, q.dtype)[None], unit_rows(v))
    return tanh_norm(h)


def weights(cfg, p, z):
    """Scores z [B, H, T, T] (scale applied) -> causal weights by cfg["attention"]."""
    T = z.shape[-1]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    log_n = torch.log(torch.arange(1, T + 1, dtype=z.dtype))[:, None]  # [T, 1]: log(i + 1)
    kind = cfg["attention"]
    if kind == "ssmax":
        z = z * p["s_SS"][None, :, None, None] * log_n
    if kind in ("softmax", "ssmax"):
        return torch.softmax(z.masked_fill(~causal, float("-inf")), dim=-1)
    if kind == "softmax1":
        z = torch.cat([z.masked_fill(~causal, float("-inf")), torch.zeros_like(z[..., :1])], dim=-1)
        return torch.softmax(z, dim=-1)[..., :T]
    if kind == "sigmoid":
        bias = log_n if cfg["sigmoid_bias"] == "per_query" else math.log(T)
        return torch.sigmoid(z - bias).masked_fill(~causal, 0.0)
    return entmax15(z / 2, causal)


def entmax15(y, mask):
    """relu(y - tau)^2 with sum 1 over the unmasked y of each row: the row sorted in
    decreasing order u, tau_k = mean_k - sqrt((1 - (sum_k u^2 - k mean_k^2)) / k) for the
    top k, tau = tau_k at the largest k with tau_k <= u_k; autograd through the sort."""
    u, _ = torch.sort(y.masked_fill(~mask, float("-inf")), dim=-1, descending=True)
    finite = torch.isfinite(u)
    u0 = torch.where(finite, u, torch.zeros_like(u))
    k = torch.arange(1, y.shape[-1] + 1, dtype=y.dtype)
    mean = torch.cumsum(u0, -1) / k
    delta = (1 - (torch.cumsum(u0 * u0, -1) - k * mean * mean)) / k
    tau_k = mean - torch.sqrt(torch.where(delta > 0, delta, torch.ones_like(delta)))
    ok = finite & (delta >= 0) & (tau_k <= u0)
    k_star = torch.max(torch.where(ok, k.to(torch.int64), torch.zeros_like(k, dtype=torch.int64)), dim=-1).values
    tau = torch.gather(tau_k, -1, (k_star - 1)[..., None])
    return torch.relu(y - tau).masked_fill(~mask, 0.0) ** 2


def ffn(p, f):
    g = torch.einsum("bte,fe->btf", f, p["W_gate"])
    u = torch.einsum("bte,fe->btf", f, p["W_up"])
    return torch.einsum("btf,fe->bte", torch.nn.functional.silu(g) * u, p["W_down"])


def forward(cfg, params, inputs, targets):
    """Returns (mean loss, token_losses [B, T])."""
    w_e = params["embed/W_E"]
    table = unit_rows(w_e) if cfg["sio"] else w_e
    x = table[inputs]
    if cfg["sio"]:
        x = torch.exp(params["embed/s_E"]) * x
    for layer in range(cfg["n_layers"]):
        p = {n: params[f"layers/{layer:03d}/{n}"] for n in layer_param_names(cfg)}
        x = x + attention(cfg, p, rms_norm(x) * p["attn_norm"])
        x = x + ffn(p, rms_norm(x) * p["ffn_norm"])
    y = unit_rows(x) if cfg["pl_norm"] else rms_norm(x)
    logits = torch.einsum("bte,ve->btv", y, table)
    if cfg["sio"]:
        logits = torch.exp(params["head/s_F"]) * logits
    token_losses = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none").reshape(targets.shape)
    return token_losses.mean(), token_losses


def loss_and_grads(cfg, params, tokens, micro_batch, seq_len, dtype=torch.float64):
    """Loss, token losses and every parameter's gradient (autograd) on the first
    micro_batch*(seq_len+1) tokens; numpy float64 results keyed like `multiscreen forward`."""
    inputs, targets = batch_from_tokens(tokens, micro_batch, seq_len)
    leaves = {name: torch.tensor(np.asarray(value, dtype=np.float64), dtype=dtype)
              .reshape(expected_shape(cfg, name)).requires_grad_(True)
              for name, value in params.items()}
    loss, token_losses = forward(cfg, leaves, inputs, targets)
    loss.backward()
    grads = {name: (leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)).detach()
             .to(torch.float64).numpy() for name, leaf in leaves.items()}
    return {"loss": float(loss.detach()),
            "token_losses": token_losses.detach().to(torch.float64).numpy(),
            "grads": grads}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--micro_batch", type=int, required=True)
    p.add_argument("--seq_len", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    a = p.parse_args(argv)
    try:
        cfg, params = load_weights(a.weights)
        result = loss_and_grads(cfg, params, read_tokens(a.tokens), a.micro_batch, a.seq_len,
                                dtype=getattr(torch, a.dtype))
        write_output(a.out, result)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"loss {result['loss']:.10f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
