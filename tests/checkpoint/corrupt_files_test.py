#!/usr/bin/python3
"""Corrupt checkpoints and weights files (issue 21): every manifest, checkpoint shard
and consolidated weights file is checked against its schema and against what it must
agree with before it is used.

CorruptCheckpointTest: the cases fuzzing found, each with its small input, through the
command line (`ckpt inspect`, `ckpt export`, `generate`, `forward`, `train`): model sizes
that crashed, counters and dataset shapes that hung, and files that were trusted.
FuzzTest: seeded mutations (bit flips, truncation, JSON fields deleted or retyped, HDF5
datasets reshaped, retyped or filled with NaN, attributes changed) of a tiny valid
checkpoint and of its exported weights file, each run through every command that reads
it under a time and memory cap: it must exit 0, or non-zero with one line on stderr;
never a signal, a hang or the memory cap. The seed is fixed;
MULTISCREEN_FUZZ_ITERATIONS=N runs N mutants of each kind (default 6),
MULTISCREEN_FUZZ_SEED=S another sequence.

Run: /usr/bin/python3 tests/checkpoint/corrupt_files_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import unittest

import h5py
import numpy as np

BIN = SRC = None
TIME_CAP_S = 20
MEMORY_CAP_BYTES = 2 << 30
STEP = 2  # the step of the tiny checkpoint every case starts from
TRAIN_FLAGS = ["--model=tiny_psi2", "--eval_every=0", "--micro_batch=2", "--grad_accum=1", "--seq_len=16",
               "--checkpoint_every=1", "--seed=1"]

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from cli_errors import OneLineErrors  # noqa: E402


def crc32c(data):
    """CRC-32C (Castagnoli) of bytes, as the manifest records per dataset."""
    table = crc32c.table
    if table is None:
        table = crc32c.table = []
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


crc32c.table = None


def byte_tokenizer(directory):
    """A GPT-2 style tokenizer holding the 256 byte tokens (ids 0..255) and one merge."""
    os.makedirs(directory, exist_ok=True)
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, n = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    encoder = {chr(c): i for i, c in enumerate(chars)}
    encoder["\u0120t"] = 256
    with open(os.path.join(directory, "encoder.json"), "w") as f:
        json.dump(encoder, f)
    with open(os.path.join(directory, "vocab.bpe"), "w") as f:
        f.write("#version: 0.2\n\u0120 t\n")


def limit_resources():
    """In the child: the memory cap (address space), and no core files."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP_BYTES, MEMORY_CAP_BYTES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_capped(args, cwd=None):
    """Runs `args` under the caps; returns (CompletedProcess or None on timeout)."""
    try:
        return subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=TIME_CAP_S,
                              preexec_fn=limit_resources, cwd=cwd)
    except subprocess.TimeoutExpired:
        return None


def error_lines(stderr):
    """stderr's lines less the log lines ([I], [W]) and progress lines of a run."""
    return [l for l in stderr.splitlines()
            if l.strip() and not l.startswith(("[I] ", "[W] ", "step ", "final "))]


