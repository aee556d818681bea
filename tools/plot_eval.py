#!/usr/bin/env python3
"""Figures of `multiscreen eval` results, drawn from the files it wrote (so they can be
redrawn without the model): python3 tools/plot_eval.py [--kind=ppl|abcdigits|passkey|relevance|all] DIR

  ppl.json        -> ppl.png: smoothed loss against position (log axis), training length marked
  abcdigits.json  -> abcdigits.png: accuracy heatmap, contexts across, depths down
  passkey.json    -> passkey.png: the same for passkey retrieval
  relevance.json  -> relevance_tiles.png: α·m of the mapped tiles (up to 6) with the tokens on
                     the axes; relevance_wr.png: the learned (w, r) of every tile, coloured by layer

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


def plot_relevance(directory, max_maps=6):
    import numpy as np
    with open(os.path.join(directory, 'relevance.json')) as f:
        r = json.load(f)
    tokens = [t.replace('\n', '\\n') for t in r['tokens']]
    n = len(tokens)
    outs = []
    maps = r['maps'][:max_maps]
    if maps:
        cols = min(3, len(maps))
        rows = (len(maps) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 4.0 * rows), squeeze=False)
        tiles = {(t['layer'], t['tile']): t for t in r['tiles']}
        for ax, m in zip(axes.flat, maps):
            grid = np.zeros((n, n))
            for i, j, alpha, mask in m['pairs']:
                grid[i, j] = alpha * mask
            ax.imshow(grid, vmin=0, vmax=1, cmap='magma_r')
            t = tiles[(m['layer'], m['tile'])]
            ax.set_title(f"layer {m['layer']} tile {m['tile']}: w={t['w']:.1f} r={t['r']:.2f}, "
                         f"{100 * t['fraction_nonzero']:.0f}% nonzero", fontsize=8)
            if n <= 48:
                ax.set_xticks(range(n), tokens, rotation=90, fontsize=5)
                ax.set_yticks(range(n), tokens, fontsize=5)
            ax.set_xlabel('key j', fontsize=7)
            ax.set_ylabel('query i', fontsize=7)
        for ax in list(axes.flat)[len(maps):]:
            ax.axis('off')
        fig.tight_layout()
        out = os.path.join(directory, 'relevance_tiles.png')
        fig.savefig(out, dpi=130)
        outs.append(out)
    fig, ax = plt.subplots(figsize=(5.5, 4))
    layers = [t['layer'] for t in r['tiles']]
    sc = ax.scatter([t['w'] for t in r['tiles']], [t['r'] for t in r['tiles']], c=layers, cmap='viridis', s=18)
    ax.set_xscale('log')
    ax.axvline(r['train_len'], color='C3', ls='--', lw=1, label=f"training length {r['train_len']}")
    ax.set_xlabel('window w')
    ax.set_ylabel('acceptance width r')
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    fig.colorbar(sc, ax=ax, label='layer')
    ax.set_title(f"{r['model']}: learned (w, r) of {len(r['tiles'])} tiles", fontsize=10)
    fig.tight_layout()
    out = os.path.join(directory, 'relevance_wr.png')
    fig.savefig(out, dpi=120)
    outs.append(out)
    return '\n'.join(outs)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--kind', default='all', choices=['all', 'ppl', 'abcdigits', 'passkey', 'relevance'])
    p.add_argument('dir')
    a = p.parse_args()
    kinds = ['ppl', 'abcdigits', 'passkey', 'relevance'] if a.kind == 'all' else [a.kind]
    drawn = 0
    for kind in kinds:
        if not os.path.exists(os.path.join(a.dir, f'{kind}.json')):
            if a.kind != 'all':
                sys.exit(f'plot_eval: {os.path.join(a.dir, kind + ".json")} not found')
            continue
        print(plot_ppl(a.dir) if kind == 'ppl' else plot_relevance(a.dir) if kind == 'relevance' else plot_grid(a.dir, kind))
        drawn += 1
    if not drawn:
        sys.exit(f'plot_eval: no results in {a.dir}')


if __name__ == '__main__':
    main()
