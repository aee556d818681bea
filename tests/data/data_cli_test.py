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
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
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


def wait_for_sigint_handler(pid, timeout=120):
    """Waits until process `pid` catches SIGINT (its SigCgt mask in /proc), so that a
    signal sent next reaches the handler, however slowly a loaded machine starts it."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(f"/proc/{pid}/status") as f:
            caught = [l for l in f if l.startswith("SigCgt:")]
        if caught and int(caught[0].split()[1], 16) & (1 << (signal.SIGINT - 1)):
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} installed no SIGINT handler within {timeout} s")


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
        self.assertFalse(os.path.exists(out), "a failed prepare left the --output directory it created")

    def test_prepare_bounds_a_document_and_stops_a_read_with_no_data_on_sigint(self):
        out = self.path("out")
        base = ["prepare", f"--tokenizer={TOKENIZER}", f"--output={out}"]
        # An endless stream without a newline is one line, not all of memory.
        self.assert_one_line_error(run(*base, "--input=/dev/zero", "--input_format=jsonl",
                                       "--max_document_bytes=5000000"),
                                   "/dev/zero:1: a document longer than 5000000 bytes (--max_document_bytes")
        with open(self.path("long.jsonl"), "w") as f:
            f.write('{"text": "short"}\n{"text": "' + "x" * 3000 + '"}\n')
        self.assert_one_line_error(run(*base, f"--input={self.path('long.jsonl')}", "--max_document_bytes=2000"),
                                   self.path("long.jsonl") + ":2: a document longer than 2000 bytes")
        self.assert_one_line_error(run(*base, f"--input={self.path('long.jsonl')}", "--max_document_bytes=0"),
                                   "--max_document_bytes=0")
        self.assertFalse(os.path.exists(out), "a failed prepare left the --output directory it created")
        # A FIFO with no writer: the first SIGINT ends the run at once, with no *.tmp left.
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        p = subprocess.Popen([BIN, *base, f"--input={fifo}", "--input_format=text"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_for_sigint_handler(p.pid)
        time.sleep(0.5)  # into the read
        p.send_signal(signal.SIGINT)
        try:
            _, err = p.communicate(timeout=30)
        finally:
            p.kill()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"interrupted", err)
        self.assertFalse(os.path.exists(out))  # no *.tmp, nor the directory this prepare created
        # A writer that comes late is read to the end.
        p = subprocess.Popen([BIN, *base, f"--input={fifo}", "--input_format=jsonl", "--val_tokens=0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.5)
        with open(fifo, "w") as f:
            f.write('{"text": "hello world"}\n')
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(len(read_shard(os.path.join(out, "train_000000.bin"))), 3)

    def test_a_second_prepare_into_the_same_directory_is_refused(self):
        """Two prepares into one output directory would delete each other's temporaries and
        interleave shards: the second is refused in one line while the first runs, and the
        first's temporary shard survives it."""
        out = self.path("out")
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        with open(self.path("a.txt"), "w") as f:
            f.write("some text to tokenize")
        base = ["prepare", f"--tokenizer={TOKENIZER}", f"--output={out}"]
        first = subprocess.Popen([BIN, *base, f"--input={fifo}", "--input_format=text"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_for_sigint_handler(first.pid)
            deadline = time.time() + 30
            while not os.path.exists(os.path.join(out, "val_000000.bin.tmp")) and time.time() < deadline:
                time.sleep(0.1)
            self.assertTrue(os.path.exists(os.path.join(out, "val_000000.bin.tmp")))
            self.assert_one_line_error(run(*base, f"--input={self.path('a.txt')}"),
                                       f"--output={out}: another prepare is using it ({out}/.prepare.lock is locked)")
            self.assertTrue(os.path.exists(os.path.join(out, "val_000000.bin.tmp")))
            first.send_signal(signal.SIGINT)
            first.communicate(timeout=30)
        finally:
            first.kill()
        # The lock goes with the process: the directory is usable again.
        r = run(*base, f"--input={self.path('a.txt')}", "--val_tokens=0")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_prepare_refuses_an_output_that_overlaps_its_inputs(self):
        """An output directory that is an input directory, lies inside one, or holds an input
        file would read its own shards back on a re-run: refused before anything is written."""
        corpus = self.path("corpus")
        os.mkdir(corpus)
        with open(os.path.join(corpus, "a.txt"), "w") as f:
            f.write("some text to tokenize")
        base = ["prepare", f"--tokenizer={TOKENIZER}", "--val_tokens=0"]
        before = sorted(os.listdir(corpus))
        self.assert_one_line_error(run(*base, f"--input={corpus}", f"--output={corpus}"),
                                   f"--output={corpus} is the input directory {corpus}")
        # The same directory through a trailing slash and through a symbolic link.
        self.assert_one_line_error(run(*base, f"--input={corpus}/", f"--output={corpus}"), "is the input directory")
        os.symlink(corpus, self.path("link"))
        self.assert_one_line_error(run(*base, f"--input={self.path('link')}", f"--output={corpus}"),
                                   "is the input directory")
        self.assert_one_line_error(run(*base, f"--input={corpus}", f"--output={corpus}/shards"),
                                   f"--output={corpus}/shards is inside the input directory {corpus}")
        self.assertEqual(sorted(os.listdir(corpus)), before)  # nothing created, nothing read
        # An input file inside the output directory (the shards of an earlier run, say).
        self.assert_one_line_error(run(*base, f"--input={corpus}/a.txt", f"--output={corpus}"),
                                   f"--input: {corpus}/a.txt is inside --output={corpus}")
        self.assertEqual(sorted(os.listdir(corpus)), before)
        # Apart, it works.
        out = self.path("out")
        r = run(*base, f"--input={corpus}", f"--output={out}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("train_000000.bin", os.listdir(out))

    def test_prepare_refuses_an_output_inside_a_runs_checkpoints(self):
        """Shards written into a checkpoint would be deleted with it by the run's retention
        (a fresh-eyes report): refused, as every other command's outputs are."""
        corpus = self.path("corpus_ck")
        os.mkdir(corpus)
        with open(os.path.join(corpus, "a.txt"), "w") as f:
            f.write("some text to tokenize")
        run_dir = self.path("run")
        step = os.path.join(run_dir, "checkpoints", "step_00000045")
        os.makedirs(step)
        with open(os.path.join(run_dir, "run.json"), "w") as f:
            f.write("{}")
        with open(os.path.join(step, "manifest.json"), "w") as f:
            f.write("{}")
        base = ["prepare", f"--tokenizer={TOKENIZER}", "--val_tokens=0", f"--input={corpus}"]
        for out in (step, os.path.join(run_dir, "checkpoints"), os.path.join(step, "data")):
            self.assert_one_line_error(run(*base, f"--output={out}"), f"--output={out}", "checkpoint")
        self.assertEqual(sorted(os.listdir(step)), ["manifest.json"])

    def test_prepare_removes_the_temporary_shards_a_killed_run_left(self):
        """*.tmp shards of a prepare killed outright (SIGKILL) are removed at the next start,
        in one line naming them; other files in the directory stay."""
        with open(self.path("a.txt"), "w") as f:
            f.write("a document long enough for a shard or two")
        out = self.path("out")
        os.mkdir(out)
        stale = ["train_000000.bin.tmp", "train_000007.bin.tmp", "val_000000.bin.tmp"]
        kept = ["notes.tmp", "train_0000.bin.tmp", "train_000001.bin.tmp.keep", "my_train_000001.bin.tmp"]
        for name in stale + kept:
            with open(os.path.join(out, name), "wb") as f:
                f.write(b"\0" * 1024)
        r = run("prepare", f"--tokenizer={TOKENIZER}", f"--input={self.path('a.txt')}", f"--output={out}",
                "--val_tokens=0")
        self.assertEqual(r.returncode, 0, r.stderr)
        notes = [l for l in r.stderr.decode().splitlines() if "temporary shard" in l]
        self.assertEqual(notes, [f"prepare: removed 3 temporary shards left in {out} by an interrupted prepare: "
                                 + ", ".join(stale)])
        self.assertEqual(sorted(os.listdir(out)), sorted(kept + ["train_000000.bin"]))
        # Nothing stale: no such line.
        r = run("prepare", f"--tokenizer={TOKENIZER}", f"--input={self.path('a.txt')}", f"--output={out}",
                "--val_tokens=0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn(b"temporary shard", r.stderr)

    def test_prepare_into_a_directory_with_shards_says_it_replaces_them(self):
        """Field report: re-preparing into a directory dropped its earlier shards without a
        word. They stay until the new run finishes (a failed run leaves them, its error one
        line); then every one is replaced, and one line says how many."""
        with open(self.path("a.txt"), "w") as f:
            f.write("one document, " * 40)
        out = self.path("out")
        base = ["prepare", f"--tokenizer={TOKENIZER}", f"--input={self.path('a.txt')}", f"--output={out}"]
        r = run(*base, "--shard_tokens=50", "--val_tokens=0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn(b"earlier prepare", r.stderr)  # an empty --output: nothing to say
        before = sorted(os.listdir(out))
        self.assertGreater(len(before), 2, before)
        # A run that fails (no training documents left) leaves the earlier shards, in one line.
        self.assert_one_line_error(run(*base, "--val_tokens=100000"), "went to the validation shard")
        self.assertEqual(sorted(os.listdir(out)), before)
        r = run(*base, "--val_tokens=0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"prepare: replaced the {len(before)} shards of an earlier prepare in --output={out} "
                      f"({len(before)} train, 0 val)\n".encode(), r.stderr)
        self.assertEqual(sorted(os.listdir(out)), ["train_000000.bin"])

    def test_prepare_max_document_bytes_takes_size_suffixes(self):
        """--max_document_bytes parses as --memory does: K, M, G (powers of 1024)."""
        with open(self.path("long.jsonl"), "w") as f:
            f.write('{"text": "short"}\n{"text": "' + "x" * 3000 + '"}\n')
        out = self.path("out")
        base = ["prepare", f"--tokenizer={TOKENIZER}", f"--input={self.path('long.jsonl')}", f"--output={out}",
                "--val_tokens=0"]
        self.assert_one_line_error(run(*base, "--max_document_bytes=2K"),
                                   self.path("long.jsonl") + ":2: a document longer than 2048 bytes")
        for ok in ("4K", "4KiB", "1m", "1G", "4096"):
            r = run(*base, f"--max_document_bytes={ok}")
            self.assertEqual(r.returncode, 0, (ok, r.stderr))
        self.assert_one_line_error(run(*base, "--max_document_bytes=2X"),
                                   "--max_document_bytes=2X: expected bytes with an optional K, M, G or T suffix")
        self.assert_one_line_error(run(*base, "--max_document_bytes=-1"), "--max_document_bytes=-1")

    def test_prepare_replaces_invalid_utf8_as_python_reads_it(self):
        """U+FFFD goes where Python's errors="replace" puts it (and, for JSON escapes of lone
        surrogates, where tiktoken's repair does), so the ids are GPT-2's encoding of the text
        a Python pipeline would have read; --strict_utf8 refuses the same input."""
        rng = random.Random(13)
        pieces = [b"a", b" the", b"\xc3\xa9", b"\xe4\xbd\xa0", b"\xf0\x9f\x91\x8d", b"\n", b"\xe6\xad", b"\xff",
                  b"\x80", b"\xed\xa0\x80", b"\xf0\x9f", b"\xe0\x80", b"\xc0", b"\xf4\x90", b"\xef\xbf\xbd"]
        docs = [b"ok \xe6\xad end"] + [b"".join(rng.choice(pieces) for _ in range(40)) for _ in range(30)]
        os.mkdir(self.path("texts"))
        for i, doc in enumerate(docs):
            with open(self.path(f"texts/t{i:02}.txt"), "wb") as f:
                f.write(doc)
        line = '{"text":"a \\udbc0 b \\ud83d\\ude00"}'
        with open(self.path("s.jsonl"), "w") as f:
            f.write(line + "\n")
        out = self.path("out")
        args = ["prepare", f"--tokenizer={TOKENIZER}", f"--input={self.path('texts')},{self.path('s.jsonl')}",
                f"--output={out}", "--val_tokens=0"]
        r = run(*args)
        self.assertEqual(r.returncode, 0, r.stderr)
        expected = [d.decode("utf-8", errors="replace") for d in docs]
        expected.append(json.loads(line)["text"].encode("utf-16", "surrogatepass").decode("utf-16", "replace"))
        tokens = read_shard(os.path.join(out, "train_000000.bin"))
        text = run("tokenize", f"--tokenizer={TOKENIZER}", "--decode", stdin=" ".join(map(str, tokens)).encode())
        self.assertEqual(text.stdout.decode(), "".join(e + "<|endoftext|>" for e in expected))
        # The ids themselves: GPT-2's encoding of what Python read (the issue's two reports).
        ends = [i for i, t in enumerate(tokens) if t == 50256]
        for e, begin, end in ((expected[0], 0, ends[0]), (expected[-1], ends[-2] + 1, ends[-1])):
            ids = run("tokenize", f"--tokenizer={TOKENIZER}", stdin=e.encode())
            self.assertEqual(ids.stdout.decode().split(), [str(t) for t in tokens[begin:end]])
        # The summary counts the replacements of each file.
        stdout = r.stdout.decode()
        total = sum(e.count("\ufffd") for e in expected) - sum(d.count(b"\xef\xbf\xbd") for d in docs)
        self.assertIn(f"replaced {total} invalid UTF-8 sequences or lone surrogate escapes by U+FFFD", stdout)
        self.assertIn(f"in 32 files (--strict_utf8 refuses them):\n  {self.path('texts/t00.txt')}: 1\n", stdout)
        self.assertIn("  ... and 12 more files\n", stdout)  # 20 files are listed
        alone = run(*args[:2], f"--input={self.path('s.jsonl')}", f"--output={out}", "--val_tokens=0")
        self.assertIn(f"by U+FFFD in 1 file (--strict_utf8 refuses them):\n  {self.path('s.jsonl')}: 1\n",
                      alone.stdout.decode())
        # --strict_utf8: the first bad byte, with its file, line and offset.
        self.assert_one_line_error(run(*args, "--strict_utf8"),
                                   f"{self.path('texts/t00.txt')}:1: invalid UTF-8 at file byte 3 (--strict_utf8)")
        self.assert_one_line_error(
            run(*args[:2], f"--input={self.path('s.jsonl')}", f"--output={out}", "--val_tokens=0", "--strict_utf8"),
            f"{self.path('s.jsonl')}:1: lone surrogate escape \\udbc0 at file byte 11 (--strict_utf8)")


    def test_prepare_refuses_token_files_and_binary_files_naming_them(self):
        """A user's `prepare --input=data_cache/shards` tokenized an llm.c shard as one
        document of U+FFFD and exited 0: token files and binary files are refused before any
        work, naming the file and what it is (a directory's first such file)."""
        shards = self.path("shards")
        os.mkdir(shards)
        for name in ("train_000000.bin", "val_000000.bin"):
            header = struct.pack("<3i", 20240520, 1, 3) + bytes(1012)
            with open(os.path.join(shards, name), "wb") as f:
                f.write(header + struct.pack("<3H", 1, 2, 3))
        out = self.path("out2")
        base = ["prepare", f"--tokenizer={TOKENIZER}", f"--output={out}"]
        self.assert_one_line_error(run(*base, f"--input={shards}"),
                                   f"{shards}/train_000000.bin: an llm.c token shard (header magic 20240520), not "
                                   "text: prepare tokenizes UTF-8 text, JSONL and JSON")
        with open(self.path("val.u16"), "wb") as f:
            f.write(struct.pack("<4H", 15496, 995, 0, 50256))
        self.assert_one_line_error(run(*base, f"--input={self.path('val.u16')}"),
                                   f"{self.path('val.u16')}: a NUL byte at byte 4: a binary file")
        self.assertFalse(os.path.exists(out), "a refused prepare left the --output directory it created")

    def test_prepare_reads_a_file_named_twice_once(self):
        """--input=ind/a.txt,ind read a.txt twice: into the validation shard and into
        training. A file named twice (itself and through its directory, two spellings) is
        read once, at its first place, with a notice naming it."""
        ind = self.path("ind")
        os.mkdir(ind)
        for name, text in (("a.txt", "alpha"), ("b.txt", "beta")):
            with open(os.path.join(ind, name), "w") as f:
                f.write(text)
        with open(self.path("small.txt"), "w") as f:
            f.write("small")
        out = self.path("out")
        for inputs, documents, again in (([f"{ind}/a.txt,{ind}"], 2, f"--input: {ind}/a.txt (in {ind}) is {ind}/a.txt again"),
                                         (["small.txt,small.txt"], 1, "--input: small.txt is small.txt again"),
                                         (["small.txt,./small.txt"], 1, "--input: ./small.txt is small.txt again"),
                                         (["small.txt", "./small.txt"], 1, "--input: ./small.txt is small.txt again")):
            r = subprocess.run([BIN, "prepare", f"--tokenizer={TOKENIZER}", f"--output={out}", "--val_tokens=0",
                                *[f"--input={i}" if k == 0 else i for k, i in enumerate(inputs)]],
                               capture_output=True, timeout=300, cwd=self.dir)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"prepare: {documents} document".encode(), r.stdout)
            self.assertIn(f"prepare: {again}: read once, at its first place".encode(), r.stderr)

    def test_prepare_input_given_twice_is_refused(self):
        """`--input=small.txt --input=hugeline.txt` read hugeline.txt alone (absl keeps the
        last value): refused, saying to give the files comma-separated."""
        for name in ("small.txt", "hugeline.txt"):
            with open(self.path(name), "w") as f:
                f.write("text")
        self.assert_one_line_error(run("prepare", f"--tokenizer={TOKENIZER}", f"--input={self.path('small.txt')}",
                                       f"--input={self.path('hugeline.txt')}", f"--output={self.path('out')}"),
                                   f"--input is given twice (--input={self.path('small.txt')}, then "
                                   f"--input={self.path('hugeline.txt')})", "comma-separated")

    def test_prepare_names_what_a_directory_input_skips(self):
        """prepare --input=DIR skipped subdirectories and broken links without a word, and a
        directory of folders only said "empty input (no files)"."""
        corpus = self.path("corpus")
        os.makedirs(os.path.join(corpus, "sub"))
        with open(os.path.join(corpus, "a.txt"), "w") as f:
            f.write("alpha")
        with open(os.path.join(corpus, "sub", "b.txt"), "w") as f:
            f.write("nested")
        out = self.path("out")
        base = ["prepare", f"--tokenizer={TOKENIZER}", f"--output={out}", "--val_tokens=0"]
        r = run(*base, f"--input={corpus}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"prepare: 1 document", r.stdout)
        self.assertIn(f"prepare: --input={corpus}: skipped 1 subdirectory (sub/; not read: prepare does not recurse, "
                      "so give one as an --input of its own)".encode(), r.stderr)
        os.symlink(self.path("gone.txt"), os.path.join(corpus, "broken.txt"))
        self.assert_one_line_error(run(*base, f"--input={corpus}"),
                                   f"{corpus}/broken.txt: a broken symbolic link (to {self.path('gone.txt')}): the "
                                   "file it names is missing")
        nested = self.path("nested")
        os.makedirs(os.path.join(nested, "x"))
        self.assert_one_line_error(run(*base, f"--input={nested}"),
                                   f"{nested}: no files directly in it, only 1 subdirectory (x/): prepare does not "
                                   f"recurse; give each as an input of its own (--input={nested}/x,...)")

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiscreen", required=True)
    args, rest = parser.parse_known_args()
    BIN = os.path.abspath(args.multiscreen)
    unittest.main(argv=[sys.argv[0]] + rest)
