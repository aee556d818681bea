#!/usr/bin/python3
"""launch/mpirun_train.sh stops a job cleanly (issue 31 §6): SIGTERM (a cluster's
stop, `kill`) or SIGINT to the script reaches every rank as SIGUSR1, the run stops
after its step with a checkpoint, and the script exits 0 (mpirun itself answers SIGTERM
with exit 1 even when every rank stopped cleanly). Then the same command resumes.

Run: /usr/bin/python3 tests/launch/mpirun_train_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from train_e2e_test import SyntheticCorpusCase, read, steps_logged  # noqa: E402

BIN = SRC = None


class MpirunTrainTest(SyntheticCorpusCase):

    def launch(self, run_dir, steps, out):
        return subprocess.Popen(start_new_session=True, args=
            [os.path.join(SRC, "launch", "mpirun_train.sh"), "--ranks_per_node=2", f"--bin={BIN}", "--",
             f"--config={self.config}", f"--data={self.data}", f"--run_dir={run_dir}", f"--steps={steps}",
             "--eval_every=0"], stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, OMP_NUM_THREADS="1"))

    def stop_with(self, sig, group=False):
        """`sig` to the script, or with `group` to its whole process group (a terminal's
        Ctrl-C reaches every process of the foreground job, mpirun included)."""
        name = f"{sig.name}{'_group' if group else ''}"
        run_dir = os.path.join(self.tmp.name, f"run_{name}")
        log = os.path.join(self.tmp.name, f"{name}.log")
        with open(log, "w") as out:
            job = self.launch(run_dir, 100000, out)
            try:
                deadline = time.time() + 120
                while steps_logged(run_dir) < 1:
                    self.assertIsNone(job.poll(), read(log))
                    self.assertLess(time.time(), deadline, "no step logged in 120 s")
                    time.sleep(0.05)
                if group:
                    os.killpg(job.pid, sig)
                else:
                    job.send_signal(sig)
                rc = job.wait(timeout=60)
            finally:
                if job.poll() is None:
                    job.kill()
                    job.wait()
        text = read(log)
        self.assertEqual(rc, 0, text[-3000:])
        self.assertIn("signal received: stopped after step", text)
        with open(os.path.join(run_dir, "status.json")) as f:
            status = json.load(f)
        self.assertEqual(status["state"], "stopped")
        self.assertTrue(os.path.exists(os.path.join(run_dir, "checkpoints", "latest")))
        # The same command resumes from that step.
        with open(log, "w") as out:
            rc = self.launch(run_dir, status["step"] + 2, out).wait(timeout=120)
        text = read(log)
        self.assertEqual(rc, 0, text[-3000:])
        self.assertIn("resumed from", text.lower())

    def test_sigterm_to_the_script_stops_with_a_checkpoint_and_exit_0(self):
        self.stop_with(signal.SIGTERM)

    def test_sigint_to_the_script_stops_with_a_checkpoint_and_exit_0(self):
        self.stop_with(signal.SIGINT)

    def test_ctrl_c_at_a_terminal_stops_with_a_checkpoint_and_exit_0(self):
        self.stop_with(signal.SIGINT, group=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    args, rest = p.parse_known_args()
    BIN, SRC = os.path.abspath(args.multiscreen), os.path.abspath(args.source)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
