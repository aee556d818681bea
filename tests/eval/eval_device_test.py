#!/usr/bin/python3
"""`multiscreen eval --device=cuda` (issue 29) against `--device=cpu` on tiny models: the
loss by position of `eval ppl` within 1e-4 in fp32 and within bf16's precision (1e-2
relative) with --precision=bf16, for Multiscreen (tiny_psi4 with expanded windows;
tiny_tiled, whose bf16 runs the tiled screening kernels) and the Transformer baseline;
`eval ppl --method=decode` with the device's decoding cache against the CPU's (fp32 and
bf16); `generate --device=cuda` printing the CPU's tokens; `eval ttft` timed on the device
with the CPU's first token; a passkey cell (decoded on the device) and `eval choice` on the
device against the CPU; device and precision in the results, a resume on another device
refused; windows past the device's memory and bf16 decoding on the CPU refused in one
line. Runs on the emulated device (build-emulated) or a GPU; skips, visibly, where no
device is visible (the nvcc build on a machine without a GPU).

Run: /usr/bin/python3 tests/eval/eval_device_test.py --multiscreen=build-emulated/multiscreen --source=.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
from random_tokens import write_tokens  # noqa: E402
sys.path.insert(0, os.path.join(HERE, ".."))
from cli_errors import OneLineErrors  # noqa: E402

BIN = None
SOURCE = None

def run(*args, timeout=240, env=None):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


class EvalDeviceTest(OneLineErrors):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        cls.tokenizer = os.path.join(SOURCE, "data_cache", "gpt2")
        # The device is checked before the weights are read: without one, one line says so.
        r = run("eval", "ttft", "--device=cuda", f"--weights={cls.dir}/none.h5", f"--out={cls.dir}/probe")
        if "--device=cuda: " in r.stderr:
            print(f"\n*** SKIPPED: {r.stderr.strip()} ***\n", flush=True)
            raise unittest.SkipTest("no CUDA device")
        cls.weights = {}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    # ---- helpers --------------------------------------------------------------------------
    def model_weights(self, model):
        """Weights of `model` whose predictions are far from uniform: Multiscreen's layers
        weigh against the embedding (s_O + 3), the Transformer's matrices are scaled ×12."""
        if model in self.weights:
            return self.weights[model]
        w = os.path.join(self.dir, f"{model}.h5")
        r = run("init", f"--model={model}", f"--seed={3 if model == 'tiny_gpt2_vocab' else 5}", f"--out={w}")
        self.assertEqual(r.returncode, 0, r.stderr)
        with h5py.File(w, "r+") as f:
            for layer in f["layers"].values():
                for name, ds in layer.items():
                    if name == "s_O":
                        ds[...] = ds[...] + 3
                    elif model == "tiny_transformer" and ds.ndim >= 2:
                        ds[...] = ds[...] * 12
            if model == "tiny_transformer":
                f["embed/W_E"][...] = f["embed/W_E"][...] * 12
            del f.attrs["params_crc32c"]
        self.weights[model] = w
        return w

    def tokens(self, vocab, count, seed, name):
        t = os.path.join(self.dir, name)
        write_tokens(t, np.random.default_rng(seed).integers(0, vocab - 1, size=count))  # no EOS (V − 1)
        return t

    def ppl(self, out, *args, env=None):
        """eval ppl into self.dir/`out`, afresh (results already there are refused without --resume)."""
        shutil.rmtree(os.path.join(self.dir, out), ignore_errors=True)
        r = run("eval", "ppl", f"--out={os.path.join(self.dir, out)}", *args, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.dir, out, "ppl.json")) as f:
            return json.load(f), r

    def ppl_pair(self, model, vocab, *flags, env=None):
        """eval ppl of `model` on the CPU in fp32 and with `flags` (on the device): 3 windows of 128."""
        w = self.model_weights(model)
        t = self.tokens(vocab, 3 * 129, 7, f"{model}.bin")
        common = (f"--weights={w}", f"--data={t}", "--seq_len=128", "--stream", "--train_len=16")
        tag = "_".join(f.strip("-").replace("=", "") for f in flags)
        cpu, _ = self.ppl(f"{model}_cpu", *common)
        dev, r = self.ppl(f"{model}_{tag}_{len(env or {})}", *common, *flags, env=env)
        self.assertEqual(dev["documents"], 3)
        return cpu, dev, r

    # ---- ppl --------------------------------------------------------------------------------
    def test_ppl_on_the_device_equals_the_cpu_in_fp32(self):
        for model, vocab in (("tiny_psi4", 97), ("tiny_transformer", 37)):
            with self.subTest(model=model):
                cpu, dev, r = self.ppl_pair(model, vocab, "--device=cuda")
                self.assertEqual((cpu["device"], cpu["precision"], cpu["method"]), ("cpu", "fp32", "full"))
                self.assertEqual((dev["device"], dev["precision"], dev["method"]), ("cuda", "fp32", "full"))
                self.assertIn("full pass (cuda, fp32)", r.stdout)
                # The work was the device's: it held the activations (the CPU run holds nothing there).
                self.assertEqual(cpu["device_bytes_peak"], 0)
                self.assertGreater(dev["device_bytes_peak"], 0)
                diff = np.max(np.abs(np.array(dev["mean_loss"]) - cpu["mean_loss"]))
                print(f"{model} fp32: max |cuda - cpu| by position {diff:.3g}", file=sys.stderr)
                self.assertLessEqual(diff, 1e-4)
                self.assertGreater(diff, 0)  # the device computed: its kernels sum in other orders
                self.assertGreater(np.ptp(cpu["mean_loss"]), 0.1)  # not a uniform model

    def test_bf16_on_the_device_is_within_bf16_of_the_cpu(self):
        for model, vocab in (("tiny_psi4", 97), ("tiny_transformer", 37), ("tiny_tiled", 97)):
            with self.subTest(model=model):
                cpu, dev16, r = self.ppl_pair(model, vocab, "--device=cuda", "--precision=bf16")
                _, dev32, _ = self.ppl_pair(model, vocab, "--device=cuda")
                self.assertEqual((dev16["device"], dev16["precision"]), ("cuda", "bf16"))
                self.assertIn("full pass (cuda, bf16)", r.stdout)
                ref, got, got32 = (np.array(j["mean_loss"]) for j in (cpu, dev16, dev32))
                rel = np.max(np.abs(got - ref) / ref)
                moved = np.max(np.abs(got - got32))
                print(f"{model} bf16: max relative |cuda bf16 - cpu fp32| by position {rel:.3g}, "
                      f"mean {abs(dev16['mean_loss_all'] - cpu['mean_loss_all']) / cpu['mean_loss_all']:.3g}; "
                      f"max |bf16 - fp32| on cuda {moved:.3g}", file=sys.stderr)
                self.assertLessEqual(rel, 1e-2)
                self.assertGreater(moved, 1e-5)  # bf16 ran: not fp32's losses
        # tiny_tiled (d_K = 16, d_V = 64): bf16 runs the tiled screening kernels, which round
        # their operands to bf16 too; the simple ones (MULTISCREEN_SCREENING_KERNEL=simple) do not.
        _, simple, _ = self.ppl_pair("tiny_tiled", 97, "--device=cuda", "--precision=bf16",
                                     env={"MULTISCREEN_SCREENING_KERNEL": "simple"})
        _, tiled, _ = self.ppl_pair("tiny_tiled", 97, "--device=cuda", "--precision=bf16")
        gap = np.max(np.abs(np.array(tiled["mean_loss"]) - simple["mean_loss"]))
        print(f"tiny_tiled bf16: max |tiled - simple| by position {gap:.3g}", file=sys.stderr)
        self.assertGreater(gap, 0)
        self.assertLessEqual(gap, 1e-2)

    def test_a_resume_on_another_device_or_precision_is_refused(self):
        w = self.model_weights("tiny_psi4")
        t = self.tokens(97, 4 * 33, 9, "resume.bin")
        out = os.path.join(self.dir, "resume")
        common = (f"--weights={w}", f"--data={t}", "--seq_len=32", "--stream", f"--out={out}")
        r = run("eval", "ppl", *common, "--documents=2")
        self.assertEqual(r.returncode, 0, r.stderr)
        for flags, differs in ((["--device=cuda"], 'device = "cpu" there, "cuda" here'),
                               (["--precision=bf16"], 'precision = "fp32" there, "bf16" here')):
            self.assert_one_line_error(run("eval", "ppl", *common, "--resume", *flags),
                                       "--resume:", f"is of another evaluation: {differs}")
        r = run("eval", "ppl", *common, "--resume")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("resuming after 2 windows", r.stderr)

    # ---- ttft ---------------------------------------------------------------------------------
    def test_ttft_on_the_device_reports_and_gives_the_cpus_first_token(self):
        w = self.model_weights("tiny_psi4")
        out = os.path.join(self.dir, "ttft")
        r = run("eval", "ttft", f"--weights={w}", "--context=128", "--repeats=3", "--warmup=1", "--device=cuda",
                f"--out={out}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"128 tokens, batch 1, fp32 on cuda:0")
        with open(os.path.join(out, "ttft_128.json")) as f:
            dev = json.load(f)
        self.assertEqual((dev["device"], dev["precision"]), ("cuda", "fp32"))
        self.assertTrue(dev["device_name"].startswith("cuda:0"), dev["device_name"])
        self.assertEqual(len(dev["times_s"]), 3)
        self.assertTrue(all(t > 0 for t in dev["times_s"]))
        self.assertEqual(dev["median_s"], sorted(dev["times_s"])[1])
        self.assertGreater(dev["device_bytes_peak"], 0)
        r = run("eval", "ttft", f"--weights={w}", "--context=128", "--repeats=1", "--warmup=0", f"--out={out}_cpu")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(f"{out}_cpu", "ttft_128.json")) as f:
            cpu = json.load(f)
        self.assertEqual((cpu["device"], cpu["device_name"], cpu["device_bytes_peak"]), ("cpu", "cpu", 0))
        self.assertEqual(dev["first_token"], cpu["first_token"])
        # The runner is the device's: its estimate adds the packed weights the device holds.
        self.assertGreater(dev["estimated_bytes"], cpu["estimated_bytes"])
        r = run("eval", "ttft", f"--weights={w}", "--context=128", "--repeats=2", "--warmup=0", "--device=cuda",
                "--precision=bf16", f"--out={out}_16")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("bf16 on cuda:0", r.stdout)

    # ---- the grids and choice -------------------------------------------------------------------
    def test_passkey_on_the_device_generates_the_cpus_tokens(self):
        w = self.model_weights("tiny_gpt2_vocab")
        dumps = {}
        for device in ("cpu", "cuda"):
            out, dump = os.path.join(self.dir, f"pk_{device}"), os.path.join(self.dir, f"pk_{device}.jsonl")
            r = run("eval", "passkey", f"--weights={w}", "--contexts=120", "--depths=0.5", "--instances=1",
                    f"--dump={dump}", f"--out={out}", f"--tokenizer={self.tokenizer}", f"--device={device}")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "passkey.json")) as f:
                self.assertEqual(json.load(f)["identity"]["device"], device)
            with open(dump) as f:
                dumps[device] = [json.loads(line) for line in f]
        self.assertIn("greedy with the decoding cache (cuda, fp32)", r.stdout)
        self.assertEqual(dumps["cuda"], dumps["cpu"])

    def test_choice_on_the_device_scores_as_the_cpu(self):
        w = self.model_weights("tiny_gpt2_vocab")
        task = os.path.join(self.dir, "piqa.jsonl")
        with open(task, "w") as f:
            f.write(json.dumps({"goal": "To open a jar", "sol1": "twist the lid.", "sol2": "paint the lid.", "label": 0}) + "\n")
            f.write(json.dumps({"goal": "Keep bread fresh", "sol1": "seal the bag", "sol2": "burn it", "label": 0}) + "\n")
        got = {}
        for device in ("cpu", "cuda"):
            out = os.path.join(self.dir, f"choice_{device}")
            r = run("eval", "choice", f"--weights={w}", f"--task={task}", "--format=piqa", f"--out={out}",
                    f"--tokenizer={self.tokenizer}", f"--device={device}")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"{device}, fp32", r.stdout)
            with open(os.path.join(out, "choice_piqa.jsonl")) as f:
                got[device] = [json.loads(line)["loglik"] for line in f]
        np.testing.assert_allclose(got["cuda"], got["cpu"], rtol=0, atol=1e-4)

    # ---- decoding on the device -----------------------------------------------------------------
    def test_decode_on_the_device_gives_the_cpus_losses(self):
        for model, vocab in (("tiny_psi4", 97), ("tiny_transformer", 37)):
            with self.subTest(model=model):
                cpu, dev, r = self.ppl_pair(model, vocab, "--device=cuda", "--method=decode")
                self.assertEqual((dev["device"], dev["precision"], dev["method"]), ("cuda", "fp32", "decode"))
                self.assertIn("decode pass (cuda, fp32)", r.stdout)
                self.assertGreater(dev["device_bytes_peak"], 0)
                diff = np.max(np.abs(np.array(dev["mean_loss"]) - cpu["mean_loss"]))
                print(f"{model} decode fp32: max |cuda decode - cpu full| by position {diff:.3g}", file=sys.stderr)
                self.assertLessEqual(diff, 1e-4)
                _, dev16, r = self.ppl_pair(model, vocab, "--device=cuda", "--method=decode", "--precision=bf16")
                self.assertIn("decode pass (cuda, bf16)", r.stdout)
                got16 = np.array(dev16["mean_loss"])
                rel = np.max(np.abs(got16 - cpu["mean_loss"]) / np.array(cpu["mean_loss"]))
                print(f"{model} decode bf16: max relative |cuda bf16 decode - cpu fp32| by position {rel:.3g}",
                      file=sys.stderr)
                self.assertLessEqual(rel, 1e-2)
                self.assertGreater(np.max(np.abs(got16 - dev["mean_loss"])), 1e-5)  # bf16 ran

    def test_generate_on_the_device_prints_the_cpus_tokens(self):
        for model in ("tiny_gpt2_vocab", "tiny_gpt2_transformer"):
            with self.subTest(model=model):
                w = self.model_weights(model)
                common = (f"--weights={w}", f"--tokenizer={self.tokenizer}", "--prompt=The quick brown fox jumps",
                          "--max_tokens=12", "--train_len=4")
                cpu = run("generate", *common)
                self.assertEqual(cpu.returncode, 0, cpu.stderr)
                dev = run("generate", *common, "--device=cuda")
                self.assertEqual(dev.returncode, 0, dev.stderr)
                print(f"{model}: {cpu.stdout.strip()!r}", file=sys.stderr)
                self.assertEqual(dev.stdout, cpu.stdout)
                self.assertGreater(len(cpu.stdout.strip()), len("The quick brown fox jumps"))
                dev16 = run("generate", *common, "--device=cuda", "--precision=bf16")
                self.assertEqual(dev16.returncode, 0, dev16.stderr)
                self.assertTrue(dev16.stdout.startswith("The quick brown fox jumps"), dev16.stdout)

    # ---- refusals ---------------------------------------------------------------------------------
    def test_windows_past_the_devices_memory_and_bf16_decoding_on_the_cpu_are_refused(self):
        w = self.model_weights("tiny_psi4")
        t = self.tokens(97, 100, 11, "refuse.bin")
        out = os.path.join(self.dir, "refused")
        big = "9223372036854775807"
        self.assert_one_line_error(run("eval", "ppl", f"--weights={w}", f"--data={t}", f"--seq_len={big}", "--device=cuda",
                                       "--method=full", f"--out={out}"),
                                   f"--seq_len={big}: the full pass on cuda needs about 8589934592.00 GiB", "free on the device")
        # auto takes the decoding cache when the full pass does not fit: Multiscreen's finite
        # windows hold it in kilobytes, but the loss by position does not fit the host.
        self.assert_one_line_error(run("eval", "ppl", f"--weights={w}", f"--data={t}", f"--seq_len={big}", "--device=cuda",
                                       f"--out={out}"),
                                   f"--seq_len={big}: the loss by position needs about 8589934592.00 GiB of host memory",
                                   "available")
        # A Transformer's cache grows with every position.
        tw = self.model_weights("tiny_transformer")
        self.assert_one_line_error(run("eval", "ppl", f"--weights={tw}", f"--data={t}", f"--seq_len={big}", "--device=cuda",
                                       "--method=decode", f"--out={out}"),
                                   f"--seq_len={big}: the decode pass on cuda needs about 8589934592.00 GiB",
                                   "free on the device (full pass 8589934592.00 GiB")
        # A Transformer's decoding cache grows with every token.
        g = self.model_weights("tiny_gpt2_transformer")
        self.assert_one_line_error(run("generate", f"--weights={g}", f"--tokenizer={self.tokenizer}", "--prompt=a",
                                       "--max_tokens=2000000000", "--device=cuda"),
                                   "--max_tokens=2000000000: the decoding cache of 2000000001 positions",
                                   "free on the device")
        # A field report: a windowed model's cache stays small, and --max_tokens=2^32 started
        # (every token is kept on the host): past 2^31 - 1 it is refused, as on the CPU.
        m = self.model_weights("tiny_gpt2_vocab")
        for device in ("cuda", "cpu"):
            self.assert_one_line_error(run("generate", f"--weights={m}", f"--tokenizer={self.tokenizer}", "--prompt=a",
                                           "--max_tokens=4294967296", "--as_learned", f"--device={device}"),
                                       "multiscreen generate: --max_tokens=4294967296: expected 0 to 2^31 - 1")
        self.assert_one_line_error(run("generate", f"--weights={g}", f"--tokenizer={self.tokenizer}", "--prompt=a",
                                       "--precision=bf16"),
                                   "--precision=bf16: on the CPU the decoding cache runs in fp32")
        self.assert_one_line_error(run("eval", "ttft", f"--weights={w}", f"--context={big}", "--device=cuda", f"--out={out}"),
                                   f"--context={big}: the prefill needs about 8589934592.00 GiB", "free on the device")

    def test_a_device_too_small_is_one_line_naming_the_flags(self):
        # A field report: "multiscreen: fatal: cuda array of N elements: cudaMalloc(N): out of
        # memory". MULTISCREEN_EMULATED_GPU_MEMORY sizes the emulated device only: on a GPU this
        # test has nothing to shrink.
        w = self.model_weights("tiny_psi4")
        t = self.tokens(97, 100, 12, "small_device.bin")
        out = os.path.join(self.dir, "small_device")
        small = {"MULTISCREEN_EMULATED_GPU_MEMORY": "10000000"}
        r = run("eval", "ppl", f"--weights={w}", f"--data={t}", "--seq_len=16", "--device=cuda", f"--out={out}", env=small)
        if r.returncode == 0:
            self.skipTest("not the emulated device (MULTISCREEN_EMULATED_GPU_MEMORY has no effect)")
        # Any allocation (here a kernel table's GEMM workspace) that does not fit: the device,
        # the bytes asked and free, the flags; --out, made by this command, is gone again.
        self.assert_one_line_error(r, "multiscreen eval ppl: cuda:0 (", "out of memory: an array of 33554432 bytes",
                                   "10000000 bytes (0.01 GiB) free of 10000000 bytes",
                                   "; a shorter --seq_len, a smaller model, or --device=cpu")
        self.assertFalse(os.path.exists(out))
        g = self.model_weights("tiny_gpt2_transformer")
        self.assert_one_line_error(run("generate", f"--weights={g}", f"--tokenizer={self.tokenizer}", "--prompt=a",
                                       "--device=cuda", env=small),
                                   "multiscreen generate: cuda:0 (", "out of memory: an array of 33554432 bytes",
                                   "; fewer --max_tokens or a shorter --prompt, a smaller model, or --device=cpu")
        # Parameters that cannot fit are said up front, before any is copied (psi16: 4 bytes each).
        p = os.path.join(self.dir, "psi16.h5")
        self.assertEqual(run("init", "--model=psi16", f"--out={p}").returncode, 0)
        self.assert_one_line_error(run("eval", "passkey", f"--weights={p}", f"--tokenizer={self.tokenizer}",
                                       "--contexts=100", "--device=cuda", f"--out={out}",
                                       env={"MULTISCREEN_EMULATED_GPU_MEMORY": "40000000"}),
                                   "multiscreen eval passkey: cuda:0 (", "the parameters of psi16 need about 110186504 "
                                   "bytes (0.10 GiB), only 40000000 bytes (0.04 GiB) are free of 40000000 bytes",
                                   "; smaller --contexts, a smaller model, or --device=cpu")
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    args, rest = p.parse_known_args()
    BIN = os.path.abspath(args.multiscreen)
    SOURCE = os.path.abspath(args.source)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
