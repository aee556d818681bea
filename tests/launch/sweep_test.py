#!/usr/bin/python3
"""`multiscreen sweep` end to end on tiny models (issue 17; ctest label e2e).

A sweep of three tiny models (Multiscreen Psi = 2 and 3, the tiny Transformer) x three token
budgets on the synthetic shards of tests/trainer, one run per model serving every budget:
  1. bad sweep files are refused in one line naming the file: an empty model axis, an empty
     token axis, a Transformer whose N_H does not divide d_E, a tp that does not divide a
     model's N_H, a budget smaller than one step;
  2. `sweep plan` lists every run with parameters, FLOPs and a measured time estimate;
  3. `sweep run --local --jobs=2` trains them all (the reference);
  4. the same sweep in another root survives a `kill -9` of the runner (its trainer dies with
     it and the run reads "interrupted") and of one trainer (that run reads "failed" with the
     signal, the others finish), and two more `sweep run`s finish it with exactly the
     reference's training and validation losses at every step;
  4b. a sweep with a run whose fp16 loss overflows to NaN (its trainer stops) finishes with that
     run diverged, not failed, and the other run done;
  5. `sweep fit --json` and `sweep report` read the finished runs; `sweep run --slurm
     --dry_run` prints the job-array script;
  6. relative paths resolve against the current directory; fit, report and a dry run create no
     root; repeated grid values and budgets off whole steps are named; changing the budgets of
     one run per model resumes the run (other changes are still refused).
Run: /usr/bin/python3 tests/launch/sweep_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

BIN = SRC = None
WORK = None
BUDGETS = (1280, 2560, 64000)  # 20, 40 and 1000 steps of 4 x 16 tokens
RUNS = ("psi2_lr0.01_s1", "psi3_lr0.01_s1", "tiny_transformer_train_lr0.01_s1")


def sweep_text(root, data, extra="", tokens=BUDGETS, models=None):
    models = models if models is not None else ('psi: [2, 3]\npsi_template { d_k: 8 d_v: 16 vocab: 97 w_th: 16 }\n'
                                                'model_files: "tiny_transformer_train"\n')
    return (f'base_config {{\n  micro_batch: 4 seq_len: 16 precision: FP32\n  optimizer {{ lr: 0.01 }}\n'
            f'  schedule {{ kind: WARMUP_CONSTANT warmup_steps: 5 }}\n  checkpoint {{ every: 100 keep_last: 2 }}\n'
            f'  eval {{ batches: 2 }}\n  logging {{ console_every: 100 }}\n{extra}}}\n'
            f'data: "{data}"\n{models}'
            + "".join(f"tokens: {t}\n" for t in tokens) + f'seeds: 1\nroot: "{root}"\n')


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def sweep(*args, check=True, timeout=600):
    r = subprocess.run([BIN, "sweep", *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"sweep {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def losses(run_dir):
    """{(step, 'train'|'val'): loss} of the standing rows."""
    sys.path.insert(0, os.path.join(SRC, "tools"))
    from metrics import read_metrics
    return {(m["step"], "val" if "val_loss" in m else "train"): m.get("loss", m.get("val_loss"))
            for m in read_metrics(os.path.join(run_dir, "metrics.jsonl"))}


def metrics_rows(run_dir):
    sys.path.insert(0, os.path.join(SRC, "tools"))
    from metrics import read_metrics
    return read_metrics(os.path.join(run_dir, "metrics.jsonl"))


def last_step(run_dir):
    try:
        return max((s for s, _ in losses(run_dir)), default=0)
    except FileNotFoundError:
        return 0


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


def alive(pid):
    """Whether `pid` runs (a zombie waiting for its parent does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def status_lines(sweep_file):
    out = sweep("status", f"--sweep={sweep_file}").stdout
    return {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0] in RUNS}


