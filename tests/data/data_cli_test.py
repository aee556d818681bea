#!/usr/bin/python3
"""End-to-end checks of `multiscreen tokenize` and `multiscreen prepare` (DESIGN
"Command-line contract") with GPT-2's files from data_cache/ (scripts/setup fetches
them): ids and text through stdin/stdout, shards that decode back to the documents,
byte-identical re-runs, and a one-line error with a non-zero exit for bad input.

Run: /usr/bin/python3 tests/data/data_cli_test.py --multiscreen=build/multiscreen
"""
import argparse
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from cli_errors import OneLineErrors  # noqa: E402

BIN = None
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CACHE = os.environ.get("MULTISCREEN_DATA_CACHE", os.path.join(ROOT, "data_cache"))
TOKENIZER = os.path.join(CACHE, "gpt2")


def run(*args, stdin=b""):
    return subprocess.run([BIN, *args], input=stdin, capture_output=True, timeout=300)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, count = struct.unpack("<3i", data[:12])
    assert magic == 20240520, path
    fmt = "H" if version == 1 else "I"
    return list(struct.unpack(f"<{count}{fmt}", data[1024:]))


class DataCliTest(OneLineErrors):
    @classmethod
    def setUpClass(cls):
        if not os.path.isfile(os.path.join(TOKENIZER, "encoder.json")):
            raise RuntimeError(f"{TOKENIZER} missing: run scripts/setup (it runs scripts/fetch_data)")

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def test_tokenize_writes_gpt2_ids_and_decode_inverts_them(self):
        r = run("tokenize", f"--tokenizer={TOKENIZER}", stdin="Hello world".encode())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"15496 995\n")
        text = "It's 2024: caf\u00e9, \u4f60\u597d \U0001F44D\n\n  done".encode()
        ids = run("tokenize", f"--tokenizer={TOKENIZER}", stdin=text)
        back = run("tokenize", f"--tokenizer={TOKENIZER}", "--decode", stdin=ids.stdout)
        self.assertEqual(back.returncode, 0, back.stderr)
        self.assertEqual(back.stdout, text)
        # Encoder/vocab under their other names (encoder.json/vocab.bpe is what setup fetches).
        os.symlink(os.path.join(TOKENIZER, "encoder.json"), self.path("vocab.json"))
        os.symlink(os.path.join(TOKENIZER, "vocab.bpe"), self.path("merges.txt"))
        r = run("tokenize", f"--tokenizer={self.dir}", stdin=b"Hello world")
        self.assertEqual(r.stdout, b"15496 995\n")

    def test_tokenize_errors_are_one_line(self):
        self.assert_one_line_error(run("tokenize", f"--tokenizer={TOKENIZER}", stdin=b"ok \xff"),
                                   "stdin: invalid UTF-8 at byte 3")
        self.assert_one_line_error(run("tokenize", f"--tokenizer={TOKENIZER}", "--decode", stdin=b"1 2 x"),
                                   "'x' (token 2) is not a token id")
        self.assert_one_line_error(run("tokenize", f"--tokenizer={TOKENIZER}", "--decode", stdin=b"50257"),
                                   "token 0 has id 50257")
        self.assert_one_line_error(run("tokenize", f"--tokenizer={self.path('none')}", stdin=b"x"),
                                   self.path("none"), "run scripts/setup")

    def test_prepare_shards_decode_to_the_documents_joined_by_eos(self):
        docs = ["First document.\nWith two lines.", "Second: \u00e9t\u00e9 \u2014 fin", "3rd", "fourth"]
        with open(self.path("a.txt"), "w") as f:
            f.write(docs[0])
        with gzip.open(self.path("b.jsonl.gz"), "wt") as f:
            f.write(json.dumps({"text": docs[1]}) + "\n" + json.dumps({"text": docs[2], "meta": 1}) + "\n")
        with open(self.path("c.json"), "w") as f:
            json.dump([docs[3]], f)
        out = self.path("out")
        args = ["prepare", f"--tokenizer={TOKENIZER}", f"--input={self.path('a.txt')},{self.path('b.jsonl.gz')}",
                self.path("c.json"), f"--output={out}", "--val_tokens=5", "--shard_tokens=7"]
        r = run(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"4 documents", r.stdout)
        shards = sorted(n for n in os.listdir(out) if n.startswith("train_"))
        self.assertGreaterEqual(len(shards), 2)
        tokens = read_shard(os.path.join(out, "val_000000.bin"))
        for name in shards:
            tokens += read_shard(os.path.join(out, name))
        self.assertEqual(tokens.count(50256), 4)
        text = run("tokenize", f"--tokenizer={TOKENIZER}", "--decode", stdin=" ".join(map(str, tokens)).encode())
        self.assertEqual(text.stdout.decode(), "".join(d + "<|endoftext|>" for d in docs))
        before = {n: read_bytes(os.path.join(out, n)) for n in os.listdir(out)}
        self.assertEqual(run(*args).returncode, 0)
        after = {n: read_bytes(os.path.join(out, n)) for n in os.listdir(out)}
        self.assertEqual(before, after)

    def test_prepare_errors_are_one_line_naming_the_file(self):
        with open(self.path("bad.jsonl"), "w") as f:
            f.write('{"text": "fine"}\n{"content": "no text"}\n')
        with open(self.path("empty.txt"), "w") as f:
            pass
        out = self.path("out")
        base = ["prepare", f"--tokenizer={TOKENIZER}", f"--output={out}"]
        self.assert_one_line_error(run(*base, f"--input={self.path('bad.jsonl')}"),
                                   self.path("bad.jsonl") + ":2: no field 'text'")
        self.assert_one_line_error(run(*base, f"--input={self.path('empty.txt')}"),
                                   self.path("empty.txt") + ": empty input")
        self.assert_one_line_error(run(*base, f"--input={self.path('nope.txt')}"), self.path("nope.txt"))
        self.assert_one_line_error(run(*base), "--input=FILES is required")
        self.assert_one_line_error(run(*base, f"--input={self.path('bad.jsonl')}", "--input_format=xml"),
                                   "input format 'xml'")
        self.assertFalse(os.path.exists(out) and os.listdir(out))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiscreen", required=True)
    args, rest = parser.parse_known_args()
    BIN = os.path.abspath(args.multiscreen)
    unittest.main(argv=[sys.argv[0]] + rest)
