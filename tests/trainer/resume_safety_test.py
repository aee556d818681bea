#!/usr/bin/python3
"""`multiscreen train` never buries what a run directory holds (issue 13):
checkpoints that all fail to verify refuse the start, in one line, changing
nothing; --restart moves them to checkpoints/unverified/ and trains from step 0;
checkpoints newer than the one resumed from are set aside, never overwritten or
pruned; metrics.jsonl is only appended to, superseded rows marked; a checkpoint
save that hits a full disk names the cause, removes its partial directory and
leaves the previous checkpoint whole.

Run: /usr/bin/python3 tests/trainer/resume_safety_test.py --multiscreen=build/multiscreen --source=. [--mpirun=mpirun]
"""
import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from train_e2e_test import SyntheticCorpusCase  # noqa: E402

BIN = SRC = MPIRUN = None


def snapshot(directory):
    """{relative path: sha256} of every file under `directory`."""
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
    return out


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def standing(run_dir):
    sys.path.insert(0, os.path.join(SRC, "tools"))
    from metrics import read_metrics
    return read_metrics(os.path.join(run_dir, "metrics.jsonl"))


def train_losses(run_dir):
    return {m["step"]: m["loss"] for m in standing(run_dir) if "loss" in m}


class ResumeSafetyTest(SyntheticCorpusCase):

    def train(self, run_dir, *flags, np=1, check=True):
        cmd = [BIN, "train", f"--config={self.config}", f"--data={self.data}", f"--run_dir={run_dir}", *flags]
        if np > 1:
            cmd = [MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", str(np), *cmd]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        if check:
            self.assertEqual(r.returncode, 0, f"{' '.join(cmd)}:\n{r.stderr[-3000:]}")
        return r

    def test_a_run_directory_it_cannot_save_into_is_refused_before_the_first_step(self):
        # Each would otherwise train to the first save and fail there, the compute lost.
        cases = {"checkpoints_is_a_file": ("checkpoints", "file", "checkpoints: exists and is not a directory"),
                 "status_is_a_directory": ("status.json", "dir", "status.json: is a directory"),
                 "latest_is_a_directory": ("checkpoints/latest", "dir", "latest: is a directory")}
        for name, (path, kind, want) in cases.items():
            with self.subTest(name):
                d = os.path.join(self.tmp.name, name)
                p = os.path.join(d, path)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                if kind == "dir":
                    os.makedirs(p)
                else:
                    open(p, "w").close()
                r = self.train(d, "--steps=2", check=False)
                self.assertNotEqual(r.returncode, 0)
                lines = [l for l in r.stderr.splitlines() if l.strip()]
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertIn(want, lines[0])
                self.assertFalse(os.path.exists(os.path.join(d, "metrics.jsonl")))
        # A run directory that cannot be written names the cause, not another process.
        if os.geteuid() != 0:
            d = os.path.join(self.tmp.name, "read_only")
            os.makedirs(d)
            os.chmod(d, 0o555)
            r = self.train(d, "--steps=2", check=False)
            self.assertNotEqual(r.returncode, 0)
            self.assertNotIn("another train process", r.stderr)

    def test_outputs_never_overwrite_an_input_or_a_checkpoint(self):
        d = os.path.join(self.tmp.name, "outputs")
        self.train(d, "--steps=10", "--checkpoint_every=10")
        step = os.path.join(d, "checkpoints", "step_00000010")
        shard = os.path.join(step, "shard_pp0_tp0.h5")
        before = read_bytes(shard)
        def run(*args):
            return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=120)
        r = run("ckpt", "export", f"--checkpoint={d}", f"--out={shard}")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("lies inside the checkpoint directory", r.stderr)
        self.assertEqual(read_bytes(shard), before)
        weights = os.path.join(d, "w.h5")
        self.assertEqual(run("ckpt", "export", f"--checkpoint={d}", f"--out={weights}").returncode, 0)
        w_before = read_bytes(weights)
        tokens = os.path.join(self.data, "val_000000.bin")
        for out in (weights, tokens):
            r = run("forward", f"--weights={weights}", f"--tokens={tokens}", "--seq_len=8", f"--out={out}")
            self.assertNotEqual(r.returncode, 0)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn("is the input", r.stderr)
        self.assertEqual(read_bytes(weights), w_before)

    def test_a_pp2_run_whose_checkpoints_all_lost_a_shard_is_refused_until_restart(self):
        d = os.path.join(self.tmp.name, "pp2")
        flags = ["--pp=2", "--steps=10", "--checkpoint_every=5"]
        self.train(d, *flags, np=2)
        ckpts = os.path.join(d, "checkpoints")
        self.assertEqual(sorted(n for n in os.listdir(ckpts) if n.startswith("step_")),
                         ["step_00000005", "step_00000010"])
        original = train_losses(d)
        # The second stage's shard disappears from every checkpoint (a requeued
        # job on a node without the mount that held it).
        for step in ("step_00000005", "step_00000010"):
            os.remove(os.path.join(ckpts, step, "shard_pp1_tp0.h5"))
        before, metrics_before = snapshot(ckpts), read_bytes(os.path.join(d, "metrics.jsonl"))
        want = (f"{ckpts}: 2 checkpoints found, none verifies: step_00000010: shard_pp1_tp0.h5: missing; "
                "step_00000005: shard_pp1_tp0.h5: missing; nothing was changed")

        # One process: exactly one line on stderr.
        r = self.train(d, "--steps=10", "--checkpoint_every=5", check=False)
        self.assertEqual(r.returncode, 1)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(want, lines[0])
        self.assertIn("--restart", lines[0])
        self.assertNotIn("no checkpoint was saved", r.stderr)
        # Under mpirun with the same layout: the same line, once (rank 0's), no rank aborts.
        r = self.train(d, *flags, np=2, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(sum(want in l for l in r.stderr.splitlines()), 1, r.stderr)
        self.assertNotIn("fatal on rank", r.stderr)
        self.assertEqual(snapshot(ckpts), before)
        self.assertEqual(read_bytes(os.path.join(d, "metrics.jsonl")), metrics_before)

        # --restart: the checkpoints move, whole, to checkpoints/unverified/; the run trains from step 0.
        r = self.train(d, *flags, "--restart", np=2)
        self.assertIn("--restart", r.stderr)
        aside = os.path.join(ckpts, "unverified")
        moved = {k: v for k, v in before.items() if k.startswith("step_")}
        self.assertEqual(snapshot(aside), moved)
        self.assertTrue(os.path.exists(os.path.join(ckpts, "step_00000010", "shard_pp1_tp0.h5")))
        with open(os.path.join(ckpts, "latest")) as f:
            self.assertEqual(f.read().strip(), "step_00000010")
        # metrics.jsonl: the old rows, untouched, then a marker, then the new run's.
        text = read_bytes(os.path.join(d, "metrics.jsonl"))
        self.assertTrue(text.startswith(metrics_before))
        marker = json.loads(text[len(metrics_before):].decode().splitlines()[0])
        self.assertEqual(marker, {"resumed_from": 0, "superseded_rows": 11})  # 10 steps and a validation
        self.assertEqual(train_losses(d), original)  # the same seed retraces the same steps
        # A second --restart over the new, good checkpoint resumes from it and sets nothing aside.
        r = self.train(d, "--pp=2", "--steps=12", "--checkpoint_every=5", "--restart", np=2)
        self.assertIn("resumed from", r.stderr)
        self.assertEqual(snapshot(aside), moved)

    def test_checkpoints_newer_than_the_resumed_one_are_set_aside_not_overwritten_or_pruned(self):
        d = os.path.join(self.tmp.name, "newer")
        self.train(d, "--steps=30")  # checkpoints 10, 20, 30 (keep_last 3)
        ckpts = os.path.join(d, "checkpoints")
        original = train_losses(d)
        shard = os.path.join(ckpts, "step_00000030", "shard_pp0_tp0.h5")
        size = os.path.getsize(shard)
        with open(shard, "r+b") as f:
            f.seek(size * 3 // 4)
            chunk = f.read(64)
            f.seek(size * 3 // 4)
            f.write(bytes(b ^ 0x5A for b in chunk))
        corrupted = snapshot(os.path.join(ckpts, "step_00000030"))
        metrics_before = read_bytes(os.path.join(d, "metrics.jsonl"))
        # 30 more steps: saves 40, 50, 60 with keep_last 3, and would have
        # rewritten step 30 over the corrupted one.
        r = self.train(d, "--steps=60")
        self.assertIn("resumed from", r.stderr)
        self.assertIn("step_00000020", r.stderr)
        self.assertEqual(snapshot(os.path.join(ckpts, "unverified", "step_00000030")), corrupted)
        self.assertEqual(sorted(n for n in os.listdir(ckpts) if n.startswith("step_")),
                         ["step_00000040", "step_00000050", "step_00000060"])
        text = read_bytes(os.path.join(d, "metrics.jsonl"))
        self.assertTrue(text.startswith(metrics_before))
        marker = json.loads(text[len(metrics_before):].decode().splitlines()[0])
        self.assertEqual(marker, {"resumed_from": 20, "superseded_rows": 11})  # steps 21-30 and a validation
        losses = train_losses(d)
        self.assertEqual(sorted(losses), list(range(1, 61)))
        for step in range(1, 31):
            self.assertEqual(losses[step], original[step], step)  # bit-identical resume

    def test_a_validation_a_stop_signal_cancelled_is_run_when_the_run_resumes(self):
        # A stop signal cancels a validation pass (so that it cannot delay the checkpoint)
        # and the checkpoint of that step is saved without it; the resumed run started at
        # the next step, so the step (here the last: a sweep budget's) never had a
        # validation loss and the resume said "nothing to do".
        import numpy as np
        sys.path.insert(0, os.path.join(SRC, "tools"))
        from random_tokens import write_tokens
        data = os.path.join(self.tmp.name, "long_val")
        os.makedirs(data)
        shutil.copy(os.path.join(self.data, "train_000000.bin"), data)
        write_tokens(os.path.join(data, "val_000000.bin"), np.random.default_rng(1).integers(0, 97, size=400000))
        config = os.path.join(self.tmp.name, "long_val.textproto")
        with open(config, "w") as f:  # a validation pass of ~3000 micro-batches: about a second
            f.write('model: "tiny_psi4" steps: 4 seed: 1 micro_batch: 4 grad_accum: 1 seq_len: 32\n'
                    'optimizer { lr: 0.0625 } schedule { kind: WARMUP_CONSTANT warmup_steps: 2 }\n'
                    'checkpoint { every: 0 } eval { every: 4 batches: 3000 } logging { tensorboard: false }\n')
        env = dict(os.environ, OMP_NUM_THREADS="1")

        def cmd(run_dir):
            return [BIN, "train", f"--config={config}", f"--data={data}", f"--run_dir={run_dir}"]

        ref = os.path.join(self.tmp.name, "long_val_ref")
        r = subprocess.run(cmd(ref), capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        want = [m["val_loss"] for m in standing(ref) if "val_loss" in m]
        self.assertEqual(len(want), 1)
        d = os.path.join(self.tmp.name, "long_val_stopped")
        p = subprocess.Popen(cmd(d), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        metrics_path = os.path.join(d, "metrics.jsonl")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # step 4's training row: its validation has begun
            if os.path.exists(metrics_path) and any("loss" in m and m["step"] == 4 for m in standing(d)):
                break
            time.sleep(0.01)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err[-3000:])
        self.assertIn("stopped after step 4", err)
        self.assertEqual([m for m in standing(d) if "val_loss" in m], [], "the validation was not cancelled")
        r = subprocess.run(cmd(d), capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual([m["val_loss"] for m in standing(d) if "val_loss" in m], want)
        with open(os.path.join(d, "status.json")) as f:
            self.assertEqual(json.load(f)["state"], "finished")
        # Resuming again owes nothing: no second row.
        r = subprocess.run(cmd(d), capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual(len([m for m in standing(d) if "val_loss" in m]), 1)

    def test_a_resume_that_changes_the_global_batch_says_so(self):
        # Any layout resumes any other; a dp changed alone doubled the global batch silently.
        d = os.path.join(self.tmp.name, "batch_change")
        self.train(d, "--steps=2", "--checkpoint_every=2")
        r = self.train(d, "--steps=4", "--checkpoint_every=2", np=2)  # dp 2 x grad_accum 2 x micro_batch 4
        self.assertIn("the global batch is now 16 windows per step (dp 2 x grad_accum 2 x micro_batch 4); "
                      "the run started with 8", r.stderr)
        r = self.train(d, "--steps=6", "--checkpoint_every=2", "--grad_accum=1", np=2)  # 2 x 1 x 4: the run's 8
        self.assertIn("resumed from", r.stderr)
        self.assertNotIn("global batch", r.stderr)

    def test_a_run_dir_inside_another_runs_checkpoints_is_refused(self):
        # The outer run's retention would delete the nested run unsaid.
        d = os.path.join(self.tmp.name, "outer")
        self.train(d, "--steps=2", "--checkpoint_every=2")
        ckpts = os.path.join(d, "checkpoints")
        for nested in (ckpts, os.path.join(ckpts, "step_00000002"), os.path.join(ckpts, "step_00000002", "run")):
            before = snapshot(d)
            r = self.train(nested, "--steps=2", check=False)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(f"--run_dir={nested} lies inside the checkpoint directory", r.stderr)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertEqual(snapshot(d), before)
        self.assertFalse(os.path.exists(os.path.join(ckpts, "step_00000002", "run")))

    def test_a_resume_over_a_corrupt_run_json_says_its_checks_are_skipped(self):
        d = os.path.join(self.tmp.name, "corrupt_run_json")
        self.train(d, "--steps=2", "--checkpoint_every=2")
        self.assertFalse(os.path.exists(os.path.join(d, "run.json.tmp")))
        for steps, text in ((3, '{"bad'), (4, "")):
            with open(os.path.join(d, "run.json"), "w") as f:
                f.write(text)
            r = self.train(d, f"--steps={steps}", "--checkpoint_every=2", "--lr=0.5")
            self.assertEqual(r.stderr.count("run.json cannot be read"), 1, r.stderr)
            self.assertIn(f"{d}/run.json cannot be read: not JSON; the resume's seq_len/batch/recipe checks are skipped",
                          r.stderr)

    def mount_tmpfs(self, name, size):
        """A tmpfs of `size` at <tmp>/`name` to fill (the caller unmounts it); the test is
        skipped, saying so, where it cannot be mounted (needs root with CAP_SYS_ADMIN)."""
        mount = os.path.join(self.tmp.name, name)
        os.makedirs(mount)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mount], capture_output=True, text=True)
        if r.returncode != 0:
            msg = f"cannot mount a tmpfs to fill (needs root with CAP_SYS_ADMIN): {r.stderr.strip()}"
            print(f"SKIPPED: {msg}", file=sys.stderr)
            self.skipTest(msg)
        return mount

    def test_a_save_on_a_full_disk_names_the_cause_and_keeps_the_previous_checkpoint(self):
        mount = self.mount_tmpfs("small_fs", "4m")
        try:
            for np, flags in [(1, []), (2, ["--pp=2"])]:
                with self.subTest(np=np):
                    self.check_full_disk(os.path.join(mount, f"run_np{np}"), np, flags)
        finally:
            subprocess.run(["umount", mount], check=False)

    def test_a_full_disk_between_checkpoints_names_the_cause(self):
        # metrics.jsonl and the TensorBoard events grow every step: the write that meets the
        # full disk says so (it said only "write failed").
        mount = self.mount_tmpfs("tiny_fs", "64k")
        try:
            d = os.path.join(mount, "run")
            r = self.train(d, "--steps=5000", "--checkpoint_every=0", "--eval_every=0", check=False)
            self.assertEqual(r.returncode, 1, r.stderr[-3000:])
            lines = [l for l in r.stderr.splitlines() if l.startswith("multiscreen")]
            self.assertEqual(len(lines), 1, r.stderr)
            self.assertRegex(lines[0], r"^multiscreen train: " + d + r"/(metrics\.jsonl|tb/events\.out\.tfevents\.\S+): "
                             r"(write|flush) failed: No space left on device \(\d+ bytes free in ")
        finally:
            subprocess.run(["umount", mount], check=False)

    def check_full_disk(self, d, np, flags):
        mount = os.path.dirname(d)
        self.train(d, *flags, "--steps=5", "--checkpoint_every=5", np=np)
        ckpts = os.path.join(d, "checkpoints")
        good = snapshot(os.path.join(ckpts, "step_00000005"))
        checkpoint_bytes = sum(os.path.getsize(os.path.join(ckpts, "step_00000005", n))
                               for n in os.listdir(os.path.join(ckpts, "step_00000005")))
        # Fill the file system but for a quarter of a checkpoint: room for
        # five steps' metrics, not for the next checkpoint.
        filler = os.path.join(mount, "filler")
        st = os.statvfs(mount)
        with open(filler, "wb") as f:
            f.write(b"\0" * (st.f_bavail * st.f_frsize - checkpoint_bytes // 4))
        try:
            r = self.train(d, *flags, "--steps=10", "--checkpoint_every=5", np=np, check=False)
        finally:
            os.remove(filler)
        # Exit code 1 (no crash on the way out), one line, from rank 0 only.
        self.assertEqual(r.returncode, 1, r.stderr[-3000:])
        lines = [l for l in r.stderr.splitlines() if l.startswith("multiscreen")]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("multiscreen train: "), lines[0])
        self.assertIn("No space left on device", lines[0])
        self.assertRegex(lines[0], r"the checkpoint needs about \d+ bytes, \d+ are free in " + ckpts)
        self.assertEqual([n for n in os.listdir(ckpts) if n.startswith(".tmp-")], [])
        self.assertEqual(snapshot(os.path.join(ckpts, "step_00000005")), good)
        with open(os.path.join(ckpts, "latest")) as f:
            self.assertEqual(f.read().strip(), "step_00000005")
        r = self.train(d, *flags, "--steps=10", "--checkpoint_every=5", np=np)
        self.assertIn("resumed from", r.stderr)
        self.assertIn("step_00000005", r.stderr)

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--mpirun", default="mpirun")
    args, rest = p.parse_known_args()
    BIN, SRC, MPIRUN = os.path.abspath(args.multiscreen), os.path.abspath(args.source), args.mpirun
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
