#!/usr/bin/python3
"""`eval ppl --data` and `forward --tokens` read every token file format `train` reads
(`--format=auto|llmc|megatron|raw_uint16`, data/loader.h): the same tokens give the same
losses as an llm.c shard, a headerless uint16 file and a Megatron pair; a file that is not
what it is taken for is one line naming it and what it is; `eval ppl --resume` refuses a
--data whose content changed since the saved windows (its fingerprint, as train's).

Run: /usr/bin/python3 tests/eval/ppl_data_cli_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import unittest

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
from random_tokens import write_tokens  # noqa: E402
sys.path.insert(0, os.path.join(HERE, ".."))
from cli_errors import OneLineErrors  # noqa: E402

BIN = None
SOURCE = None
EOS = 36  # tiny_psi2's V = 37: its last id is EOS


def run(*args, timeout=120):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout)


class PplDataTest(OneLineErrors):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.w = os.path.join(self.dir, "w.h5")
        r = run("init", "--model=tiny_psi2", "--seed=3", f"--out={self.w}")
        self.assertEqual(r.returncode, 0, r.stderr)

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def ppl(self, data, *flags):
        out = self.path(f"out{len(os.listdir(self.dir))}")
        r = run("eval", "ppl", f"--weights={self.w}", f"--data={data}", "--seq_len=16", f"--out={out}", *flags)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "ppl.json")) as f:
            return json.load(f)

    def megatron(self, prefix, llmc):
        subprocess.run([sys.executable, os.path.join(SOURCE, "tools", "megatron_indexed.py"), f"--prefix={prefix}",
                        "--dtype=uint16", f"--from_llmc={llmc}", f"--eos={EOS}"], check=True)

    def test_every_format_train_reads_gives_the_llmc_shards_losses(self):
        # Issue: --data=val.u16 was read as text ("invalid UTF-8 at byte 0"), a raw or
        # Megatron .bin was "bad magic" with no hint, and --format was refused.
        rng = np.random.default_rng(1)
        docs = [rng.integers(0, EOS, size=n) for n in (40, 5, 33, 20)]
        ids = np.concatenate([np.append(d, EOS) for d in docs])
        llmc = self.path("t.bin")
        write_tokens(llmc, ids)
        ids.astype(np.uint16).tofile(self.path("val.u16"))
        ids.astype(np.uint16).tofile(self.path("raw.bin"))
        self.megatron(self.path("corpus_text_document"), llmc)
        for flags in ((), ("--stream",)):
            want = self.ppl(llmc, *flags)
            self.assertEqual(want["documents"], 6 if flags else 3)
            for data, more in ((self.path("val.u16"), ()), (self.path("raw.bin"), ("--format=raw_uint16",)),
                               (self.path("corpus_text_document"), ()),
                               (self.path("corpus_text_document.bin"), ("--format=megatron",)),
                               (llmc, ("--format=llmc",))):
                got = self.ppl(data, *flags, *more)
                self.assertEqual(got["documents"], want["documents"], (data, flags))
                np.testing.assert_allclose(got["mean_loss"], want["mean_loss"], rtol=0, atol=1e-9,
                                           err_msg=f"{data} {flags} {more}")
        # forward reads them too: the same token losses.
        losses = {}
        for data, more in ((llmc, ()), (self.path("val.u16"), ()), (self.path("raw.bin"), ("--format=raw_uint16",)),
                           (self.path("corpus_text_document.idx"), ())):
            out = self.path(f"fwd{len(losses)}.h5")
            r = run("forward", f"--weights={self.w}", f"--tokens={data}", "--micro_batch=2", "--seq_len=16",
                    f"--out={out}", "--no_grad", *more)
            self.assertEqual(r.returncode, 0, r.stderr)
            with h5py.File(out) as f:
                losses[data] = f["token_losses"][()]
        for data, got in losses.items():
            np.testing.assert_array_equal(got, losses[llmc], err_msg=data)

    def test_compressed_megatron_and_raw_token_files_are_named_as_such(self):
        # A fresh-eyes finding: a gzipped Megatron .bin said "584 bytes, but its index lists
        # 8800 tokens", a gzipped .idx "unknown magic", a gzipped raw file "odd size".
        import gzip
        import shutil
        ids = np.arange(600) % EOS
        llmc = self.path("t.bin")
        write_tokens(llmc, ids)
        out = self.path("o")
        base = ["eval", "ppl", f"--weights={self.w}", "--seq_len=16", f"--out={out}"]
        for part in ("bin", "idx"):
            prefix = self.path(f"mg_{part}")
            self.megatron(prefix, llmc)
            target = f"{prefix}.{part}"
            with open(target, "rb") as f:
                raw = f.read()
            with gzip.open(target, "wb") as f:
                f.write(raw)
            self.assert_one_line_error(run(*base, f"--data={prefix}"),
                                       f"{target}: gzip data (magic 1f 8b): token files are read as they are stored; "
                                       f"decompress it first (zcat {target} > NEW.{part})")
        raw = self.path("raw.u16")
        with gzip.open(raw, "wb") as f:
            f.write(ids.astype(np.uint16).tobytes())
        self.assert_one_line_error(run(*base, f"--data={raw}"), f"{raw}: gzip data (magic 1f 8b)", "> NEW.u16")
        shutil.rmtree(out, ignore_errors=True)

    def test_a_file_that_is_not_what_it_is_taken_for_is_named(self):
        ids = np.arange(600) % EOS
        ids.astype(np.uint16).tofile(self.path("raw.bin"))
        out = self.path("o")
        base = ["eval", "ppl", f"--weights={self.w}", "--seq_len=16", f"--out={out}"]
        raw = self.path("raw.bin")
        self.assert_one_line_error(run(*base, f"--data={raw}"), f"--data={raw}: bad magic",
                                   "a headerless nanoGPT file needs --format=raw_uint16")
        self.assert_one_line_error(run(*base, f"--data={raw}", "--format=megatron"),
                                   f"--data={raw}: not a Megatron pair")
        self.assert_one_line_error(run(*base, f"--data={raw}", "--format=bytes"),
                                   "--format=bytes: expected auto, llmc, megatron or raw_uint16")
        self.assert_one_line_error(run(*base, "--data=/nonexistent"), "--data=/nonexistent: does not exist")
        self.assert_one_line_error(run(*base, f"--data={self.dir}"), f"--data={self.dir}: is a directory")
        # Token ids under a name that says nothing: not taken for text.
        ids.astype(np.uint16).tofile(self.path("ids.dat"))
        self.assert_one_line_error(run(*base, f"--data={self.path('ids.dat')}"),
                                   f"--data={self.path('ids.dat')}: a NUL byte at byte 0: not text",
                                   "--format=llmc, megatron or raw_uint16")
        write_tokens(self.path("shard.txt"), ids)  # an llm.c shard under a text name is read as one
        self.assertEqual(self.ppl(self.path("shard.txt"), "--stream")["documents"], 35)
        self.assertFalse(os.path.exists(out), "a refused evaluation left the --out directory it made")
        # An id past 2^31 - 1 in a uint32 shard: its value as the file holds it.
        write_tokens(self.path("wide.bin"), [1, 2, 2**31 + 5] + [3] * 30)
        self.assert_one_line_error(run(*base, f"--data={self.path('wide.bin')}"),
                                   f"{self.path('wide.bin')}: token 2 is 2147483653, past the model's V = 37")

    def test_compressed_text_is_read_as_prepare_reads_it(self):
        # Issue: --data=val.jsonl.gz was refused as "a NUL byte at byte 3: not text".
        w = self.path("gpt2_vocab.h5")
        r = run("init", "--model=tiny_gpt2_vocab", "--seed=3", f"--out={w}")
        self.assertEqual(r.returncode, 0, r.stderr)
        docs = ["The history of the kettle is long and full of steam, whistles and tea.",
                "A man laces his shoes and steps onto the track; he runs around it twice.",
                "Basil likes the sun, water every morning, and a pot near the window."]
        jsonl = self.path("docs.jsonl")
        with open(jsonl, "w") as f:
            f.write("".join(json.dumps({"text": d}) + "\n" for d in docs))
        text = self.path("doc.txt")
        with open(text, "w") as f:
            f.write(" ".join(docs) + "\n")
        tokenizer = f"--tokenizer={os.path.join(SOURCE, 'data_cache', 'gpt2')}"

        def losses(data):
            out = self.path(f"out{len(os.listdir(self.dir))}")
            r = run("eval", "ppl", f"--weights={w}", f"--data={data}", "--seq_len=8", f"--out={out}", tokenizer)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "ppl.json")) as f:
                got = json.load(f)
            return got["documents"], got["data_format"], got["mean_loss"]

        for plain in (jsonl, text):
            want = losses(plain)
            self.assertEqual(want[0], 3 if plain == jsonl else 1)
            with open(plain, "rb") as f, gzip.open(plain + ".gz", "wb") as g:
                g.write(f.read())
            subprocess.run(["zstd", "-q", plain, "-o", plain + ".zst"], check=True)
            for packed in (plain + ".gz", plain + ".zst"):
                self.assertEqual(losses(packed), want, packed)
        # Compressed token ids are not text: the NUL byte is found in what they decompress to.
        ids = self.path("ids.dat.gz")
        with gzip.open(ids, "wb") as g:
            g.write((np.arange(600) % EOS).astype(np.uint16).tobytes())
        self.assert_one_line_error(run("eval", "ppl", f"--weights={w}", f"--data={ids}", "--seq_len=8",
                                       f"--out={self.path('o')}", tokenizer),
                                   f"--data={ids}: a NUL byte at byte 0: not text")

    def test_resume_refuses_data_that_changed_at_the_same_path(self):
        # Issue: the resume identity held --data's path alone, so a file overwritten between
        # the runs had its windows averaged with the old file's under one result.
        rng = np.random.default_rng(3)
        t = self.path("t.bin")
        write_tokens(t, rng.integers(0, EOS, size=6 * 17))
        out = self.path("part")
        common = ("eval", "ppl", f"--weights={self.w}", f"--data={t}", "--seq_len=16", "--stream", f"--out={out}")
        r = run(*common, "--documents=2")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "ppl_state.json")) as f:
            identity = json.load(f)["identity"]
        self.assertRegex(identity["data_fingerprint"], r"^[0-9a-f]{8}$")
        self.assertEqual(identity["data_format"], "llmc")
        write_tokens(t, rng.integers(0, EOS, size=6 * 17))  # other tokens, the same size and path
        self.assert_one_line_error(run(*common, "--resume"),
                                   f"--resume: --data={t} changed since {out}/ppl_state.json was written",
                                   f'data_fingerprint = "{identity["data_fingerprint"]}" there')
        # A text file likewise (its bytes' fingerprint).
        g = self.path("g.h5")
        self.assertEqual(run("init", "--model=tiny_gpt2_vocab", "--seed=3", f"--out={g}").returncode, 0)
        text = self.path("a.txt")
        with open(text, "w") as f:
            f.write("The quick brown fox jumps over the lazy dog. " * 10)
        tok = os.path.join(SOURCE, "data_cache", "gpt2")
        common = ("eval", "ppl", f"--weights={g}", f"--data={text}", "--seq_len=16", "--stride=16",
                  f"--tokenizer={tok}", f"--out={self.path('text')}")
        r = run(*common, "--documents=2")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run(*common, "--resume", "--documents=3")
        self.assertEqual(r.returncode, 0, r.stderr)  # the same file resumes
        with open(text, "w") as f:
            f.write("A slow grey cat sleeps under the busy bed. " * 10)
        self.assert_one_line_error(run(*common, "--resume", "--documents=4"), f"--resume: --data={text} changed since")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiscreen", required=True)
    parser.add_argument("--source", required=True)
    args, rest = parser.parse_known_args()
    BIN = os.path.abspath(args.multiscreen)
    SOURCE = os.path.abspath(args.source)
    unittest.main(argv=[sys.argv[0]] + rest)
