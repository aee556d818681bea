#!/usr/bin/python3
"""A dense PyTorch reference ("twin") of the Multiscreen model.

Written from the normative spec (shared/spec/MULTISCREEN.md), independently of the C++
code, so that the two can check each other: every step of "Forward pass" is one readable
block below, cited by its step number; gradients come from autograd. Everything is dense
([B, N_H, T, T] relevance maps, [B, T, V] logits), so it is meant for small models and
short sequences, not for speed.

Importable:
    cfg, params = load_weights("W.h5")               # numpy arrays under their logical names
    tokens = read_tokens("F.bin")                     # int64 numpy array
    out = loss_and_grads(cfg, params, tokens, micro_batch=2, seq_len=16, dtype=torch.float64)
    out["loss"], out["token_losses"], out["grads"]["layers/000/W_Q"]

Command line (writes the same datasets as `multiscreen forward`):
    /usr/bin/python3 tools/multiscreen_twin.py --weights=W.h5 --tokens=F.bin \
        --micro_batch=B --seq_len=T --out=O.h5 [--dtype=float64|float32]
"""
import argparse
import math
import sys

import h5py
import numpy as np
import torch

# Parameters of one layer, in the order the spec lists them.
LAYER_PARAMS = ("W_Q", "W_K", "W_V", "W_G", "W_O", "s_w", "s_r", "s_O")

# Base of the RoPE frequencies for the ablation switch position = "rope" (issue 30).
ROPE_BASE = 10000.0


def layer_params(cfg):
    """The layer's parameter names: without W_G when the output gate is off (issue 30)."""
    return tuple(n for n in LAYER_PARAMS if n != "W_G" or cfg.get("output_gate", True))

# Floor on vector norms before dividing (spec step 5: "a small floor on the norm").
NORM_FLOOR = 1e-12

# Below this squared norm TanhNorm uses its Taylor series (see tanh_norm).
TANH_NORM_SERIES_BELOW_N2 = 1e-4


# ----------------------------------------------------------------------------- I/O

def load_weights(path):
    """Reads a consolidated weights file written by `multiscreen init` / `ckpt export`.

    Returns (cfg, params): cfg is a dict of the root attributes (name, n_layers, n_heads,
    d_e, d_k, d_v, vocab, eos_token, w_th, pl_norm, tanh_norm, and issue 30's ablation
    switches position ("mipe", "nope" or "rope") and output_gate); params maps each logical name
    ("embed/W_E", "embed/s_E", "head/s_F", "layers/000/W_Q", ...) to a numpy array of the
    stored (full) shape.
    """
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
        for key in ("n_layers", "n_heads", "d_e", "d_k", "d_v", "vocab"):
            cfg[key] = int(cfg[key])
        cfg["w_th"] = float(cfg["w_th"])
        cfg["pl_norm"] = bool(int(cfg.get("pl_norm", 1)))
        cfg["tanh_norm"] = bool(int(cfg.get("tanh_norm", 1)))
        cfg["position"] = str(cfg.get("position", "mipe"))
        if cfg["position"] not in ("mipe", "nope", "rope"):
            raise ValueError(f"{path}: position = {cfg['position']!r} is not mipe, nope or rope")
        cfg["output_gate"] = bool(int(cfg.get("output_gate", 1)))
        params = {}
        for name in param_names(cfg):
            if name not in f:
                raise ValueError(f"{path}: missing dataset '{name}'")
            params[name] = np.array(f[name][()])
    check_shapes(cfg, params)
    return cfg, params


def param_names(cfg):
    """Logical parameter names, in a fixed order: embed, head, then layer by layer."""
    names = ["embed/W_E", "embed/s_E", "head/s_F"]
    for layer in range(cfg["n_layers"]):
        names += [f"layers/{layer:03d}/{p}" for p in layer_params(cfg)]
    return names


def expected_shape(cfg, name):
    n_h, d_e, d_k, d_v = cfg["n_heads"], cfg["d_e"], cfg["d_k"], cfg["d_v"]
    leaf = name.rsplit("/", 1)[1]
    return {
        "W_E": (cfg["vocab"], d_e), "s_E": (), "s_F": (),
        "W_Q": (n_h, d_e, d_k), "W_K": (n_h, d_e, d_k),
        "W_V": (n_h, d_e, d_v), "W_G": (n_h, d_e, d_v), "W_O": (n_h, d_v, d_e),
        "s_w": (n_h,), "s_r": (n_h,), "s_O": (n_h,),
    }[leaf]


