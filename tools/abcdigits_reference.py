#!/usr/bin/env python3
"""ABCDigits instances made by Python itself: the reference for eval/abcdigits.cc.

A transcription of the author's public generator (ken-nakanishi/abcdigits, abcdigits.py,
MIT License, Copyright (c) 2026 Ken Nakanishi): `generate_by_line_count` and
`generate_by_token_count`, on CPython's own `random.Random(seed)` (the author's seed is
123). The token mode counts each line's GPT-2 tokens; the author used Hugging Face's GPT-2
tokenizer, here a small byte-level BPE over the same encoder.json / vocab.bpe (enough for
the ASCII lines "L=dddddd\n"; anything else is refused), so no extra package is needed.

  tools/abcdigits_reference.py --mode=lines --length=64 --depth=0.5 --instances=10 \
      [--seed=123 --tokenizer=data_cache/gpt2] > F.jsonl
  tools/abcdigits_reference.py --goldens=tests/eval/testdata   # rewrites the golden files

Output: one JSON object per line, {"prompt": text[:-6], "answer": text[-6:]}, exactly as
`multiscreen eval abcdigits --generate_only --dump=F.jsonl` writes it.
"""
import argparse
import json
import os
import random
import re
import string
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def by_line_count(n_lines, depth, n_digits=6, n_trials=1000, seed=123):
    assert n_lines >= 50, 'n_lines must be at least 50'
    rng = random.Random(seed)
    out = []
    for _ in range(n_trials):
        values = rng.sample(range(10 ** (n_digits - 1), 10 ** n_digits), 26)
        lines = [f'{letter}={value}\n' for letter, value in zip(string.ascii_uppercase, values)]
        weights = [0] + [2 ** i for i in range(25)]
        rng.shuffle(weights)
        target = weights.index(0)
        order = [i for i in range(26) if i != target]
        order += rng.choices(range(26), weights=weights, k=n_lines - 27)
        rng.shuffle(order)
        order.insert(int(len(order) * depth), target)
        order.append(target)
        out.append(''.join(lines[i] for i in order).rstrip())
    return out


def by_token_count(n_tokens, depth, count_tokens, n_digits=6, n_trials=1000, seed=123):
    rng = random.Random(seed)
    out = []
    for _ in range(n_trials):
        values = rng.sample(range(10 ** (n_digits - 1), 10 ** n_digits), 26)
        lines = [f'{letter}={value}\n' for letter, value in zip(string.ascii_uppercase, values)]
        lengths = [count_tokens(t) for t in lines]
        weights = [0] + [2 ** i for i in range(25)]
        rng.shuffle(weights)
        target = weights.index(0)
        total = sum(lengths) + lengths[target]
        order = [i for i in range(26) if i != target]
        assert total * 2 < n_tokens, f'n_tokens must be more than {total}*2'
        while total < n_tokens:
            i = rng.choices(range(26), weights=weights)[0]
            order.append(i)
            total += lengths[i]
        rng.shuffle(order)
        order.insert(int(len(order) * depth), target)
        order.append(target)
        out.append(''.join(lines[i] for i in order).rstrip())
    return out


class AsciiGpt2:
    """GPT-2 byte-level BPE for ASCII text (the pre-tokenizer's \\p{L}/\\p{N} are ASCII here)."""

    PATTERN = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")

    def __init__(self, directory):
        with open(os.path.join(directory, 'encoder.json'), encoding='utf-8') as f:
            self.encoder = json.load(f)
        with open(os.path.join(directory, 'vocab.bpe'), encoding='utf-8') as f:
            merges = [tuple(line.split()) for line in f.read().split('\n')[1:] if line.strip()]
        self.ranks = {pair: i for i, pair in enumerate(merges)}
        # bytes_to_unicode(): printable bytes map to themselves, the rest to 256 + n.
        printable = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
        self.byte_char = {}
        n = 0
        for b in range(256):
            if b in printable:
                self.byte_char[b] = chr(b)
            else:
                self.byte_char[b] = chr(256 + n)
                n += 1

    def bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.ranks.get((a, b), float('inf')), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            rank, _ = min(pairs)
            if rank == float('inf'):
                break
            first, second = [p for p in zip(parts, parts[1:])][min(pairs)[1]]
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == first and parts[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return parts

    def encode(self, text):
        if not text.isascii():
            raise ValueError('AsciiGpt2 encodes ASCII text only')
        ids = []
        for piece in self.PATTERN.findall(text):
            word = ''.join(self.byte_char[b] for b in piece.encode('utf-8'))
            ids += [self.encoder[p] for p in self.bpe(word)]
        return ids


def dump(texts, n_digits=6):
    return ''.join(json.dumps({'prompt': t[:-n_digits], 'answer': t[-n_digits:]}) + '\n' for t in texts)


# (mode, length, depth, instances, seed): the cases tests/eval/abcdigits_test.cc compares.
GOLDEN_CASES = [
    ('lines', 50, 0.1, 4, 123),
    ('lines', 64, 0.5, 4, 123),
    ('lines', 200, 0.9, 3, 123),
    ('lines', 100, 0.0, 3, 7),
    ('lines', 80, 1.0, 2, 2 ** 40 + 5),
    ('tokens', 400, 0.1, 3, 123),
    ('tokens', 1000, 0.7, 2, 123),
    ('tokens', 600, 0.3, 2, 99),
]


def golden_name(mode, length, depth, instances, seed):
    return f'abcdigits_{mode}_{length}_d{depth}_n{instances}_s{seed}.jsonl'


def generate(mode, length, depth, instances, seed, tokenizer_dir):
    if mode == 'lines':
        return by_line_count(length, depth, n_trials=instances, seed=seed)
    gpt2 = AsciiGpt2(tokenizer_dir)
    return by_token_count(length, depth, lambda t: len(gpt2.encode(t)), n_trials=instances, seed=seed)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--mode', choices=['lines', 'tokens'], default='lines')
    p.add_argument('--length', type=int, default=64)
    p.add_argument('--depth', type=float, default=0.5)
    p.add_argument('--instances', type=int, default=10)
    p.add_argument('--seed', type=int, default=123)
    p.add_argument('--tokenizer', default=os.path.join(ROOT, 'data_cache', 'gpt2'))
    p.add_argument('--goldens', help='write every golden case into this directory')
    a = p.parse_args()
    if a.goldens:
        os.makedirs(a.goldens, exist_ok=True)
        for case in GOLDEN_CASES:
            path = os.path.join(a.goldens, golden_name(*case))
            with open(path, 'w', encoding='utf-8', newline='\n') as f:
                f.write(dump(generate(*case, a.tokenizer)))
            print(path)
        return
    sys.stdout.write(dump(generate(a.mode, a.length, a.depth, a.instances, a.seed, a.tokenizer)))


if __name__ == '__main__':
    main()