class Fixture:
    """A tiny valid checkpoint (tiny_psi2 trained STEP steps), its weights file, token
    data and a byte-level tokenizer, made once per test class."""

    def __init__(self, root):
        sys.path.insert(0, os.path.join(SRC, "tools"))
        from random_tokens import write_tokens
        self.root = root
        self.data = os.path.join(root, "data")
        os.makedirs(self.data)
        write_tokens(os.path.join(self.data, "train_000000.bin"), np.random.default_rng(0).integers(0, 37, 4000))
        write_tokens(os.path.join(self.data, "val_000000.bin"), np.random.default_rng(1).integers(0, 37, 1000))
        self.tokens = os.path.join(self.data, "train_000000.bin")
        self.tokenizer = os.path.join(root, "tokenizer")
        byte_tokenizer(self.tokenizer)
        self.config = os.path.join(SRC, "configs", "train", "tiny_test.textproto")
        run = os.path.join(root, "base_run")
        r = subprocess.run([BIN, "train", f"--config={self.config}", f"--data={self.data}", f"--run_dir={run}",
                            f"--steps={STEP}", *TRAIN_FLAGS], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        self.checkpoint = os.path.join(run, "checkpoints", f"step_{STEP:08d}")
        self.weights = os.path.join(root, "base_weights.h5")
        r = subprocess.run([BIN, "ckpt", "export", f"--checkpoint={self.checkpoint}", f"--out={self.weights}"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr

    def copy_run(self, name):
        """A run directory holding a copy of the checkpoint; returns (run_dir, checkpoint dir)."""
        run = os.path.join(self.root, name)
        shutil.rmtree(run, ignore_errors=True)
        dst = os.path.join(run, "checkpoints", os.path.basename(self.checkpoint))
        shutil.copytree(self.checkpoint, dst)
        return run, dst

    def copy_weights(self, name):
        dst = os.path.join(self.root, name + ".h5")
        shutil.copyfile(self.weights, dst)
        return dst

    # The commands that read a checkpoint or a weights file, as argument lists.
    def checkpoint_commands(self, run, ckpt, out):
        return {
            "ckpt inspect": [BIN, "ckpt", "inspect", f"--checkpoint={ckpt}"],
            "ckpt export": [BIN, "ckpt", "export", f"--checkpoint={ckpt}", f"--out={out}/export.h5"],
            "generate": [BIN, "generate", f"--checkpoint={ckpt}", "--prompt=", "--max_tokens=4",
                         f"--tokenizer={self.tokenizer}"],
            "forward": [BIN, "forward", f"--checkpoint={ckpt}", f"--tokens={self.tokens}", "--micro_batch=2",
                        "--seq_len=8", f"--out={out}/forward.h5"],
            "train": [BIN, "train", f"--config={self.config}", f"--data={self.data}", f"--run_dir={run}",
                      f"--steps={STEP + 1}", *TRAIN_FLAGS],
        }

    def weights_commands(self, weights, out):
        return {
            "generate --weights": [BIN, "generate", f"--weights={weights}", "--prompt=", "--max_tokens=4",
                                   f"--tokenizer={self.tokenizer}"],
            "forward --weights": [BIN, "forward", f"--weights={weights}", f"--tokens={self.tokens}",
                                  "--micro_batch=2", "--seq_len=8", f"--out={out}/forward.h5"],
        }


def edit_manifest(ckpt, edit):
    path = os.path.join(ckpt, "manifest.json")
    with open(path) as f:
        m = json.load(f)
    edit(m)
    with open(path, "w") as f:
        json.dump(m, f)


def rewrite_dataset(ckpt, name, values, file="shard_pp0_tp0.h5"):
    """Overwrites dataset `name` with `values` (same shape) and records their CRC-32C and
    the file's new size in the manifest, so that only the values are wrong."""
    path = os.path.join(ckpt, file)
    with h5py.File(path, "r+") as f:
        f[name][...] = values
    data = np.asarray(values, dtype=np.float32).tobytes()
    edit_manifest(ckpt, lambda m: (m["files"][file]["datasets"].__setitem__(name, crc32c(data)),
                                   m["files"][file].__setitem__("bytes", os.path.getsize(path))))


class CorruptCheckpointTest(OneLineErrors):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.fx = Fixture(cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_all(self, run, ckpt, names=("ckpt inspect", "ckpt export", "generate", "forward", "train")):
        """Runs the named commands on the checkpoint; returns {name: CompletedProcess}, each
        having finished within the caps."""
        out = tempfile.mkdtemp(dir=self.tmp.name)
        commands = self.fx.checkpoint_commands(run, ckpt, out)
        results = {}
        for name in names:
            r = run_capped(commands[name])
            self.assertIsNotNone(r, f"{name}: still running after {TIME_CAP_S} s")
            self.assertGreaterEqual(r.returncode, 0, f"{name}: killed by signal {-r.returncode}: {r.stderr[-2000:]}")
            results[name] = r
        return results

    def assert_refused_everywhere(self, run, ckpt, *fragments, names=("ckpt inspect", "ckpt export", "generate",
                                                                        "forward", "train")):
        for name, r in self.run_all(run, ckpt, names).items():
            with self.subTest(command=name):
                self.assert_one_line_error(r, *fragments)

    def test_invalid_model_sizes_are_refused_naming_the_field(self):
        # Were SIGSEGV/SIGABRT in ckpt export and generate.
        for field, value in [("vocab", -1), ("d_k", 0), ("d_k", -1), ("n_layers", 0), ("d_e", 1 << 40)]:
            with self.subTest(field=field, value=value):
                run, ckpt = self.fx.copy_run("sizes")
                edit_manifest(ckpt, lambda m: m["model"].__setitem__(field, value))
                self.assert_refused_everywhere(run, ckpt, "manifest.json", f"model.{field} = {value}")

    def test_a_model_name_with_a_newline_cannot_split_an_error_line(self):
        run, ckpt = self.fx.copy_run("name")
        edit_manifest(ckpt, lambda m: m["model"].__setitem__("name", "tiny_psi2\nsecond line"))
        self.assert_refused_everywhere(run, ckpt, "manifest.json", "model.name is not a line of at most 256 "
                                       "printable characters")

    def test_a_samples_counter_near_int64_max_is_refused_at_once(self):
        # Was a hang ignoring SIGTERM: the window sampler's permutation spun after the
        # sample index overflowed.
        run, ckpt = self.fx.copy_run("samples")
        edit_manifest(ckpt, lambda m: (m.__setitem__("samples", 2**63 - 1),
                                       m["rng"].__setitem__("data_samples_consumed", 2**63 - 1)))
        self.assert_refused_everywhere(run, ckpt, "manifest.json", "field samples = 9223372036854775807",
                                       "outside [0, 1125899906842624]")

    def test_a_huge_empty_chunked_dataset_is_refused_before_it_is_read(self):
        # Was a hang: an empty chunked dataset declaring (2^40, 64) elements, read on and on.
        run, ckpt = self.fx.copy_run("chunked")
        shard = os.path.join(ckpt, "shard_pp0_tp0.h5")
        with h5py.File(shard, "r+") as f:
            attrs = dict(f["embed/W_E"].attrs)
            del f["embed/W_E"]
            d = f.create_dataset("embed/W_E", shape=(2**40, 64), chunks=(1, 64), dtype="f4")
            for k, v in attrs.items():
                d.attrs[k] = v
        edit_manifest(ckpt, lambda m: m["files"]["shard_pp0_tp0.h5"].__setitem__("bytes", os.path.getsize(shard)))
        self.assert_refused_everywhere(run, ckpt, "shard_pp0_tp0.h5", "dataset embed/W_E has shape [1099511627776, 64], "
                                       "expected [37, 8]")

    def test_a_dataset_that_was_never_written_is_refused(self):
        # Right shape, but its chunks were never allocated: fill values, not weights.
        run, ckpt = self.fx.copy_run("unwritten")
        shard = os.path.join(ckpt, "shard_pp0_tp0.h5")
        with h5py.File(shard, "r+") as f:
            attrs = dict(f["embed/W_E"].attrs)
            del f["embed/W_E"]
            d = f.create_dataset("embed/W_E", shape=(37, 8), chunks=(1, 8), dtype="f4")
            for k, v in attrs.items():
                d.attrs[k] = v
        edit_manifest(ckpt, lambda m: m["files"]["shard_pp0_tp0.h5"].__setitem__("bytes", os.path.getsize(shard)))
        self.assert_refused_everywhere(run, ckpt, "shard_pp0_tp0.h5", "dataset embed/W_E stores 0 bytes of the 1184")

    def test_model_sizes_that_disagree_with_the_datasets_are_refused(self):
        # vocab 50000 built a 50000-row W_E from a 37-row dataset, exit 0.
        run, ckpt = self.fx.copy_run("vocab")
        edit_manifest(ckpt, lambda m: m["model"].__setitem__("vocab", 50000))
        self.assert_refused_everywhere(run, ckpt, "manifest.json", "bytes of parameters, more than its files'")
        # A vocabulary small enough to fit the files still disagrees with the dataset.
        run, ckpt = self.fx.copy_run("vocab38")
        edit_manifest(ckpt, lambda m: m["model"].__setitem__("vocab", 38))
        self.assert_refused_everywhere(run, ckpt, "shard_pp0_tp0.h5", "dataset embed/W_E has shape [37, 8], "
                                       "expected [38, 8]")

    def test_latest_naming_another_runs_checkpoint_is_not_followed(self):
        other_run, _ = self.fx.copy_run("other")
        run, ckpt = self.fx.copy_run("mine")
        os.rename(ckpt, os.path.join(run, "checkpoints", "step_00000001"))
        edit_manifest(os.path.join(run, "checkpoints", "step_00000001"),
                      lambda m: (m.__setitem__("step", 1), m["lr_schedule"].__setitem__("step", 1),
                                 m["optimizer"].__setitem__("adam_step", 1)))
        with open(os.path.join(run, "checkpoints", "latest"), "w") as f:
            f.write(os.path.relpath(os.path.join(other_run, "checkpoints", f"step_{STEP:08d}"),
                                    os.path.join(run, "checkpoints")) + "\n")
        r = self.run_all(run, run, ("ckpt inspect",))["ckpt inspect"]
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(os.path.join(run, "checkpoints", "step_00000001"), r.stdout)
        self.assertIn("step 1,", r.stdout)

    def test_a_checkpoint_copied_under_another_steps_name_is_refused(self):
        run, ckpt = self.fx.copy_run("renamed")
        renamed = os.path.join(run, "checkpoints", "step_00000007")
        os.rename(ckpt, renamed)
        self.assert_refused_everywhere(run, renamed, "manifest.json", "field step = 2 but the directory is "
                                       "step_00000007")

    def test_inspect_refuses_manifests_without_files_checksums_or_a_known_version(self):
        cases = [
            ("no files", lambda m: m.__setitem__("files", {}), "field files lists 0 files, the layout"),
            ("no checksums", lambda m: m["files"]["shard_pp0_tp0.h5"].__setitem__("datasets", {}),
             "field files.shard_pp0_tp0.h5.datasets has no checksum for embed/W_E"),
            ("format_version 2", lambda m: m.__setitem__("format_version", 2),
             "field format_version = 2 is not one this build reads (1)"),
            ("format_version missing", lambda m: m.pop("format_version"), "field format_version is missing"),
        ]
        for what, edit, fragment in cases:
            with self.subTest(what):
                run, ckpt = self.fx.copy_run("inspect")
                edit_manifest(ckpt, edit)
                r = self.run_all(run, ckpt, ("ckpt inspect",))["ckpt inspect"]
                self.assert_one_line_error(r, "manifest.json", fragment)
                self.assertNotIn("all OK", r.stdout)

    def test_every_manifest_field_of_the_wrong_json_type_is_named(self):
        cases = [("step", "2", "field step is a string, expected an integer"),
                 ("samples", 4.0, "field samples is the float 4.0, expected an integer"),
                 ("model", [], "field model is an array, expected an object"),
                 ("loss_scaler", {"scale": "1", "good_steps": 0, "skipped": 0},
                  "field loss_scaler.scale is a string, expected a number"),
                 ("model.pl_norm", 1, "field model.pl_norm is the number 1, expected true or false"),
                 ("crc", "123", "field files.shard_pp0_tp0.h5.datasets.embed/W_E is a string, expected a CRC-32C")]
        for field, value, fragment in cases:
            with self.subTest(field):
                run, ckpt = self.fx.copy_run("types")

                def edit(m):
                    if field == "crc":
                        m["files"]["shard_pp0_tp0.h5"]["datasets"]["embed/W_E"] = value
                    elif field == "model.pl_norm":
                        m["model"]["pl_norm"] = value
                    else:
                        m[field] = value
                edit_manifest(ckpt, edit)
                for name, r in self.run_all(run, ckpt, ("ckpt inspect", "ckpt export")).items():
                    self.assert_one_line_error(r, "manifest.json", fragment)

    def test_a_retyped_params_crc32c_does_not_disable_the_check(self):
        weights = self.fx.copy_weights("crc_string")
        with h5py.File(weights, "r+") as f:
            crc = int(f.attrs["params_crc32c"])
            f["embed/W_E"][0, 0] += 1.0  # a change the checksum must catch
            del f.attrs["params_crc32c"]
            f.attrs["params_crc32c"] = str(crc)
        out = tempfile.mkdtemp(dir=self.tmp.name)
        for name, cmd in self.fx.weights_commands(weights, out).items():
            with self.subTest(command=name):
                self.assert_one_line_error(run_capped(cmd), weights, "attribute params_crc32c is a string, "
                                           "expected one integer")

    def test_a_manifest_or_shard_that_is_a_fifo_or_a_device_is_refused_not_read_forever(self):
        # A FIFO or an endless device where a checkpoint file is expected: refused by name
        # (a shard was reported as "missing", a manifest was read forever).
        for name, want in (("manifest.json", "not a regular file of at most"),
                           ("shard_pp0_tp0.h5", "not a regular file")):
            for what in ("fifo", "/dev/zero"):
                with self.subTest(name=name, what=what):
                    run, ckpt = self.fx.copy_run(name.split(".")[0] + "_" + what.strip("/").replace("/", "_"))
                    path = os.path.join(ckpt, name)
                    os.remove(path)
                    if what == "fifo":
                        os.mkfifo(path)
                    else:
                        os.symlink(what, path)
                    self.assert_refused_everywhere(run, ckpt, name, want)

    def test_a_fifo_in_place_of_a_weights_file_is_refused_not_waited_on(self):
        fifo = os.path.join(self.tmp.name, "fifo.h5")
        os.mkfifo(fifo)
        out = tempfile.mkdtemp(dir=self.tmp.name)
        for name, cmd in self.fx.weights_commands(fifo, out).items():
            with self.subTest(command=name):
                r = run_capped(cmd)
                self.assertIsNotNone(r, f"{name}: waited on the FIFO for {TIME_CAP_S} s")
                self.assert_one_line_error(r, fifo, "not a regular file")

    def test_non_finite_weights_are_refused_naming_the_dataset(self):
        weights = self.fx.copy_weights("nan")
        with h5py.File(weights, "r+") as f:
            f["layers/001/W_V"][0, 1, 2] = np.nan
            del f.attrs["params_crc32c"]  # as an edit with h5py must
        out = tempfile.mkdtemp(dir=self.tmp.name)
        for name, cmd in self.fx.weights_commands(weights, out).items():
            with self.subTest(command=name):
                self.assert_one_line_error(run_capped(cmd), weights, "dataset layers/001/W_V holds a non-finite "
                                           "value (nan) at element 8")

    def test_a_nan_in_a_checkpoint_is_refused_even_with_a_matching_checksum(self):
        run, ckpt = self.fx.copy_run("nan_ckpt")
        with h5py.File(os.path.join(ckpt, "shard_pp0_tp0.h5"), "r") as f:
            values = f["layers/000/s_w"][...]
        values[1] = np.inf
        rewrite_dataset(ckpt, "layers/000/s_w", values)
        results = self.run_all(run, ckpt)
        for name in ("ckpt inspect", "ckpt export", "generate", "forward"):
            with self.subTest(command=name):
                self.assert_one_line_error(results[name], "shard_pp0_tp0.h5",
                                           "dataset layers/000/s_w holds a non-finite value (inf) at element 1")
        # train: the only checkpoint does not verify, so the run is refused, untouched.
        self.assert_one_line_error(results["train"], "1 checkpoint found, it does not verify",
                                   "dataset layers/000/s_w holds a non-finite value")
        self.assertFalse(os.path.exists(os.path.join(run, "metrics.jsonl")))

    def test_a_checkpoint_whose_window_overflows_trains_on_with_the_causal_mask(self):
        # s_w = 1000: w = e^{s_w} + 1 is inf, Softmask the plain causal mask, and s_w's gradient
        # its limit 0. It was 0 * inf = NaN, and the resumed run stopped at once ("non-finite
        # gradients ... the run diverged").
        run, ckpt = self.fx.copy_run("overflowing_window")
        with h5py.File(os.path.join(ckpt, "shard_pp0_tp0.h5"), "r") as f:
            values = f["layers/000/s_w"][...]
        values[0] = 1000.0
        rewrite_dataset(ckpt, "layers/000/s_w", values)
        train = [a for a in self.fx.checkpoint_commands(run, ckpt, self.tmp.name)["train"] if not a.startswith("--steps=")]
        r = run_capped(train + [f"--steps={STEP + 2}"])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(run, "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f if '"loss"' in line]
        self.assertEqual([m["step"] for m in rows], [STEP + 1, STEP + 2])
        self.assertTrue(all(np.isfinite(m["loss"]) and np.isfinite(m["grad_norm"]) for m in rows), rows)
        with h5py.File(os.path.join(run, "checkpoints", f"step_{STEP + 2:08d}", "shard_pp0_tp0.h5"), "r") as f:
            self.assertGreater(f["layers/000/s_w"][0], 999.0)  # moved by Adam's momentum only

    def test_fp32_and_bf16_training_that_diverges_stops_naming_the_step_and_keeps_the_last_good_checkpoint(self):
        # Finite weights so large that the first step's loss is not finite: before, the
        # run trained on to "final train_loss nan" and exit 0, saving NaN weights.
        for precision in ("fp32", "bf16"):
            with self.subTest(precision):
                run, ckpt = self.fx.copy_run("diverge_" + precision)
                with h5py.File(os.path.join(ckpt, "shard_pp0_tp0.h5"), "r") as f:
                    values = f["embed/s_E"][...]
                rewrite_dataset(ckpt, "embed/s_E", np.float32(200.0) + 0 * values)  # e^200 overflows fp32
                with open(os.path.join(ckpt, "manifest.json")) as f:
                    manifest = f.read()
                r = run_capped(self.fx.checkpoint_commands(run, ckpt, self.tmp.name)["train"] +
                               [f"--precision={precision}"])
                self.assertEqual(r.returncode, 1, r.stderr)
                errors = error_lines(r.stderr)
                self.assertEqual(len(errors), 1, r.stderr)
                self.assertIn(f"step {STEP + 1}: non-finite loss", errors[0])
                self.assertIn(f"{precision.upper()} training; the run diverged, stopped without saving", errors[0])
                self.assertEqual(sorted(os.listdir(os.path.join(run, "checkpoints"))), [f"step_{STEP:08d}"])
                with open(os.path.join(ckpt, "manifest.json")) as f:
                    self.assertEqual(f.read(), manifest)
                self.assertNotIn("final train_loss", r.stderr)


class FuzzTest(unittest.TestCase):
    """Seeded mutations of the tiny checkpoint and its weights file."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.fx = Fixture(cls.tmp.name)
        cls.iterations = int(os.environ.get("MULTISCREEN_FUZZ_ITERATIONS", "6"))
        cls.seed = int(os.environ.get("MULTISCREEN_FUZZ_SEED", "21"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check(self, label, commands):
        """Each command exits 0, or non-zero with one error line; never a signal, the time
        cap or the memory cap."""
        for name, cmd in commands.items():
            r = run_capped(cmd)
            where = f"{label}: {name}"
            self.assertIsNotNone(r, f"{where}: still running after {TIME_CAP_S} s")
            self.assertGreaterEqual(r.returncode, 0, f"{where}: killed by signal {-r.returncode}:\n{r.stderr[-2000:]}")
            self.assertNotIn("bad_alloc", r.stderr, f"{where}: ran into the {MEMORY_CAP_BYTES} byte cap")
            if r.returncode != 0:
                lines = error_lines(r.stderr) if name == "train" else [l for l in r.stderr.splitlines() if l.strip()]
                self.assertEqual(len(lines), 1, f"{where}: exit {r.returncode} with stderr:\n{r.stderr[-2000:]}")
                self.assertTrue(lines[0].startswith("multiscreen "), f"{where}: {lines[0]}")

    # --- mutations -------------------------------------------------------------------

    @staticmethod
    def flip_bits(rng, path):
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(data))
                data[i] ^= 1 << rng.randrange(8)
            f.seek(0)
            f.write(data)
        return "bit flips"

    @staticmethod
    def truncate(rng, path):
        size = os.path.getsize(path)
        os.truncate(path, rng.randrange(size))
        return "truncated"

    @staticmethod
    def json_paths(value, prefix=()):
        yield prefix
        if isinstance(value, dict):
            for k, v in value.items():
                yield from FuzzTest.json_paths(v, prefix + (k,))

    @staticmethod
    def mutate_manifest(rng, ckpt):
        path = os.path.join(ckpt, "manifest.json")
        with open(path) as f:
            m = json.load(f)
        paths = [p for p in FuzzTest.json_paths(m) if p]
        p = rng.choice(paths)
        parent = m
        for k in p[:-1]:
            parent = parent[k]
        kind = rng.choice(["delete", "retype", "value"])
        if kind == "delete":
            del parent[p[-1]]
        elif kind == "retype":
            old = parent[p[-1]]
            parent[p[-1]] = rng.choice([str(old), [old], None, True, {"x": old}, 1.5,
                                        float(old) if isinstance(old, int) and not isinstance(old, bool) else 0])
        else:
            parent[p[-1]] = rng.choice([-1, 0, 1, 3, 2**31, 2**40, 2**53 + 1, 2**63 - 1, 2**64 + 5, -2**63, 1e308,
                                        -0.0, "", "step_00000002"])
        with open(path, "w") as f:
            json.dump(m, f)
        return f"manifest {kind} {'.'.join(p)}"

    @staticmethod
    def mutate_dataset(rng, path, manifest_ckpt=None):
        """Reshapes, retypes, refills or re-attributes one dataset (or root attribute) with
        h5py; the manifest's recorded size follows, so that the file's contents are what
        is tested."""
        with h5py.File(path, "r+") as f:
            names = []
            f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
            name = rng.choice(names)
            d = f[name]
            kind = rng.choice(["shape", "dtype", "nan", "huge", "attr", "root_attr", "delete"])
            attrs = dict(d.attrs)
            data = d[...]

            def replace(**kwargs):
                del f[name]
                new = f.create_dataset(name, **kwargs)
                for k, v in attrs.items():
                    new.attrs[k] = v
                return new
            if kind == "shape":
                shape = list(data.shape) or [1]
                shape[rng.randrange(len(shape))] += rng.choice([-1, 1, 1000])
                replace(data=np.zeros([max(0, s) for s in shape], np.float32))
            elif kind == "dtype":
                replace(data=data.astype(rng.choice([np.int32, np.float64, np.float16, np.uint8])))
            elif kind == "nan":
                flat = data.reshape(-1).astype(np.float32)
                flat[rng.randrange(flat.size)] = rng.choice([np.nan, np.inf, -np.inf])
                d[...] = flat.reshape(data.shape)
                if manifest_ckpt is not None and rng.random() < 0.7:  # checksum made to match
                    file = os.path.basename(path)
                    crc = crc32c(flat.tobytes())
                    edit_manifest(manifest_ckpt, lambda m: m["files"][file]["datasets"].__setitem__(name, crc))
            elif kind == "huge":
                replace(shape=(2**40, 64), chunks=(1, 64), dtype="f4")
            elif kind == "attr" and attrs:
                key = rng.choice(sorted(attrs))
                d.attrs[key] = rng.choice([np.array([2**40, 8]), np.array([-1]), "x", np.array([], np.int64),
                                           np.arange(100), 1.5])
            elif kind == "root_attr" and f.attrs:
                key = rng.choice(sorted(f.attrs))
                f.attrs[key] = rng.choice([-1, 0, 2**40, "x", 1.5, np.arange(10), np.nan])
            else:
                del f[name]
            label = f"{kind} {name}"
        if manifest_ckpt is not None:
            file = os.path.basename(path)
            size = os.path.getsize(path)
            edit_manifest(manifest_ckpt, lambda m: m["files"][file].__setitem__("bytes", size))
        return label

    # --- the fuzz loops ------------------------------------------------------------------

    def test_mutated_checkpoints_never_crash_hang_or_exhaust_memory(self):
        rng = random.Random(self.seed)
        for i in range(self.iterations * 3):
            run, ckpt = self.fx.copy_run("fuzz_ckpt")
            shard = os.path.join(ckpt, "shard_pp0_tp0.h5")
            kind = ["manifest", "shard_bytes", "shard_h5"][i % 3]
            if kind == "manifest":
                label = self.mutate_manifest(rng, ckpt)
            elif kind == "shard_bytes":
                label = rng.choice([self.flip_bits, self.truncate])(rng, shard)
                if rng.random() < 0.5:  # the manifest's size made to match: HDF5 must cope
                    size = os.path.getsize(shard)
                    edit_manifest(ckpt, lambda m: m["files"]["shard_pp0_tp0.h5"].__setitem__("bytes", size))
            else:
                label = self.mutate_dataset(rng, shard, ckpt)
            out = tempfile.mkdtemp(dir=self.tmp.name)
            self.check(f"checkpoint mutant {i} ({label})", self.fx.checkpoint_commands(run, ckpt, out))

    def test_mutated_weights_files_never_crash_hang_or_exhaust_memory(self):
        rng = random.Random(self.seed + 1)
        for i in range(self.iterations * 2):
            weights = self.fx.copy_weights("fuzz_weights")
            kind = ["bytes", "h5"][i % 2]
            if kind == "bytes":
                label = rng.choice([self.flip_bits, self.truncate])(rng, weights)
            else:
                label = self.mutate_dataset(rng, weights)
            out = tempfile.mkdtemp(dir=self.tmp.name)
            self.check(f"weights mutant {i} ({label})", self.fx.weights_commands(weights, out))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiscreen", required=True)
    parser.add_argument("--source", required=True)
    args, rest = parser.parse_known_args()
    BIN, SRC = os.path.abspath(args.multiscreen), os.path.abspath(args.source)
    unittest.main(argv=[sys.argv[0]] + rest)
