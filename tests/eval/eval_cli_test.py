#!/usr/bin/python3
"""`multiscreen eval` end to end (issue 16) on tiny models: ppl equals `forward`'s token
losses on the same windows, the decoding-cache path equals the full pass, the abcdigits
generator's dumps equal the golden files (made by CPython), the tokens abcdigits/passkey
generate equal `generate`'s, ttft's statistics, --resume, and one-line errors. The
Transformer baseline (issue 18) through the same evaluations, relevance refused.

Run: /usr/bin/python3 tests/eval/eval_cli_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import glob
import json
import os
import shutil
import re
import stat
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

# Models with GPT-2's vocabulary, so that text prompts tokenize into them:
# configs/models/tiny_gpt2_vocab (Multiscreen) and tiny_gpt2_transformer.


def run(*args, timeout=120):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout)


class EvalCliTest(OneLineErrors):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.tokenizer = os.path.join(SOURCE, "data_cache", "gpt2")

    def tearDown(self):
        self.tmp.cleanup()

    def init(self, model="tiny_psi2", seed=3):
        w = os.path.join(self.dir, f"w_{seed}.h5")
        r = run("init", f"--model={model}", f"--seed={seed}", f"--out={w}")
        self.assertEqual(r.returncode, 0, r.stderr)
        return w

    def tokens(self, ids, name="t.bin"):
        t = os.path.join(self.dir, name)
        write_tokens(t, np.asarray(ids))
        return t

    def ppl(self, *args):
        """eval ppl into a fresh --out (results already in one are refused without --resume);
        the last call's stays at self.dir/ppl_out."""
        out = os.path.join(self.dir, "ppl_out")
        if os.path.exists(out):
            shutil.rmtree(out)
        r = run("eval", "ppl", f"--out={out}", *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "ppl.json")) as f:
            return json.load(f), r

    # ---- ppl --------------------------------------------------------------------------
    def test_ppl_equals_forwards_token_losses_on_the_same_windows(self):
        w = self.init()
        B, T = 3, 16
        t = self.tokens(np.random.default_rng(1).integers(0, 36, size=B * (T + 1)))  # no EOS (36)
        fwd = os.path.join(self.dir, "fwd.h5")
        r = run("forward", f"--weights={w}", f"--tokens={t}", f"--micro_batch={B}", f"--seq_len={T}", f"--out={fwd}")
        self.assertEqual(r.returncode, 0, r.stderr)
        with h5py.File(fwd) as f:
            expected = f["token_losses"][()].mean(axis=0)
        j, _ = self.ppl(f"--weights={w}", f"--data={t}", f"--seq_len={T}", "--stream", "--as_learned", "--method=full")
        self.assertEqual(j["documents"], B)
        np.testing.assert_allclose(j["mean_loss"], expected, rtol=0, atol=1e-6)
        # The decoding cache gives the same losses, token by token.
        j2, _ = self.ppl(f"--weights={w}", f"--data={t}", f"--seq_len={T}", "--stream", "--as_learned", "--method=decode")
        np.testing.assert_allclose(j2["mean_loss"], expected, rtol=0, atol=1e-4)
        # Window expansion changes the tile whose w (9 at init: e^{log 8} + 1) exceeds train_len = 4.
        j3, _ = self.ppl(f"--weights={w}", f"--data={t}", f"--seq_len={T}", "--stream", "--train_len=4")
        self.assertGreater(np.max(np.abs(np.array(j3["mean_loss"]) - expected)), 1e-4)
        # Smoothing: position p averages the positions within ±10 %.
        m = np.array(j["mean_loss"])
        self.assertAlmostEqual(j["smoothed_loss"][9], m[8:11].mean(), places=6)  # p = 10: positions [9, 11]

    def test_plot_takes_an_out_whose_path_holds_quotes_and_spaces(self):
        # (--plot ran the plotter through std::system with the paths in hand-made '...' quotes: an
        # --out with a ' in it broke the command line)
        w = self.init()
        t = self.tokens(np.random.default_rng(1).integers(0, 36, size=2 * 17))
        out = os.path.join(self.dir, "it's a run")
        r = run("eval", "ppl", f"--weights={w}", f"--data={t}", "--seq_len=16", "--stream", "--plot", f"--out={out}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreater(os.path.getsize(os.path.join(out, "ppl.png")), 0)

    def test_ppl_splits_documents_at_eos_and_reports_the_short_ones(self):
        w = self.init()
        rng = np.random.default_rng(2)
        eos = 36
        docs = [rng.integers(0, 36, size=n) for n in (40, 5, 33, 12, 50)]
        ids = np.concatenate([np.append(d, eos) for d in docs])
        t = self.tokens(ids)
        j, r = self.ppl(f"--weights={w}", f"--data={t}", "--seq_len=32")
        self.assertEqual((j["documents"], j["skipped_short"], j["documents_read"]), (3, 2, 5))
        self.assertIn("2 documents shorter than 33 skipped", r.stdout)
        with open(os.path.join(self.dir, "ppl_out", "ppl.csv")) as f:
            rows = f.read().splitlines()
        self.assertEqual(rows[0], "position,mean_loss,smoothed_loss,perplexity,documents")
        self.assertEqual(len(rows), 33)
        r = run("eval", "ppl", f"--weights={w}", f"--data={t}", "--seq_len=64", f"--out={self.dir}/o")
        self.assert_one_line_error(r, "no document has --seq_len + 1 = 65 tokens", "5 of 5 skipped as shorter", "the longest has 50")

    def test_ppl_resume_against_other_weights_at_the_same_path_is_refused(self):
        # Issue 31: a run directory that kept training between the two calls (its latest
        # checkpoint moved) had its windows averaged with the old ones' under one result.
        w = self.init(seed=3)
        t = self.tokens(np.random.default_rng(3).integers(0, 36, size=6 * 17))
        out = os.path.join(self.dir, "moved")
        r = run("eval", "ppl", f"--weights={w}", f"--data={t}", "--seq_len=16", "--stream", "--documents=2", f"--out={out}")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "ppl_state.json")) as f:
            crc = json.load(f)["identity"]["weights_crc32"]
        self.assertRegex(crc, r"^[0-9a-f]{8}$")
        shutil.copyfile(self.init(seed=4), w)  # other weights at the same path
        r = run("eval", "ppl", f"--weights={w}", f"--data={t}", "--seq_len=16", "--stream", "--resume", f"--out={out}")
        self.assert_one_line_error(r, "--resume:", f"is of another evaluation: weights_crc32 = \"{crc}\" there, \"")

    def test_ppl_resume_compares_the_inputs_content_not_how_their_paths_are_spelled(self):
        # A field report: resuming from another working directory (--checkpoint=run there,
        # --checkpoint=/abs/run here) was refused as 'weights = "run" there, "/abs/run" here'.
        for seed, name in ((3, "run"), (4, "other")):
            r = run("ckpt", "init", "--model=tiny_psi2", f"--seed={seed}", "--tp=1", "--pp=1",
                    f"--out={os.path.join(self.dir, name)}")
            self.assertEqual(r.returncode, 0, r.stderr)
        self.tokens(np.random.default_rng(3).integers(0, 36, size=6 * 17))
        out = os.path.join(self.dir, "o")
        first = subprocess.run([BIN, "eval", "ppl", "--checkpoint=run", "--data=t.bin", "--seq_len=16", "--stream",
                                "--documents=2", "--out=o"], capture_output=True, text=True, timeout=120, cwd=self.dir)
        self.assertEqual(first.returncode, 0, first.stderr)
        with open(os.path.join(out, "ppl_state.json")) as f:
            crc = json.load(f)["identity"]["weights_crc32"]
        common = ("--seq_len=16", "--stream", f"--out={out}", "--resume")
        # Other weights are refused, named by content and path both.
        r = subprocess.run([BIN, "eval", "ppl", f"--checkpoint={self.dir}/other", f"--data={self.dir}/t.bin", *common],
                           capture_output=True, text=True, timeout=120, cwd="/")
        self.assert_one_line_error(r, "is of another evaluation:", f'weights = "run" there, "{self.dir}/other" here',
                                   f'weights_crc32 = "{crc}" there, "')
        # Other data too.
        self.tokens(np.random.default_rng(5).integers(0, 36, size=6 * 17), name="u.bin")
        r = subprocess.run([BIN, "eval", "ppl", f"--checkpoint={self.dir}/run", *common, f"--data={self.dir}/u.bin"],
                           capture_output=True, text=True, timeout=120, cwd="/")
        self.assert_one_line_error(r, "is of another evaluation:", f'data = "t.bin" there, "{self.dir}/u.bin" here',
                                   "data_fingerprint = ")
        # The same files by absolute paths, from another directory: it resumes.
        r = subprocess.run([BIN, "eval", "ppl", f"--checkpoint={self.dir}/run", f"--data={self.dir}/t.bin", *common],
                           capture_output=True, text=True, timeout=120, cwd="/")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("resuming after 2 windows", r.stderr)
        with open(os.path.join(out, "ppl.json")) as f:
            self.assertEqual(json.load(f)["documents"], 6)

    def test_ppl_resume_under_other_flags_names_only_what_differs_with_both_values(self):
        # It listed every field that might differ (model, weights, data, --seq_len, ...).
        w = self.init()
        t = self.tokens(np.random.default_rng(3).integers(0, 36, size=6 * 17))
        out = os.path.join(self.dir, "other_flags")
        common = (f"--weights={w}", f"--data={t}", "--seq_len=16", "--stream", f"--out={out}")
        r = run("eval", "ppl", *common, "--documents=2")
        self.assertEqual(r.returncode, 0, r.stderr)
        state = os.path.join(out, "ppl_state.json")
        for flags, differs in ((["--as_learned"], 'window_rule = "expand" there, "as_learned" here'),
                               (["--stride=8", "--as_learned"],
                                'stride = 0 there, 8 here; window_rule = "expand" there, "as_learned" here')):
            r = run("eval", "ppl", *common, "--resume", *flags)
            self.assert_one_line_error(r, f"--resume: {state} is of another evaluation: {differs}")
            self.assertTrue(r.stderr.rstrip().endswith(differs), r.stderr)

    def test_ppl_resume_continues_from_the_saved_windows(self):
        w = self.init()
        t = self.tokens(np.random.default_rng(3).integers(0, 36, size=6 * 17))
        whole, _ = self.ppl(f"--weights={w}", f"--data={t}", "--seq_len=16", "--stream")
        out = os.path.join(self.dir, "part")
        r = run("eval", "ppl", f"--weights={w}", f"--data={t}", "--seq_len=16", "--stream", "--documents=2", f"--out={out}")
        self.assertEqual(r.returncode, 0, r.stderr)
        # A smaller --documents cannot take back the 2 windows averaged (it was ignored: a fresh-eyes report).
        r = run("eval", "ppl", f"--weights={w}", f"--data={t}", "--seq_len=16", "--stream", "--documents=1", "--resume",
                f"--out={out}")
        self.assert_one_line_error(r, "--resume: --documents=1 is fewer than the 2 windows", "--documents=2 or more")
        r = run("eval", "ppl", f"--weights={w}", f"--data={t}", "--seq_len=16", "--stream", "--resume", f"--out={out}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("resuming after 2 windows", r.stderr)
        with open(os.path.join(out, "ppl.json")) as f:
            resumed = json.load(f)
        self.assertEqual(resumed["documents"], 6)
        np.testing.assert_allclose(resumed["mean_loss"], whole["mean_loss"], atol=1e-9)

    def test_outputs_over_inputs_runs_or_results_are_refused(self):
        # A fresh-eyes pass: --dump=RUN/run.json replaced a run's identity, --dump=OUT/passkey.json
        # was replaced by the results, and `eval ppl --data=OUT/ppl.csv --out=OUT` its own input.
        g = self.init("tiny_gpt2_vocab")
        run_dir = os.path.join(self.dir, "a_run")
        os.makedirs(run_dir)
        with open(os.path.join(run_dir, "run.json"), "w") as f:
            f.write('{"model": "x"}')
        grid = (f"--weights={g}", "--contexts=100", "--depths=0.5", "--instances=1", f"--tokenizer={self.tokenizer}")
        self.assert_one_line_error(run("eval", "passkey", *grid, f"--out={self.dir}/pk_a", f"--dump={run_dir}/run.json"),
                                   f"--dump={run_dir}/run.json is a file of the training run in ")
        with open(os.path.join(run_dir, "run.json")) as f:
            self.assertEqual(f.read(), '{"model": "x"}')
        out = os.path.join(self.dir, "pk_b")
        self.assert_one_line_error(run("eval", "passkey", *grid, f"--out={out}", f"--dump={out}/passkey.json"),
                                   f"--dump={out}/passkey.json is the results file {out}/passkey.json of this evaluation")
        w = self.init()
        out = os.path.join(self.dir, "ppl_out")
        os.makedirs(out)
        data = os.path.join(out, "ppl.csv")
        with open(data, "w") as f:
            f.write("a text to evaluate " * 20)
        self.assert_one_line_error(run("eval", "ppl", f"--weights={w}", f"--data={data}", "--seq_len=8", f"--out={out}",
                                       f"--tokenizer={self.tokenizer}"),
                                   f"--data={data} lies in --out={out}, where this evaluation writes its results")
        with open(data) as f:
            self.assertEqual(f.read(), "a text to evaluate " * 20)
        # A run's directory as --out: the results went among the run's files.
        t = self.tokens(np.arange(40) % 30)
        self.assert_one_line_error(run("eval", "ppl", f"--weights={w}", f"--data={t}", "--seq_len=8", f"--out={run_dir}"),
                                   f"multiscreen eval ppl: --out={run_dir} is a training run's directory (it holds "
                                   f"run.json): write into a directory of its own (e.g. {run_dir}/eval)")
        self.assertEqual(os.listdir(run_dir), ["run.json"])

    def test_results_already_in_out_are_refused_without_resume(self):
        # A field report: `eval ppl --out=DIR` over another evaluation's ppl.json replaced it.
        w = self.init()
        t = self.tokens(np.random.default_rng(3).integers(0, 36, size=6 * 17))
        out = os.path.join(self.dir, "taken")
        common = (f"--weights={w}", f"--data={t}", "--stream", f"--out={out}")
        self.assertEqual(run("eval", "ppl", *common, "--seq_len=16", "--documents=2").returncode, 0)
        files = {n: open(os.path.join(out, n), "rb").read() for n in ("ppl.json", "ppl_state.json", "ppl.csv")}
        for flags in (["--seq_len=16"], ["--seq_len=8"]):  # the same evaluation again, or another one
            self.assert_one_line_error(run("eval", "ppl", *common, *flags),
                                       f"multiscreen eval ppl: --out={out} already holds {out}/ppl.json: --resume "
                                       "continues that evaluation (refused if it is another), or give another --out")
        os.remove(os.path.join(out, "ppl.json"))  # a run stopped before its first results: the state alone
        self.assert_one_line_error(run("eval", "ppl", *common, "--seq_len=16"), f"already holds {out}/ppl_state.json: --resume")
        for name, data in files.items():
            if name != "ppl.json":
                with open(os.path.join(out, name), "rb") as f:
                    self.assertEqual(f.read(), data, name)
        # --resume continues it.
        self.assertEqual(run("eval", "ppl", *common, "--seq_len=16", "--resume").returncode, 0)
        with open(os.path.join(out, "ppl.json")) as f:
            self.assertEqual(json.load(f)["documents"], 6)

    def test_text_evaluations_refuse_a_tokenizer_larger_than_the_model(self):
        # Issue 31: a small-vocabulary model fed GPT-2 ids reported "perplexity 97.00" (V = 97) and exited 0.
        w = self.init("tiny_psi2")
        text = os.path.join(self.dir, "small_v.txt")
        with open(text, "w") as f:
            f.write("The quick brown fox jumps over the lazy dog. " * 10)
        out = os.path.join(self.dir, "small_v")
        for cmd in (["ppl", f"--data={text}", "--seq_len=16"], ["passkey", "--contexts=120", "--depths=0"],
                    ["abcdigits", "--contexts=400", "--depths=0.5"]):
            r = run("eval", *cmd, f"--weights={w}", f"--out={out}", f"--tokenizer={self.tokenizer}")
            self.assert_one_line_error(r, "--tokenizer: its 50257 tokens do not fit model tiny_psi2's V = 37")

    def test_ppl_reads_text_and_jsonl(self):
        w = self.init("tiny_gpt2_vocab")
        text = os.path.join(self.dir, "a.txt")
        with open(text, "w") as f:
            f.write("The quick brown fox jumps over the lazy dog. " * 10)
        j, _ = self.ppl(f"--weights={w}", f"--data={text}", "--seq_len=40", f"--tokenizer={self.tokenizer}")
        self.assertEqual(j["documents"], 1)
        jl = os.path.join(self.dir, "a.jsonl")
        with open(jl, "w") as f:
            f.write(json.dumps({"text": "short"}) + "\n" + json.dumps({"text": "Hello world. " * 20}) + "\n")
        j, _ = self.ppl(f"--weights={w}", f"--data={jl}", "--seq_len=30", f"--tokenizer={self.tokenizer}")
        self.assertEqual((j["documents"], j["skipped_short"]), (1, 1))

    # ---- abcdigits, passkey ---------------------------------------------------------------
    def test_generate_only_dumps_equal_the_golden_files(self):
        for path in sorted(glob.glob(os.path.join(HERE, "testdata", "abcdigits_*.jsonl"))):
            m = re.match(r"abcdigits_(lines|tokens)_(\d+)_d([0-9.]+)_n(\d+)_s(\d+)\.jsonl", os.path.basename(path))
            mode, length, depth, n, seed = m.groups()
            dump = os.path.join(self.dir, "dump.jsonl")
            r = run("eval", "abcdigits", "--generate_only", f"--mode={mode}", f"--length={length}", f"--depth={depth}",
                    f"--instances={n}", f"--generator_seed={seed}", f"--dump={dump}", f"--tokenizer={self.tokenizer}")
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(dump, "rb") as a, open(path, "rb") as b:
                self.assertEqual(a.read(), b.read(), path)

    def test_abcdigits_scores_what_generate_generates(self):
        w = self.init("tiny_gpt2_vocab")
        out = os.path.join(self.dir, "abc")
        dump = os.path.join(self.dir, "abc.jsonl")
        r = run("eval", "abcdigits", f"--weights={w}", "--contexts=400,450", "--depths=0.2,0.8", "--instances=2",
                f"--dump={dump}", f"--out={out}", f"--tokenizer={self.tokenizer}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("cell 4/4", r.stderr)
        with open(os.path.join(out, "abcdigits.json")) as f:
            res = json.load(f)
        self.assertEqual([(c["context"], c["depth"], c["instances"]) for c in res["cells"]],
                         [(400, 0.2, 2), (400, 0.8, 2), (450, 0.2, 2), (450, 0.8, 2)])
        with open(dump) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual(len(rows), 8)
        for cell in res["cells"]:
            mine = [x for x in rows if x["context"] == cell["context"] and x["depth"] == cell["depth"]]
            self.assertEqual(cell["correct"], sum(x["correct"] for x in mine))
        for x in rows[:2]:
            g = run("generate", f"--weights={w}", f"--prompt={x['prompt']}", "--max_tokens=6",
                    f"--tokenizer={self.tokenizer}")
            self.assertEqual(g.returncode, 0, g.stderr)
            self.assertEqual(g.stdout[len(x["prompt"]):-1][:6], x["output"])
            self.assertEqual(x["correct"], x["output"] == x["answer"])
        # --resume with every cell done runs none; with a new context only that one.
        r = run("eval", "abcdigits", f"--weights={w}", "--contexts=400,450,420", "--depths=0.2,0.8", "--instances=2",
                "--resume", f"--out={out}", f"--tokenizer={self.tokenizer}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(re.findall(r"cell \d+/6", r.stderr)), 2, r.stderr)

    def test_passkey_grid_runs_and_scores_each_cell(self):
        w = self.init("tiny_gpt2_vocab")
        out = os.path.join(self.dir, "pk")
        r = run("eval", "passkey", f"--weights={w}", "--contexts=120", "--depths=0,1", "--instances=2", f"--out={out}",
                f"--tokenizer={self.tokenizer}")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "passkey.csv")) as f:
            rows = f.read().splitlines()
        self.assertEqual(rows[0], "context,depth,instances,correct,accuracy")
        self.assertEqual(len(rows), 3)
        # Depths are plain decimals (strtod read "0x0.8" as 0.5); a blank is refused
        # (comma-separated without blanks, as docs/commands.md says).
        r = run("eval", "passkey", f"--weights={w}", "--contexts=120", "--depths=0,0x0.8", "--instances=2",
                f"--out={out}_hex", f"--tokenizer={self.tokenizer}")
        self.assert_one_line_error(r, "--depths=0,0x0.8: '0x0.8' is not a number in [0, 1]")
        r = run("eval", "passkey", f"--weights={w}", "--contexts=120", "--depths=0, 0.5", "--instances=2",
                f"--out={out}_blank", f"--tokenizer={self.tokenizer}")
        self.assert_one_line_error(r, "--depths=0, 0.5", "holds a blank")

    # ---- the Transformer baseline (issue 18) -----------------------------------------------
    def test_the_transformer_runs_ppl_abcdigits_passkey_ttft_and_refuses_relevance(self):
        w = self.init("tiny_gpt2_transformer")
        with h5py.File(w, "r+") as f:  # off the init (std 0.02), so predictions are far from uniform
            for name in ("layers/000/W_Q", "layers/000/W_K", "layers/001/W_Q", "layers/001/W_K", "embed/W_E"):
                f[name][...] = f[name][...] * 20
            del f.attrs["params_crc32c"]
        B, T = 2, 24
        t = self.tokens(np.random.default_rng(5).integers(0, 1000, size=B * (T + 1)))
        fwd = os.path.join(self.dir, "fwd.h5")
        r = run("forward", f"--weights={w}", f"--tokens={t}", f"--micro_batch={B}", f"--seq_len={T}", f"--out={fwd}")
        self.assertEqual(r.returncode, 0, r.stderr)
        with h5py.File(fwd) as f:
            expected = f["token_losses"][()].mean(axis=0)
        self.assertGreater(np.ptp(expected), 0.1)  # not a uniform model
        j, _ = self.ppl(f"--weights={w}", f"--data={t}", f"--seq_len={T}", "--stream", "--method=full")
        np.testing.assert_allclose(j["mean_loss"], expected, rtol=0, atol=1e-5)
        j2, _ = self.ppl(f"--weights={w}", f"--data={t}", f"--seq_len={T}", "--stream", "--method=decode")
        np.testing.assert_allclose(j2["mean_loss"], expected, rtol=0, atol=1e-4)
        # abcdigits scores the tokens `generate` (the KV cache) prints for its prompts.
        out, dump = os.path.join(self.dir, "abc_t"), os.path.join(self.dir, "abc_t.jsonl")
        r = run("eval", "abcdigits", f"--weights={w}", "--contexts=400", "--depths=0.5", "--instances=2",
                f"--dump={dump}", f"--out={out}", f"--tokenizer={self.tokenizer}")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(dump) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual(len(rows), 2)
        for x in rows:
            g = run("generate", f"--weights={w}", f"--prompt={x['prompt']}", "--max_tokens=6",
                    f"--tokenizer={self.tokenizer}")
            self.assertEqual(g.returncode, 0, g.stderr)
            self.assertEqual(g.stdout[len(x["prompt"]):-1][:6], x["output"])
        r = run("eval", "passkey", f"--weights={w}", "--contexts=120", "--depths=0", "--instances=1",
                f"--out={self.dir}/pk_t", f"--tokenizer={self.tokenizer}")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run("eval", "ttft", f"--weights={w}", "--context=64", "--repeats=2", "--warmup=0", f"--out={self.dir}/tt")
        self.assertEqual(r.returncode, 0, r.stderr)
        text = os.path.join(self.dir, "rel.txt")
        with open(text, "w") as f:
            f.write("The quick brown fox jumps over the lazy dog.\n")
        r = run("eval", "relevance", f"--weights={w}", f"--text={text}", f"--out={self.dir}/rel",
                f"--tokenizer={self.tokenizer}")
        self.assert_one_line_error(r, "is a Transformer: relevance maps are Multiscreen's")
        # --as_learned keeps Multiscreen's learned windows; a Transformer has none.
        r = run("eval", "ttft", f"--weights={w}", "--context=64", "--as_learned", f"--out={self.dir}/tt2")
        self.assert_one_line_error(r, "--as_learned: model")
        r = run("generate", f"--weights={w}", "--prompt=hi", "--as_learned", f"--tokenizer={self.tokenizer}")
        self.assert_one_line_error(r, "which has no learned windows to keep")
        # A Transformer's decoding cache grows with every token: --max_tokens whose cache would not
        # fit in memory is refused before decoding (it decoded for ever, printing nothing).
        r = run("generate", f"--weights={w}", "--prompt=hi", "--max_tokens=2000000000", f"--tokenizer={self.tokenizer}")
        self.assert_one_line_error(r, "--max_tokens=2000000000: the decoding cache of 2000000001 positions", "available")
        # Past 2^31 - 1 tokens (all kept on the host) it is refused whatever the model and device.
        for n in ("2147483648", "4294967296", "99999999999999", "-1"):
            r = run("generate", f"--weights={w}", "--prompt=hi", f"--max_tokens={n}", f"--tokenizer={self.tokenizer}")
            self.assert_one_line_error(r, f"--max_tokens={n}: expected 0 to 2^31 - 1")

    # ---- ttft ---------------------------------------------------------------------------
    def test_ttft_reports_median_mean_and_spread(self):
        w = self.init()
        out = os.path.join(self.dir, "ttft")
        r = run("eval", "ttft", f"--weights={w}", "--context=64", "--repeats=3", "--warmup=1", f"--out={out}")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "ttft_64.json")) as f:
            j = json.load(f)
        self.assertEqual(len(j["times_s"]), 3)
        self.assertEqual(j["median_s"], sorted(j["times_s"])[1])
        self.assertAlmostEqual(j["mean_s"], sum(j["times_s"]) / 3)
        self.assertLessEqual(j["min_s"], j["median_s"])
        self.assertAlmostEqual(j["tokens_per_s"], 64 / j["median_s"], places=3)
        self.assertIn(j["first_token"], range(37))

    # ---- --device, --precision (issue 29; the device itself: eval_device_test.py) ---------------
    def test_device_and_precision_flags(self):
        w = self.init()
        t = self.tokens(np.random.default_rng(6).integers(0, 36, size=2 * 33))
        common = (f"--weights={w}", f"--data={t}", "--seq_len=32", "--stream")
        fp32, r = self.ppl(*common)
        self.assertEqual((fp32["device"], fp32["precision"], fp32["device_bytes_peak"]), ("cpu", "fp32", 0))
        self.assertIn("full pass (cpu, fp32)", r.stdout)
        # bf16 on the CPU: the GEMM operands rounded (the CPU table's bf16), the full pass.
        bf16, r = self.ppl(*common, "--precision=bf16")
        self.assertEqual((bf16["device"], bf16["precision"], bf16["method"]), ("cpu", "bf16", "full"))
        self.assertIn("full pass (cpu, bf16)", r.stdout)
        a, b = np.array(fp32["mean_loss"]), np.array(bf16["mean_loss"])
        self.assertLessEqual(np.max(np.abs(b - a) / a), 1e-2)
        self.assertGreater(np.max(np.abs(b - a)), 1e-6)
        out = f"--out={self.dir}/o"
        # Without CUDA in the build, or without a visible GPU, the kernel table's one line.
        r = run("eval", "ppl", *common, "--device=cuda", f"--out={self.dir}/on_cuda")  # runs on the emulated device
        if r.returncode != 0:
            self.assert_one_line_error(r, "multiscreen eval ppl: --device=cuda: ", "CUDA")
        self.assert_one_line_error(run("eval", "ttft", f"--weights={w}", "--device=tpu", out),
                                   "--device=tpu: expected cpu or cuda")
        self.assert_one_line_error(run("eval", "ppl", *common, "--precision=fp16", out),
                                   "--precision=fp16: expected fp32 or bf16")
        # The CPU's decoding cache is fp32: refused under bf16 on the CPU (before the weights are
        # read), naming both flags and the device that decodes in bf16.
        self.assert_one_line_error(run("eval", "ppl", *common, "--method=decode", "--precision=bf16", out),
                                   "--method=decode with --precision=bf16", "fp32", "--device=cuda")
        g = self.init("tiny_gpt2_vocab", seed=4)
        self.assert_one_line_error(run("eval", "passkey", f"--weights={g}", "--contexts=120", "--depths=0", "--instances=1",
                                       "--precision=bf16", out, f"--tokenizer={self.tokenizer}"),
                                   "--precision=bf16: on the CPU the grid decodes with the decoding cache, in fp32")
        self.assert_one_line_error(run("eval", "relevance", f"--weights={w}", "--text=x.txt", "--device=cpu", out),
                                   "--device is not a flag of 'eval relevance'")
        # Results written before device and precision were recorded ran on the CPU in fp32:
        # they resume there.
        part = os.path.join(self.dir, "old_state")
        r = run("eval", "ppl", *common, "--documents=1", f"--out={part}")
        self.assertEqual(r.returncode, 0, r.stderr)
        state_path = os.path.join(part, "ppl_state.json")
        with open(state_path) as f:
            state = json.load(f)
        del state["identity"]["device"], state["identity"]["precision"]
        with open(state_path, "w") as f:
            json.dump(state, f)
        r = run("eval", "ppl", *common, "--resume", f"--out={part}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("resuming after 1 windows", r.stderr)
        self.assert_one_line_error(run("eval", "ppl", *common, "--resume", "--precision=bf16", f"--out={part}"),
                                   "is of another evaluation: precision = \"fp32\" there, \"bf16\" here")

    # ---- relevance ------------------------------------------------------------------------
    def test_relevance_lists_every_tile_and_the_pairs_of_the_chosen_ones(self):
        w = self.init("tiny_gpt2_vocab")
        text = os.path.join(self.dir, "t.txt")
        with open(text, "w") as f:
            f.write("The history of the world is a story of people.")
        out = os.path.join(self.dir, "rel")
        r = run("eval", "relevance", f"--weights={w}", f"--text={text}", "--layers=1", "--map_tiles=0", "--as_learned",
                f"--out={out}", f"--tokenizer={self.tokenizer}")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "relevance.json")) as f:
            j = json.load(f)
        n = len(j["tokens"])
        self.assertEqual(n, 11)  # GPT-2: The| history| of| the| world| is| a| story| of| people|.
        self.assertEqual([(t["layer"], t["tile"]) for t in j["tiles"]], [(0, 0), (0, 1), (1, 0), (1, 1)])
        self.assertEqual([(m["layer"], m["tile"]) for m in j["maps"]], [(1, 0)])
        tile = j["tiles"][2]
        self.assertEqual(len(j["maps"][0]["pairs"]), tile["nonzero_pairs"])
        # At initialization s_w = 0 in tile 0: w = 2, so each query sees itself and one key back.
        self.assertAlmostEqual(tile["w"], 2.0, places=5)
        self.assertEqual(tile["window_pairs"], 1 + 2 * (n - 1))
        for i, jj, alpha, m in j["maps"][0]["pairs"]:
            self.assertIn(i - jj, (0, 1))
            self.assertAlmostEqual(m, 1.0 if i == jj else 0.5, places=6)  # Softmask: ½(cos(π d/2) + 1)
        with open(os.path.join(out, "tiles.csv")) as f:
            self.assertEqual(len(f.read().splitlines()), 1 + 4)

    # ---- what the run recorded --------------------------------------------------------------
    def test_a_checkpoint_brings_its_tokenizer_and_training_length(self):
        data = os.path.join(self.dir, "data")
        os.makedirs(data)
        write_tokens(os.path.join(data, "train_000000.bin"), np.random.default_rng(4).integers(0, 50257, size=4000))
        run_dir = os.path.join(self.dir, "run")
        r = subprocess.run([BIN, "train", f"--config={SOURCE}/configs/train/tiny_test.textproto",
                            "--model=tiny_gpt2_vocab", f"--data={data}", f"--run_dir={run_dir}",
                            "--steps=2", "--seq_len=16", "--checkpoint_every=2", "--eval_every=0"],
                           capture_output=True, text=True, timeout=120, cwd=SOURCE)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(run_dir, "data.json")) as f:
            recorded = json.load(f)
        self.assertEqual(sorted(recorded), ["max_seq_len", "tokenizer_dir"])
        self.assertEqual(recorded["max_seq_len"], 16)
        self.assertTrue(os.path.isabs(recorded["tokenizer_dir"]))
        self.assertTrue(os.path.samefile(recorded["tokenizer_dir"], self.tokenizer))
        text = os.path.join(self.dir, "a.txt")
        with open(text, "w") as f:
            f.write("Hello world, this is a test of the recorded tokenizer. " * 4)
        # From another directory, without --tokenizer or --train_len.
        out = os.path.join(self.dir, "o")
        ckpt = os.path.join(run_dir, "checkpoints", "step_00000002")
        r = subprocess.run([BIN, "eval", "ppl", f"--checkpoint={ckpt}", f"--data={text}", "--seq_len=20", f"--out={out}"],
                           capture_output=True, text=True, timeout=120, cwd="/")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "ppl.json")) as f:
            j = json.load(f)
        self.assertEqual((j["train_len"], j["train_len_source"]), (16, os.path.join(run_dir, "data.json")))
        g = subprocess.run([BIN, "generate", f"--checkpoint={run_dir}", "--prompt=Hello", "--max_tokens=2"],
                           capture_output=True, text=True, timeout=120, cwd="/")
        self.assertEqual(g.returncode, 0, g.stderr)
        # The recorded directory is the one used: a wrong one is named.
        recorded["tokenizer_dir"] = os.path.join(self.dir, "gone")
        with open(os.path.join(run_dir, "data.json"), "w") as f:
            json.dump(recorded, f)
        r = subprocess.run([BIN, "eval", "ppl", f"--checkpoint={run_dir}", f"--data={text}", "--seq_len=20",
                            f"--out={out}_2"], capture_output=True, text=True, timeout=120, cwd="/")
        self.assert_one_line_error(r, "data.json", "--tokenizer")

    # ---- errors -------------------------------------------------------------------------
    def test_outputs_stay_out_of_checkpoints_and_never_replace_a_fifo(self):
        # Retention deletes a checkpoint directory whole: results written into one would go
        # with it. A FIFO as --dump would be replaced by the rename that writes it.
        run_dir = os.path.join(self.dir, "run")
        r = run("ckpt", "init", "--model=tiny_psi2", "--seed=3", "--tp=1", "--pp=1", f"--out={run_dir}")
        self.assertEqual(r.returncode, 0, r.stderr)
        ckpts = os.path.join(run_dir, "checkpoints")
        before = sorted(os.listdir(os.path.join(ckpts, "step_00000000")))
        for out in (ckpts, os.path.join(ckpts, "step_00000000"), os.path.join(ckpts, "step_00000000", "ttft")):
            r = run("eval", "ttft", f"--checkpoint={run_dir}", "--context=8", "--repeats=1", f"--out={out}")
            self.assert_one_line_error(r, f"--out={out} lies inside the checkpoint directory")
        self.assertEqual(sorted(os.listdir(os.path.join(ckpts, "step_00000000"))), before)
        r = run("eval", "ttft", f"--checkpoint={run_dir}", "--context=8", "--repeats=1",
                f"--out={os.path.join(run_dir, 'eval')}")
        self.assertEqual(r.returncode, 0, r.stderr)
        fifo = os.path.join(self.dir, "fifo")
        os.mkfifo(fifo)
        r = run("eval", "abcdigits", "--generate_only", "--mode=lines", "--length=64", "--depth=0.5",
                "--instances=1", f"--dump={fifo}")
        self.assert_one_line_error(r, f"--dump={fifo}: is a FIFO")
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode))

    def test_bad_inputs_fail_in_one_line(self):
        w = self.init()
        missing = os.path.join(self.dir, "nope")
        self.assert_one_line_error(run("eval", "ttft", f"--checkpoint={missing}", f"--out={self.dir}/o"), missing)
        self.assert_one_line_error(run("eval", "ttft", f"--weights={w}", "--context=10000000000", f"--out={self.dir}/o"),
                                   "--context=10000000000", "GiB")
        self.assert_one_line_error(run("eval", "frobnicate"), "frobnicate")
        # The largest --seq_len: the estimate saturates (it wrapped to a small number and passed).
        t = self.tokens(np.arange(40) % 30)
        big = "9223372036854775807"
        for method in ("auto", "full", "decode"):
            self.assert_one_line_error(run("eval", "ppl", f"--weights={w}", f"--data={t}", f"--seq_len={big}",
                                           f"--method={method}", f"--out={self.dir}/o"),
                                       f"--seq_len={big}: the ", "pass needs about 8589934592.00 GiB")
        self.assert_one_line_error(run("eval", "ttft", f"--weights={w}", f"--context={big}", f"--out={self.dir}/o"),
                                   f"--context={big}: the prefill needs about 8589934592.00 GiB")
        self.assert_one_line_error(run("eval", "ttft", f"--weights={w}", "--contexts=5", f"--out={self.dir}/o"), "--contexts")
        self.assert_one_line_error(run("eval", "abcdigits", "--generate_only", "--mode=lines", "--length=49",
                                       f"--dump={self.dir}/d.jsonl"), "--length=49")
        # --generate_only runs no model: a --checkpoint beside it was ignored without a word.
        for flag in (f"--checkpoint={self.dir}/run", f"--weights={w}", "--device=cpu", "--contexts=100",
                     f"--out={self.dir}/o", "--threads=1"):
            self.assert_one_line_error(run("eval", "abcdigits", "--generate_only", "--mode=lines", "--length=64",
                                           f"--dump={self.dir}/d.jsonl", flag),
                                       f"{flag.split('=')[0]} with --generate_only: it writes one cell's instances "
                                       "to --dump alone, without a model")
        self.assertFalse(os.path.exists(f"{self.dir}/d.jsonl"))
        # Another evaluation's flag: the line names this evaluation's usage, as every command's does.
        self.assert_one_line_error(run("eval", "ppl", f"--weights={w}", "--repeats=3", f"--out={self.dir}/o"),
                                   "multiscreen eval ppl: --repeats is not a flag of 'eval ppl'; usage: multiscreen eval "
                                   "ppl (--checkpoint=DIR | --weights=W.h5) --data=FILE --seq_len=N --out=DIR [--documents=K "
                                   "--stride=S")
        r = run("eval", "ttft", f"--weights={w}", "--depths=0.5")
        self.assert_one_line_error(r, "usage: multiscreen eval ttft (--checkpoint=DIR | --weights=W.h5) --context=N")
        self.assertNotIn("eval ppl", r.stderr)
        # A grid context past the machine's memory is refused before anything is generated.
        g = self.init("tiny_gpt2_vocab", seed=4)
        self.assert_one_line_error(run("eval", "abcdigits", f"--weights={g}", "--depths=0.5,2", f"--out={self.dir}/o",
                                       f"--tokenizer={self.tokenizer}"), "--depths")
        # Issue 31: duplicates made cells twice; a context too short was named --length.
        self.assert_one_line_error(run("eval", "abcdigits", f"--weights={g}", "--contexts=400,450,400",
                                       f"--out={self.dir}/o", f"--tokenizer={self.tokenizer}"),
                                   "--contexts=400,450,400: 400 is given twice")
        self.assert_one_line_error(run("eval", "passkey", f"--weights={g}", "--depths=0.5,0.5", f"--out={self.dir}/o",
                                       f"--tokenizer={self.tokenizer}"), "--depths=0.5,0.5: 0.5 is given twice")
        self.assert_one_line_error(run("eval", "abcdigits", f"--weights={g}", "--mode=lines", "--contexts=5",
                                       f"--out={self.dir}/o", f"--tokenizer={self.tokenizer}"),
                                   "--contexts: 5: lines mode needs at least 50 lines")
        self.assert_one_line_error(run("eval", "abcdigits", f"--weights={g}", "--mode=lines", "--contexts=1000000000",
                                       f"--out={self.dir}/o", f"--tokenizer={self.tokenizer}", timeout=30),
                                   "--contexts: 1000000000 lines need about", "GiB")
        # None of these refusals left its --out behind (the setup makes it before each evaluation
        # checks its own flags); a directory that was there stays, with what it held.
        self.assertFalse(os.path.exists(f"{self.dir}/o"))
        kept = os.path.join(self.dir, "kept")
        os.makedirs(kept)
        open(os.path.join(kept, "x"), "w").close()
        self.assert_one_line_error(run("eval", "passkey", f"--weights={g}", "--depths=0.5,0.5", f"--out={kept}",
                                       f"--tokenizer={self.tokenizer}"), "0.5 is given twice")
        self.assertEqual(os.listdir(kept), ["x"])


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    args, rest = p.parse_known_args()
    BIN = os.path.abspath(args.multiscreen)
    SOURCE = os.path.abspath(args.source)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
