#!/usr/bin/python3
"""`multiscreen eval choice` end to end (issue 30) on tiny models with GPT-2's vocabulary:
the hand-made items of tests/eval/testdata/choice_*.jsonl in the four formats. Every
per-choice log-likelihood is recomputed here without the code under test: the prompts
are built in Python from the published fields (lm-evaluation-harness's rules, written
out below), tokenized by `multiscreen tokenize`, and scored by `multiscreen forward`'s
per-token losses of each whole sequence; acc and acc_norm (per character) follow from
those sums with numpy. Also: left truncation at --seq_len, the Transformer baseline, and
one-line errors (a malformed line names file:line and the field).

Run: /usr/bin/python3 tests/eval/choice_cli_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import gzip
import json
import os
import re
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
EOS = 50256
# What the tests only read, made once for the whole file: `tokenize`'s ids of a text, the
# initialized weights of a model, and `forward`'s token losses of a sequence under them.
TOKENS = {}
WEIGHTS = {}
LOSSES = {}



def read(path):
    with open(path) as f:
        return f.read()


def run(*args, stdin=None, timeout=120):
    return subprocess.run([BIN, *args], input=stdin, capture_output=True, text=True, timeout=timeout)


# ---- the prompts, from the published fields (lm-eval's task definitions) ----------------
def hellaswag_preprocess(text):
    text = text.strip().replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def candidates(fmt, d):
    """[(context, choice)] per candidate, the gold index, and whether the continuation is
    shared (WinoGrande's partial scoring)."""
    if fmt == "hellaswag":
        ctx = d["ctx_a"] + " " + d["ctx_b"].capitalize() if "ctx_a" in d else d["ctx"]
        if "activity_label" in d:
            ctx = d["activity_label"] + ": " + ctx
        ctx = hellaswag_preprocess(ctx)
        return [(ctx, hellaswag_preprocess(e)) for e in d["endings"]], int(d["label"])
    if fmt == "piqa":
        ctx = "Question: " + d["goal"] + "\nAnswer:"
        return [(ctx, d["sol1"]), (ctx, d["sol2"])], int(d["label"])
    if fmt == "arc":
        if isinstance(d["question"], dict):
            stem, texts = d["question"]["stem"], [c["text"] for c in d["question"]["choices"]]
            labels = [c["label"] for c in d["question"]["choices"]]
        else:
            stem, texts, labels = d["question"], d["choices"]["text"], d["choices"]["label"]
        letter = {"1": "A", "2": "B", "3": "C", "4": "D", "5": "E"}
        gold = [letter.get(l, l) for l in labels].index(letter.get(d["answerKey"], d["answerKey"]))
        return [("Question: " + stem + "\nAnswer:", t) for t in texts], gold
    # winogrande: the sentence up to "_" with the option, then the rest after "_"
    i = d["sentence"].index("_")
    rest = d["sentence"][i + 1:].strip()
    return [(d["sentence"][:i] + d["option1"], rest), (d["sentence"][:i] + d["option2"], rest)], int(d["answer"]) - 1


class ChoiceCliTest(OneLineErrors):
    @classmethod
    def setUpClass(cls):
        cls.shared = tempfile.TemporaryDirectory()  # the weights, read by every test

    @classmethod
    def tearDownClass(cls):
        cls.shared.cleanup()

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.tokenizer = os.path.join(SOURCE, "data_cache", "gpt2")

    def tearDown(self):
        self.tmp.cleanup()

    def init(self, model, seed=3):
        if (model, seed) not in WEIGHTS:
            w = os.path.join(self.shared.name, f"{model}_{seed}.h5")  # configs/models/tiny_gpt2_vocab or tiny_gpt2_transformer
            r = run("init", f"--model={model}", f"--seed={seed}", f"--out={w}")
            self.assertEqual(r.returncode, 0, r.stderr)
            WEIGHTS[model, seed] = w
        return WEIGHTS[model, seed]

    def encode(self, text):
        if text not in TOKENS:
            r = run("tokenize", f"--tokenizer={self.tokenizer}", stdin=text)
            self.assertEqual(r.returncode, 0, r.stderr)
            TOKENS[text] = [int(t) for t in r.stdout.split()]
        return TOKENS[text]

    def forward_losses(self, w, seqs):
        """`forward`'s token losses of each sequence: −log p(ids[i+1] | ids[..i]). The ones
        not yet known run in one `forward`, each sequence a row of the batch, padded on the
        right with EOS to the longest: the model is causal, so what follows a position
        changes nothing of its loss."""
        todo = sorted({tuple(ids) for ids in seqs if (w, tuple(ids)) not in LOSSES})
        if todo:
            T = max(len(ids) for ids in todo) - 1
            t = os.path.join(self.dir, "seqs.bin")
            write_tokens(t, np.concatenate([np.asarray(ids + (EOS,) * (T + 1 - len(ids))) for ids in todo]))
            out = os.path.join(self.dir, "fwd.h5")
            r = run("forward", f"--weights={w}", f"--tokens={t}", f"--micro_batch={len(todo)}", f"--seq_len={T}",
                    f"--out={out}")
            self.assertEqual(r.returncode, 0, r.stderr)
            with h5py.File(out) as f:
                losses = f["token_losses"][()].astype(np.float64)
            for row, ids in zip(losses, todo):
                LOSSES[w, ids] = row[:len(ids) - 1]
        return [LOSSES[w, tuple(ids)] for ids in seqs]

    def expected(self, w, fmt, path, seq_len=4096):
        """Per item: the log-likelihoods, gold, and len(choice), computed here."""
        items = []  # per item: gold, and per candidate (sequence, continuation tokens, len(choice))
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                cands, gold = candidates(fmt, json.loads(line))
                scored = []
                for ctx, choice in cands:
                    cont = " " + choice
                    n = len(ctx) - len(ctx.rstrip())  # trailing whitespace goes with the continuation
                    if n:
                        ctx, cont = ctx[:-n], ctx[-n:] + cont
                    ctx_ids, whole = self.encode(ctx), self.encode(ctx + cont)
                    n_cont = len(whole) - len(ctx_ids)
                    scored.append((whole[-(seq_len + 1):], n_cont, len(choice)))
                items.append((gold, scored))
        losses = iter(self.forward_losses(w, [seq for _, scored in items for seq, _, _ in scored]))
        return [(np.array([-next(losses)[-n_cont:].sum() for _, n_cont, _ in scored]), gold,
                 np.array([chars for _, _, chars in scored], dtype=np.float64)) for gold, scored in items]

    def choice(self, w, fmt, path, *extra):
        out = os.path.join(self.dir, "out")
        r = run("eval", "choice", f"--weights={w}", f"--task={path}", f"--format={fmt}", f"--out={out}",
                f"--tokenizer={self.tokenizer}", *extra)
        self.assertEqual(r.returncode, 0, r.stderr)
        name = os.path.basename(path)
        stem = os.path.splitext(name[:-len(".gz")] if name.endswith(".gz") else name[:-len(".zst")] if name.endswith(".zst")
                                else name)[0]
        with open(os.path.join(out, f"choice_{stem}.json")) as f:
            summary = json.load(f)
        with open(os.path.join(out, f"choice_{stem}.jsonl")) as f:
            rows = [json.loads(l) for l in f]
        return summary, rows, r

    def check(self, w, fmt, *extra, seq_len=4096, path=None):
        path = path or os.path.join(HERE, "testdata", f"choice_{fmt}.jsonl")
        summary, rows, r = self.choice(w, fmt, path, *extra)
        want = self.expected(w, fmt, path, seq_len)
        self.assertEqual(len(rows), len(want))
        acc = acc_norm = 0
        for row, (lls, gold, lens) in zip(rows, want):
            np.testing.assert_allclose(row["loglik"], lls, rtol=0, atol=2e-4, err_msg=f"{fmt} item {row['index']}")
            self.assertEqual(row["gold"], gold)
            self.assertEqual(row["chars"], lens.astype(int).tolist())
            with np.errstate(divide="ignore", invalid="ignore"):  # an empty choice: ll / 0 = -inf, as lm-eval's numpy
                normed = lls / lens
            self.assertEqual(row["pred"], int(np.argmax(lls)))
            self.assertEqual(row["pred_norm"], int(np.argmax(normed)))
            acc += int(np.argmax(lls)) == gold
            acc_norm += int(np.argmax(normed)) == gold
        n = len(want)
        self.assertEqual(summary["n"], n)
        self.assertAlmostEqual(summary["acc"], acc / n)
        self.assertAlmostEqual(summary["acc_norm"], acc_norm / n)
        p = acc / n
        self.assertAlmostEqual(summary["acc_stderr"], np.sqrt(p * (1 - p) / (n - 1)))
        self.assertEqual(summary["format"], fmt)
        return summary, rows, r

    def test_each_format_scores_the_continuations_forward_scores(self):
        w = self.init("tiny_gpt2_vocab")
        rows_of = {}
        for fmt in ("hellaswag", "piqa", "arc", "winogrande"):
            with self.subTest(fmt=fmt):
                summary, rows_of[fmt], r = self.check(w, fmt)
                self.assertIn("acc_norm", r.stdout)
                self.assertEqual(summary["truncated"], 0)
        # HellaSwag's third item has an ending with "é": 23 characters, 24 bytes.
        self.assertEqual(rows_of["hellaswag"][2]["chars"][3], len("Café au lait is served."))

    def test_long_contexts_are_cut_on_the_left(self):
        w = self.init("tiny_gpt2_vocab")
        # Item 1's longest sequence has 12 tokens, item 2's 23 (a 12-token continuation).
        summary, rows, r = self.check(w, "piqa", "--seq_len=14", seq_len=14)
        self.assertEqual(summary["truncated"], 1)
        self.assertEqual([row["truncated"] for row in rows], [False, True])
        self.assertIn("context cut on the left to fit --seq_len=14: 1 of 2 items", r.stdout)

    def test_the_memory_check_is_of_the_longest_item_not_of_seq_len(self):
        # Items far shorter than --seq_len are scored whole; the check (and the left cut) do
        # not overflow at the largest --seq_len.
        w = self.init("tiny_gpt2_vocab")
        summary, rows, _ = self.check(w, "piqa", "--seq_len=9223372036854775807")
        self.assertEqual(summary["truncated"], 0)

    def test_the_transformer_baseline_is_scored_the_same_way(self):
        w = self.init("tiny_gpt2_transformer")
        self.check(w, "winogrande")
        self.check(w, "arc")

    def test_outputs_of_another_task_of_the_same_name_are_not_overwritten(self):
        w = self.init("tiny_gpt2_vocab")
        piqa = os.path.join(HERE, "testdata", "choice_piqa.jsonl")
        a, b = os.path.join(self.dir, "a", "test.jsonl"), os.path.join(self.dir, "b", "test.jsonl")
        for path, lines in ((a, read(piqa)), (b, read(piqa).splitlines()[0] + "\n")):
            os.makedirs(os.path.dirname(path))
            with open(path, "w") as f:
                f.write(lines)
        out = os.path.join(self.dir, "out")
        summary, rows, _ = self.choice(w, "piqa", a)
        files = [os.path.join(out, "choice_test.json"), os.path.join(out, "choice_test.jsonl")]
        before = [read(f) for f in files]
        r = run("eval", "choice", f"--weights={w}", f"--task={b}", "--format=piqa", f"--out={out}", f"--tokenizer={self.tokenizer}")
        self.assert_one_line_error(r, f"--out={out} already holds {files[0]} of --task={os.path.realpath(a)}, not of --task={b}")
        self.assertEqual([read(f) for f in files], before)
        # A run of the same task that fails while scoring leaves the earlier pair as it was.
        r = run("eval", "choice", f"--weights={w}", f"--task={a}", "--format=piqa", f"--out={out}", "--seq_len=3",
                f"--tokenizer={self.tokenizer}")
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual([read(f) for f in files], before)
        # The same task again is refused without --resume (as ppl's, abcdigits' and passkey's
        # results are); --resume of the finished run scores nothing and reports the same.
        r = run("eval", "choice", f"--weights={w}", f"--task={a}", "--format=piqa", f"--out={out}", f"--tokenizer={self.tokenizer}")
        self.assert_one_line_error(r, f"--out={out} already holds {files[0]}: --resume continues that evaluation")
        summary2, rows2, r = self.choice(w, "piqa", a, "--resume")
        self.assertIn("resuming after 2 of 2 items", r.stderr)
        self.assertEqual(rows2, rows)
        self.assertEqual(len(rows), 2)
        self.assertEqual((summary2["acc"], summary2["n"], summary2["complete"]), (summary["acc"], 2, True))

    def test_errors_are_one_line(self):
        w = self.init("tiny_gpt2_vocab")
        bad = os.path.join(self.dir, "bad.jsonl")
        with open(bad, "w") as f:
            f.write('{"goal": "g", "sol1": "a", "sol2": "b", "label": 0}\n\n{"goal": "g", "sol1": "a", "label": 0}\n')
        out = os.path.join(self.dir, "o")
        r = run("eval", "choice", f"--weights={w}", f"--task={bad}", "--format=piqa", f"--out={out}")
        self.assert_one_line_error(r, f"{bad}:3: field \"sol2\": expected a string (missing)")
        r = run("eval", "choice", f"--weights={w}", f"--task={bad}", "--format=mmlu", f"--out={out}")
        self.assert_one_line_error(r, "--format=mmlu: expected hellaswag, piqa, arc or winogrande")
        r = run("eval", "choice", f"--weights={w}", f"--task={bad}", f"--out={out}")
        self.assert_one_line_error(r, "--format=hellaswag|piqa|arc|winogrande is required")
        r = run("eval", "choice", f"--weights={w}", "--format=piqa", f"--out={out}")
        self.assert_one_line_error(r, "--task=FILE.jsonl is required")
        piqa = os.path.join(HERE, "testdata", "choice_piqa.jsonl")
        r = run("eval", "choice", f"--weights={w}", f"--task={piqa}", "--format=piqa", f"--out={out}", "--seq_len=3",
                f"--tokenizer={self.tokenizer}")
        self.assert_one_line_error(r, f"{piqa}:1: choice 1: the continuation has 4 tokens, more than the 3 positions of --seq_len")
        r = run("eval", "choice", f"--weights={w}", f"--task={piqa}", "--format=piqa", f"--out={out}", "--stride=2")
        self.assert_one_line_error(r, "--stride is not a flag of 'eval choice'")
        # --threads, listed among every evaluation's flags, is taken (and checked) by choice too.
        r = run("eval", "choice", f"--weights={w}", f"--task={piqa}", "--format=piqa", f"--out={out}", "--threads=-1")
        self.assert_one_line_error(r, "--threads=-1: expected 0 (all cores) to 1024")
        r = run("eval", "choice", f"--weights={w}", f"--task={piqa}", "--format=piqa", f"--out={out}",
                "--threads=100000")
        self.assert_one_line_error(r, "--threads=100000: expected 0 (all cores) to 1024")

    def write(self, name, lines):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(b"".join((l if isinstance(l, bytes) else json.dumps(l).encode()) + b"\n" for l in lines))
        return path

    def test_empty_choices_are_scored_as_lm_eval_scores_them(self):
        # The continuation is " " (one token) and len(choice) 0: acc may pick it, acc_norm
        # (ll / 0 = -inf) does not. Each case failed the whole run before.
        w = self.init("tiny_gpt2_vocab")
        cases = {
            "piqa": [{"goal": "Open a jar", "sol1": "twist the lid off", "sol2": "", "label": 0},
                     {"goal": "Dry shoes", "sol1": "", "sol2": "stuff them with paper", "label": 1}],
            "hellaswag": [{"ctx": "A man sits down.", "endings": ["He eats.", "[substeps]", " [title] ", "He reads."],
                           "label": 0},
                          {"ctx": "She opens the door.", "endings": ["[step]", "She walks in.", "It rains.", "[header]"],
                           "label": 1}],
            "winogrande": [{"sentence": "The cup fell off the shelf because _", "option1": "it", "option2": "the shelf",
                            "answer": "1"},
                           {"sentence": "Anna gave Mia the book so _ could read.", "option1": "Anna", "option2": "Mia",
                            "answer": "2"}],
        }
        for fmt, lines in cases.items():
            with self.subTest(fmt=fmt):
                path = self.write(f"empty_{fmt}.jsonl", lines)
                summary, rows, _ = self.check(w, fmt, path=path)
                empty = [(row, k) for row in rows for k, c in enumerate(row["chars"]) if c == 0]
                self.assertTrue(empty)
                for row, k in empty:
                    self.assertEqual(row["tokens"][k], 1)  # " "
                    if min(row["chars"]) < max(row["chars"]):
                        self.assertNotEqual(row["pred_norm"], k)
                shutil.rmtree(os.path.join(self.dir, "out"))

    def test_an_item_with_one_choice_is_refused_naming_its_line(self):
        w = self.init("tiny_gpt2_vocab")
        path = self.write("arc1.jsonl", [
            {"question": {"stem": "Q", "choices": [{"text": "x", "label": "A"}, {"text": "y", "label": "B"}]}, "answerKey": "A"},
            {"question": {"stem": "Q", "choices": [{"text": "x", "label": "A"}]}, "answerKey": "A"}])
        r = run("eval", "choice", f"--weights={w}", f"--task={path}", "--format=arc", f"--out={self.dir}/o",
                f"--tokenizer={self.tokenizer}")
        self.assert_one_line_error(r, f"{path}:2: 1 choice: an item needs 2 or more")

    def test_json_errors_and_bytes_that_are_not_utf8_are_one_readable_line(self):
        w = self.init("tiny_gpt2_vocab")
        args = [f"--weights={w}", "--format=piqa", f"--out={self.dir}/o", f"--tokenizer={self.tokenizer}"]
        path = self.write("big.jsonl", [b'{"goal": "g", "sol1": "a", "sol2": "b", "label": 1e999}'])
        r = run("eval", "choice", f"--task={path}", *args)
        self.assert_one_line_error(r, f"{path}:1: not valid JSON (number overflow parsing '1e999')")
        self.assertNotIn("json.exception", r.stderr)
        # A line with the byte ff, in a file whose name holds the bytes fe and ff: the
        # error is UTF-8 (the bytes written as \xNN), whatever the file held.
        path = os.path.join(os.fsencode(self.dir), b"bad\xfe\xff.jsonl")
        with open(path, "wb") as f:
            f.write(b'{"goal": "\xff", "sol1": "a", "sol2": "b", "label": 0}\n')
        r = subprocess.run([BIN, "eval", "choice", b"--task=" + path, *args], capture_output=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        r.stderr.decode("utf-8")  # raises on bytes that are not UTF-8
        self.assert_one_line_error(r, "bad\\xfe\\xff.jsonl:1: not valid JSON", "\\xff")

    def resumed_run(self, w, task, *extra, tokenizer=None):
        return run("eval", "choice", f"--weights={w}", f"--task={task}", "--format=hellaswag", f"--out={self.dir}/out",
                   f"--tokenizer={tokenizer or self.tokenizer}", "--resume", *extra)

    def test_resume_continues_after_the_items_scored_and_checks_what_it_continues(self):
        w = self.init("tiny_gpt2_vocab")
        task = os.path.join(self.dir, "hella.jsonl")
        # The items with 2 MiB in a field the reader ignores, so that a sampled fingerprint
        # (1 MiB of the file) would miss an edit.
        with open(os.path.join(HERE, "testdata", "choice_hellaswag.jsonl")) as f:
            lines = f.read().splitlines()
        last = json.loads(lines[-1])
        last["source_id"] = "x" * (2 << 20)
        with open(task, "w") as f:
            f.write("\n".join(lines[:-1] + [json.dumps(last)]) + "\n")
        summary, rows, _ = self.choice(w, "hellaswag", task)
        self.assertEqual(len(rows), 4)
        items = os.path.join(self.dir, "out", "choice_hella.jsonl")
        # A run stopped after item 0, while writing item 1's row: row 0 (its log-likelihoods
        # marked, to see that they are not computed again) and half of row 1.
        marked = dict(rows[0], loglik=[-1.0, -2.0, -3.0, -4.0])
        with open(items, "w") as f:
            f.write(json.dumps(marked) + "\n" + json.dumps(rows[1])[:40])
        r = self.resumed_run(w, task)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("resuming after 1 of 4 items", r.stderr)
        with open(items) as f:
            resumed = [json.loads(l) for l in f]
        self.assertEqual(resumed, [marked] + rows[1:])
        # The same weights under another name are the same weights (by content) ...
        copy = os.path.join(self.dir, "copy.h5")
        shutil.copy(w, copy)
        r = self.resumed_run(copy, task)
        self.assertEqual(r.returncode, 0, r.stderr)
        # ... other weights, another --seq_len or a changed task file are another evaluation.
        r = self.resumed_run(self.init("tiny_gpt2_vocab", seed=4), task)
        self.assert_one_line_error(r, "--resume: ", "is of another evaluation: ", "weights_crc32 = ")
        r = self.resumed_run(w, task, "--seq_len=64")
        self.assert_one_line_error(r, "is of another evaluation: seq_len = 4096 there, 64 here")
        # The same task moved elsewhere is the same task (by content) ...
        moved = os.path.join(self.dir, "moved", "hella.jsonl")
        os.makedirs(os.path.dirname(moved))
        shutil.copy(task, moved)
        r = self.resumed_run(w, moved)
        self.assertEqual(r.returncode, 0, r.stderr)
        # ... one byte edited in place (same size) is not, wherever the edit lies: here
        # between two of the 256 blocks of 4 KiB that SampledFileFingerprint would read.
        with open(moved, "rb") as f:
            text = bytearray(f.read())
        span = len(text) - 4096
        at = span * 128 // 255 + 4096 + 100
        self.assertLess(at, span * 129 // 255)
        self.assertEqual(text[at], ord("x"))
        text[at] = ord("y")
        with open(moved, "wb") as f:
            f.write(bytes(text))
        r = self.resumed_run(w, moved)
        self.assert_one_line_error(r, "is of another evaluation: task_fingerprint = ")
        # ... nor is the text encoded by another tokenizer (one merge fewer).
        other_tokenizer = os.path.join(self.dir, "tokenizer")
        shutil.copytree(self.tokenizer, other_tokenizer)
        with open(os.path.join(other_tokenizer, "vocab.bpe"), "rb+") as f:
            merges = f.read().rstrip(b"\n").split(b"\n")
            f.seek(0)
            f.truncate()
            f.write(b"\n".join(merges[:-1]) + b"\n")
        r = self.resumed_run(w, task, tokenizer=other_tokenizer)
        self.assert_one_line_error(r, "is of another evaluation: tokenizer_crc32c = ")
        # Back at its first path the task resumes (and the summary names that path again).
        r = self.resumed_run(w, task)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(task, "a") as f:
            f.write(read(os.path.join(HERE, "testdata", "choice_hellaswag.jsonl")).splitlines()[0] + "\n")
        r = self.resumed_run(w, task)
        self.assert_one_line_error(r, "is of another evaluation: task_fingerprint = ")
        # Without results to continue, --resume says so.
        r = run("eval", "choice", f"--weights={w}", f"--task={task}", "--format=hellaswag", f"--out={self.dir}/new",
                f"--tokenizer={self.tokenizer}", "--resume")
        self.assert_one_line_error(r, f"--resume: {self.dir}/new/choice_hella.json is missing or not JSON")

    def test_compressed_tasks_are_read_as_prepare_reads_them(self):
        w = self.init("tiny_gpt2_vocab")
        plain = os.path.join(HERE, "testdata", "choice_piqa.jsonl")
        _, want, _ = self.choice(w, "piqa", plain)
        shutil.rmtree(os.path.join(self.dir, "out"))
        gz = os.path.join(self.dir, "piqa.jsonl.gz")
        with open(plain, "rb") as f, gzip.open(gz, "wb") as g:
            g.write(f.read())
        zst = os.path.join(self.dir, "zst", "piqa.jsonl.zst")
        os.makedirs(os.path.dirname(zst))
        subprocess.run(["zstd", "-q", plain, "-o", zst], check=True)
        for path in (gz, zst):
            with self.subTest(path=path):
                summary, rows, _ = self.choice(w, "piqa", path)  # choice_piqa.json: named without .jsonl.gz
                self.assertEqual(rows, want)
                self.assertEqual(summary["n"], 2)
                shutil.rmtree(os.path.join(self.dir, "out"))
        # Compressed data under a plain name is named as such (it said "not valid JSON").
        for path, kind, suffix in ((gz, "gzip data (magic 1f 8b)", ".gz"), (zst, "zstd data (magic 28 b5 2f fd)", ".zst")):
            with self.subTest(unnamed=suffix):
                bare = os.path.join(self.dir, f"piqa{suffix}_plain.jsonl")
                shutil.copy(path, bare)
                r = run("eval", "choice", f"--weights={w}", f"--task={bare}", "--format=piqa", f"--out={self.dir}/out",
                        f"--tokenizer={self.tokenizer}")
                self.assert_one_line_error(r, f"{bare}: {kind} under a name without {suffix}: name it {bare}{suffix} "
                                           "to have it decompressed")

    def test_help_gives_choices_meaning_of_format(self):
        r = run("eval", "choice", "--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("for eval choice the benchmark format of --task: hellaswag, piqa, arc or winogrande (required there)", r.stdout)
        self.assertIn("choice's --format (required) is the benchmark's: hellaswag|piqa|arc|winogrande", r.stdout)
        self.assertIn("[--threads=N]", r.stdout)
        # The top-level list names choice; generate's usage its window, YaRN and device flags.
        r = run("--help")
        self.assertIn("| choice --task=F --format=B", r.stdout + r.stderr)
        self.assertIn("--as_learned --yarn_factor=F|auto", r.stdout + r.stderr)
        self.assertIn("--device=cpu|cuda --precision=fp32|bf16]", r.stdout + r.stderr)
        r = run("generate", "--help")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--train_len=T --as_learned --yarn_factor=F|auto --yarn_ramp=paper|code "
                      "--sigmoid_bias_length=N|auto --device=cpu|cuda --precision=fp32|bf16]", r.stdout.split("\n\n")[0])


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    args, rest = p.parse_known_args()
    BIN, SOURCE = os.path.abspath(args.multiscreen), os.path.abspath(args.source)
    unittest.main(argv=[sys.argv[0]] + rest)
