#!/usr/bin/python3
"""`multiscreen generate` streams its output: the bytes equal the whole output the command
printed before it streamed (golden files made by that build, byte for byte, for a
Multiscreen whose greedy tokens are lone UTF-8 continuation bytes and a Transformer one of
whose tokens ends inside a character), the prompt and tokens arrive while it still decodes,
and SIGINT / SIGTERM after the first tokens leave exactly the tokens printed so far (the
same bytes as a run of that many tokens, newline included), one line on stderr and status
128 + the signal. A second SIGINT still ends it at once. The closed-pipe case is one line.

Run: /usr/bin/python3 tests/eval/generate_stream_cli_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from cli_errors import OneLineErrors  # noqa: E402

BIN = None
SOURCE = None
PROMPT = "絵文字🙂"


def run(*args, timeout=120):
    return subprocess.run([BIN, *args], capture_output=True, timeout=timeout)


def randomize(path, seed):
    """Every matrix of the weights file drawn from N(0, 1) (numpy's default_rng(seed), in
    h5py's visiting order), so that greedy decoding leaves the initialization's repetition."""
    rng = np.random.default_rng(seed)
    with h5py.File(path, "r+") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and obj.ndim >= 2:
                obj[...] = rng.standard_normal(obj.shape).astype(obj.dtype)
        f.visititems(visit)
        del f.attrs["params_crc32c"]


class GenerateStreamTest(OneLineErrors):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.tokenizer = os.path.join(SOURCE, "data_cache", "gpt2")

    def tearDown(self):
        self.tmp.cleanup()

    def init(self, model, seed=7):
        w = os.path.join(self.dir, f"{model}.h5")
        r = run("init", f"--model={model}", f"--seed={seed}", f"--out={w}")
        self.assertEqual(r.returncode, 0, r.stderr)
        return w

    def test_streamed_bytes_equal_the_whole_output_of_before(self):
        # The goldens: stdout of the build before streaming (printf of prompt, Decode of all
        # tokens, newline) for these weights; identical on the avx2 and avx512 paths.
        for model, seed, partial in (("tiny_gpt2_vocab", 1, b"\x99\x82\x99\x82"),
                                     ("tiny_gpt2_transformer", 4, b"\xe2\x98 realized")):
            w = self.init(model)
            randomize(w, seed)
            r = run("generate", f"--weights={w}", f"--tokenizer={self.tokenizer}", f"--prompt={PROMPT}",
                    "--max_tokens=64")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(HERE, "testdata", f"generate_{model}_s{seed}.golden"), "rb") as f:
                golden = f.read()
            self.assertIn(partial, golden)  # bytes that end no character: still printed as they were
            self.assertEqual(r.stdout, golden, model)

    def start(self, w, max_tokens, prompt="The history of"):
        return subprocess.Popen([BIN, "generate", f"--weights={w}", f"--tokenizer={self.tokenizer}",
                                 f"--prompt={prompt}", f"--max_tokens={max_tokens}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def read_until(self, proc, size, timeout=120):
        """stdout of the running proc until it holds more than `size` bytes."""
        out = b""
        end = time.time() + timeout
        while len(out) <= size:
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, end - time.time()))
            self.assertTrue(ready, f"no output past {size} bytes in {timeout} s: {out!r}")
            chunk = os.read(proc.stdout.fileno(), 65536)
            self.assertTrue(chunk, f"stdout closed early: {out!r}")
            out += chunk
        return out

    def test_a_stop_signal_keeps_the_tokens_printed_so_far(self):
        # Ψ = 8 decodes ~100 tokens a second here; 10^5 cannot finish before the signal.
        w = self.init("psi8")
        prompt = "The history of"
        for sig, status in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            proc = self.start(w, 100000, prompt)
            early = self.read_until(proc, len(prompt) + 8)  # the prompt and the first tokens, while it runs
            self.assertTrue(early.startswith(prompt.encode()), early)
            self.assertIsNone(proc.poll())
            proc.send_signal(sig)
            rest, err = proc.communicate(timeout=60)
            out = early + rest
            self.assertEqual(proc.returncode, status, err)
            lines = err.decode().splitlines()
            self.assertEqual(len(lines), 1, err)
            m = re.fullmatch(rf"multiscreen generate: interrupted by {sig.name} after (\d+) of 100000 tokens; "
                             r"printed those", lines[0])
            self.assertIsNotNone(m, lines[0])
            n = int(m.group(1))
            self.assertGreater(n, 0)
            self.assertLess(n, 100000)
            # Exactly the first n tokens, ended as a whole output ends.
            whole = run("generate", f"--weights={w}", f"--tokenizer={self.tokenizer}", f"--prompt={prompt}",
                        f"--max_tokens={n}")
            self.assertEqual(whole.returncode, 0, whole.stderr)
            self.assertEqual(out, whole.stdout, sig.name)
            self.assertTrue(out.endswith(b"\n"))

    def test_a_second_sigint_ends_it_at_once(self):
        w = self.init("psi8")
        proc = self.start(w, 100000)
        self.read_until(proc, 20)
        # Two signals before the loop looks: the second exits from the handler.
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 130, err)

    def test_a_closed_pipe_stops_decoding_with_one_line(self):
        w = self.init("psi8")
        proc = self.start(w, 100000)
        self.read_until(proc, 20)
        proc.stdout.close()  # the reader goes away (`| head -c 20`)
        err = proc.stderr.read()
        proc.stderr.close()
        self.assertEqual(proc.wait(timeout=60), 1, err)
        lines = err.decode().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertRegex(lines[0], r"^multiscreen generate: writing stdout failed after \d+ of 100000 tokens$")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiscreen", required=True)
    parser.add_argument("--source", required=True)
    args, rest = parser.parse_known_args()
    BIN = os.path.abspath(args.multiscreen)
    SOURCE = os.path.abspath(args.source)
    unittest.main(argv=[sys.argv[0]] + rest)
