#!/usr/bin/python3
"""launch/train.sbatch on a real one-node Slurm cluster (issue 8; ctest label e2e).

Starts munged, slurmctld and slurmd on localhost (tests/launch/slurm_cluster.py:
a fresh key and slurm.conf in a temporary directory; all stopped afterwards,
whatever happens), then submits the sbatch script for a tiny 2-task training
job (tiny_psi4, tp=2, srun --mpi=pmix):
  1. uninterrupted: it finishes, with every step's metrics, the last checkpoint
     under the job's layout, status.json "finished", and each rank's launcher
     line in the job's log;
  2. `scancel --signal=USR1` mid-run: the tasks stop after their step with a
     checkpoint, the script requeues the job, the requeued job (same flags)
     resumes from `latest` and ends with exactly the losses of run 1;
  3. the time limit: with --time=1 and --signal=USR1@20 Slurm itself signals
     the tasks, and the job is stopped with a checkpoint and requeued;
  4. preemption: a job in a higher-priority partition preempts it (SIGTERM),
     the tasks stop with a checkpoint, Slurm requeues it (PreemptMode=REQUEUE),
     and it resumes and ends with exactly the losses of run 1;
  5. a plain `scancel` stops it with a checkpoint and it stays cancelled;
  6. `srun -n 2 --mpi=none` (no PMIx: two one-process MPI worlds) is refused by
     each task, naming the cause, before either touches the run directory.
If the cluster cannot start (no munge, no slurm-wlm, not root) the test fails
with the reason and the daemons' logs.

Run: /usr/bin/python3 tests/launch/slurm_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import json
import os
import re
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from slurm_cluster import SlurmCluster  # noqa: E402

BIN = SRC = None
STEPS = 800  # about 3-6 s for 2 ranks on 2 cores: long enough to be interrupted mid-run
TRAIN_ARGS = "--checkpoint_every=200 --eval_every=200"


def read_metrics(run_dir):
    """{(step, 'train'|'val'): loss} of the standing rows (tools/metrics.py skips
    a line being written and rows superseded by a resume)."""
    sys.path.insert(0, os.path.join(SRC, "tools"))
    from metrics import read_metrics as standing_rows
    try:
        rows = standing_rows(os.path.join(run_dir, "metrics.jsonl"))
    except FileNotFoundError:
        return {}
    return {(m["step"], "val" if "val_loss" in m else "train"): m.get("loss", m.get("val_loss")) for m in rows}


def read_json(path):
    with open(path) as f:
        return json.load(f)


class SlurmLaunchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.started = time.time()
        cls.cluster = SlurmCluster()
        try:
            cls.cluster.start()  # raises ClusterError with the reason: the test fails, never skips
            print(f"cluster up in {time.time() - cls.started:.1f}s ({cls.cluster.dir})", file=sys.stderr)
            # Data, run directories and job logs inside the cluster's directory: removed with it.
            cls.work = os.path.join(cls.cluster.dir, "work")
            os.mkdir(cls.work)
            sys.path.insert(0, os.path.join(SRC, "tests", "trainer"))
            import train_e2e_test
            train_e2e_test.SRC = SRC
            cls.data = os.path.join(cls.work, "data")
            train_e2e_test.synthetic_shards(cls.data)
        except BaseException:
            cls.cluster.stop()  # tearDownClass does not run when setUpClass fails
            raise
        cls.reference = None

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        print(f"total {time.time() - cls.started:.1f}s", file=sys.stderr)

    def submit(self, name, steps=STEPS, sbatch_args=()):
        """Submits launch/train.sbatch as docs/parallelism.md "Slurm" shows; returns (job id, run dir, log path)."""
        run_dir = os.path.join(self.work, name)
        log = os.path.join(self.work, f"{name}.out")
        env = {"CONFIG": os.path.join(SRC, "configs", "train", "tiny_test.textproto"), "DATA": self.data,
               "RUN_DIR": run_dir, "TP": "2", "STEPS": str(steps), "TRAIN_ARGS": TRAIN_ARGS, "MULTISCREEN": BIN,
               "OMP_NUM_THREADS": "1"}
        # The node has 2 CPUs and 2 (stand-in) GPUs: 2 tasks of one CPU and one GPU each.
        job = self.cluster.sbatch(["--job-name", name, "--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=2",
                                   "--cpus-per-task=1", f"--output={log}", *sbatch_args,
                                   os.path.join(SRC, "launch", "train.sbatch")], env=env, cwd=self.work)
        return job, run_dir, log

    def wait_done(self, job, timeout_s, restarts=0):
        """Waits for an end state; a COMPLETED seen before the expected requeues is not one."""
        ended = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")
        return self.cluster.wait(job, lambda j: j["JobState"] in ended and
                                 (j["JobState"] != "COMPLETED" or int(j.get("Restarts", 0)) >= restarts), timeout_s)

    def job_log(self, log):
        with open(log, errors="replace") as f:
            return f.read()

    def assert_finished(self, rec, run_dir, log):
        text = self.job_log(log)
        self.assertEqual((rec["JobState"], rec["ExitCode"]), ("COMPLETED", "0:0"), text[-3000:])
        self.assertEqual(read_json(os.path.join(run_dir, "status.json")),
                         {"state": "finished", "step": STEPS, "steps": STEPS})
        with open(os.path.join(run_dir, "checkpoints", "latest")) as f:
            latest = f.read().strip()
        self.assertEqual(latest, f"step_{STEPS:08d}")
        manifest = read_json(os.path.join(run_dir, "checkpoints", latest, "manifest.json"))
        self.assertEqual(manifest["step"], STEPS)
        self.assertEqual(manifest["layout"], {"tp": 2, "pp": 1, "dp": 1, "zero": 0})
        for shard in ("shard_pp0_tp0.h5", "shard_pp0_tp1.h5"):
            self.assertTrue(os.path.getsize(os.path.join(run_dir, "checkpoints", latest, shard)) > 0)
        return text

    def reference_run(self):
        """Run 1, once: the uninterrupted job the others are compared with."""
        if SlurmLaunchTest.reference is None:
            t = time.time()
            job, run_dir, log = self.submit("straight")
            rec = self.wait_done(job, 90)
            print(f"uninterrupted job {job}: {time.time() - t:.1f}s", file=sys.stderr)
            SlurmLaunchTest.reference = (job, rec, run_dir, log)
        return SlurmLaunchTest.reference

    def test_1_a_two_task_job_trains_checkpoints_and_logs_its_layout(self):
        job, rec, run_dir, log = self.reference_run()
        text = self.assert_finished(rec, run_dir, log)
        self.assertEqual(rec["Restarts"], "0")
        m = read_metrics(run_dir)
        self.assertEqual(sorted(s for s, kind in m if kind == "train"), list(range(1, STEPS + 1)))
        self.assertEqual(sorted(s for s, kind in m if kind == "val"), list(range(200, STEPS + 1, 200)))
        self.assertLess(m[(STEPS, "train")], 0.5 * m[(1, "train")])
        # The layout once (rank 0), and one launcher line per rank with what Slurm and PMIx said.
        self.assertEqual(text.count("process grid: 2 ranks, tp=2 pp=1 dp=1"), 1, text[-3000:])
        for rank in (0, 1):
            line = re.search(rf"\[I\] rank {rank} of 2: dp 0, pp 0, tp {rank} \(local rank {rank} of 2\), "
                             rf"device (cpu|cuda:\d); launcher: (.*)", text)
            self.assertIsNotNone(line, f"no launcher line for rank {rank}:\n{text[-3000:]}")
            for var in (f"PMIX_RANK={rank}", f"SLURM_JOB_ID={job}", f"SLURM_PROCID={rank}", "SLURM_NTASKS=2",
                        f"SLURM_LOCALID={rank}"):
                self.assertIn(var, line.group(2).split(), line.group(0))
        self.assertIn("run finished", text)

    def wait_for_step(self, job, run_dir, log, step, timeout_s=60):
        deadline = time.time() + timeout_s
        while max((s for s, _ in read_metrics(run_dir)), default=0) < step:
            self.assertLess(time.time(), deadline, f"job {job} logged no step {step} in {timeout_s} s:\n"
                            f"{self.job_log(log)[-3000:] if os.path.exists(log) else self.cluster.job(job)}")
            time.sleep(0.02)

    def assert_stopped_and_resumed(self, job, run_dir, text):
        """The log shows one stop with a checkpoint at some step k mid-run, then a resume from it; returns k."""
        stop = re.findall(r"signal received: stopped after step (\d+) with a checkpoint saved", text)
        self.assertEqual(len(stop), 1, text[-3000:])
        k = int(stop[0])
        self.assertTrue(30 <= k < STEPS, f"stopped at step {k}, not mid-run")
        self.assertIn(f'"state":"stopped","step":{k},"steps":{STEPS}', text)
        self.assertIn(f"job {job} (restart 1)", text)
        self.assertIn(f"resumed from {run_dir}/checkpoints/step_{k:08d} at step {k}", text)
        return k

    def assert_same_losses_as_the_uninterrupted_run(self, run_dir):
        _, _, ref_dir, _ = self.reference_run()
        ref, got = read_metrics(ref_dir), read_metrics(run_dir)
        self.assertEqual(sorted(got), sorted(ref))
        for key in sorted(ref):
            self.assertEqual(got[key], ref[key], key)  # exactly: the resume is bit-identical
        self.assertEqual(got[(STEPS, "train")], ref[(STEPS, "train")])

    def test_2_a_signalled_job_is_requeued_resumes_and_ends_on_the_same_loss(self):
        self.reference_run()
        t = time.time()
        job, run_dir, log = self.submit("signalled")
        self.wait_for_step(job, run_dir, log, 30)
        self.cluster.run(["scancel", "--signal=USR1", job])  # to the tasks of every step, as --signal=USR1@T does
        signalled = time.time()
        rec = self.wait_done(job, 90, restarts=1)
        print(f"signalled job {job}: {signalled - t:.1f}s to step 30, {time.time() - signalled:.1f}s to stop, "
              f"requeue and finish", file=sys.stderr)
        text = self.assert_finished(rec, run_dir, log)
        self.assertEqual(rec["Restarts"], "1", text[-3000:])
        self.assert_stopped_and_resumed(job, run_dir, text)
        self.assertIn(f"requeueing job {job}", text)
        self.assert_same_losses_as_the_uninterrupted_run(run_dir)

    def test_3_the_time_limit_signal_stops_the_tasks_and_requeues_the_job(self):
        # slurmctld's time-limit pass (every 30 s) sends the signal once
        # now + 30 s ≥ end - 20 s, i.e. at the first pass 10 s or more after the start
        # (never during start-up), and well before the 60 s limit.
        t = time.time()
        job, run_dir, log = self.submit("time_limit", steps=10**6, sbatch_args=["--time=1", "--signal=USR1@20"])
        rec = self.cluster.wait(job, lambda j: int(j.get("Restarts", 0)) >= 1 or
                                j["JobState"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), 75)
        print(f"time-limit job {job}: requeued after {time.time() - t:.1f}s", file=sys.stderr)
        self.cluster.run(["scancel", job])
        text = self.job_log(log)
        self.assertEqual(rec["Restarts"], "1", f"{rec}\n{text[-3000:]}")
        self.assertRegex(text, r"signal received: stopped after step \d+ with a checkpoint saved")
        status = re.search(r'run stopped with a checkpoint: (\{.*?\})', text)
        self.assertIsNotNone(status, text[-3000:])
        k = json.loads(status.group(1))["step"]
        self.assertTrue(os.path.isdir(os.path.join(run_dir, "checkpoints", f"step_{k:08d}")))
        self.assertIn(f"requeueing job {job}", text)


    def test_4_a_preempted_job_comes_back_by_itself_and_ends_on_the_same_loss(self):
        self.reference_run()
        t = time.time()
        job, run_dir, log = self.submit("preempted")
        self.wait_for_step(job, run_dir, log, 30)
        # Freeze the tasks first, so that the preemption lands mid-run however long Slurm
        # takes to decide it (Slurm sends SIGCONT along with SIGTERM when it ends a job).
        self.cluster.run(["scancel", "--signal=STOP", job])
        # Both CPUs for a job of the higher-priority partition: Slurm preempts ours
        # (SIGTERM to its tasks and its batch shell) and, PreemptMode=REQUEUE, requeues it.
        urgent = self.cluster.sbatch(["--partition=urgent", "--ntasks=2", "--cpus-per-task=1", "--output=/dev/null",
                                      "--wrap", "sleep 1"], cwd=self.work)
        rec = self.wait_done(job, 90, restarts=1)
        print(f"preempted job {job}: {time.time() - t:.1f}s in all", file=sys.stderr)
        text = self.assert_finished(rec, run_dir, log)
        self.assertEqual(rec["Restarts"], "1", text[-3000:])
        self.assertIn("DUE TO PREEMPTION", text)
        self.assert_stopped_and_resumed(job, run_dir, text)
        self.assertIn("not requeued here", text)  # Slurm did it
        self.assertNotIn("requeueing job", text)
        self.assertEqual(self.cluster.job(urgent)["JobState"], "COMPLETED")
        self.assert_same_losses_as_the_uninterrupted_run(run_dir)

    def test_5_a_cancelled_job_stops_with_a_checkpoint_and_stays_cancelled(self):
        job, run_dir, log = self.submit("cancelled", steps=10**6)
        self.wait_for_step(job, run_dir, log, 30)
        self.cluster.run(["scancel", job])
        rec = self.wait_done(job, 60)
        time.sleep(2)  # a requeue, if there were one, would show by now
        rec = self.cluster.job(job)
        text = self.job_log(log)
        self.assertEqual((rec["JobState"], rec["Restarts"]), ("CANCELLED", "0"), text[-3000:])
        status = read_json(os.path.join(run_dir, "status.json"))
        self.assertEqual(status["state"], "stopped")
        self.assertTrue(os.path.isdir(os.path.join(run_dir, "checkpoints", f"step_{status['step']:08d}")))
        self.assertIn("not requeued here", text)

    def test_6_srun_without_pmix_is_refused_by_each_task_naming_the_cause(self):
        # --mpi=none makes each task a one-process MPI world: both would train on one
        # run directory, and the second would only stop on its lock without saying why.
        run_dir = os.path.join(self.work, "no_pmix")
        r = self.cluster.run(["srun", "-n", "2", "--cpus-per-task=1", "--mpi=none", BIN, "train",
                              f"--config={os.path.join(SRC, 'configs', 'train', 'tiny_test.textproto')}",
                              f"--data={self.data}", f"--run_dir={run_dir}", "--steps=5"],
                             env={"OMP_NUM_THREADS": "1"}, check=False, timeout=120, cwd=self.work)
        self.assertNotEqual(r.returncode, 0, r.stderr)
        refused = [l for l in r.stderr.splitlines() if "but MPI sees" in l]
        self.assertEqual(len(refused), 2, r.stderr)
        for line in refused:
            self.assertRegex(line, r"^multiscreen train: SLURM_(STEP_NUM_TASKS|NTASKS)=2 but MPI sees 1 process: "
                                   r"srun needs --mpi=pmix")
        self.assertFalse(os.path.exists(run_dir))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    args, rest = p.parse_known_args()
    BIN, SRC = os.path.abspath(args.multiscreen), os.path.abspath(args.source)

    def interrupted(*_):  # ends unittest at once; atexit still stops the cluster
        raise KeyboardInterrupt("slurm_test: SIGTERM")
    signal.signal(signal.SIGTERM, interrupted)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