def check_shapes(cfg, params):
    for name in param_names(cfg):
        want = expected_shape(cfg, name)
        got = tuple(params[name].shape)
        if got != want and not (want == () and got == (1,)):
            raise ValueError(f"dataset '{name}' has shape {got}, expected {want}")


def read_tokens(path):
    """Reads an llm.c .bin token file: a 256 x int32 header (magic 20240520, version 1
    for uint16 tokens or 2 for uint32, count), then the tokens."""
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(256 * 4), dtype=np.int32)
        if header.size != 256 or header[0] != 20240520:
            raise ValueError(f"{path}: not an llm.c token file (bad magic)")
        version, count = int(header[1]), int(header[2])
        if version not in (1, 2):
            raise ValueError(f"{path}: unknown token file version {version}")
        dtype = np.uint16 if version == 1 else np.uint32
        tokens = np.frombuffer(f.read(), dtype=dtype)
    if tokens.size < count:
        raise ValueError(f"{path}: header says {count} tokens, file holds {tokens.size}")
    return tokens[:count].astype(np.int64)


def batch_from_tokens(tokens, micro_batch, seq_len):
    """The first B*(T+1) tokens as B sequences of T+1: inputs [B, T], targets [B, T]."""
    need = micro_batch * (seq_len + 1)
    if tokens.size < need:
        raise ValueError(f"need {need} tokens for micro_batch={micro_batch} "
                         f"seq_len={seq_len}, have {tokens.size}")
    seqs = np.asarray(tokens[:need], dtype=np.int64).reshape(micro_batch, seq_len + 1)
    return torch.from_numpy(seqs[:, :-1].copy()), torch.from_numpy(seqs[:, 1:].copy())


# ------------------------------------------------------------------- building blocks

def unit_rows(z):
    """z / max(||z||, 1e-12) along the last axis (spec steps 1, 5, 14)."""
    return z / torch.linalg.vector_norm(z, dim=-1, keepdim=True).clamp_min(NORM_FLOOR)


def mipe_angles(w, w_th, seq_len):
    """Spec step 6, the angles: gamma(w) = (cos(pi w / w_th) + 1)/2 if w < w_th else 0,
    phi_i = pi * i * gamma(w) / w at absolute positions i = 0..T-1.

    w: [N_H] float64 (differentiable). Returns phi [N_H, T] in float64: the angles are
    always computed in float64 whatever the model dtype (low precision breaks causality).
    """
    w = w.to(torch.float64)
    gamma = torch.where(w < w_th, 0.5 * (torch.cos(math.pi * w / w_th) + 1.0),
                        torch.zeros_like(w))
    i = torch.arange(seq_len, dtype=torch.float64)
    return math.pi * i[None, :] * (gamma / w)[:, None]


def mipe_rotate(z, phi):
    """Spec step 6, the rotation of coordinates (0, 1) by phi_i; the others are untouched.

    z: [B, N_H, T, d] (unit rows); phi: [N_H, T] float64.
    """
    cos = torch.cos(phi).to(z.dtype)[None, :, :]
    sin = torch.sin(phi).to(z.dtype)[None, :, :]
    z0, z1, rest = z[..., 0], z[..., 1], z[..., 2:]
    r0 = z0 * cos - z1 * sin
    r1 = z0 * sin + z1 * cos
    return torch.cat([r0[..., None], r1[..., None], rest], dim=-1)


def trim(s, r):
    """Spec step 8: alpha = max(1 - (1 - s)/r, 0)^2.  s: [B, N_H, T, T]; r: [N_H]."""
    a = 1.0 - (1.0 - s) / r[None, :, None, None]
    return torch.clamp(a, min=0.0) ** 2


def softmask(w, seq_len, dtype):
    """Spec step 9: m_ij = (cos(pi (j - i)/w) + 1)/2 if -w < j - i <= 0 else 0.

    w: [N_H] (differentiable). Computed in float64 and returned as [N_H, T, T] in dtype.
    """
    w = w.to(torch.float64)[:, None, None]
    pos = torch.arange(seq_len, dtype=torch.float64)
    d = (pos[None, :] - pos[:, None])[None, :, :]          # d[i, j] = j - i
    inside = (d <= 0) & (d > -w)
    m = torch.where(inside, 0.5 * (torch.cos(math.pi * d / w) + 1.0), torch.zeros_like(d * w))
    return m.to(dtype)


