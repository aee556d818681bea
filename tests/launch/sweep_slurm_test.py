#!/usr/bin/python3
"""`multiscreen sweep run --slurm` on the one-node test cluster (issue 17; ctest label e2e).

Brings up munged, slurmctld and slurmd on localhost as tests/launch/slurm_test.py does
(tests/launch/slurm_cluster.py), then submits tests/launch/sweep_test.py's tiny sweep as one
`sbatch --array` job through `sweep run --slurm`: every array task runs launch/train.sbatch's
protocol on its run directory. One task is stopped mid-run with `scancel --signal=USR1`; it
checkpoints, requeues itself and resumes. The sweep ends with every run done and exactly the
losses of the same sweep run locally; a second `sweep run --slurm` submits nothing.
Run: /usr/bin/python3 tests/launch/sweep_slurm_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import os
import re
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sweep_test as st  # noqa: E402
from slurm_cluster import SlurmCluster  # noqa: E402


class SweepSlurmTest(unittest.TestCase):
    def test_job_array_trains_every_run_to_the_local_losses(self):
        with SlurmCluster() as cluster:
            work = os.path.join(cluster.dir, "work")
            os.mkdir(work)
            st.WORK = work
            sys.path.insert(0, os.path.join(st.SRC, "tests", "trainer"))
            import train_e2e_test
            train_e2e_test.SRC = st.SRC
            data = os.path.join(work, "data")
            train_e2e_test.synthetic_shards(data)
            local = st.write(os.path.join(work, "local.textproto"), st.sweep_text(os.path.join(work, "local"), data))
            st.sweep("run", f"--sweep={local}", "--local", "--jobs=2", "--threads=1")
            root = os.path.join(work, "slurm")
            path = st.write(os.path.join(work, "slurm.textproto"), st.sweep_text(root, data))
            env = dict(cluster.env, OMP_NUM_THREADS="1")
            r = subprocess.run([st.BIN, "sweep", "run", f"--sweep={path}", "--slurm", "--", "--cpus-per-task=1", "--time=10"],
                               capture_output=True, text=True, env=env, cwd=work, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr + cluster.logs(["slurmctld"]))
            job = re.search(r"Submitted batch job (\d+)", r.stdout).group(1)
            # Stop the first task mid-run: it checkpoints and requeues itself.
            first = os.path.join(root, st.RUNS[0])
            st.wait_until(lambda: 200 <= st.last_step(first), 240, "array task 0 at step 200")
            cluster.run(["scancel", "--signal=USR1", f"{job}_0"], check=False)
            deadline = time.time() + 420
            while time.time() < deadline:
                out = cluster.run(["squeue", "-h", "-j", job], check=False).stdout.strip()
                if not out:
                    break
                time.sleep(0.5)
            logs = "".join(open(os.path.join(root, "slurm", f)).read() for f in sorted(os.listdir(os.path.join(root, "slurm"))))
            self.assertFalse(out, f"the array did not end: {out}\n{logs[-3000:]}")
            status = subprocess.run([st.BIN, "sweep", "status", f"--sweep={path}"], capture_output=True, text=True).stdout
            self.assertIn("3 done", status, status + logs[-3000:])
            for name in st.RUNS:
                self.assertEqual(st.losses(os.path.join(root, name)), st.losses(os.path.join(work, "local", name)), name)
            self.assertIn("requeueing", logs)
            r = subprocess.run([st.BIN, "sweep", "run", f"--sweep={path}", "--slurm"], capture_output=True, text=True, env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("all 3 runs are done", r.stdout)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--multiscreen", required=True)
    ap.add_argument("--source", required=True)
    args, rest = ap.parse_known_args()
    st.BIN, st.SRC = os.path.abspath(args.multiscreen), os.path.abspath(args.source)
    unittest.main(argv=[sys.argv[0]] + rest)
