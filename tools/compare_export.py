#!/usr/bin/python3
"""Compares a consolidated weights file (`init`, `ckpt export`) with the shards of a
checkpoint, bit for bit, one tensor and one block of rows at a time (bounded memory:
the 4B model's 16 GB are never held; issue 20).

Every weight dataset of every shard file the manifest lists (Adam's moments and
ZeRO-1 optimizer pieces are not weights and are skipped) is compared with its rows
[offset[0], offset[0] + rows) of the same tensor in the weights file, replicas
included (W_E on the first and last pipeline stage, scalars on every tp rank); each
tensor of the weights file must be covered row for row by the shards, and the two
must name the same tensors. Scalars carry an empty `offset` attribute (HDF5's empty
dataspace): row 0. Bits are compared (uint32 views), so -0.0 != +0.0 and NaN
payloads count.

Prints one line per mismatch (tensor, shard file, first differing row) and a summary;
exit status 0 when identical, 1 when not, 2 on unreadable input.

  tools/compare_export.py --weights=psi64.h5 --checkpoint=RUN_DIR_or_step_dir [--block_mib=64]
"""
import argparse
import json
import os
import sys

import h5py
import numpy as np


def checkpoint_dir(path):
    """The step directory of `path`: itself when it holds manifest.json, else the run's latest."""
    if os.path.exists(os.path.join(path, "manifest.json")):
        return path
    latest = os.path.join(path, "checkpoints", "latest")
    with open(latest) as f:
        return os.path.join(path, "checkpoints", f.read().strip())


def row_offset(dataset):
    """Row offset of a shard dataset: offset[0], or 0 for a scalar (empty offset)."""
    offset = dataset.attrs.get("offset")
    if offset is None or isinstance(offset, h5py.Empty) or np.asarray(offset).size == 0:
        return 0
    return int(np.asarray(offset).reshape(-1)[0])


def datasets(f):
    names = []
    f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    return names


def is_weight(name):
    return not (name.startswith("adam_m/") or name.startswith("adam_v/") or name.startswith("optimizer/"))


def compare_rows(want, got, first_row, rows, block_bytes):
    """First row (of `got`) whose bits differ from want[first_row + r], or None."""
    inner = int(np.prod(got.shape[1:])) if got.ndim > 1 else 1
    step = max(1, block_bytes // (4 * inner))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        a = np.ascontiguousarray(want[first_row + r0:first_row + r1], dtype=np.float32)
        b = np.ascontiguousarray(got[r0:r1], dtype=np.float32)
        if a.shape != b.shape:
            return r0
        diff = np.nonzero((a.view(np.uint32) != b.view(np.uint32)).reshape(r1 - r0, -1).any(axis=1))[0]
        if diff.size:
            return r0 + int(diff[0])
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--weights", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--block_mib", type=int, default=64)
    args = parser.parse_args()
    block_bytes = args.block_mib << 20
    try:
        step_dir = checkpoint_dir(args.checkpoint)
        with open(os.path.join(step_dir, "manifest.json")) as f:
            manifest = json.load(f)
        weights = h5py.File(args.weights, "r")
    except (OSError, ValueError, KeyError) as e:
        print(f"compare_export: {e}", file=sys.stderr)
        return 2
    names = set(datasets(weights))
    covered = {n: np.zeros(weights[n].shape[0] if weights[n].ndim else 1, dtype=bool) for n in names}
    mismatches = compared = elements = 0
    shard_names = set()
    for file in sorted(manifest["files"]):
        with h5py.File(os.path.join(step_dir, file), "r") as shard:
            for name in sorted(datasets(shard)):
                if not is_weight(name):
                    continue
                shard_names.add(name)
                if name not in names:
                    print(f"{name}: in {file}, not in {args.weights}")
                    mismatches += 1
                    continue
                got, want = shard[name], weights[name]
                if got.shape[1:] != want.shape[1:] or got.ndim != want.ndim:
                    print(f"{name}: {file} has shape {got.shape}, the weights file {want.shape}")
                    mismatches += 1
                    continue
                first = row_offset(got)
                rows = got.shape[0] if got.ndim else 1
                if got.ndim == 0:
                    same = np.float32(got[()]).view(np.uint32) == np.float32(want[()]).view(np.uint32)
                    bad = None if same else 0
                else:
                    bad = compare_rows(want, got, first, rows, block_bytes)
                if bad is not None:
                    print(f"{name}: {file} differs at row {first + bad}")
                    mismatches += 1
                covered[name][first:first + rows] = True
                compared += 1
                elements += int(np.prod(got.shape)) if got.ndim else 1
    for name in sorted(names):
        if name not in shard_names:
            print(f"{name}: in {args.weights}, in no shard")
            mismatches += 1
        elif not covered[name].all():
            print(f"{name}: rows {np.nonzero(~covered[name])[0][:5].tolist()}... held by no shard")
            mismatches += 1
    print(f"compared {compared} shard datasets ({elements} elements, replicas included) with {len(names)} tensors of "
          f"{args.weights}: {'identical' if mismatches == 0 else f'{mismatches} mismatches'}")
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
