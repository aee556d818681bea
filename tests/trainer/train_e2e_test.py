#!/usr/bin/python3
"""End-to-end tests of `multiscreen train` (issues 5 and 6): loss goes down;
the paper's lr 2^-4 is stable at Psi = 8 on the default corpus; a run killed
with SIGKILL resumes bit-identically; SIGTERM stops cleanly with a checkpoint;
a corrupted newest checkpoint falls back to the previous one; fp16 loss scaling
skips overflowed steps (which do not advance the lr schedule) and recovers; a run
directory is never overwritten; Slurm tasks that MPI does not see are refused.

Run: /usr/bin/python3 tests/trainer/train_e2e_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

BIN = SRC = NO_FLOCK_SHIM = None


def write_tokens(path, tokens):
    sys.path.insert(0, os.path.join(SRC, "tools"))
    from random_tokens import write_tokens as w
    w(path, tokens)


def synthetic_shards(directory, vocab=97, seed=0):
    """A learnable stream: shifted copies of 0..vocab-1."""
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(seed)
    base = np.arange(vocab)
    s = np.concatenate([np.roll(base, int(rng.integers(vocab))) for _ in range(400)])
    write_tokens(os.path.join(directory, "train_000000.bin"), s[:30000])
    write_tokens(os.path.join(directory, "val_000000.bin"), s[30000:])


def metrics(run_dir):
    """The standing rows of run_dir's metrics.jsonl (tools/metrics.py)."""
    sys.path.insert(0, os.path.join(SRC, "tools"))
    from metrics import read_metrics
    return read_metrics(os.path.join(run_dir, "metrics.jsonl"))


def train_losses(run_dir):
    return {m["step"]: m["loss"] for m in metrics(run_dir) if "loss" in m}


