#!/usr/bin/python3
"""Writes uniformly random token ids as an llm.c .bin file (256 x int32 header:
magic 20240520, version 1 (uint16) or 2 (uint32), count; then the tokens)."""
import argparse

import numpy as np


def write_tokens(path, tokens):
    tokens = np.asarray(tokens, dtype=np.int64)
    wide = tokens.size and tokens.max() > 0xFFFF
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 2 if wide else 1, tokens.size
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(np.uint32 if wide else np.uint16).tobytes())


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    write_tokens(a.out, np.random.default_rng(a.seed).integers(0, a.vocab, size=a.count))


if __name__ == "__main__":
    main()
