#!/usr/bin/python3
"""The transport `train --device=cuda --comm=auto` picks under mpirun on the emulated
device (parallel/comm_choice.h): ranks that each see only their own GPU (Slurm's
--gpus-per-task=1: CUDA_VISIBLE_DEVICES per rank) are told apart by PCI bus id and get
NCCL; ranks whose visible GPU is the same one get the staged path. A --device=cpu run binds no
GPU: each rank's start line says cpu.

Run: /usr/bin/python3 tests/cuda_emulator/transport_choice_test.py --multiscreen=build-emulated/multiscreen \
       --source=. [--mpirun=mpirun]
"""
import argparse
import os
import re
import subprocess
import sys
import unittest

BIN = SRC = MPIRUN = None


class TransportChoiceTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        sys.path.insert(0, os.path.join(SRC, "tests", "trainer"))
        import train_e2e_test
        train_e2e_test.SRC = SRC
        cls.case = train_e2e_test.SyntheticCorpusCase
        cls.case.setUpClass()

    @classmethod
    def tearDownClass(cls):
        cls.case.tearDownClass()

    def comm_of(self, name, visible):
        """The comm: line of a 2-rank run where rank r sees CUDA_VISIBLE_DEVICES=visible[r]."""
        run_dir = os.path.join(self.case.tmp.name, name)
        train = (f"exec {BIN} train --config={self.case.config} --data={self.case.data} --run_dir={run_dir} "
                 "--steps=2 --device=cuda")
        script = f'case $OMPI_COMM_WORLD_RANK in 0) export CUDA_VISIBLE_DEVICES={visible[0]};; ' \
                 f'*) export CUDA_VISIBLE_DEVICES={visible[1]};; esac; {train}'
        env = dict(os.environ, MULTISCREEN_EMULATED_GPUS="2", OMP_NUM_THREADS="1")
        r = subprocess.run([MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", "2", "sh", "-c", script],
                           capture_output=True, text=True, timeout=300, env=env)
        self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
        found = re.findall(r"comm: (\w+) \(--comm=auto\)", r.stdout + r.stderr)
        self.assertTrue(found, r.stdout[-2000:] + r.stderr[-2000:])
        return found[0]

    def test_ranks_each_seeing_their_own_gpu_get_nccl(self):
        self.assertEqual(self.comm_of("own", ("0", "1")), "nccl")

    def test_ranks_whose_one_visible_gpu_is_the_same_get_staged(self):
        self.assertEqual(self.comm_of("same", ("1", "1")), "staged")

    def test_a_cpu_run_says_cpu_on_every_ranks_start_line(self):
        # A field report: each rank of `mpirun -np 2 ... train --device=cpu` said "device
        # cuda:0 (Emulated ...)" on its start line, then ran on the CPU.
        run_dir = os.path.join(self.case.tmp.name, "cpu")
        env = dict(os.environ, MULTISCREEN_EMULATED_GPUS="2", OMP_NUM_THREADS="1")
        r = subprocess.run([MPIRUN, "--oversubscribe", "--allow-run-as-root", "-np", "2", BIN, "train",
                            f"--config={self.case.config}", f"--data={self.case.data}", f"--run_dir={run_dir}",
                            "--steps=1", "--device=cpu"], capture_output=True, text=True, timeout=300, env=env)
        text = r.stdout + r.stderr
        self.assertEqual(r.returncode, 0, text[-2000:])
        starts = re.findall(r"rank (\d) of 2: .*, device (.*); launcher: ", text)
        self.assertEqual(sorted(starts), [("0", "cpu"), ("1", "cpu")], text[-2000:])
        self.assertIn("device: cpu", text)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--mpirun", default="mpirun")
    args, rest = p.parse_known_args()
    BIN, SRC, MPIRUN = os.path.abspath(args.multiscreen), os.path.abspath(args.source), args.mpirun
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
