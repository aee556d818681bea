#!/usr/bin/python3
"""A rank stuck before the ranks agree on the run ends the job, named (issue 43 §2).

The collective watchdog started after the start-up agreement, so a rank stopped or hung
before it (reading its run file on a hung file system, SIGSTOPped right after MPI_Init)
left the others waiting for ever at any --collective_timeout. Here rank 1's open() of its
run file never returns (tests/parallel/stall_open.c, LD_PRELOAD: it sleeps there, or
SIGSTOPs itself there), after MPI_Init and before the agreement. At
--collective_timeout=2 (6 s in start-up) rank 0 must end the job within seconds in one
line naming rank 1: busy outside any collective in start-up, or not answering and
stopped. (tests/CMakeLists.txt's mpi_failure_late covers a rank late to the job's first
exchange, inside MPI start-up itself.)

Run: /usr/bin/python3 tests/parallel/start_up_watch_test.py --multiscreen=build/multiscreen --source=. \
    --stall_open_shim=build/tests/libstall_open_shim.so [--mpirun=mpirun]
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer"))
from kill_rank_test import rank_pids  # noqa: E402
from train_e2e_test import SyntheticCorpusCase, read  # noqa: E402

BIN = SRC = MPIRUN = SHIM = None
LIMIT_S = 40  # 6 s of start-up limit, the inquiry (1 s window, 1 s more) and the abort, with room


class StartUpWatchTest(SyntheticCorpusCase):

    def stuck_rank_1(self, name, how):
        """Starts 2 ranks; rank 1's open() of its run file (a copy of rank 0's) stalls
        (`how`: "sleep" or "stop"). Returns (exit code, seconds from the start, output,
        rank 1's pid)."""
        config = os.path.join(self.tmp.name, name + ".textproto")
        shutil.copy(self.config, config)
        run_dir = os.path.join(self.tmp.name, name)
        out_path = os.path.join(self.tmp.name, name + ".out")
        base = [BIN, "train", f"--data={self.data}", f"--run_dir={run_dir}", "--steps=4", "--collective_timeout=2"]
        cmd = [MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", "1", *base, f"--config={self.config}",
               ":", "-np", "1", *base, f"--config={config}"]
        env = dict(os.environ, OMP_NUM_THREADS="1", LD_PRELOAD=SHIM, MS_STALL_OPEN=config, MS_STALL_HOW=how)
        pids = {}
        with open(out_path, "w") as out:
            start = time.time()
            job = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
            try:
                while sorted(pids) != [0, 1] and time.time() - start < 20 and job.poll() is None:
                    pids.update(rank_pids(job.pid))
                    time.sleep(0.05)
                self.assertEqual(sorted(pids), [0, 1], f"ranks found: {pids}\n{read(out_path)}")
                try:
                    rc = job.wait(timeout=LIMIT_S)
                except subprocess.TimeoutExpired:
                    self.fail(f"the job still runs {LIMIT_S} s after it started with rank 1 stuck in start-up:\n"
                              f"{read(out_path)}")
                elapsed = time.time() - start
            finally:
                for pid in pids.values():  # a stopped rank outlives mpirun
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                if job.poll() is None:
                    job.kill()
                job.wait()
        output = read(out_path)
        self.assertNotEqual(rc, 0, output)
        return rc, elapsed, output, pids[1]

    def the_line(self, output):
        ours = [l for l in output.splitlines() if "collective timeout" in l]
        self.assertEqual(len(ours), 1, f"expected one line of ours:\n{output}")
        line = ours[0]
        self.assertRegex(line, r"^multiscreen: fatal on rank 0 of 2 .*: collective timeout: rank 0 waited \d+\.\d s in "
                               r"communicator set-up \(start-up for \d+\.\d s; limit 6 s: 3 × --collective_timeout in "
                               r"start-up")
        return line

    def test_a_rank_hung_opening_its_run_file_before_the_agreement_is_named(self):
        rc, elapsed, output, pid = self.stuck_rank_1("hung", "sleep")
        line = self.the_line(output)
        self.assertRegex(line, rf"it waits for rank 1 \(\S+, pid {pid}\) busy outside any collective: start-up for "
                               r"\d+\.\d s; ending the job$")
        print(f"hung: exit {rc} {elapsed:.1f} s after the start; {line}")

    def test_a_rank_stopped_before_the_agreement_is_named(self):
        rc, elapsed, output, pid = self.stuck_rank_1("stopped", "stop")
        line = self.the_line(output)
        self.assertRegex(line, rf"it waits for rank 1 \(\S+, pid {pid}\) not answering: stopped \(SIGSTOP or a "
                               r"debugger\), its last mark: start-up for \d+\.\d s; ending the job$")
        print(f"stopped: exit {rc} {elapsed:.1f} s after the start; {line}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--stall_open_shim", required=True, help="tests/parallel/stall_open.c built as a shared library")
    args, rest = p.parse_known_args()
    BIN, SRC, MPIRUN = os.path.abspath(args.multiscreen), os.path.abspath(args.source), args.mpirun
    SHIM = os.path.abspath(args.stall_open_shim)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
