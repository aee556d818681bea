#!/usr/bin/python3
"""The cases of issue 21 (run files, token shards, tokenizer files), each with its
small input, through the command that crashed, hung or accepted it: every one now
exits non-zero with one line naming the file and field, promptly; and a validation
pass stops on SIGTERM.

Run: /usr/bin/python3 tests/cli/corrupt_inputs_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import json
import os
import resource
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
SRC = None
VOCAB = 97  # tiny_psi4's


def run(*args, stdin="", timeout=60):
    return subprocess.run([BIN, *args], input=stdin, capture_output=True, text=True, timeout=timeout)


def write_shard(path, tokens, version=1):
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, version, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(("<%dH" if version == 1 else "<%dI") % len(tokens), *tokens))


class CorruptInputsTest(OneLineErrors):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.data = os.path.join(self.dir, "data")
        os.makedirs(self.data)
        stream = [(i * 7 + i // VOCAB) % VOCAB for i in range(6000)]
        write_shard(os.path.join(self.data, "train_000000.bin"), stream[:4000])
        write_shard(os.path.join(self.data, "val_000000.bin"), stream[4000:])
        with open(os.path.join(SRC, "configs", "train", "tiny_test.textproto")) as f:
            self.tiny_test = f.read()

    def tearDown(self):
        self.tmp.cleanup()

    def run_file(self, replace=None, append=""):
        """tiny_test.textproto with `replace` (old -> new) applied and `append` added."""
        text = self.tiny_test
        for old, new in (replace or {}).items():
            self.assertIn(old, text)
            text = text.replace(old, new)
        path = os.path.join(self.dir, "run.textproto")
        with open(path, "w") as f:
            f.write(text + append + "\n")
        return path

    def train(self, config, *extra, timeout=60):
        return run("train", f"--config={config}", f"--data={self.data}", f"--run_dir={self.dir}/run", *extra,
                   timeout=timeout)

    # --- run files -------------------------------------------------------------------

    def test_a_micro_batch_or_grad_accum_of_ten_to_the_twelve_is_refused_before_allocating(self):
        # Was: std::bad_alloc in the loader's prefetch thread, SIGABRT.
        config = self.run_file({"micro_batch: 4": "micro_batch: 1000000000000"})
        self.assert_one_line_error(self.train(config), config, "micro_batch: 1000000000000 sequences",
                                   "more than 2^31 - 1")
        config = self.run_file({"grad_accum: 2": "grad_accum: 1000000000000"})
        self.assert_one_line_error(self.train(config), config, "grad_accum: 1000000000000 micro-batches")
        self.assertFalse(os.path.exists(f"{self.dir}/run"))

    def test_a_flag_that_sets_the_field_is_named_instead_of_the_file(self):
        config = self.run_file()
        self.assert_one_line_error(self.train(config, "--micro_batch=50000000", "--grad_accum=1"),
                                   "--micro_batch (micro_batch): 50000000 x seq_len 32", "more than the")

    def test_values_that_make_the_loss_nan_are_refused_naming_file_and_field(self):
        cases = {
            "optimizer { lr: 0.0625 }": [("optimizer { lr: 1e308 }", "optimizer.lr: 1e+308 must be in [0, 1]"),
                                         ("optimizer { lr: 0.0625 eps: 0 }", "optimizer.eps: 0 must be in (0, 1]"),
                                         ("optimizer { lr: 0.0625 weight_decay: inf }",
                                          "optimizer.weight_decay: inf must be finite")],
            "schedule { kind: WARMUP_CONSTANT warmup_steps: 4 }": [
                ("schedule { kind: WARMUP_COSINE min_lr_ratio: nan }", "schedule.min_lr_ratio: nan must be in [0, 1]"),
                ("schedule { kind: WARMUP_STABLE_DECAY decay_fraction: 2 }",
                 "schedule.decay_fraction: 2 must be in [0, 1]"),
                ("schedule { kind: 99 }", "schedule.kind: 99 is not a known value")],
            "precision: FP32": [("precision: 99", "precision: 99 is not a known value (FP32 = 1, BF16 = 2, FP16 = 3)")],
        }
        for old, variants in cases.items():
            for new, message in variants:
                with self.subTest(new=new):
                    config = self.run_file({old: new})
                    self.assert_one_line_error(self.train(config), f"{config}: {message}")

    def test_a_model_file_with_an_infinite_threshold_is_refused(self):
        model = os.path.join(self.dir, "model.textproto")
        with open(model, "w") as f:
            f.write("psi: 4\nd_k: 8\nd_v: 16\nvocab: 97\nw_th: inf\n")
        config = self.run_file({'model: "tiny_psi4"': f'model: "{model}"'})
        self.assert_one_line_error(self.train(config), model, "w_th = inf must be finite and positive")

    def test_eval_batches_of_ten_to_the_twelve_is_refused(self):
        # Was: a validation pass over the whole held-out stream at every eval, deaf to SIGTERM.
        config = self.run_file({"batches: 2": "batches: 1000000000000"})
        self.assert_one_line_error(self.train(config), config,
                                   "eval.batches: 1000000000000 must be in [0, 2^20]")

    def test_a_validation_pass_stops_on_sigterm_with_a_checkpoint(self):
        # A held-out stream of 125,000 windows: one pass takes far longer than the wait.
        stream = [(i * 7 + i // VOCAB) % VOCAB for i in range(4_000_000)]
        write_shard(os.path.join(self.data, "val_000000.bin"), stream)
        config = self.run_file({"batches: 2": "batches: 1048576", "every: 10 batches": "every: 1 batches"})
        run_dir = f"{self.dir}/run"
        p = subprocess.Popen([BIN, "train", f"--config={config}", f"--data={self.data}", f"--run_dir={run_dir}",
                              "--steps=3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            metrics = os.path.join(run_dir, "metrics.jsonl")
            deadline = time.time() + 60
            while time.time() < deadline and not (os.path.exists(metrics) and os.path.getsize(metrics) > 0):
                time.sleep(0.01)
            time.sleep(0.5)  # well into step 1's validation pass
            p.send_signal(signal.SIGTERM)
            sent = time.time()
            out, err = p.communicate(timeout=60)
        finally:
            p.kill()
        self.assertLess(time.time() - sent, 10, err[-2000:])
        self.assertEqual(p.returncode, 0, err[-2000:])
        with open(os.path.join(run_dir, "status.json")) as f:
            self.assertEqual(json.load(f), {"state": "stopped", "step": 1, "steps": 3})
        with open(metrics) as f:
            self.assertFalse(any("val_loss" in line for line in f), "a cut-short pass logs no val_loss")
        self.assertTrue(os.path.isdir(os.path.join(run_dir, "checkpoints", "step_00000001")))

    def test_a_run_file_that_is_a_fifo_is_refused_without_blocking(self):
        config = os.path.join(self.dir, "run.textproto")
        os.mkfifo(config)
        self.assert_one_line_error(self.train(config, timeout=20), config, "is a FIFO (named pipe)")

    # --- token shards ----------------------------------------------------------------

    def test_a_fifo_where_a_shard_is_expected_is_refused_naming_it(self):
        # Was: open() blocked forever.
        fifo = os.path.join(self.data, "train_000001.bin")
        os.mkfifo(fifo)
        config = self.run_file()
        self.assert_one_line_error(self.train(config, timeout=20), fifo,
                                   "is a FIFO (named pipe), not a regular file (expected a token shard)")
        w = os.path.join(self.dir, "w.h5")
        self.assertEqual(run("init", "--model=tiny_psi4", "--seed=3", f"--out={w}").returncode, 0)
        self.assert_one_line_error(run("forward", f"--weights={w}", f"--tokens={fifo}", "--micro_batch=2",
                                       "--seq_len=8", f"--out={self.dir}/o.h5", timeout=20),
                                   fifo, "is a FIFO (named pipe)")

    def test_compressed_token_data_is_named_with_the_tool_that_decompresses_it(self):
        # Was: "NUL byte ... --format=llmc" (eval ppl), "bad magic 134777631" (train, forward).
        import gzip
        with open(os.path.join(self.data, "train_000000.bin"), "rb") as f:
            raw = f.read()
        shards = os.path.join(self.dir, "gz")
        os.makedirs(shards)
        shard = os.path.join(shards, "train_000000.bin")  # gzip data under a token name
        with gzip.open(shard, "wb") as f:
            f.write(raw)
        self.assert_one_line_error(run("train", f"--config={self.run_file()}", f"--data={shards}",
                                       f"--run_dir={self.dir}/run"),
                                   f"{shard}: gzip data (magic 1f 8b): token files are read as they are stored; "
                                   f"decompress it first (zcat {shard} > NEW.bin)")
        w = os.path.join(self.dir, "w.h5")
        self.assertEqual(run("init", "--model=tiny_psi4", "--seed=3", f"--out={w}").returncode, 0)
        self.assert_one_line_error(run("forward", f"--weights={w}", f"--tokens={shard}", "--micro_batch=2",
                                       "--seq_len=8", f"--out={self.dir}/o.h5"),
                                   f"{shard}: gzip data (magic 1f 8b)")
        named = os.path.join(self.dir, "v.bin.gz")  # named as what it is: eval ppl reads it decompressed
        with gzip.open(named, "wb") as f:
            f.write(raw)
        self.assert_one_line_error(run("eval", "ppl", f"--weights={self.dir}/none.h5", f"--data={named}",
                                       "--seq_len=8", f"--out={self.dir}/o"),
                                   f"--data={named}: gzip data (magic 1f 8b): token files are read as they are "
                                   f"stored; decompress it first (gunzip -k {named})")
        self.assertFalse(os.path.exists(f"{self.dir}/run"))

    def test_compressed_shards_beside_plain_ones_are_not_left_out_in_silence(self):
        # Was: train_000001.bin.gz skipped (only train_*.bin listed), training on the rest.
        import gzip
        with open(os.path.join(self.data, "train_000000.bin"), "rb") as f:
            raw = f.read()
        packed = os.path.join(self.data, "train_000001.bin.gz")
        with gzip.open(packed, "wb") as f:
            f.write(raw)
        tail = f"; 1 file in {self.data} is named as a compressed train shard (*.bin is read)"
        self.assert_one_line_error(run("train", f"--config={self.run_file()}", f"--data={self.data}",
                                       f"--run_dir={self.dir}/run"),
                                   f"{packed}: gzip data (magic 1f 8b): token files are read as they are stored; "
                                   f"decompress it first (gunzip -k {packed})" + tail)
        # A copy beside its decompressed file: gunzip -k would refuse; move it out instead.
        os.rename(packed, os.path.join(self.data, "train_000000.bin.gz"))
        copy = os.path.join(self.data, "train_000000.bin.gz")
        self.assert_one_line_error(run("train", f"--config={self.run_file()}", f"--data={self.data}",
                                       f"--run_dir={self.dir}/run"),
                                   f"{copy}: a compressed copy of {self.data}/train_000000.bin, which is there too: "
                                   "move it out of the directory" + tail)
        # Not compressed data under the name (nothing claimed of its bytes); other compressors too.
        os.remove(copy)
        for name, content in (("train_000001.bin.gz", b""), ("train_000001.bin.xz", raw)):
            odd = os.path.join(self.data, name)
            with open(odd, "wb") as f:
                f.write(content)
            self.assert_one_line_error(run("train", f"--config={self.run_file()}", f"--data={self.data}",
                                           f"--run_dir={self.dir}/run"),
                                       f"{odd}: a compressed file's name ({name[-3:]}); token files are read as "
                                       f"they are stored, and only *.bin: decompress it to "
                                       f"{self.data}/train_000001.bin or move it out of the directory" + tail)
            os.remove(odd)
        self.assertFalse(os.path.exists(f"{self.dir}/run"))

    def test_forward_refuses_version_2_ids_past_two_to_the_31(self):
        # Was: read as negative int32, a loss computed on them, exit 0.
        w = os.path.join(self.dir, "w.h5")
        self.assertEqual(run("init", "--model=tiny_psi4", "--seed=3", f"--out={w}").returncode, 0)
        t = os.path.join(self.dir, "wide.bin")
        for big in (2**31, 2**32 - 1, 2**31 + 5):
            write_shard(t, [1, 2, 3, big] + [4] * 20, version=2)
            r = run("forward", f"--weights={w}", f"--tokens={t}", "--micro_batch=2", "--seq_len=8",
                    f"--out={self.dir}/o.h5")
            self.assert_one_line_error(r, f"{t}: token 3 is {big}, not below the model's vocabulary V = 97")
            self.assertFalse(os.path.exists(f"{self.dir}/o.h5"))

    # --- tokenizer files -------------------------------------------------------------

    def tokenizer(self, merges="#version: 0.2\nĠ t\n"):
        d = os.path.join(self.dir, "tok")
        os.makedirs(d, exist_ok=True)
        stand_in = {}
        n = 0
        for b in range(256):
            direct = ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or b >= 0xAE
            stand_in[b] = chr(b if direct else 256 + n)
            n += 0 if direct else 1
        vocab = {stand_in[b]: b for b in range(256)}
        vocab["Ġt"] = 256
        vocab["<|endoftext|>"] = 257
        with open(os.path.join(d, "encoder.json"), "w") as f:
            json.dump(vocab, f, ensure_ascii=False)
        path = os.path.join(d, "vocab.bpe")
        if merges is not None:
            with open(path, "w") as f:
                f.write(merges)
        return d

    def test_a_merges_file_without_merges_is_refused_not_byte_level(self):
        self.assertEqual(run("tokenize", f"--tokenizer={self.tokenizer()}", stdin=" t").stdout, "256\n")
        for merges in ("", "#version: 0.2\n"):
            d = self.tokenizer(merges)
            self.assert_one_line_error(run("tokenize", f"--tokenizer={d}", stdin=" t"),
                                       f"{d}/vocab.bpe: no merges")
        d = self.tokenizer(None)
        os.remove(os.path.join(d, "vocab.bpe"))
        os.makedirs(os.path.join(d, "vocab.bpe"))
        self.assert_one_line_error(run("tokenize", f"--tokenizer={d}", stdin=" t"),
                                   f"{d}/vocab.bpe: is a directory, not a regular file")

    def test_what_an_error_quotes_from_a_file_stays_on_one_line(self):
        # Control characters and Unicode line breaks quoted from a merges file are
        # escaped: a reader splitting lines (Python's splitlines) sees one.
        d = self.tokenizer("#version: 0.2\nĠ t\nq\x0bz\x1c\u2028 x\n")
        self.assert_one_line_error(run("tokenize", f"--tokenizer={d}", stdin=" t"),
                                   f"{d}/vocab.bpe:3: token 'q\\x0bz\\x1c\\u2028' is not in {d}/encoder.json")

    def test_tokenizer_files_of_unbounded_size_are_refused(self):
        d = self.tokenizer()
        encoder = os.path.join(d, "encoder.json")
        with open(encoder) as f:
            vocab = json.load(f)
        vocab["Ġt"] = 10**8  # was: a 10^8-entry table, 3 GB
        with open(encoder, "w") as f:
            json.dump(vocab, f, ensure_ascii=False)
        self.assert_one_line_error(run("prepare", f"--tokenizer={d}", f"--input={encoder}", f"--output={self.dir}/o"),
                                   encoder, "has id 100000000, not an id in [0, 258)")
        os.remove(encoder)
        os.symlink("/dev/zero", encoder)  # was: read until memory ran out
        self.assert_one_line_error(run("tokenize", f"--tokenizer={d}", stdin="x", timeout=20), encoder,
                                   "is a character device, not a regular file")

    def test_prepare_turns_an_exception_in_its_reader_thread_into_one_line(self):
        # /dev/zero is one endless document: under a 1 GiB address-space cap reading it
        # runs out of memory in prepare's reader thread, which called std::terminate.
        # The cap is 768 MiB above the binary's own start-up address space (a CUDA build maps
        # NCCL and the CUDA runtime: about 0.8 GiB before main; under a flat 1 GiB cap
        # OpenBLAS's initializer then retried its allocation for ever), and the document
        # bound is lifted so that memory, not --max_document_bytes, ends the read.
        d = self.tokenizer()
        idle = subprocess.Popen([BIN, "tokenize", f"--tokenizer={d}"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            start_kb = 0
            for _ in range(100):  # until it waits for stdin, its libraries and tokenizer loaded
                with open(f"/proc/{idle.pid}/status") as f:
                    start_kb = max(start_kb, next(int(l.split()[1]) for l in f if l.startswith("VmSize:")))
                with open(f"/proc/{idle.pid}/wchan") as f:
                    if "pipe" in f.read():
                        break
                time.sleep(0.1)
        finally:
            idle.communicate(b"", timeout=30)
        limit = start_kb * 1024 + (768 << 20)
        def cap():
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        r = subprocess.run([BIN, "prepare", f"--tokenizer={d}", "--input=/dev/zero", "--input_format=text",
                            f"--output={self.dir}/o", "--threads=1", "--max_document_bytes=1T"], capture_output=True,
                           text=True, timeout=60, preexec_fn=cap)
        self.assert_one_line_error(r, "/dev/zero: out of memory reading it")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiscreen", required=True)
    parser.add_argument("--source", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    args, rest = parser.parse_known_args()
    BIN = os.path.abspath(args.multiscreen)
    SRC = os.path.abspath(args.source)
    os.environ.setdefault("MULTISCREEN_CONFIG_DIR", os.path.join(SRC, "configs"))
    unittest.main(argv=[sys.argv[0]] + rest)