def rope_rotate(z):
    """Issue 30's position = "rope": every coordinate of z [..., T, d_K] turned, pairs
    (p, p + d_K/2) (the half-split pairing of the project's Transformer RoPE) by the angle
    t * ROPE_BASE^(-2p/d_K) at position t; the angles in float64, independent of w."""
    seq_len, d_k = z.shape[-2], z.shape[-1]
    half = d_k // 2
    theta = ROPE_BASE ** (-2.0 * torch.arange(half, dtype=torch.float64) / d_k)
    angle = torch.arange(seq_len, dtype=torch.float64)[:, None] * theta[None, :]  # [T, d_K/2]
    c, s = torch.cos(angle).to(z.dtype), torch.sin(angle).to(z.dtype)
    a, b = z[..., :half], z[..., half:]
    return torch.cat([a * c - b * s, a * s + b * c], dim=-1)


def tanh_norm(h):
    """Spec step 11: u = h * tanh(||h||)/||h|| along the last axis.

    Autograd-safe at h = 0: the scale is computed from n2 = ||h||^2, and below
    n2 = 1e-4 (||h|| < 0.01) from the Taylor series
        tanh(n)/n = 1 - n^2/3 + 2 n^4/15 - 17 n^6/315 + 62 n^8/2835 - ...
    truncated after the n^6 term, whose remainder (< 62e-16/2835 ~ 2e-18) and the
    remainder of its derivative are far below float64 rounding. Above the threshold the
    closed form is used, with the norm taken of a safe n2 so that the unused branch never
    produces 0/0 in the backward pass.
    """
    n2 = (h * h).sum(dim=-1, keepdim=True)
    small = n2 < TANH_NORM_SERIES_BELOW_N2
    n = torch.sqrt(torch.where(small, torch.ones_like(n2), n2))
    closed = torch.tanh(n) / n
    series = 1.0 - n2 / 3.0 + (2.0 / 15.0) * n2 ** 2 - (17.0 / 315.0) * n2 ** 3
    return h * torch.where(small, series, closed)


def gate(g):
    """Spec step 12: g_hat = tanh(SiLU(g)), SiLU(x) = x * sigmoid(x)."""
    return torch.tanh(g * torch.sigmoid(g))


# ------------------------------------------------------------------------ the model

def embed(params, inputs):
    """Spec step 1: E_bar = W_E with unit rows; x0_i = e^{s_E} E_bar[t_i].
    Returns (x0 [B, T, d_E], E_bar [V, d_E])."""
    e_bar = unit_rows(params["embed/W_E"])
    return torch.exp(params["embed/s_E"]) * e_bar[inputs], e_bar


def layer_tiles(cfg, p, x, stats=None):
    """Spec steps 3-13 for all N_H tiles of one layer at once (tile axis 1).

    p: this layer's parameters by short name (W_Q, ..., s_O). x: [B, T, d_E].
    Returns sum_h Delta x^{h} [B, T, d_E] (spec step 2's sum over tiles).
    If stats is a list, appends this layer's w [N_H], r [N_H], and per tile the number of
    in-window pairs (m > 0) and of those that Trim accepts (alpha > 0), for diagnostics.
    """
    seq_len = x.shape[1]
    # Step 3: projections, per tile. [B, N_H, T, d]
    q = torch.einsum("btd,hdk->bhtk", x, p["W_Q"])
    k = torch.einsum("btd,hdk->bhtk", x, p["W_K"])
    v = torch.einsum("btd,hdk->bhtk", x, p["W_V"])
    g = torch.einsum("btd,hdk->bhtk", x, p["W_G"]) if cfg.get("output_gate", True) else None
    # Step 4: tile scalars. w is formed in float64 (it feeds the MiPE angles and mask).
    w = torch.exp(p["s_w"].to(torch.float64)) + 1.0
    r = torch.sigmoid(p["s_r"])
    # Step 5: unit-normalize q, k, v (not g).
    q_bar, k_bar, v_bar = unit_rows(q), unit_rows(k), unit_rows(v)
    # Step 6: MiPE on q_bar and k_bar, coordinates 0 and 1, absolute positions; or, by
    # issue 30's ablation switch, no positional encoding or RoPE on every coordinate.
    position = cfg.get("position", "mipe")
    if position == "mipe":
        phi = mipe_angles(w, cfg["w_th"], seq_len)
        q_t, k_t = mipe_rotate(q_bar, phi), mipe_rotate(k_bar, phi)
    elif position == "nope":
        q_t, k_t = q_bar, k_bar
    else:
        q_t, k_t = rope_rotate(q_bar), rope_rotate(k_bar)
    # Step 7: similarity s_ij = q~_i . k~_j. [B, N_H, T(i), T(j)]
    s = torch.einsum("bhik,bhjk->bhij", q_t, k_t)
    # Step 8: Trim.
    alpha = trim(s, r)
    # Step 9: Softmask (causal, window w).
    m = softmask(w, seq_len, x.dtype)
    if stats is not None:
        with torch.no_grad():
            in_window = (m > 0)[None].expand_as(alpha)
            stats.append({"w": w.detach().numpy().copy(), "r": r.detach().double().numpy(),
                          "pairs": in_window.sum(dim=(0, 2, 3)).numpy(),
                          "accepted": ((alpha > 0) & in_window).sum(dim=(0, 2, 3)).numpy()})
    # Step 10: aggregate, no normalization over keys.
    h = torch.einsum("bhij,bhjv->bhiv", alpha * m[None], v_bar)
    # Step 11: TanhNorm; the identity when the ablation switch tanh_norm is off (issue 18).
    u = tanh_norm(h) if cfg.get("tanh_norm", True) else h
    # Step 12: gate (none when issue 30's switch output_gate is off).
    gated = u * gate(g) if g is not None else u
    # Step 13: output, e^{s_O} (u . g_hat) W_O; step 2: summed over tiles.
    out = torch.einsum("bhtv,hve->bhte", gated, p["W_O"])
    return torch.einsum("bhte,h->bte", out, torch.exp(p["s_O"]))


