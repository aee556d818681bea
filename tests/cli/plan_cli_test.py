#!/usr/bin/python3
"""`multiscreen plan` (issue 45), the command's contract: the JSON fields of every layout
(tp · pp · dp = --gpus, micro_batch · grad_accum · dp = the global batch's sequences, tp
within a node), every printed figure labelled modelled, and a bad flag refused in one line
naming it. tests/tools/plan_test.py checks the figures.

Run: /usr/bin/python3 tests/cli/plan_cli_test.py --multiscreen=build/multiscreen
     (with MULTISCREEN_CONFIG_DIR pointing at configs/)
"""
import argparse
import json
import os
import subprocess
import sys
import signal
import time
import unittest

MULTISCREEN = None
LAYOUT_FIELDS = ("tp", "pp", "dp", "zero", "micro_batch", "grad_accum", "peak_bytes_per_rank", "fits", "step_ms",
                 "tokens_per_s", "mfu")


def run(*args):
    return subprocess.run([MULTISCREEN, "plan", *args], capture_output=True, text=True, timeout=120)


class CommandTest(unittest.TestCase):
    def test_json_lists_every_layout_with_the_contracts_fields(self):
        r = run("--model=psi32", "--gpus=16", "--json")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        p = json.loads(r.stdout)
        self.assertTrue(p["modelled"])
        self.assertEqual((p["seq_len"], p["global_batch_tokens"], p["gpu"], p["gpus_per_node"]), (4096, 1 << 22, "h100", 8))
        self.assertEqual(p["precision"], "bf16")
        self.assertEqual((p["dims"]["n_layers"], p["dims"]["d_e"], p["dims"]["position"]), (32, 1024, "mipe"))
        self.assertGreater(len(p["layouts"]), 10)
        seen = set()
        for lay in p["layouts"]:
            for field in LAYOUT_FIELDS:
                self.assertIn(field, lay)
            self.assertEqual(lay["tp"] * lay["pp"] * lay["dp"], 16)
            self.assertEqual(lay["micro_batch"] * lay["grad_accum"] * lay["dp"], 1024)
            self.assertLessEqual(lay["tp"], 8)
            self.assertEqual(32 % lay["tp"] + 32 % lay["pp"], 0)
            self.assertAlmostEqual(lay["tokens_per_s"], (1 << 22) / (lay["step_ms"] / 1e3), delta=1e-6 * lay["tokens_per_s"])
            seen.add((lay["tp"], lay["pp"], lay["zero"]))
        self.assertIn((8, 2, 0), seen)
        self.assertIn((1, 1, 1), seen)
        self.assertNotIn((16, 1, 0), seen)  # tp within a node

    def test_a_transformer_is_planned_with_its_switches(self):
        r = run("--model=tiny_transformer_all", "--gpus=2", "--seq_len=64", "--global_batch=1024", "--json")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        p = json.loads(r.stdout)
        self.assertEqual((p["dims"]["family"], p["dims"]["qk_norm"], p["dims"]["sio"], p["dims"]["attention"]),
                         ("TRANSFORMER", True, True, "softmax"))
        self.assertTrue(all(lay["fits"] for lay in p["layouts"]))
        self.assertIn("W_qkv", p["terms"]["compute_copies"])

    def test_text_labels_every_figure_modelled(self):
        r = run("--model=psi32", "--gpus=8", "--top=3")
        self.assertEqual((r.returncode, r.stderr), (0, ""))
        lines = r.stdout.splitlines()
        self.assertIn("every figure modelled", lines[0])
        header = next(l for l in lines if l.startswith("| tp "))
        for column in ("GiB/rank", "step ms", "tokens/s", "MFU"):
            self.assertIn(f"modelled {column}", header)
        self.assertEqual(len([l for l in lines if l.startswith("| 1 ") or l.startswith("| 2 ") or l.startswith("| 4 ")
                              or l.startswith("| 8 ")]), 3)
        self.assertTrue(any(l.startswith("modelled memory of tp=") for l in lines))
        self.assertTrue(any(l.startswith("modelled step ") for l in lines))

    def test_bad_flags_are_refused_in_one_line_naming_the_flag(self):
        for args, message in (
                (["--gpus=8"], "multiscreen plan: --model is required"),
                (["--model=psi32"], "multiscreen plan: --gpus=0: give the number of GPUs of the job"),
                (["--model=psi32", "--gpus=8", "--gpu=v100"], "multiscreen plan: --gpu=v100 is not a known GPU"),
                (["--model=psi32", "--gpus=12"], "multiscreen plan: --gpus=12 is not a whole number of nodes of "
                                                 "--gpus_per_node=8"),
                (["--model=psi32", "--gpus=8", "--global_batch=1000"], "multiscreen plan: --global_batch=1000 tokens"),
                (["--model=psi32", "--gpus=8", "--seq_len=0"], "multiscreen plan: --seq_len=0 must be at least 1"),
                (["--model=psi32", "--gpus=8", "--precision=fp64"], "multiscreen plan: --precision=fp64"),
                (["--model=psi32", "--gpus=8", "--device_memory=80 GB"], "multiscreen plan: --device_memory=80 GB: "
                 "expected bytes"),
                (["--model=psi32", "--gpus=8", "--device_memory=0"], "multiscreen plan: --device_memory=0 must be at "
                 "least 1 byte"),
                (["--model=psi32", "--gpus=8", "--gpus_per_node=0"], "multiscreen plan: --gpus_per_node=0"),
                (["--model=psi32", "--gpus=x"], "--gpus"),
                (["--model=no_such_model", "--gpus=8"], "no_such_model"),
                (["--model=psi32", "--gpus=8", "--steps=3"], "--steps"),
                # (it said "tp must divide N_H": tp = pp = 1 always does, dp = 3 did not divide 1024)
                (["--model=psi32", "--gpus=3", "--gpus_per_node=3"], "--global_batch=4194304: its 1024 sequences of "
                 "--seq_len=4096 split over no dp this model allows on --gpus=3 (dp = 3: tp divides N_H = 32 within a "
                 "node of 3, pp N_L = 32)"),
                # (it said "tp must divide N_H" where a rank's one sequence was over 2^31 − 1 tokens)
                (["--model=psi32", "--gpus=8", "--seq_len=2147483648", "--global_batch=2147483648"],
                 "--seq_len=2147483648: a rank's step of 1 sequence holds 2,147,483,649 tokens (T + 1 each), over the "
                 "2,147,483,647 one step may hold"),
                (["--model=tiny_psi4", "--gpus=32", "--seq_len=64", "--global_batch=64"],
                 "--global_batch=64: its 1 sequence of --seq_len=64 split over no dp this model allows on --gpus=32 "
                 "(dp = 2, 4, 8, 16, 32: tp divides N_H = 4 within a node of 8, pp N_L = 4)"),
                # (it enumerated the divisors of 10^12 and did not end)
                (["--model=psi32", "--gpus=1000000000000"], "--gpus=1000000000000: more than 1,048,576 GPUs")):
            with self.subTest(args=args):
                r = run(*args)
                self.assertNotEqual(r.returncode, 0)
                self.assertEqual(r.stdout, "")
                lines = r.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertIn(message, lines[0])

    def test_no_layout_that_fits_prints_the_plan_then_exits_2_saying_why(self):
        # (it exited 0: a script could not tell that no layout fits)
        r = run("--model=psi64", "--gpus=1", "--global_batch=4096", "--top=1")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("none fits, the smallest:", r.stdout)
        self.assertIn("(does not fit)", r.stdout)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertRegex(lines[0], r"^multiscreen plan: no layout fits: the smallest \(tp=1 pp=1 dp=1 zero=0 "
                                   r"micro_batch=1\) needs a modelled [0-9.]+ GiB per rank, more than the 79.6 GiB of "
                                   r"--gpu=h100; raise --gpus")
        r = run("--model=psi64", "--gpus=1", "--global_batch=4096", "--json")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertFalse(any(lay["fits"] for lay in json.loads(r.stdout)["layouts"]))

    def test_the_planner_dies_with_the_command(self):
        # (SIGTERM or SIGINT to `multiscreen plan` left tools/plan.py running: fork/execvp without
        # a death signal)
        def children(pid):
            out = []
            for entry in os.listdir("/proc"):
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        if entry.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                            out.append(int(entry))
                except (OSError, ValueError, IndexError):
                    pass
            return out

        def alive(pid):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()[0] != "Z"
            except OSError:
                return False

        for sig in (signal.SIGTERM, signal.SIGINT):
            with self.subTest(signal=sig.name):
                # 2^20 GPUs, 5040 sequences of 64 tokens each: about 10 s of layouts, time to be killed in
                p = subprocess.Popen([MULTISCREEN, "plan", "--model=psi32", "--gpus=1048576", "--seq_len=64",
                                      f"--global_batch={64 * 1048576 * 5040}"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
                deadline, kids = time.time() + 30, []
                while not kids and time.time() < deadline and p.poll() is None:
                    time.sleep(0.05)
                    kids = children(p.pid)
                self.assertTrue(kids, "no planner started")
                p.send_signal(sig)
                p.wait(timeout=30)
                deadline = time.time() + 3  # dies at once with the death signal; ran ~10 s more without
                while any(alive(k) for k in kids) and time.time() < deadline:
                    time.sleep(0.05)
                left = [k for k in kids if alive(k)]
                for k in left:
                    os.kill(k, signal.SIGKILL)
                self.assertEqual(left, [], "the planner outlived the command")

    def test_an_output_that_cannot_be_written_is_one_line(self):
        # (it ended in a Python traceback: OSError on /dev/full)
        with open("/dev/full", "w") as full:
            r = subprocess.run([MULTISCREEN, "plan", "--model=psi32", "--gpus=8"], stdout=full, stderr=subprocess.PIPE,
                               text=True, timeout=120)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip().splitlines(),
                         ["multiscreen plan: cannot write the plan to standard output: No space left on device"])
        # A closed stdout (`>&-`) said Python's "'NoneType' object has no attribute 'flush'".
        r = subprocess.run([MULTISCREEN, "plan", "--model=psi32", "--gpus=8"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=120, pass_fds=(),
                           preexec_fn=lambda: os.close(1))
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip().splitlines(),
                         ["multiscreen plan: cannot write the plan to standard output: it is closed"])

    def test_device_memory_replaces_the_presets_and_names_are_read_in_any_case(self):
        # train's refusal points here: plan had no --device_memory, and --gpu=H100 was refused
        preset = json.loads(run("--model=psi32", "--gpus=8", "--json").stdout)
        r = run("--model=psi32", "--gpus=8", "--json", "--gpu=H100", "--precision=BF16", "--device_memory=40GiB")
        self.assertEqual(r.returncode, 0, r.stderr)
        small = json.loads(r.stdout)
        self.assertEqual(small["device_memory_bytes"], 40 << 30)
        by_layout = {(l["tp"], l["pp"], l["dp"], l["zero"], l["micro_batch"]): l for l in preset["layouts"]}
        fits = [l for l in small["layouts"] if l["fits"]]
        self.assertLess(len(fits), sum(l["fits"] for l in preset["layouts"]))
        for l in small["layouts"]:
            self.assertEqual(l["fits"], l["peak_bytes_per_rank"] <= 40 << 30)
            self.assertEqual(l["peak_bytes_per_rank"],
                             by_layout[(l["tp"], l["pp"], l["dp"], l["zero"], l["micro_batch"])]["peak_bytes_per_rank"])

    def test_a_reader_that_goes_away_ends_the_plan_by_sigpipe(self):
        # `plan --json | (exec 0<&-; ...)` exited 0, and a plan that fits nothing lost its exit status 2:
        # the command now ends as a pipe's writer does (SIGPIPE, the shell's 141), saying nothing.
        for args in (("--model=psi8", "--gpus=8", "--json"), ("--model=psi64", "--gpus=1")):
            with self.subTest(args=args):
                p = subprocess.Popen([MULTISCREEN, "plan", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                p.stdout.close()
                err = p.stderr.read().decode()
                self.assertEqual(p.wait(timeout=120), -signal.SIGPIPE, err)
                self.assertEqual(err.strip(), "")

    def test_a_config_dir_with_a_trailing_slash_finds_the_planner(self):
        # (it looked for configs/tools/plan.py)
        env = dict(os.environ, MULTISCREEN_CONFIG_DIR=os.environ["MULTISCREEN_CONFIG_DIR"].rstrip("/") + "/")
        r = subprocess.run([MULTISCREEN, "plan", "--model=tiny_psi4", "--gpus=2", "--seq_len=64",
                            "--global_batch=128", "--top=1"], capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual((r.returncode, r.stderr), (0, ""))

    def test_another_precision_says_its_times_are_bf16s(self):
        r = run("--model=psi32", "--gpus=8", "--precision=fp32", "--top=1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("fp32, windows trained (memory of fp32; times modelled for bf16's kernels)", r.stdout.splitlines()[0])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiscreen", required=True)
    args, rest = parser.parse_known_args()
    MULTISCREEN = os.path.abspath(args.multiscreen)
    unittest.main(argv=[sys.argv[0], *rest])