def wait_until(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class SweepTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.join(SRC, "tests", "trainer"))
        import train_e2e_test
        train_e2e_test.SRC = SRC
        cls.data = os.path.join(WORK, "data")
        train_e2e_test.synthetic_shards(cls.data)
        cls.reference_file = write(os.path.join(WORK, "reference.textproto"), sweep_text(os.path.join(WORK, "reference"), cls.data))
        cls.reference = None

    def reference_losses(self):
        if SweepTest.reference is None:
            sweep("run", f"--sweep={self.reference_file}", "--local", "--jobs=2", "--threads=1")
            SweepTest.reference = {name: losses(os.path.join(WORK, "reference", name)) for name in RUNS}
        return SweepTest.reference

    def test_bad_sweep_files_are_refused_in_one_line(self):
        bad = {
            "no_models": sweep_text("r", self.data, models=""),
            "no_tokens": sweep_text("r", self.data, tokens=()),
            "heads": sweep_text("r", self.data, models="models { name: \"t\" family: TRANSFORMER n_layers: 2 n_heads: 3 d_e: 8 vocab: 97 }\n"),
            "tp": sweep_text("r", self.data, extra="  parallel { tp: 2 }\n", models="psi: 3\npsi_template { vocab: 97 }\n"),
            "small_budget": sweep_text("r", self.data, tokens=(32, 1280)),
        }
        expect = {"no_models": "model axis is empty", "no_tokens": "token axis is empty", "heads": "n_heads = 3 times",
                  "tp": "does not divide N_H", "small_budget": "smaller than one step"}
        for name, text in bad.items():
            path = write(os.path.join(WORK, f"bad_{name}.textproto"), text)
            for sub in ("plan", "run"):
                r = sweep(sub, f"--sweep={path}", *(["--local"] if sub == "run" else []), check=False)
                self.assertNotEqual(r.returncode, 0, f"{name} {sub}: {r.stdout}")
                lines = r.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, f"{name}: {r.stderr}")
                self.assertIn(path, lines[0])
                self.assertIn(expect[name], lines[0])
            self.assertFalse(os.path.exists(os.path.join(os.getcwd(), "r")), "a refused sweep created its root")

    def test_too_few_held_out_windows_are_refused_before_any_run_starts(self):
        # eval.windows past what the validation shard holds (8,800 tokens: 549 windows of
        # 16 + 1): every run's trainer would refuse it at start; plan and run refuse it now,
        # in one line naming the sweep file and the numbers, and no run directory is made.
        root = os.path.join(WORK, "few_windows")
        path = write(os.path.join(WORK, "few_windows.textproto"),
                     sweep_text(root, self.data).replace("eval { batches: 2 }", "eval { windows: 100000 }"))
        for sub in ("plan", "run"):
            r = sweep(sub, f"--sweep={path}", *(["--local"] if sub == "run" else []), check=False)
            self.assertNotEqual(r.returncode, 0, f"{sub}: {r.stdout}")
            lines = r.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, f"{sub}: {r.stderr}")
            self.assertIn(f"{path}: every run's trainer would refuse its validation data at start: ", lines[0])
            self.assertIn("8800 tokens make 549 validation windows of seq_len + 1 = 17, fewer than eval.windows = 100000",
                          lines[0])
            self.assertFalse(os.path.exists(root), f"{sub} made the root")

    def test_held_out_ids_past_a_models_vocabulary_are_refused_before_any_run_starts(self):
        # Field report: plan opened the validation windows but did not scan their ids as the
        # trainer does at start (trainer/validation_data.h): the shared scan, with the grid's
        # smallest vocabulary (50; the held-out ids reach 96), refuses in plan and run alike.
        root = os.path.join(WORK, "val_vocab")
        path = write(os.path.join(WORK, "val_vocab.textproto"),
                     sweep_text(root, self.data, tokens=(1280,),
                                models='models { name: "big" psi: 2 d_k: 8 d_v: 16 vocab: 97 w_th: 16 }\n'
                                       'models { name: "ms" psi: 2 d_k: 8 d_v: 16 vocab: 50 w_th: 16 }\n'))
        for sub in ("plan", "run"):
            r = sweep(sub, f"--sweep={path}", *(["--local"] if sub == "run" else []), check=False)
            self.assertNotEqual(r.returncode, 0, f"{sub}: {r.stdout}")
            lines = r.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, f"{sub}: {r.stderr}")
            self.assertRegex(lines[0], rf"^multiscreen sweep {sub}: {re.escape(path)}: run ms_lr0.01_s1's trainer would refuse "
                                       rf"its validation data at start: {re.escape(self.data)}/val_000000.bin: token \d+: "
                                       r"validation window \d+ holds token id (5\d|[6-9]\d), outside the vocabulary V = 50 "
                                       r"of model ms")
            self.assertFalse(os.path.exists(root), f"{sub} made the root")

    def test_a_run_refused_at_start_is_not_offered_a_retry(self):
        # A refusal `sweep plan` cannot see (the training data holds token ids past the
        # model's vocabulary of 50, the held-out data none): the trainer exits before its
        # first step. The runner records it as refused at start, not retryable, and does not
        # offer a retry.
        import train_e2e_test
        data = os.path.join(WORK, "refused_data")
        train_e2e_test.synthetic_shards(data)
        train_e2e_test.write_tokens(os.path.join(data, "val_000000.bin"), [i % 50 for i in range(2000)])
        root = os.path.join(WORK, "refused")
        path = write(os.path.join(WORK, "refused.textproto"),
                     sweep_text(root, data, tokens=(1280,),
                                models='models { name: "ms" psi: 2 d_k: 8 d_v: 16 vocab: 50 w_th: 16 }\n'))
        r = sweep("run", f"--sweep={path}", "--local", "--threads=1", check=False)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        last = r.stderr.strip().splitlines()[-1]
        self.assertIn("1 of 1 runs failed (see `sweep status`); 1 of them refused at start, which a retry meets again",
                      last)
        self.assertNotIn("retries", last)
        with open(os.path.join(root, "ms_lr0.01_s1", "sweep_failed.json")) as f:
            failed = json.load(f)
        self.assertIs(failed["retryable"], False)
        self.assertRegex(failed["reason"], r"^refused at start, exit status 1: multiscreen train: .*holds token id \d+, "
                                           r"outside the vocabulary V = 50 of model ms")
        self.assertRegex(sweep("status", f"--sweep={path}").stdout, r"ms_lr0.01_s1 +failed .*refused at start")

    def test_plan_lists_every_run_with_counts_and_a_measured_estimate(self):
        out = sweep("plan", f"--sweep={self.reference_file}", "--jobs=2", "--threads=1").stdout
        for name in RUNS:
            row = next(line for line in out.splitlines() if line.startswith(name))
            self.assertRegex(row, r"\*?\d+(\.\d+)?[smh]\s*$", row)  # a time measured by bench train (*: from FLOPs)
            self.assertIn("1000", row)  # the run's steps
        self.assertIn("one run per model", out)
        self.assertRegex(out, r"total: \S+ model FLOPs \(trainer/flops.h\); \S+ of training, about \S+ wall with --jobs=2 \(1 threads each")
        # bench train times the Transformer too (issue 18): every estimate is measured, none marked *.
        self.assertNotRegex(next(line for line in out.splitlines() if line.startswith(RUNS[2])), r"\*\S+\s*$")
        params = subprocess.run([BIN, "params", "--model=tiny_transformer_train", "--json"], capture_output=True, text=True, check=True)
        total = json.loads(params.stdout)["total"]
        self.assertIn(str(total) if total < 1000 else f"{total / 1000:.3g}k", out)

    def test_kill9_of_the_runner_and_of_one_run_resumes_to_the_same_losses(self):
        reference = self.reference_losses()
        root = os.path.join(WORK, "killed")
        path = write(os.path.join(WORK, "killed.textproto"), sweep_text(root, self.data))
        # 1. kill -9 the runner while its first run trains: the trainer dies with it.
        runner = subprocess.Popen([BIN, "sweep", "run", f"--sweep={path}", "--local", "--jobs=1", "--threads=1"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        first = os.path.join(root, RUNS[0])
        wait_until(lambda: 300 <= last_step(first) < 900 or runner.poll() is not None, 300, "the first run at step 300")
        self.assertIsNone(runner.poll(), "the runner ended before it could be killed")
        trainers = children(runner.pid)
        runner.kill()
        runner.communicate()
        wait_until(lambda: all(not alive(p) for p in trainers),
                   30, "the trainer to die with its runner")
        st = status_lines(path)
        self.assertIn("interrupted", st[RUNS[0]])
        self.assertIn("pending", st[RUNS[1]])
        # 2. kill -9 one trainer: that run fails with the signal named, the others go on.
        runner = subprocess.Popen([BIN, "sweep", "run", f"--sweep={path}", "--local", "--jobs=1", "--threads=1"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        second = os.path.join(root, RUNS[1])
        wait_until(lambda: 300 <= last_step(second) < 900 or runner.poll() is not None, 300, "the second run at step 300")
        victims = children(runner.pid)
        self.assertEqual(len(victims), 1)
        os.kill(victims[0], signal.SIGKILL)
        out, err = runner.communicate(timeout=600)
        self.assertNotEqual(runner.returncode, 0)
        self.assertIn("1 of 3 runs failed (see `sweep status`); `sweep run` again retries them", err.strip().splitlines()[-1])
        st = status_lines(path)
        self.assertIn("done", st[RUNS[0]])
        self.assertRegex(st[RUNS[1]], r"failed .*killed by signal 9")
        self.assertIn("done", st[RUNS[2]])
        # 3. run again: it resumes the failed run and ends with the reference's losses.
        r = sweep("run", f"--sweep={path}", "--local", "--jobs=2", "--threads=1")
        self.assertIn("all 3 runs done", r.stdout)
        self.assertIn("1 to train", r.stderr)
        for name in RUNS:
            self.assertEqual(losses(os.path.join(root, name)), reference[name], name)
        self.assertIn("3 done", sweep("status", f"--sweep={path}").stdout)

    def test_a_diverging_run_is_an_outcome_and_the_others_go_on(self):
        # Issue 18: arms with their own lrs and optimizer fields; the tiny Transformer at lr 1
        # without clipping in fp16 overflows to a NaN loss and its trainer stops (exit 1,
        # "the run diverged"); the runner records it as diverged, not failed, finishes the
        # other run, exits 0, and a second `sweep run` does not retry it.
        root = os.path.join(WORK, "diverging")
        path = write(os.path.join(WORK, "diverging.textproto"),
                     'base_config { micro_batch: 4 seq_len: 16 precision: FP16 optimizer { lr: 0.01 grad_clip: 1.0 }\n'
                     '  schedule { kind: WARMUP_CONSTANT warmup_steps: 5 } eval { batches: 2 } logging { console_every: 100 } }\n'
                     f'data: "{self.data}"\n'
                     'arms { model_file: "tiny_transformer_train" lr: 1.0 optimizer { grad_clip: 0 } }\n'
                     'arms { model { name: "ms" psi: 2 d_k: 8 d_v: 16 vocab: 97 w_th: 16 } lr: 0.01 }\n'
                     f'tokens: 2560\nseeds: 1\nroot: "{root}"\n')
        r = sweep("run", f"--sweep={path}", "--local", "--jobs=2", "--threads=1")
        self.assertIn("all 2 runs ended: 1 done, 1 diverged", r.stdout)
        diverged = os.path.join(root, "tiny_transformer_train_lr1_s1")
        with open(os.path.join(diverged, "train.log")) as f:
            self.assertIn("non-finite steps in a row (max_nonfinite_steps = 10); the run diverged", f.read())
        self.assertFalse(os.path.exists(os.path.join(diverged, "sweep_failed.json")))
        self.assertTrue(any(m.get("loss") is None for m in metrics_rows(diverged)), "the test needs a NaN loss")
        out = sweep("status", f"--sweep={path}").stdout
        # The loss blows up from 4.6 to ~15, then NaN: judged on the first 10-step mean after
        # the warmup (launch/divergence.h), with the evidence, or on the NaN where it comes
        # first (step 9 with OpenBLAS's Haswell/Zen kernels, past 10 with its SkylakeX ones).
        self.assertRegex(out, r"tiny_transformer_train_lr1_s1 +diverged .*(mean loss [0-9.]+ over steps 1-10 is "
                              r"[0-9.]+ above the first step's loss [0-9.]+, more than the margin|non-finite loss at "
                              r"step [0-9]\b)")
        self.assertRegex(out, r"ms_lr0.01_s1 +done")
        self.assertIn("2 runs: 1 done, 1 diverged, 0 running, 0 failed", out)
        st = {x["name"]: x for x in json.loads(sweep("status", f"--sweep={path}", "--json").stdout)["runs"]}
        self.assertTrue(st["tiny_transformer_train_lr1_s1"]["diverged"])
        self.assertLessEqual(st["tiny_transformer_train_lr1_s1"]["diverged_step"], 10)
        self.assertFalse(st["ms_lr0.01_s1"]["diverged"])
        r = sweep("run", f"--sweep={path}", "--local", "--jobs=2", "--threads=1")
        self.assertIn("1 done, 1 diverged, 0 to train", r.stderr)

    def test_fit_report_and_slurm_script_read_the_finished_sweep(self):
        self.reference_losses()
        fit = json.loads(sweep("fit", f"--sweep={self.reference_file}", "--json", "--bootstrap=5").stdout)
        ms = fit["families"]["multiscreen"]
        self.assertEqual(ms["results"], 6)
        self.assertTrue(all(k in ms for k in ("E", "A", "alpha", "B", "beta")), ms)
        self.assertIn("joint_error", fit["families"]["transformer"])  # one model: no joint fit, and it says why
        with open(os.path.join(WORK, "reference", "results.csv")) as f:
            rows = f.read().strip().splitlines()
        self.assertEqual(rows[0].split(",")[:4], ["family", "params", "tokens", "loss"])
        self.assertEqual(len(rows), 1 + 9)
        ref = self.reference_losses()
        psi2_last = next(r for r in rows if RUNS[0] in r and ",64000," in r)
        self.assertAlmostEqual(float(psi2_last.split(",")[3]), ref[RUNS[0]][(1000, "val")], places=12)
        report = os.path.join(WORK, "report", "sweep.md")
        sweep("report", f"--sweep={self.reference_file}", f"--out={report}", "--bootstrap=5")
        with open(report) as f:
            text = f.read()
        self.assertIn("one run per model served every token budget", text)
        for fig in ("curves", "params", "frontier"):
            png = os.path.join(WORK, "report", "figures", f"sweep_{fig}.png")
            self.assertGreater(os.path.getsize(png), 5000)
            self.assertIn(f"figures/sweep_{fig}.png", text)
        # The job-array script: every run that is not done; none when all are.
        fresh = write(os.path.join(WORK, "fresh.textproto"), sweep_text(os.path.join(WORK, "fresh"), self.data))
        script = sweep("run", f"--sweep={fresh}", "--slurm", "--dry_run").stdout
        self.assertIn("#SBATCH --array=0-2", script)
        for name in RUNS:
            self.assertIn(os.path.join(WORK, "fresh", name), script)
        self.assertIn(os.path.join(SRC, "launch", "train.sbatch"), script)
        self.assertIn("all 3 runs are done", sweep("run", f"--sweep={self.reference_file}", "--slurm", "--dry_run").stdout)

    def test_relative_data_that_is_not_there_is_named_where_it_was_looked_for(self):
        # `sweep plan` of configs/sweeps/cpu_small.textproto from outside the repository said
        # "no validation data", not which data_cache/shards it had looked for.
        sub = os.path.join(WORK, "missing_data", "configs")
        os.makedirs(sub)
        elsewhere = os.path.join(WORK, "missing_data", "elsewhere")
        os.makedirs(elsewhere)
        f = write(os.path.join(sub, "s.textproto"), sweep_text("root", "data_cache/shards"))
        r = subprocess.run([BIN, "sweep", "plan", f"--sweep={f}", "--measure=false"], capture_output=True, text=True,
                           cwd=elsewhere, timeout=60)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(f"{f}: data: {os.path.join(elsewhere, 'data_cache', 'shards')} does not exist (relative paths in "
                      f"a sweep file are relative to the current directory, {elsewhere})", lines[0])
        # A file where a directory of train_*.bin and val_*.bin is wanted: named too.
        shard = write(os.path.join(elsewhere, "train_000000.bin"), "")
        f = write(os.path.join(sub, "file.textproto"), sweep_text("root", shard))
        r = sweep("plan", f"--sweep={f}", "--measure=false", check=False)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn(f"{f}: data: {shard} is a file, not a directory with val_*.bin: no validation data", r.stderr)

    def test_relative_paths_resolve_against_the_current_directory(self):
        """base, data and root alike: relative to where the command runs, not to the sweep file."""
        sub = os.path.join(WORK, "paths", "configs")
        os.makedirs(sub)
        write(os.path.join(sub, "base.textproto"), "micro_batch: 4 seq_len: 16 precision: FP32\n")
        models = 'psi: 2\npsi_template { d_k: 8 d_v: 16 vocab: 97 w_th: 16 }\n'
        # base named relative to the sweep file (the old rule): refused, with the path to give.
        old = write(os.path.join(sub, "old.textproto"),
                    'base: "base.textproto"\n' + sweep_text("rel_root", os.path.relpath(self.data, os.path.join(WORK, "paths")),
                                                              models=models, tokens=(1280,)))
        r = subprocess.run([BIN, "sweep", "plan", f"--sweep={old}", "--measure=false"], capture_output=True, text=True,
                           cwd=os.path.join(WORK, "paths"), timeout=60)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn(f"{old}: base: ", lines[0])
        self.assertIn(f"relative paths in a sweep file are relative to the current directory, {os.path.join(WORK, 'paths')}; "
                      f"relative to the sweep file's directory this is {os.path.join(sub, 'base.textproto')}", lines[0])
        # Relative to the current directory, all three resolve; root is not created by plan.
        new = write(os.path.join(sub, "new.textproto"), 'base: "configs/base.textproto"\n' + sweep_text(
            "rel_root", os.path.relpath(self.data, os.path.join(WORK, "paths")), models=models, tokens=(1280,)))
        r = subprocess.run([BIN, "sweep", "plan", f"--sweep={new}", "--measure=false"], capture_output=True, text=True,
                           cwd=os.path.join(WORK, "paths"), timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"under {os.path.join(WORK, 'paths', 'rel_root')} ", r.stdout)
        self.assertFalse(os.path.exists(os.path.join(WORK, "paths", "rel_root")))

    def test_fit_report_and_a_slurm_dry_run_create_no_root(self):
        root = os.path.join(WORK, "never_run")
        path = write(os.path.join(WORK, "never_run.textproto"), sweep_text(root, self.data))
        for args in (["fit"], ["fit", "--json"], ["report", f"--out={os.path.join(WORK, 'never_run.md')}"]):
            r = sweep(*args, f"--sweep={path}", check=False)
            self.assertNotEqual(r.returncode, 0, r.stdout)
            lines = r.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, r.stderr)
            self.assertIn(f"{root}: no such directory (the root of {path}): no run has started yet", lines[0])
            self.assertFalse(os.path.exists(root), args)
        script = sweep("run", f"--sweep={path}", "--slurm", "--dry_run").stdout
        self.assertIn("#SBATCH --array=0-2", script)
        self.assertIn(f"#SBATCH --output={root}/slurm/%A_%a.out\n", script)
        self.assertFalse(os.path.exists(root), "--dry_run")
        # A root with a space: sbatch does not unquote #SBATCH lines, so --output goes on
        # its command line (issue 31: it was written unquoted).
        spaced = os.path.join(WORK, "never run")
        path = write(os.path.join(WORK, "never_run_spaced.textproto"), sweep_text(spaced, self.data))
        script = sweep("run", f"--sweep={path}", "--slurm", "--dry_run").stdout
        self.assertNotIn("#SBATCH --output", script)
        self.assertIn(f"# sbatch --output='{spaced}/slurm/%A_%a.out' (on the command line", script)

    def test_grid_values_that_collide_or_do_not_fill_whole_steps_are_named(self):
        cases = {
            "seeds": (sweep_text("r", self.data).replace("seeds: 1\n", "seeds: [1, 2, 1]\n"), "seeds[2] = 1 repeats seeds[0]"),
            "lr": (sweep_text("r", self.data) + "lr: [0.01, 0.02, 0.01]\n", "lr[2] = 0.01 repeats lr[0] = 0.01"),
            "lr_digits": (sweep_text("r", self.data) + "lr: [0.01, 0.0100000001]\n",
                          "lr[1] = 0.0100000001 repeats lr[0] = 0.01 to the 6 digits of run names (both 0.01)"),
            "psi": (sweep_text("r", self.data, models='psi: [2, 3, 2]\npsi_template { d_k: 8 d_v: 16 vocab: 97 w_th: 16 }\n'),
                    "psi[2] = 2 repeats psi[0]"),
            "steps": (sweep_text("r", self.data, tokens=(1280, 2600)),
                      "tokens[1] = 2600 is not a whole number of steps of 64 tokens (micro_batch·grad_accum·seq_len): give 2560 or 2624"),
        }
        for name, (text, expect) in cases.items():
            path = write(os.path.join(WORK, f"collide_{name}.textproto"), text)
            r = sweep("plan", f"--sweep={path}", "--measure=false", check=False)
            self.assertNotEqual(r.returncode, 0, f"{name}: {r.stdout}")
            lines = r.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, f"{name}: {r.stderr}")
            self.assertIn(f"{path}: {expect}", lines[0], name)

    def test_two_runners_started_together_share_the_sweep_and_both_succeed(self):
        # Issue 43: each skipped the runs the other held and exited 1 ("were held by another
        # runner") though the sweep completed. Now each waits for the other's runs.
        root = os.path.join(WORK, "together")
        path = write(os.path.join(WORK, "together.textproto"), sweep_text(root, self.data, tokens=(1280,)))
        runners = [subprocess.Popen([BIN, "sweep", "run", f"--sweep={path}", "--local", "--jobs=3", "--threads=1"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [r.communicate(timeout=600) for r in runners]
        for r, (out, err) in zip(runners, outs):
            self.assertEqual(r.returncode, 0, err[-3000:])
            self.assertIn("all 3 runs done", out)
        said = "".join(err for _, err in outs)
        self.assertIn("is held): waiting for it", said)  # they did meet
        self.assertIn("3 done", sweep("status", f"--sweep={path}").stdout)
        for name in RUNS:  # each run trained once: 20 steps, no row superseded
            self.assertEqual(sorted(s for s, k in losses(os.path.join(root, name)) if k == "train"), list(range(1, 21)))

    def test_changing_the_budgets_of_one_run_per_model_resumes_the_run(self):
        """Adding a larger budget extends the run from its last checkpoint; dropping it again
        leaves a done run; any other change, or a new budget the run may have passed off its
        validation cadence, is still refused."""
        root = os.path.join(WORK, "budgets")
        models = 'psi: 2\npsi_template { d_k: 8 d_v: 16 vocab: 97 w_th: 16 }\n'
        path = os.path.join(WORK, "budgets.textproto")
        run_dir = os.path.join(root, "psi2_lr0.01_s1")
        write(path, sweep_text(root, self.data, models=models, tokens=(1280, 2560)))  # 20, 40 steps
        sweep("run", f"--sweep={path}", "--local", "--threads=1")
        first = losses(run_dir)
        self.assertEqual(max(s for s, _ in first), 40)
        with open(os.path.join(run_dir, "train.log")) as f:  # run.textproto, written first, is a run's file
            self.assertNotIn("holds files but no run", f.read())
        # A third, larger budget: the same run trains on from step 40 to 80.
        write(path, sweep_text(root, self.data, models=models, tokens=(1280, 2560, 5120)))
        r = sweep("run", f"--sweep={path}", "--local", "--threads=1")
        self.assertIn("the token budgets changed", r.stderr)
        with open(os.path.join(run_dir, "train.log")) as f:
            log = f.read()
        self.assertRegex(log, r"(?i)resum\w* .*step[ _]0*40")
        after = losses(run_dir)
        self.assertEqual(max(s for s, _ in after), 80)
        self.assertEqual({k: v for k, v in after.items() if k[0] <= 40}, first)  # steps 1..40 kept, not redone
        self.assertIn((80, "val"), after)
        self.assertIn("1 done", sweep("status", f"--sweep={path}").stdout)
        # Dropping it again: the longer run serves the two budgets; nothing trains.
        write(path, sweep_text(root, self.data, models=models, tokens=(1280, 2560)))
        r = sweep("run", f"--sweep={path}", "--local", "--threads=1")
        self.assertIn("1 done, 0 diverged, 0 to train", r.stderr)
        self.assertEqual(losses(run_dir), after)
        # A budget within the run's length but off its validation cadence (every 20 steps).
        write(path, sweep_text(root, self.data, models=models, tokens=(640, 1280, 2560)))
        r = sweep("run", f"--sweep={path}", "--local", "--threads=1", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("the budget of 640 tokens (step 10) lies within the run's old 40 steps but off its validation "
                      "cadence (every 20 steps)", r.stderr)
        # Anything else that differs is refused as before.
        write(path, sweep_text(root, self.data, models=models, tokens=(1280, 2560)).replace("warmup_steps: 5", "warmup_steps: 6"))
        r = sweep("run", f"--sweep={path}", "--local", "--threads=1", check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("run.textproto: differs from what", r.stderr)
        self.assertIn("the sweep file changed more than its token budgets", r.stderr)
        self.assertEqual(losses(run_dir), after)
        # The report of this one-model sweep (no joint fit possible) draws without matplotlib warnings.
        write(path, sweep_text(root, self.data, models=models, tokens=(1280, 2560)))
        r = sweep("report", f"--sweep={path}", f"--out={os.path.join(WORK, 'budgets.md')}", "--bootstrap=2")
        self.assertNotIn("legend", r.stderr)
        self.assertNotIn("Warning", r.stderr)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--multiscreen", required=True)
    ap.add_argument("--source", required=True)
    args, rest = ap.parse_known_args()
    BIN, SRC = os.path.abspath(args.multiscreen), os.path.abspath(args.source)
    WORK = tempfile.mkdtemp(prefix="sweep_test_")
    os.chdir(WORK)
    try:
        unittest.main(argv=[sys.argv[0]] + rest)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