def forward(cfg, params, inputs, targets, stats=None):
    """The whole model, spec steps 1-15.

    params: logical name -> torch tensor (any float dtype, all the same);
    inputs, targets: [B, T] int64. Returns (loss, token_losses [B, T]): loss is the mean
    next-token cross-entropy. stats: optional list, filled per layer (see layer_tiles).
    """
    x, e_bar = embed(params, inputs)                                    # step 1
    for layer in range(cfg["n_layers"]):                                # step 2
        p = {name: params[f"layers/{layer:03d}/{name}"] for name in layer_params(cfg)}
        x = x + layer_tiles(cfg, p, x, stats)
    y = unit_rows(x) if cfg["pl_norm"] else x                           # step 14, PLNorm
    logits = torch.exp(params["head/s_F"]) * torch.einsum("bte,ve->btv", y, e_bar)
    token_losses = torch.nn.functional.cross_entropy(                  # step 15
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none"
    ).reshape(targets.shape)
    return token_losses.mean(), token_losses


def loss_and_grads(cfg, params, tokens, micro_batch, seq_len, dtype=torch.float64,
                   stats=None):
    """Runs the twin on the first micro_batch*(seq_len+1) tokens and differentiates the
    mean loss with autograd.

    params: name -> numpy array (as from load_weights). Returns a dict with "loss"
    (python float), "token_losses" (numpy [B, T] float64) and "grads" (name -> numpy
    float64 array of the parameter's shape). stats: optional list (see layer_tiles).
    """
    inputs, targets = batch_from_tokens(tokens, micro_batch, seq_len)
    if inputs.max() >= cfg["vocab"] or inputs.min() < 0 or targets.max() >= cfg["vocab"]:
        raise ValueError(f"token id out of range for vocab {cfg['vocab']}")
    leaves = {name: torch.tensor(np.asarray(value, dtype=np.float64), dtype=dtype)
              .reshape(expected_shape(cfg, name)).requires_grad_(True)
              for name, value in params.items()}
    loss, token_losses = forward(cfg, leaves, inputs, targets, stats)
    loss.backward()
    grads = {}
    for name, leaf in leaves.items():
        grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
        grads[name] = grad.detach().to(torch.float64).numpy()
    return {"loss": float(loss.detach()),
            "token_losses": token_losses.detach().to(torch.float64).numpy(),
            "grads": grads}


def write_output(path, result):
    """Writes loss, token_losses and grad/<name> like `multiscreen forward`."""
    with h5py.File(path, "w") as f:
        f.create_dataset("loss", data=np.float64(result["loss"]))
        f.create_dataset("token_losses", data=result["token_losses"])
        for name, grad in result["grads"].items():
            f.create_dataset(f"grad/{name}", data=grad)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", required=True, help="consolidated weights .h5")
    p.add_argument("--tokens", required=True, help="llm.c .bin token file")
    p.add_argument("--micro_batch", type=int, required=True)
    p.add_argument("--seq_len", type=int, required=True)
    p.add_argument("--out", required=True, help="output .h5")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    a = p.parse_args(argv)
    if a.micro_batch < 1 or a.seq_len < 1:
        print("error: --micro_batch and --seq_len must be positive", file=sys.stderr)
        return 2
    try:
        cfg, params = load_weights(a.weights)
        tokens = read_tokens(a.tokens)
        result = loss_and_grads(cfg, params, tokens, a.micro_batch, a.seq_len,
                                dtype=getattr(torch, a.dtype))
        write_output(a.out, result)
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"loss {result['loss']:.10f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
