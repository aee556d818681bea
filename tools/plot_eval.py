#!/usr/bin/env python3
"""Figures of `multiscreen eval` results, drawn from the files it wrote (so they can be
redrawn without the model): python3 tools/plot_eval.py [--kind=ppl|abcdigits|passkey|all] DIR

  ppl.json        -> ppl.png: smoothed loss against position (log axis), training length marked
  abcdigits.json  -> abcdigits.png: accuracy heatmap, contexts across, depths down
  passkey.json    -> passkey.png: the same for passkey retrieval

Needs matplotlib (Debian's python3-matplotlib; scripts/setup installs it).
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402


def plot_ppl(directory):
    with open(os.path.join(directory, 'ppl.json')) as f:
        r = json.load(f)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(r['position'], r['mean_loss'], color='0.8', lw=0.6, label='per position')
    ax.plot(r['position'], r['smoothed_loss'], color='C0', lw=1.5, label='±10 % window')
    ax.axvline(r['train_len'], color='C3', ls='--', lw=1, label=f"training length {r['train_len']}")
    ax.set_xscale('log')
    ax.set_xlabel('position (tokens)')
    ax.set_ylabel('loss (nats)')
    rule = 'window expansion' if r['window_rule'] == 'expand' else 'windows as learned'
    ax.set_title(f"{r['model']}: {r['documents']} windows of {r['seq_len']} tokens, {rule}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = os.path.join(directory, 'ppl.png')
    fig.savefig(out, dpi=120)
    return out


def plot_grid(directory, name):
    with open(os.path.join(directory, f'{name}.json')) as f:
        r = json.load(f)
    cells = r['cells']
    contexts = sorted({c['context'] for c in cells})
    depths = sorted({c['depth'] for c in cells})
    grid = [[float('nan')] * len(contexts) for _ in depths]
    for c in cells:
        grid[depths.index(c['depth'])][contexts.index(c['context'])] = c['accuracy']
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(contexts), 1.2 + 0.55 * len(depths)))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap='viridis', aspect='auto')
    ax.set_xticks(range(len(contexts)), [str(c) for c in contexts], rotation=45)
    ax.set_yticks(range(len(depths)), [f'{d:g}' for d in depths])
    for i in range(len(depths)):
        for j in range(len(contexts)):
            if grid[i][j] == grid[i][j]:
                ax.text(j, i, f'{grid[i][j]:.2f}', ha='center', va='center', fontsize=7,
                        color='white' if grid[i][j] < 0.6 else 'black')
    ax.set_xlabel('context (tokens)' if r['identity'].get('mode', 'tokens') == 'tokens' else 'context (lines)')
    ax.set_ylabel('depth')
    ax.set_title(f"{name}: {r['identity']['model']}, {r['identity']['instances']} per cell", fontsize=9)
    fig.colorbar(im, ax=ax, label='accuracy')
    fig.tight_layout()
    out = os.path.join(directory, f'{name}.png')
    fig.savefig(out, dpi=120)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--kind', default='all', choices=['all', 'ppl', 'abcdigits', 'passkey'])
    p.add_argument('dir')
    a = p.parse_args()
    kinds = ['ppl', 'abcdigits', 'passkey'] if a.kind == 'all' else [a.kind]
    drawn = 0
    for kind in kinds:
        if not os.path.exists(os.path.join(a.dir, f'{kind}.json')):
            if a.kind != 'all':
                sys.exit(f'plot_eval: {os.path.join(a.dir, kind + ".json")} not found')
            continue
        print(plot_ppl(a.dir) if kind == 'ppl' else plot_grid(a.dir, kind))
        drawn += 1
    if not drawn:
        sys.exit(f'plot_eval: no results in {a.dir}')


if __name__ == '__main__':
    main()
