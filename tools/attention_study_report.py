#!/usr/bin/python3
"""The attention-mechanism study's tables and figure (issue 30; configs/studies/attention/,
docs/attention_study.md), drawn from the files `multiscreen eval` wrote, so that they can be
redrawn without the models.

Each --variant is LABEL=DIR[,DIR...]: eval output directories of one trained model, each
holding a ppl.json (`eval ppl`: mean loss by position) and/or an abcdigits.json (`eval
abcdigits`). A ppl.json with a YaRN factor other than 1 is drawn dashed and labelled with
it. Prints a Markdown table (mean loss over position bands relative to the training length L:
(0, L], (L, 2L], (2L, 4L], (4L, 8L] of the 1-based positions; ABCDigits accuracy per context) and writes the figure.

Run: /usr/bin/python3 tools/attention_study_report.py --variant=softmax=runs/x/eval_ppl,runs/x/eval_abc \
         ... --figure=docs/figures/attention_study_ppl.png > table.md
Needs matplotlib (Debian's python3-matplotlib; scripts/setup installs it).
"""
import argparse
import json
import math
import os
import sys


BANDS = ((0, 1), (1, 2), (2, 4), (4, 8))  # in units of the training length L


def band_means(ppl):
    """Mean loss over the positions (1-based, as ppl.json counts them: position p is the
    p-th predicted token) in (0, L], (L, 2L], (2L, 4L], (4L, 8L] of a ppl.json (L =
    train_len), each position's mean loss with equal weight; None for a band the windows
    do not reach to its end."""
    L = ppl['train_len']
    last = max(ppl['position'])
    out = []
    for lo, hi in BANDS:
        vals = [loss for pos, loss in zip(ppl['position'], ppl['mean_loss']) if lo * L < pos <= hi * L]
        out.append(sum(vals) / len(vals) if vals and last >= hi * L else None)
    return out


def yarn_of(ppl):
    return float(ppl.get('yarn_factor', 1) or 1)


def load(spec):
    label, _, dirs = spec.partition('=')
    if not label or not dirs:
        sys.exit(f'--variant={spec}: expected LABEL=DIR[,DIR...]')
    variant = {'label': label, 'ppl': [], 'abc': None}
    for d in dirs.split(','):
        found = False
        for name in ('ppl.json', 'abcdigits.json'):
            path = os.path.join(d, name)
            if os.path.exists(path):
                with open(path) as f:
                    r = json.load(f)
                if name == 'ppl.json':
                    variant['ppl'].append(r)
                else:
                    variant['abc'] = r
                found = True
        if not found:
            sys.exit(f'--variant={spec}: {d} holds neither ppl.json nor abcdigits.json')
    return variant


def fmt(x):
    return '–' if x is None else f'{x:.3f}'


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--variant', action='append', required=True, help='LABEL=DIR[,DIR...]')
    ap.add_argument('--figure', help='PNG of loss against position, every variant')
    args = ap.parse_args()
    variants = [load(v) for v in args.variant]

    print('| variant | YaRN | loss (0, L] | (L, 2L] | (2L, 4L] | (4L, 8L] |')
    print('|---|---:|---:|---:|---:|---:|')
    for v in variants:
        for p in sorted(v['ppl'], key=yarn_of):
            f = yarn_of(p)
            print(f"| {v['label']} | {'–' if f == 1 else f'{f:g}'} | " + ' | '.join(fmt(x) for x in band_means(p)) + ' |')
    abc = [v for v in variants if v['abc']]
    if abc:
        contexts = sorted({c['context'] for v in abc for c in v['abc']['cells']})
        print()
        print('| variant | ' + ' | '.join(f'ABCDigits {c}' for c in contexts) + ' |')
        print('|---|' + '---:|' * len(contexts))
        for v in abc:
            acc = {}
            for c in v['abc']['cells']:
                acc.setdefault(c['context'], []).append(c['accuracy'])
            print(f"| {v['label']} | " + ' | '.join(
                fmt(sum(acc[c]) / len(acc[c])) if c in acc else '–' for c in contexts) + ' |')

    if args.figure:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.5))
        train_len = None
        for i, v in enumerate(variants):
            for p in sorted(v['ppl'], key=yarn_of):
                f = yarn_of(p)
                label = v['label'] if f == 1 else f"{v['label']}, YaRN {f:g}"
                ax.plot(p['position'], p['smoothed_loss'], color=f'C{i}', lw=1.3, ls='-' if f == 1 else '--',
                        label=label)
                train_len = p['train_len']
        if train_len:
            ax.axvline(train_len, color='0.5', ls=':', lw=1, label=f'training length {train_len}')
        ax.set_xscale('log')
        ax.set_xlabel('position (tokens)')
        ax.set_ylabel('loss (nats), smoothed')
        finite = [y for v in variants for p in v['ppl'] for y in p['smoothed_loss'] if math.isfinite(y)]
        if finite:
            lo = min(finite)
            ax.set_ylim(lo - 0.2, min(max(finite), lo + 4))
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(args.figure, dpi=120)


if __name__ == '__main__':
    main()
