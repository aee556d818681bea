#!/usr/bin/python3
"""Fuzzing the files a user hands the tool (issue 21): seeded mutations of a run file
(RunConfig) and a model file (ModelConfig), of llm.c token shards and of tokenizer
files, each run through the commands that read them (`train`, `forward`,
`tokenize`, `prepare`) under a time cap and an address-space cap.

A run passes when it exits 0, or exits non-zero with exactly one error line on stderr
(`multiscreen CMD: ...`; train's own log lines, "[I] ..." / "[W] ..." and progress
lines, may come before it). It fails on a signal, on the time cap (a hang), on the
memory cap (an error saying "out of memory", or a kill), and, where the mutation makes
success impossible, on exit 0: token ids past the vocabulary in what `forward` reads,
a merges file without merges, a run that ends with a NaN loss.

Fixed seed for CI; more iterations with MULTISCREEN_FUZZ_ITERATIONS=N (cases per
format, default 40), another seed with MULTISCREEN_FUZZ_SEED=S. A failure prints the
case, the command and its stderr; MULTISCREEN_FUZZ_KEEP=DIR keeps every case's files.

Run: /usr/bin/python3 tests/cli/input_fuzz_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import collections
import concurrent.futures
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from cli_errors import OneLineErrors  # noqa: E402

BIN = None
SRC = None
TIME_CAP_S = 20
MEMORY_CAP_BYTES = 2 << 30
ITERATIONS = int(os.environ.get("MULTISCREEN_FUZZ_ITERATIONS", "40"))
SEED = int(os.environ.get("MULTISCREEN_FUZZ_SEED", "21"))
VOCAB = 97  # tiny_psi4's

# A run file like configs/train/tiny_test.textproto with every field written out, so
# that each can be mutated.
RUN_FILE = """model: "{model}"
steps: 40
seed: 1
micro_batch: 4
grad_accum: 2
seq_len: 32
precision: FP32
optimizer {{ lr: 0.0625 beta1: 0.9 beta2: 0.95 eps: 1e-8 weight_decay: 0.1 grad_clip: 1 decay_scalars: true }}
schedule {{ kind: WARMUP_STABLE_DECAY warmup_steps: 4 min_lr_ratio: 0.1 decay_fraction: 0.2 }}
checkpoint {{ every: 10 keep_last: 3 keep_every: 0 }}
eval {{ every: 1 batches: 2 }}
logging {{ tensorboard: false console_every: 10 }}
max_nonfinite_steps: 10
initial_loss_scale: 65536
"""
MODEL_FILE = """name: "fuzz_model"
family: MULTISCREEN
psi: 4
n_layers: 4
n_heads: 4
d_e: 16
d_k: 8
d_v: 16
vocab: 97
w_th: 16
pl_norm: true
eos_token: 96
"""
EXTREMES = ["0", "-1", "1", "2", "99", "1e12", "1000000000000", "1e308", "-1e308", "nan", "inf", "-inf",
            "2147483648", "9223372036854775807", "-9223372036854775808", "1e-320", "0.5"]
ENUM_NUMBERS = ["99", "-1", "0", "4", "2147483647"]


def run_capped(args, stdin=b""):
    """(returncode or None on the time cap, stderr, stdout, seconds). The address-space
    cap and no core files come from the shell that execs the command (preexec_fn is
    not safe with the test's threads)."""
    start = time.time()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    capped = ["/bin/sh", "-c", f'ulimit -v {MEMORY_CAP_BYTES // 1024} && ulimit -c 0 && exec "$0" "$@"', *args]
    p = subprocess.Popen(capped, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env, start_new_session=True)
    try:
        out, err = p.communicate(stdin, timeout=TIME_CAP_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return None, err.decode(errors="replace"), out.decode(errors="replace"), time.time() - start
    return p.returncode, err.decode(errors="replace"), out.decode(errors="replace"), time.time() - start


LOG_LINE = re.compile(r"^(\[[IW]\] |step \d+/\d+ \|)")


def verdict(command, rc, stderr, stdout, must_fail=None):
    """None when the run keeps the contract, else why not."""
    if rc is None:
        return f"no exit within {TIME_CAP_S} s (a hang)"
    if rc < 0:
        return f"killed by signal {signal.Signals(-rc).name}"
    lines = [l for l in stderr.splitlines() if l.strip()]
    if rc == 0:
        if must_fail:
            return f"exit 0, but {must_fail}"
        if "nan" in stdout.lower():
            return "exit 0 with a NaN in its output: " + stdout.strip()[-200:]
        return None
    errors = [l for l in lines if not (command == "train" and LOG_LINE.match(l))]
    if len(errors) != 1 or not errors[0].startswith(f"multiscreen {command}: ") or errors[-1] != lines[-1]:
        return f"exit {rc} without exactly one error line last on stderr"
    if "out of memory" in errors[0] or "bad_alloc" in errors[0]:
        return "hit the memory cap (the input was not bounded before allocating)"
    return None


# --- the tiny tokenizer (GPT-2's byte alphabet, a few merges) ---------------------

def bytes_to_unicode():
    direct = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cp, n = {}, 0
    for b in range(256):
        if b in direct:
            cp[b] = b
        else:
            cp[b] = 256 + n
            n += 1
    return {b: chr(c) for b, c in cp.items()}


def tokenizer_files():
    import json
    stand_in = bytes_to_unicode()
    vocab = {stand_in[b]: b for b in range(256)}
    space = stand_in[ord(" ")]
    vocab.update({"th": 256, "the": 257, space + "th": 258, "<|endoftext|>": 259})
    merges = f"#version: 0.2\nt h\nth e\n{space} th\n"
    return json.dumps(vocab, ensure_ascii=False).encode(), merges.encode()


# --- token shards ------------------------------------------------------------------

def shard_bytes(tokens, version=1, count=None, magic=20240520):
    header = [0] * 256
    header[0], header[1], header[2] = magic, version, len(tokens) if count is None else count
    fmt = "<%dH" % len(tokens) if version == 1 else "<%dI" % len(tokens)
    return struct.pack("<256i", *header) + struct.pack(fmt, *tokens)


class Case:
    """One fuzz case: its name, the files to write (path -> bytes, or a special kind),
    and the commands to run on them."""

    def __init__(self, name):
        self.name = name
        self.files = {}  # relative path -> bytes | "fifo" | "dir" | "dev_zero" | None (absent)
        self.runs = []   # (command, args with {dir} for the case directory, stdin, must_fail reason or None)

    def materialize(self, root):
        for rel, content in self.files.items():
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if content is None:
                continue
            if content == "fifo":
                os.mkfifo(path)
            elif content == "dir":
                os.makedirs(path)
            elif content == "dev_zero":
                os.symlink("/dev/zero", path)
            else:
                with open(path, "wb") as f:
                    f.write(content.replace(b"{dir}", root.encode()))


class InputFuzzTest(OneLineErrors):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="ms_fuzz_")
        cls.root = cls.tmp.name
        rng = random.Random(0)
        # A learnable stream of tiny_psi4's vocabulary, as in train_e2e_test.
        stream = []
        for _ in range(60):
            k = rng.randrange(VOCAB)
            stream += [(k + i) % VOCAB for i in range(VOCAB)]
        cls.train_tokens, cls.val_tokens = stream[:4000], stream[4000:5500]
        cls.weights = os.path.join(cls.root, "w.h5")
        r = subprocess.run([BIN, "init", "--model=tiny_psi4", "--seed=3", f"--out={cls.weights}"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        cls.vocab_json, cls.merges_txt = tokenizer_files()
        cls.corpus = b"the wide one\nthe thin theory\n" * 20

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    # --- mutations ---------------------------------------------------------------

    def mutate_text(self, rng, text, enums):
        """A mutated text-format file and what was done."""
        kind = rng.choice(["number", "number", "number", "enum", "drop", "truncate", "garbage"])
        if kind == "number":
            spans = [m.span(1) for m in re.finditer(r":\s*(-?[0-9][0-9.eE+-]*)", text)]
            a, b = rng.choice(spans)
            value = rng.choice(EXTREMES)
            return text[:a] + value + text[b:], f"number {text[a:b]} -> {value}"
        if kind == "enum":
            spans = [m.span(1) for m in re.finditer(r":\s*(%s)\b" % "|".join(enums), text)]
            if spans:
                a, b = rng.choice(spans)
                value = rng.choice(ENUM_NUMBERS)
                return text[:a] + value + text[b:], f"enum {text[a:b]} -> {value}"
        if kind == "drop":
            fields = list(re.finditer(r"\b\w+: *(\"[^\"]*\"|[^\s}]+) ?", text))
            m = rng.choice(fields)
            return text[:m.start()] + text[m.end():], f"dropped '{m.group(0).strip()}'"
        if kind == "truncate":
            n = rng.randrange(len(text))
            return text[:n], f"truncated to {n} bytes"
        n = rng.randrange(len(text))
        junk = "".join(rng.choice("{}:\"\\ \n#x9-.e") for _ in range(rng.randrange(1, 12)))
        return text[:n] + junk + text[n:], f"garbage {junk!r} at byte {n}"

    def run_file_case(self, rng, i):
        model_case = rng.random() < 0.3
        model_text = MODEL_FILE
        run_text = RUN_FILE.format(model="{dir}/model.textproto" if model_case else "tiny_psi4")
        if model_case:
            model_text, what = self.mutate_text(rng, MODEL_FILE, ["MULTISCREEN"])
            what = "model file: " + what
        else:
            run_text, what = self.mutate_text(rng, run_text, ["FP32", "WARMUP_STABLE_DECAY"])
            what = "run file: " + what
        if rng.random() < 0.08:
            what += "; run file a " + (special := rng.choice(["fifo", "dir", "dev_zero"]))
            run_text = special
        c = Case(f"run{i}: {what}")
        c.files["data/train_000000.bin"] = shard_bytes(self.train_tokens)
        c.files["data/val_000000.bin"] = shard_bytes(self.val_tokens)
        c.files["model.textproto"] = model_text.encode()
        c.files["run.textproto"] = run_text if run_text in ("fifo", "dir", "dev_zero") else run_text.encode()
        # Two steps: a value that wrecks the first update shows as a NaN loss in the second.
        c.runs.append(("train", ["train", "--config={dir}/run.textproto", "--data={dir}/data", "--run_dir={dir}/run",
                                 "--steps=2"], b"", None))
        return c

    def shard_case(self, rng, i):
        tokens = list(self.train_tokens[:400])
        version, count, magic, tail, special = 1, None, 20240520, b"", None
        must_fail = None
        kind = rng.choice(["magic", "version", "count", "truncate", "extend", "ids", "wide_ids", "wide_ids",
                           "special"])
        if kind == "magic":
            magic = rng.choice([0, -1, 20240521, 2**31 - 1])
            what = f"magic {magic}"
        elif kind == "version":
            version = rng.choice([0, 2, 3, -1, 2**31 - 1])
            what = f"version {version} (tokens written as version 1)"
        elif kind == "count":
            count = rng.choice([0, -1, 399, 401, 2**31 - 1, -2**31, 10**9])
            what = f"count {count}"
        elif kind == "truncate":
            what = "truncated"
        elif kind == "extend":
            tail = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
            what = f"{len(tail)} bytes appended"
        elif kind in ("ids", "wide_ids"):
            if kind == "wide_ids":
                version = 2
            at = rng.randrange(40)
            big = rng.choice([VOCAB, 65535, 2**31, 2**32 - 1, 2**31 + VOCAB] if version == 2 else [VOCAB, 65535])
            tokens[at] = big
            what = f"version {version}, token {at} = {big}"
            if at < 18:  # forward reads 2 x 9 tokens
                must_fail = f"token {at} is {big}, past V = {VOCAB}"
        else:
            special = rng.choice(["fifo", "dir", "dev_zero", "empty"])
            what = f"a {special} where the shard is"
        data = shard_bytes(tokens, version=1 if kind == "version" else version, count=count, magic=magic)
        if kind == "version":
            data = data[:4] + struct.pack("<i", version) + data[8:]
        if kind == "truncate":
            n = rng.randrange(len(data))
            data, what = data[:n], f"truncated to {n} bytes"
        data += tail
        c = Case(f"shard{i}: {what}")
        c.files["shard.bin"] = {"empty": b"", None: data}.get(special, special)
        c.files["run.textproto"] = RUN_FILE.format(model="tiny_psi4").replace("every: 1 ", "every: 0 ").encode()
        c.runs.append(("forward", ["forward", f"--weights={self.weights}", "--tokens={dir}/shard.bin",
                                   "--micro_batch=2", "--seq_len=8", "--out={dir}/out.h5"], b"", must_fail))
        c.runs.append(("train", ["train", "--config={dir}/run.textproto", "--data={dir}/shard.bin",
                                 "--run_dir={dir}/run", "--steps=1"], b"", None))
        return c

    def tokenizer_case(self, rng, i):
        target = rng.choice(["encoder.json", "vocab.bpe"])
        files = {"encoder.json": self.vocab_json, "vocab.bpe": self.merges_txt}
        data = files[target]
        must_fail = None
        kind = rng.choice(["truncate", "empty", "header", "huge_id", "huge_id", "duplicate_id", "garbage",
                           "special", "absent"])
        if kind == "truncate":
            n = rng.randrange(len(data))
            data, what = data[:n], f"truncated to {n} bytes"
        elif kind == "empty":
            data, what = b"", "empty"
        elif kind == "header":
            data, what = (b"#version: 0.2\n", "header only") if target == "vocab.bpe" else (b"{}", "{}")
        elif kind in ("huge_id", "duplicate_id") and target == "encoder.json":
            ids = [m.span(1) for m in re.finditer(rb": (\d+)", data)]
            a, b = rng.choice(ids)
            value = (rng.choice([b"100000000", b"2147483647", b"2147483648", b"-1", b"1.5", b"\"x\"", b"1e300"])
                     if kind == "huge_id" else b"7")
            data, what = data[:a] + value + data[b:], f"id {data[a:b].decode()} -> {value.decode()}"
        elif kind == "special":
            data = rng.choice(["fifo", "dir", "dev_zero"])
            what = f"a {data}"
        elif kind == "absent":
            data, what = None, "absent"
        else:
            n = rng.randrange(len(data) + 1)
            junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
            data, what = data[:n] + junk + data[n:], f"{len(junk)} garbage bytes at {n}"
        if target == "vocab.bpe" and kind in ("empty", "header", "special", "absent"):
            must_fail = "the merges file has no merges"
        files[target] = data
        c = Case(f"tokenizer{i}: {target} {what}")
        for name, content in files.items():
            c.files["tok/" + name] = content
        c.files["corpus.txt"] = self.corpus
        c.runs.append(("tokenize", ["tokenize", "--tokenizer={dir}/tok"], b"the wide one", must_fail))
        c.runs.append(("prepare", ["prepare", "--tokenizer={dir}/tok", "--input={dir}/corpus.txt",
                                   "--output={dir}/out", "--val_tokens=0"], b"", must_fail))
        return c

    # --- the test ------------------------------------------------------------------

    def run_case(self, case, index):
        root = os.path.join(self.root, f"case{index:04d}")
        case.materialize(root)
        failures, seconds, outcomes = [], 0.0, []
        for command, args, stdin, must_fail in case.runs:
            argv = [BIN] + [a.replace("{dir}", root) for a in args]
            rc, err, out, s = run_capped(argv, stdin)
            seconds += s
            why = verdict(command, rc, err, out, must_fail)
            outcomes.append((command, "failed" if why else "exit 0" if rc == 0 else "error"))
            if why:
                failures.append(f"{case.name}\n  $ {' '.join(argv)}\n  {why}\n  stderr: {err.strip()[-600:]}")
        keep = os.environ.get("MULTISCREEN_FUZZ_KEEP")
        if keep:
            shutil.copytree(root, os.path.join(keep, f"case{index:04d}"), symlinks=True,
                            ignore_dangling_symlinks=True, dirs_exist_ok=True, ignore=self._no_fifos)
        shutil.rmtree(root, ignore_errors=True)
        return failures, seconds, outcomes

    @staticmethod
    def _no_fifos(directory, names):
        import stat
        return [n for n in names if stat.S_ISFIFO(os.lstat(os.path.join(directory, n)).st_mode)]

    def test_corrupt_inputs_exit_cleanly_with_one_line(self):
        rng = random.Random(SEED)
        cases = []
        for i in range(ITERATIONS):
            cases += [self.run_file_case(rng, i), self.shard_case(rng, i), self.tokenizer_case(rng, i)]
        start = time.time()
        failures, slowest, counts = [], (0.0, ""), collections.Counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            for case, (fails, seconds, outcomes) in zip(cases, pool.map(self.run_case, cases, range(len(cases)))):
                failures += fails
                slowest = max(slowest, (seconds, case.name))
                counts.update(outcomes)
        summary = ", ".join(f"{c} {o} {n}" for (c, o), n in sorted(counts.items()))
        print(f"\n{len(cases)} cases ({sum(len(c.runs) for c in cases)} runs, seed {SEED}) in "
              f"{time.time() - start:.1f} s; slowest {slowest[0]:.1f} s: {slowest[1]}\n{summary}", file=sys.stderr)
        self.assertEqual(failures, [], "\n\n".join(failures))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--multiscreen", required=True)
    parser.add_argument("--source", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    args, rest = parser.parse_known_args()
    BIN = os.path.abspath(args.multiscreen)
    SRC = os.path.abspath(args.source)
    os.environ.setdefault("MULTISCREEN_CONFIG_DIR", os.path.join(SRC, "configs"))
    unittest.main(argv=[sys.argv[0]] + rest)
