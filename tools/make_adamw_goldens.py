#!/usr/bin/python3
"""Writes tests/trainer/testdata/adamw_golden.json: parameters after each of a
few torch.optim.AdamW steps (Debian's python3-torch), for the C++ AdamW test.
Gradients are a fixed function of (step, index); the last parameter is put in
a group without weight decay, as the trainer exempts scalars."""
import json
import math
import os

import torch

N, STEPS = 7, 6
LRS = [0.01 * (s + 1) / 3 if s < 3 else 0.01 for s in range(STEPS)]  # warmup then constant


def grad(step, i):
    return math.sin(1.3 * step + 0.7 * i) * (1.0 + i) * (10.0 if i == 3 else 1.0)


def main():
    init = [0.5 - 0.17 * i for i in range(N)]
    p_decay = torch.nn.Parameter(torch.tensor(init[:-1], dtype=torch.float32))
    p_plain = torch.nn.Parameter(torch.tensor(init[-1:], dtype=torch.float32))
    opt = torch.optim.AdamW([{"params": [p_decay], "weight_decay": 0.1},
                             {"params": [p_plain], "weight_decay": 0.0}],
                            lr=LRS[0], betas=(0.9, 0.95), eps=1e-8, foreach=False)
    out = {"init": init, "lrs": LRS, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
           "decay": [1] * (N - 1) + [0], "grads": [], "params": []}
    for s in range(STEPS):
        g = [grad(s, i) for i in range(N)]
        out["grads"].append(g)
        for group in opt.param_groups:
            group["lr"] = LRS[s]
        p_decay.grad = torch.tensor(g[:-1], dtype=torch.float32)
        p_plain.grad = torch.tensor(g[-1:], dtype=torch.float32)
        opt.step()
        out["params"].append(p_decay.detach().tolist() + p_plain.detach().tolist())
    path = os.path.join(os.path.dirname(__file__), "..", "tests", "trainer", "testdata", "adamw_golden.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", os.path.normpath(path), "torch", torch.__version__)


if __name__ == "__main__":
    main()