def wait_for_step(run_dir, step, timeout):
    """Polls metrics.jsonl until `step` is logged (or the timeout passes)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if max(train_losses(run_dir), default=0) >= step:
                return
        except (FileNotFoundError, json.JSONDecodeError):
            pass  # not written yet, or a line half-written
        time.sleep(0.005)


def read(path):
    with open(path) as f:
        return f.read()


def steps_logged(run_dir):
    """Training rows in run_dir/metrics.jsonl so far (0 before the file exists): for
    tests that act on a job while it trains."""
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            return sum('"step"' in line and '"loss"' in line for line in f)
    except FileNotFoundError:
        return 0


class SyntheticCorpusCase(unittest.TestCase):
    """The e2e tests' common set-up: a temporary directory (cls.tmp) holding the synthetic
    corpus (cls.data, synthetic_shards) and the tiny run file (cls.config), removed after
    the class. Other test files import it from here (tests/trainer on sys.path)."""

    @classmethod
    def setUpClass(cls):
        global SRC
        if SRC is None:  # imported by another test: the checkout this file is in
            SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
        cls.tmp = tempfile.TemporaryDirectory()
        cls.data = os.path.join(cls.tmp.name, "data")
        synthetic_shards(cls.data)
        cls.config = os.path.join(SRC, "configs", "train", "tiny_test.textproto")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()


class TrainTest(SyntheticCorpusCase):

    def run_dir(self, name):
        return os.path.join(self.tmp.name, name)

    def train(self, run_dir, *flags, check=True):
        r = subprocess.run([BIN, "train", f"--config={self.config}", f"--data={self.data}", f"--run_dir={run_dir}",
                            *flags], capture_output=True, text=True, timeout=600)
        if check:
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        return r

    def test_loss_decreases_and_metrics_follow_the_contract(self):
        d = self.run_dir("basic")
        r = self.train(d)
        m = metrics(d)
        steps = [x for x in m if "loss" in x]
        self.assertEqual([x["step"] for x in steps], list(range(1, 41)))
        for key in ("step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mfu", "loss_scale"):
            self.assertIn(key, steps[0])
        self.assertEqual(steps[-1]["tokens"], 40 * 2 * 4 * 32)
        self.assertAlmostEqual(steps[0]["lr"], 0.0625 / 4)
        self.assertAlmostEqual(steps[-1]["lr"], 0.0625)
        vals = [x["val_loss"] for x in m if "val_loss" in x]
        self.assertEqual(len(vals), 4)
        self.assertLess(steps[-1]["loss"], 0.5 * steps[0]["loss"])
        self.assertLess(vals[-1], vals[0])
        self.assertIn("final train_loss", r.stdout)
        tb = os.listdir(os.path.join(d, "tb"))
        self.assertTrue(any(f.startswith("events.out.tfevents.") for f in tb))
        self.assertTrue(os.path.isdir(os.path.join(d, "checkpoints", "step_00000040")))
        with open(os.path.join(d, "status.json")) as f:
            self.assertEqual(json.load(f), {"state": "finished", "step": 40, "steps": 40})

    def test_mfu_is_taken_against_peak_tflops_when_given(self):
        # MFU = tokens/s x the model's training FLOPs per token / the peak: with --peak_tflops
        # the peak is the given rate (no measurement), so mfu x peak / tokens/s is the FLOPs
        # per token that bench train reports for the same model and T, in every row (within
        # 1 %: bench counts the windows of the fp32 s_w it initialized, the trainer the
        # spec's initial windows in fp64, and a ceil(w) can differ).
        d = self.run_dir("peak")
        self.train(d, "--steps=3", "--peak_tflops=0.002")
        bench = subprocess.run([BIN, "bench", "train", "--model=tiny_psi4", "--seq_len=32", "--micro_batch=1",
                                "--steps=1", "--warmup=0", "--peak_tflops=0.002", "--json"],
                               capture_output=True, text=True, timeout=300)
        self.assertEqual(bench.returncode, 0, bench.stderr[-2000:])
        b = json.loads(bench.stdout)
        self.assertEqual(b["gemm_rate_source"], "--peak_tflops")
        self.assertAlmostEqual(b["sgemm_gflops"], 2.0)
        self.assertAlmostEqual(b["mfu"], b["gflops"] / 2.0)
        rows = [x for x in metrics(d) if "loss" in x]
        self.assertEqual(len(rows), 3)
        for x in rows:
            self.assertAlmostEqual(x["mfu"] * 2e9 / x["tokens_per_s"] / b["flops_per_token"], 1.0, delta=0.01)
        for bad in ("-1", "1e-320", "0.0009", "2e6"):
            r = self.train(self.run_dir("peak_bad"), "--steps=1", f"--peak_tflops={bad}", check=False)
            self.assertEqual(r.returncode, 1)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertRegex(r.stderr, r"^multiscreen train: --peak_tflops=\S+: must be 0 \(measured\) or a rate in "
                                       r"\[0.001, 1e6\] TFLOP/s per process$")
            self.assertFalse(os.path.exists(self.run_dir("peak_bad")))

    def test_a_data_path_that_is_not_there_is_one_line(self):
        # It was first called a file ("training data only, so validation is off"), then refused.
        missing = os.path.join(self.tmp.name, "no_such_data")
        r = subprocess.run([BIN, "train", f"--config={self.config}", f"--data={missing}",
                            f"--run_dir={self.run_dir('no_data')}", "--steps=1"], capture_output=True, text=True,
                           timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(r.stderr.strip().splitlines(), [f"multiscreen train: {missing}: no such shard file or directory"])
        self.assertFalse(os.path.exists(self.run_dir("no_data")))

    def test_a_data_file_that_is_not_token_data_is_one_line(self):
        # A fresh-eyes report: the warning that a --data file turns validation off came
        # first, then the error; a run that never starts has nothing to warn of.
        text = os.path.join(self.tmp.name, "notes.txt")
        with open(text, "w") as f:
            f.write("plain text, not token ids\n" * 200)
        r = subprocess.run([BIN, "train", f"--config={self.config}", f"--data={text}",
                            f"--run_dir={self.run_dir('text_data')}", "--steps=1", "--eval_every=1"],
                           capture_output=True, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("multiscreen train: ") and text in lines[0], lines[0])
        self.assertFalse(os.path.exists(self.run_dir("text_data")))

    def test_checkpoints_gone_while_latest_names_one_are_refused_not_buried(self):
        # Issue 31: the step directories vanished (moved away, a mount gone) while
        # checkpoints/latest still names one; train restarted from step 0 saying "no
        # checkpoint was saved before the run stopped".
        d = self.run_dir("gone")
        self.train(d, "--steps=10")
        ckpts = os.path.join(d, "checkpoints")
        shutil.rmtree(os.path.join(ckpts, "step_00000010"))
        r = self.train(d, "--steps=20", check=False)
        self.assertEqual(r.returncode, 1, r.stderr[-2000:])
        errors = [l for l in r.stderr.splitlines() if "error" in l.lower() or "latest names" in l]
        self.assertEqual(len(errors), 1, r.stderr[-2000:])
        self.assertIn("checkpoints/latest names step_00000010, which is gone", errors[0])
        self.assertIn("pass --restart to train from step 0", errors[0])
        self.assertEqual(max(train_losses(d)), 10)  # nothing was changed
        r = self.train(d, "--steps=20", "--restart")
        self.assertIn("--restart: ", r.stderr)
        self.assertEqual(sorted(train_losses(d)), list(range(1, 21)))
        with open(os.path.join(ckpts, "latest")) as f:
            self.assertEqual(f.read().strip(), "step_00000020")
        # With a checkpoint that verifies, --restart is said to change nothing.
        r = self.train(d, "--steps=25", "--restart")
        self.assertIn("step_00000020 verifies, so the run resumes from it (--restart applies only when no checkpoint "
                      "verifies", r.stderr)

    def test_a_resume_that_changes_the_window_or_a_length_shaped_schedule_says_so(self):
        # Issue 31: another --seq_len, or another --steps under a cosine schedule (whose lr
        # at every step follows the run's length), changed the trajectory without a word.
        cosine = os.path.join(self.tmp.name, "cosine.textproto")
        with open(self.config) as f:
            text = f.read().replace("kind: WARMUP_CONSTANT", "kind: WARMUP_COSINE")
        self.assertIn("WARMUP_COSINE", text)
        with open(cosine, "w") as f:
            f.write(text)
        d = self.run_dir("reshaped")
        subprocess.run([BIN, "train", f"--config={cosine}", f"--data={self.data}", f"--run_dir={d}", "--steps=10"],
                       check=True, capture_output=True, timeout=600)
        r = subprocess.run([BIN, "train", f"--config={cosine}", f"--data={self.data}", f"--run_dir={d}", "--steps=20",
                            "--seq_len=16"], capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertIn("--seq_len is now 16; the run started with 32", r.stderr)
        self.assertRegex(r.stderr, r"--steps is now 20; the run started with 10 and its WARMUP_COSINE schedule follows "
                                   r"the run's length: the lr of step 11 is [0-9.e-]+ instead of [0-9.e-]+")
        # A constant schedule does not depend on the length: nothing to say.
        c = self.run_dir("constant_longer")
        self.train(c, "--steps=10")
        self.assertNotIn("--steps is now", self.train(c, "--steps=20").stderr)

    def test_a_resume_that_changes_the_recipe_says_so(self):
        # A field report: another --lr or --precision resumed without a word, while another
        # --seq_len warned. Run file fields without a flag are named by their field.
        clipped = os.path.join(self.tmp.name, "clipped.textproto")
        with open(self.config) as f:
            text = f.read()
        with open(clipped, "w") as f:
            f.write(text.replace("optimizer {", "optimizer {\n  grad_clip: 1.0", 1))
        d = self.run_dir("recipe")
        self.train(d, "--steps=2", "--eval_every=0")
        r = subprocess.run([BIN, "train", f"--config={clipped}", f"--data={self.data}", f"--run_dir={d}", "--steps=3",
                            "--eval_every=0", "--lr=0.01", "--precision=bf16"], capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        run_json = os.path.join(d, "run.json")
        changed = [l for l in r.stderr.splitlines() if "its trajectory changes here" in l]
        self.assertEqual(changed, [
            f"[W] optimizer.grad_clip is now 1.0; the run started with 0.0 ({run_json}): its trajectory changes here",
            f"[W] --lr is now 0.01; the run started with 0.0625 ({run_json}): its trajectory changes here",
            f"[W] --precision is now bf16; the run started with fp32 ({run_json}): its trajectory changes here"],
            r.stderr[-2000:])
        # The run's start is what a resume compares with; the same recipe says nothing.
        self.assertNotIn("is now", self.train(d, "--steps=4", "--eval_every=0").stderr)

    def test_more_validation_batches_than_the_data_holds_are_said_not_repeated(self):
        many = os.path.join(self.tmp.name, "many_val_batches.textproto")
        with open(self.config) as f:
            text = f.read().replace("eval { every: 10 batches: 2 }", "eval { every: 2 batches: 500 }")
        self.assertIn("batches: 500", text)
        with open(many, "w") as f:
            f.write(text)
        r = subprocess.run([BIN, "train", f"--config={many}", f"--data={self.data}",
                            f"--run_dir={self.run_dir('val_short')}", "--steps=2"],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        # The synthetic val shard: 8,800 tokens, 274 windows of 32 + 1 (in micro-batches of 4,
        # the last one of 2).
        self.assertIn("validation data: eval.batches=500 asks for 2000 windows (500 x micro_batch 4); 8800 tokens and "
                      "dp = 1 give 274: each validation uses those", r.stderr)
        self.assertNotIn("asks for", self.train(self.run_dir("val_fits"), "--steps=2", "--eval_every=2").stderr)

    def test_sigkill_after_a_checkpoint_resumes_bit_identically(self):
        straight = self.run_dir("straight")
        self.train(straight, "--steps=30", "--seq_len=64", "--micro_batch=8")
        killed = self.run_dir("killed")
        cmd = [BIN, "train", f"--config={self.config}", f"--data={self.data}", f"--run_dir={killed}",
               "--steps=30", "--seq_len=64", "--micro_batch=8"]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Kill at an arbitrary point after the step-10 checkpoint: once step 13 is logged.
        wait_for_step(killed, 13, timeout=120)
        p.send_signal(signal.SIGKILL)
        p.wait()
        logged = max(train_losses(killed))
        self.assertLess(logged, 30, "the run finished before it could be killed")
        r = self.train(killed, "--steps=30", "--seq_len=64", "--micro_batch=8")
        self.assertIn("resumed from", r.stderr)
        a, b = train_losses(straight), train_losses(killed)
        self.assertEqual(sorted(b), list(range(1, 31)))  # each step once, the redone ones replaced
        for step in range(1, 31):
            self.assertEqual(a[step], b[step], f"step {step}")  # exact equality of the logged values

    def test_a_run_killed_before_its_first_checkpoint_restarts_from_step_0(self):
        flags = ["--steps=25", "--seq_len=64", "--micro_batch=8", "--checkpoint_every=0"]
        straight = self.run_dir("early_straight")
        self.train(straight, *flags)
        killed = self.run_dir("early_killed")
        cmd = [BIN, "train", f"--config={self.config}", f"--data={self.data}", f"--run_dir={killed}", *flags]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_step(killed, 5, timeout=120)
        p.send_signal(signal.SIGKILL)
        p.wait()
        self.assertFalse(os.path.exists(os.path.join(killed, "checkpoints", "latest")))
        r = self.train(killed, *flags)
        self.assertIn("restarting it from step 0", r.stderr)
        self.assertEqual(train_losses(straight), train_losses(killed))
        # A finished run asked again has nothing to do, and says so.
        r = self.train(killed, *flags)
        self.assertIn("nothing to do", r.stderr)
        self.assertNotIn("final train_loss", r.stdout)

    def test_sigterm_stops_after_the_step_with_a_checkpoint_and_exit_0(self):
        d = self.run_dir("sigterm")
        cmd = [BIN, "train", f"--config={self.config}", f"--data={self.data}", f"--run_dir={d}",
               "--steps=100000", "--checkpoint_every=0"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for_step(d, 3, timeout=60)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err[-2000:])
        self.assertIn("stopped after step", err)
        last = max(train_losses(d))
        with open(os.path.join(d, "checkpoints", "latest")) as f:
            self.assertEqual(f.read().strip(), f"step_{last:08d}")
        with open(os.path.join(d, "status.json")) as f:
            self.assertEqual(json.load(f), {"state": "stopped", "step": last, "steps": 100000})

    def test_a_second_sigint_exits_at_once(self):
        d = self.run_dir("sigint2")
        cmd = [BIN, "train", f"--config={self.config}", f"--data={self.data}", f"--run_dir={d}",
               "--steps=100000", "--seq_len=512", "--micro_batch=8", "--checkpoint_every=0"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for_step(d, 1, timeout=60)
        p.send_signal(signal.SIGINT)
        time.sleep(0.02)  # two pending SIGINTs would merge into one
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 130, err[-2000:])
        self.assertIn("second SIGINT", err)

    def test_a_corrupted_newest_checkpoint_falls_back_with_a_warning(self):
        d = self.run_dir("fallback")
        self.train(d, "--steps=20")
        shard = os.path.join(d, "checkpoints", "step_00000020", "shard_pp0_tp0.h5")
        size = os.path.getsize(shard)
        with open(shard, "r+b") as f:
            f.seek(size * 3 // 4)
            chunk = f.read(64)
            f.seek(size * 3 // 4)
            f.write(bytes(b ^ 0x5A for b in chunk))
        r = self.train(d, "--steps=25")
        self.assertIn("skipping checkpoint", r.stderr)
        self.assertIn("step_00000020", r.stderr)
        self.assertIn("resumed from", r.stderr)
        self.assertIn("step_00000010", r.stderr)

    def test_the_run_records_the_build_that_started_it(self):
        # Issue 43: no run file, log or checkpoint recorded the build. run.json and the
        # start line say `multiscreen --version`'s; another build resumes the run.
        version = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.strip()
        _, number, commit = version.split(" ")
        d = self.run_dir("build_recorded")
        r = self.train(d, "--steps=2")
        self.assertRegex(r.stderr, r"\[I\] training tiny_psi4 for 2 steps of .* tokens into .*; build " + re.escape(version))
        with open(os.path.join(d, "run.json")) as f:
            self.assertEqual(json.load(f)["build"], {"version": number, "commit": commit.strip("()")})
        with open(os.path.join(d, "run.json")) as f:
            identity = json.load(f)
        identity["build"] = {"version": "0.0", "commit": "0000000"}
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump(identity, f)
        r = self.train(d, "--steps=4")
        self.assertIn("resumed from", r.stderr)
        self.assertNotIn("[W]", r.stderr)
        # Without a checkpoint, the metrics are still this run's (the build is no part of
        # its identity): restarted from step 0, not refused as another run's.
        shutil.rmtree(os.path.join(d, "checkpoints"))
        r = self.train(d, "--steps=2")
        self.assertIn("restarting it from step 0", r.stderr)

    def test_the_root_is_no_run_directory_and_other_files_are_said(self):
        r = self.train("/", "--steps=1", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(r.stderr.strip().splitlines()[-1],
                         "multiscreen train: --run_dir=/ is the file system's root: give the run a directory of its own")
        self.assertFalse(os.path.exists("/run.json"))
        d = self.run_dir("with_notes")
        os.makedirs(d)
        with open(os.path.join(d, "notes.txt"), "w") as f:
            f.write("mine\n")
        r = self.train(d, "--steps=1")
        self.assertIn(f"--run_dir={d} holds files but no run", r.stderr)
        self.assertNotIn("holds files but no run", self.train(d, "--steps=2").stderr)  # now it holds one
        # Hidden files only (scripts/demo's .multiscreen_demo marker, a .gitkeep) are no
        # one's files: a newcomer's first command printed this warning about the demo's marker.
        d = self.run_dir("with_markers")
        os.makedirs(d)
        for name in (".multiscreen_demo", ".gitkeep"):
            open(os.path.join(d, name), "w").close()
        self.assertNotIn("holds files but no run", self.train(d, "--steps=1").stderr)
        # A directory of token shards is data: the run's files went among them with the
        # warning above. Refused before anything is written there.
        before = sorted(os.listdir(self.data))
        r = self.train(self.data, "--steps=1", check=False)
        self.assertEqual((r.returncode, r.stderr.strip().splitlines()[-1]),
                         (1, f"multiscreen train: --run_dir={self.data} holds prepared token data (train_000000.bin): "
                             "give the run a directory of its own (the data goes in --data)"))
        self.assertEqual(sorted(os.listdir(self.data)), before)
        # A run an older version let start among the shards still resumes, with the advice.
        older = self.run_dir("older_among_shards")
        self.train(older, "--steps=1")
        shutil.copy(os.path.join(self.data, "train_000000.bin"), older)
        r = self.train(older, "--steps=2")
        self.assertIn(f"--run_dir={older} holds prepared token data (train_000000.bin) beside this run's files", r.stderr)
        self.assertIn("move the run's files", r.stderr)

    def test_a_run_directory_without_checkpoints_is_not_overwritten(self):
        d = self.run_dir("occupied")
        os.makedirs(d)
        with open(os.path.join(d, "metrics.jsonl"), "w") as f:
            f.write('{"step": 1, "loss": 3.0}\n')
        r = self.train(d, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("already holds a run", r.stderr)
        with open(os.path.join(d, "metrics.jsonl")) as f:
            self.assertEqual(f.read(), '{"step": 1, "loss": 3.0}\n')

    def test_token_ids_past_the_vocabulary_are_refused(self):
        data = os.path.join(self.tmp.name, "wide_vocab")
        synthetic_shards(data, vocab=200)
        r = subprocess.run([BIN, "train", f"--config={self.config}", f"--data={data}",
                            f"--run_dir={self.run_dir('wide')}"], capture_output=True, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("outside the vocabulary V = 97", r.stderr)
        # The run directory it created holds nothing of value and is removed, so the
        # corrected command starts clean; one that existed before is left as it was.
        self.assertFalse(os.path.exists(self.run_dir("wide")))
        # So are the parent directories it created for it (only those): here `new` and
        # `new/deeper` under an existing, empty `parent`.
        os.makedirs(self.run_dir("parent"))
        nested = os.path.join(self.run_dir("parent"), "new", "deeper", "wide")
        r = subprocess.run([BIN, "train", f"--config={self.config}", f"--data={data}", f"--run_dir={nested}/"],
                           capture_output=True, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("outside the vocabulary V = 97", r.stderr)
        self.assertEqual(os.listdir(self.run_dir("parent")), [])
        kept = self.run_dir("wide_kept")
        os.makedirs(kept)
        with open(os.path.join(kept, "notes.txt"), "w") as f:
            f.write("mine\n")
        r = subprocess.run([BIN, "train", f"--config={self.config}", f"--data={data}", f"--run_dir={kept}"],
                           capture_output=True, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        with open(os.path.join(kept, "notes.txt")) as f:
            self.assertEqual(f.read(), "mine\n")

    def test_resuming_on_other_data_is_refused_unless_allowed(self):
        d = self.run_dir("data_change")
        self.train(d, "--steps=10", "--checkpoint_every=10", "--eval_every=0")
        with open(os.path.join(d, "checkpoints", "step_00000010", "manifest.json")) as f:
            recorded = json.load(f)["data"]["train"]
        self.assertEqual(recorded["tokens"], 30000)
        self.assertRegex(recorded["fingerprint"], "^[0-9a-f]{8}$")
        other = os.path.join(self.tmp.name, "other_data")
        synthetic_shards(other, seed=5)  # as many tokens, in another order
        flags = [f"--config={self.config}", f"--data={other}", f"--run_dir={d}", "--steps=12", "--eval_every=0"]
        r = subprocess.run([BIN, "train", *flags], capture_output=True, text=True, timeout=600)
        self.assertNotEqual(r.returncode, 0)
        lines = [l for l in r.stderr.splitlines() if l.startswith("multiscreen train:")]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("step_00000010 was trained on other data (train: 30000 tokens, fingerprint "
                      + recorded["fingerprint"], lines[0])
        self.assertIn("--allow_data_change", lines[0])
        self.assertEqual(max(train_losses(d)), 10)  # nothing was changed
        # The same data in another file layout is the same stream: it resumes.
        split = os.path.join(self.tmp.name, "split_data")
        os.makedirs(split)
        with open(os.path.join(self.data, "train_000000.bin"), "rb") as f:
            tokens = np.frombuffer(f.read()[1024:], dtype=np.uint16)
        write_tokens(os.path.join(split, "train_000000.bin"), tokens[:12345])
        write_tokens(os.path.join(split, "train_000001.bin"), tokens[12345:])
        shutil.copy(os.path.join(self.data, "val_000000.bin"), split)
        r = subprocess.run([BIN, "train", *flags[:1], f"--data={split}", *flags[2:]], capture_output=True, text=True,
                           timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        r = subprocess.run([BIN, "train", *flags[:3], "--steps=14", "--eval_every=0", "--allow_data_change"],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("resuming on this run's data (--allow_data_change)", r.stderr)
        self.assertEqual(max(train_losses(d)), 14)

    def test_a_second_train_on_the_same_run_directory_is_refused(self):
        d = self.run_dir("locked")
        cmd = [BIN, "train", f"--config={self.config}", f"--data={self.data}", f"--run_dir={d}", "--steps=100000"]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 60
            while time.time() < deadline and not os.path.exists(os.path.join(d, "metrics.jsonl")):
                time.sleep(0.01)
            r = self.train(d, check=False)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("another train process is using it", r.stderr)
        finally:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=60)

    def test_slurm_tasks_that_mpi_does_not_see_are_refused_before_the_run_directory(self):
        # What `srun -n 2 --mpi=none` gives each of its two processes: the step's task
        # count, no PMI, so MPI sees one process.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI"))}
        def train(d, **extra):
            return subprocess.run([BIN, "train", f"--config={self.config}", f"--data={self.data}", f"--run_dir={d}",
                                   "--steps=1"], capture_output=True, text=True, timeout=120, env=dict(env, **extra))
        d = self.run_dir("srun_step")
        r = train(d, SLURM_STEP_NUM_TASKS="2", SLURM_NTASKS="2")
        self.assertNotEqual(r.returncode, 0)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("SLURM_STEP_NUM_TASKS=2 but MPI sees 1 process: srun needs --mpi=pmix", lines[0])
        self.assertFalse(os.path.exists(d))
        # A batch script of a 2-task job running train itself, without srun: one process on purpose.
        d = self.run_dir("batch_shell")
        r = train(d, SLURM_NTASKS="2", SLURM_NPROCS="2")
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])

    def test_a_comm_that_cannot_serve_the_step_is_one_line_before_the_run_directory(self):
        for flags, want in [(["--comm=gloo"], "--comm=gloo: expected auto, mpi, staged or nccl"),
                            (["--comm=nccl", "--device=cpu"], "--comm=nccl: NCCL moves GPU buffers; this step runs on the cpu")]:
            with self.subTest(flags=flags):
                d = self.run_dir("comm_" + flags[0][7:])
                r = self.train(d, "--steps=1", *flags, check=False)
                self.assertNotEqual(r.returncode, 0)
                lines = [l for l in r.stderr.splitlines() if l.strip()]
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertIn(want, lines[0])
                self.assertFalse(os.path.exists(d))

    def test_defaults_give_the_papers_learning_rate_and_a_single_file_has_no_validation(self):
        d = self.run_dir("defaults")
        r = subprocess.run([BIN, "train", "--model=tiny_psi4", f"--data={self.data}/train_000000.bin",
                            f"--run_dir={d}", "--steps=3", "--seq_len=32", "--micro_batch=4", "--eval_every=1"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertEqual(r.stderr.count("is a file: training data only, so validation is off"), 1, r.stderr)
        m = metrics(d)
        self.assertEqual([x["lr"] for x in m if "lr" in x], [0.0625] * 3)
        self.assertFalse(any("val_loss" in x for x in m))
        r = subprocess.run([BIN, "train", "--model=tiny_psi4", f"--data={self.data}", f"--run_dir={d}x",
                            "--seq_len=32", "--micro_batch=4"], capture_output=True, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("steps", r.stderr)

    def fp16_config(self):
        """tiny_test in FP16 with a loss scale that overflows for the first ~18 steps."""
        cfg = os.path.join(self.tmp.name, "fp16.textproto")
        with open(self.config) as f, open(cfg, "w") as g:
            g.write(f.read().replace("precision: FP32", "precision: FP16") +
                    "initial_loss_scale: 1e12\nmax_nonfinite_steps: 40\n")
        return cfg

    def test_fp16_overflow_skips_steps_and_the_scale_backs_off(self):
        d = self.run_dir("fp16")
        r = subprocess.run([BIN, "train", f"--config={self.fp16_config()}", f"--data={self.data}", f"--run_dir={d}",
                            "--steps=30"], capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        steps = [m for m in metrics(d) if "loss" in m]
        skipped = [m for m in steps if m["skipped"]]
        self.assertGreater(len(skipped), 0)
        self.assertIn("step skipped", r.stderr)
        self.assertIn("the lr schedule stays at 0 applied steps", r.stderr)
        self.assertLess(steps[-1]["loss_scale"], 1e12)
        applied = [m for m in steps if not m["skipped"]]
        self.assertGreater(len(applied), 5)
        self.assertLess(applied[-1]["loss"], applied[0]["loss"])

    def test_skipped_fp16_steps_do_not_advance_the_lr_schedule_across_a_resume(self):
        # tiny_test: lr 0.0625, linear warmup over 4 steps. Each step's lr is that of
        # the updates applied before it; here the first 18 steps are skipped.
        cfg = self.fp16_config()
        whole, resumed = self.run_dir("fp16_whole"), self.run_dir("fp16_resumed")
        for d, stops in ((whole, [30]), (resumed, [20, 30])):
            for steps in stops:  # the resumed run stops at 20 (a checkpoint) and continues
                r = subprocess.run([BIN, "train", f"--config={cfg}", f"--data={self.data}", f"--run_dir={d}",
                                    f"--steps={steps}"], capture_output=True, text=True, timeout=600)
                self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        rows = [m for m in metrics(whole) if "loss" in m]
        self.assertGreater(sum(m["skipped"] for m in rows[:20]), 10, "the test needs skipped steps in warmup")
        self.assertIn(sum(not m["skipped"] for m in rows[:20]), (1, 2, 3),
                      "the test needs the resume inside warmup, after an update")
        applied = 0
        for m in rows:
            self.assertAlmostEqual(m["lr"], 0.0625 * min(1.0, (applied + 1) / 4), delta=1e-12, msg=m)
            applied += not m["skipped"]
        self.assertGreater(applied, 4, "the test needs warmup to end")
        self.assertEqual([(m["lr"], m["skipped"]) for m in rows],
                         [(m["lr"], m["skipped"]) for m in metrics(resumed) if "loss" in m])

    def test_bf16_trains_close_to_fp32(self):
        a, b = self.run_dir("fp32ref"), self.run_dir("bf16")
        self.train(a, "--steps=10")
        r = self.train(b, "--steps=10", "--precision=bf16")
        la, lb = train_losses(a), train_losses(b)
        # A CPU path without bf16 dot products runs the fp32 step and says so once (issue 44).
        notices = [l for l in r.stderr.splitlines() if "has no bf16 dot products" in l]
        if notices:
            self.assertEqual(len(notices), 1, r.stderr[-2000:])
            self.assertEqual(la[10], lb[10])
            return
        self.assertNotEqual(la[10], lb[10])
        self.assertLess(abs(la[10] - lb[10]), 0.1 * la[10])

    def test_bf16_on_a_path_without_bf16_dot_products_trains_fp32_and_says_so_once(self):
        # Issue 44: --isa=generic has no bf16 dot products: the fp32 step, bit for bit, and
        # one warning naming the path.
        a, b = self.run_dir("generic_fp32"), self.run_dir("generic_bf16")
        self.train(a, "--steps=3", "--eval_every=0", "--isa=generic")
        r = self.train(b, "--steps=3", "--eval_every=0", "--isa=generic", "--precision=bf16")
        notices = [l for l in r.stderr.splitlines() if "bf16 dot products" in l]
        self.assertEqual(len(notices), 1, r.stderr[-2000:])
        self.assertIn("generic path", notices[0])
        self.assertIn("the step runs in fp32", notices[0])
        self.assertEqual(train_losses(a), train_losses(b))

    def test_run_json_records_the_requested_and_the_effective_precision(self):
        # bf16 asked on a path without bf16 dot products runs the fp32 step: run.json's recipe
        # keeps the requested bf16 (what a resume's flags compare with, and what a resume on a
        # CPU with bf16 dot products gets back), effective_precision what the step computed
        # in, and the device line says both.
        d = self.run_dir("effective_precision")
        r = self.train(d, "--steps=2", "--eval_every=0", "--isa=generic", "--precision=bf16")
        run_json = os.path.join(d, "run.json")
        with open(run_json) as f:
            started = json.load(f)
        self.assertEqual((started["recipe"]["precision"], started["effective_precision"]), ("bf16", "fp32"))
        self.assertIn("; step precision: fp32 (--precision=bf16 falls back); head: ", r.stderr)
        # Resumed with the same flags on the default path: where it has bf16 dot products the
        # step computes in bf16 from here, said in one line (no recipe line: --precision is
        # unchanged); where it has none, nothing changes and nothing is said.
        r = self.train(d, "--steps=4", "--eval_every=0", "--precision=bf16")
        self.assertIn("resumed from", r.stderr)
        self.assertNotIn("--precision is now", r.stderr)
        changed = [l for l in r.stderr.splitlines() if "the step now computes in" in l]
        if "has no bf16 dot products" in r.stderr:
            self.assertEqual(changed, [])
            self.assertIn("; step precision: fp32 (--precision=bf16 falls back); head: ", r.stderr)
        else:
            self.assertEqual(changed, [f"[W] the step now computes in bf16 (--precision=bf16); it started in fp32 "
                                       f"({run_json}): its trajectory changes here"])
            self.assertIn("; step precision: bf16; head: ", r.stderr)
        with open(run_json) as f:
            self.assertEqual(json.load(f), started)  # written at the start only
        # fp32 asked and run: no fallback said.
        r = self.train(self.run_dir("effective_fp32"), "--steps=1", "--eval_every=0")
        with open(os.path.join(self.run_dir("effective_fp32"), "run.json")) as f:
            self.assertEqual(json.load(f)["effective_precision"], "fp32")
        self.assertIn("; step precision: fp32; head: ", r.stderr)

    def test_zero_1_without_data_parallel_ranks_says_it_does_nothing(self):
        # A field report: --zero=1 on a layout with dp = 1 ran without ZeRO-1, in silence.
        r = self.train(self.run_dir("zero_dp1"), "--steps=1", "--eval_every=0", "--zero=1")
        self.assertEqual([l for l in r.stderr.splitlines() if "has no effect" in l],
                         ["[W] train: zero=1 (--zero or parallel.zero) has no effect with dp = 1 (tp=1 pp=1): every "
                          "rank holds its whole optimizer state"])

    def test_the_transformer_baseline_learns_and_resumes_bit_identically(self):
        # tiny_transformer_train (2 layers, d_E 32) through the same trainer, checkpoints
        # and validation: the synthetic stream is learnable, ln 97 = 4.57 at the start.
        flags = ("--model=tiny_transformer_train", "--lr=0.01")
        d = self.run_dir("transformer")
        self.train(d, *flags)
        losses = train_losses(d)
        self.assertEqual(sorted(losses), list(range(1, 41)))
        self.assertAlmostEqual(losses[1], math.log(97), delta=0.3)
        self.assertLess(losses[40], 0.25 * losses[1])
        vals = [x["val_loss"] for x in metrics(d) if "val_loss" in x]
        self.assertEqual(len(vals), 4)
        self.assertLess(vals[-1], 0.5 * vals[0])
        with open(os.path.join(d, "checkpoints", "step_00000040", "manifest.json")) as f:
            self.assertEqual(json.load(f)["model"]["family"], "transformer")
        # 20 steps, then resumed from the step-20 checkpoint to 40: the same losses, exactly.
        r = self.run_dir("transformer_resumed")
        self.train(r, *flags, "--steps=20")
        out = self.train(r, *flags)
        self.assertIn("resumed from", out.stderr)
        resumed = train_losses(r)
        for step in range(1, 41):
            self.assertEqual(resumed[step], losses[step], f"step {step}")

    def test_tanh_norm_off_trains_records_itself_and_refuses_a_model_with_it_on(self):
        # Issue 18's ablation switch through the trainer: the manifest and the exported
        # weights record tanh_norm = false, the trajectory differs from TanhNorm's, and a
        # run directory of one is not resumed with the other.
        with open(os.path.join(SRC, "configs", "models", "tiny_psi4.textproto")) as f:
            body = f.read().replace('name: "tiny_psi4"', 'name: "tiny_psi4_notanh"')
        model = os.path.join(self.tmp.name, "tiny_psi4_notanh.textproto")
        with open(model, "w") as f:
            f.write(body + "tanh_norm: false\n")
        d, ref = self.run_dir("notanh"), self.run_dir("notanh_ref")
        self.train(d, f"--model={model}", "--steps=10")
        self.train(ref, "--steps=10")
        with open(os.path.join(d, "checkpoints", "step_00000010", "manifest.json")) as f:
            self.assertIs(json.load(f)["model"]["tanh_norm"], False)
        with open(os.path.join(ref, "checkpoints", "step_00000010", "manifest.json")) as f:
            self.assertIs(json.load(f)["model"]["tanh_norm"], True)
        off, on = train_losses(d), train_losses(ref)
        # The same init and batches: the first losses are close (small tile outputs, where
        # TanhNorm is near the identity) but not equal, and training follows another path.
        self.assertNotEqual(off[1], on[1])
        self.assertLess(abs(off[1] - on[1]), 0.01 * on[1])
        self.assertNotEqual(off[10], on[10])
        out = os.path.join(self.tmp.name, "notanh.h5")
        r = subprocess.run([BIN, "ckpt", "export", f"--checkpoint={d}", f"--out={out}"], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        import h5py
        with h5py.File(out) as f:
            self.assertEqual(int(f.attrs["tanh_norm"]), 0)
        r = self.train(d, "--steps=20", check=False)  # tiny_psi4, TanhNorm on
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("does not match the model being loaded", r.stderr)
        # Only the field that differs, with both values (every field was listed).
        self.assertIn("loaded ('tiny_psi4'): tanh_norm = false in the checkpoint, true in the model being loaded\n",
                      r.stderr)

    def test_position_and_gate_switches_train_record_themselves_and_refuse_the_standard_model(self):
        # Issue 30's ablation switches through the trainer: a RoPE model without the output
        # gate trains (finite losses, another path than the standard model's), the manifest
        # and the exported weights record both switches and hold no W_G, and the run
        # directory is not resumed as the standard model.
        with open(os.path.join(SRC, "configs", "models", "tiny_psi4.textproto")) as f:
            body = f.read().replace('name: "tiny_psi4"', 'name: "tiny_psi4_rope_nogate"')
        model = os.path.join(self.tmp.name, "tiny_psi4_rope_nogate.textproto")
        with open(model, "w") as f:
            f.write(body + "position: ROPE\noutput_gate: false\n")
        d, ref = self.run_dir("rope_nogate"), self.run_dir("rope_nogate_ref")
        self.train(d, f"--model={model}", "--steps=10")
        self.train(ref, "--steps=10")
        with open(os.path.join(d, "checkpoints", "step_00000010", "manifest.json")) as f:
            m = json.load(f)["model"]
        self.assertEqual((m["position"], m["output_gate"]), ("rope", False))
        with open(os.path.join(ref, "checkpoints", "step_00000010", "manifest.json")) as f:
            m = json.load(f)["model"]
        self.assertEqual((m["position"], m["output_gate"]), ("mipe", True))
        ablated, standard = train_losses(d), train_losses(ref)
        self.assertTrue(all(math.isfinite(ablated[s]) for s in range(1, 11)))
        self.assertNotEqual(ablated[10], standard[10])
        out = os.path.join(self.tmp.name, "rope_nogate.h5")
        r = subprocess.run([BIN, "ckpt", "export", f"--checkpoint={d}", f"--out={out}"], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        import h5py
        with h5py.File(out) as f:
            position = f.attrs["position"]
            self.assertEqual(position.decode() if isinstance(position, bytes) else position, "rope")
            self.assertEqual(int(f.attrs["output_gate"]), 0)
            self.assertNotIn("W_G", f["layers/000"])
        r = self.train(d, "--steps=20", check=False)  # tiny_psi4: MiPE, gate on
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("loaded ('tiny_psi4'): position = rope in the checkpoint, mipe in the model being loaded; "
                      "output_gate = false in the checkpoint, true in the model being loaded\n", r.stderr)

    def test_psi8_at_the_papers_learning_rate_trains_without_divergence(self):
        corpus = os.path.join(SRC, "data_cache", "nlp-corpus")
        tok = os.path.join(SRC, "data_cache", "gpt2")
        self.assertTrue(os.path.isdir(corpus), "data_cache/ is missing: run scripts/setup")
        shards = os.path.join(self.tmp.name, "corpus")
        r = subprocess.run([BIN, "prepare", f"--tokenizer={tok}", f"--input={corpus}", f"--output={shards}"],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        d = self.run_dir("psi8")
        r = subprocess.run([BIN, "train", "--model=psi8", f"--data={shards}", f"--run_dir={d}", "--steps=40",
                            "--micro_batch=2", "--seq_len=64", "--lr=0.0625", "--seed=3"],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        losses = [train_losses(d)[s] for s in range(1, 41)]
        self.assertTrue(all(l is not None and math.isfinite(l) for l in losses), losses)
        self.assertLess(np.mean(losses[-10:]), np.mean(losses[:5]) - 1.0, losses)

    def test_a_file_system_without_flock_trains_with_one_warning(self):
        """Where flock() fails with ENOSYS (Lustre without -o flock; here the LD_PRELOAD shim
        tests/checkpoint/no_flock.c), the run directory's lock cannot be had: train warns once
        and trains (it said "another train process is using it" and refused), checkpoints
        included."""
        d = self.run_dir("no_flock")
        env = dict(os.environ, LD_PRELOAD=NO_FLOCK_SHIM)
        r = subprocess.run([BIN, "train", f"--config={self.config}", f"--data={self.data}", f"--run_dir={d}",
                            "--steps=4", "--checkpoint_every=2"], capture_output=True, text=True, timeout=600, env=env)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        warnings = [l for l in r.stderr.splitlines() if "has no flock" in l]
        self.assertEqual(len(warnings), 1, r.stderr[-3000:])
        self.assertIn(f"--run_dir={d}: this file system has no flock", warnings[0])
        self.assertEqual([x["step"] for x in metrics(d) if "loss" in x], [1, 2, 3, 4])
        self.assertTrue(os.path.isdir(os.path.join(d, "checkpoints", "step_00000004")))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--no_flock_shim", required=True)
    args, rest = p.parse_known_args()
    BIN, SRC = os.path.abspath(args.multiscreen), os.path.abspath(args.source)
    NO_FLOCK_SHIM = os.path.abspath(args.no_flock_shim)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
