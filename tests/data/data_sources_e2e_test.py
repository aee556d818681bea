#!/usr/bin/python3
"""End to end (issue 19): `train` on a 30/70 mixture of two named sources logs tokens
per source in exact proportion and a validation loss per source (metrics.jsonl and
TensorBoard), and resumes onto the uninterrupted run's losses; the same tokens as a
Megatron pair (tools/megatron_indexed.py) or a nanoGPT raw uint16 file train exactly
as the llm.c shard does; bad sources are one line naming the file or field.

Run: /usr/bin/python3 tests/data/data_sources_e2e_test.py --multiscreen=build/multiscreen --source=.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

BIN = SRC = None
VOCAB = 97
T, B, ACCUM = 32, 4, 2  # configs/train/tiny_test.textproto


def write_llmc(path, tokens):
    sys.path.insert(0, os.path.join(SRC, "tools"))
    from random_tokens import write_tokens
    write_tokens(path, np.asarray(tokens))


def stream(seed, n, reverse=False):
    """A learnable stream: shifted copies of 0..VOCAB-1 (descending when `reverse`)."""
    rng = np.random.default_rng(seed)
    base = np.arange(VOCAB)[::-1] if reverse else np.arange(VOCAB)
    s = np.concatenate([np.roll(base, int(rng.integers(VOCAB))) for _ in range(n // VOCAB + 1)])
    return s[:n]


def read_metrics(run_dir):
    sys.path.insert(0, os.path.join(SRC, "tools"))
    from metrics import read_metrics as r
    return r(os.path.join(run_dir, "metrics.jsonl"))


def train(args, check=True):
    env = dict(os.environ, OMP_NUM_THREADS="2")
    r = subprocess.run([BIN, "train"] + args, capture_output=True, text=True, env=env, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"train {' '.join(args)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return r


class DataSourcesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.tmp.name
        web, code = stream(1, 24000), stream(2, 24000, reverse=True)
        for name, s in (("web", web), ("code", code)):
            os.makedirs(os.path.join(d, name))
            write_llmc(os.path.join(d, name, "train_000000.bin"), s[:20000])
            write_llmc(os.path.join(d, name, "val_000000.bin"), s[20000:])
        with open(os.path.join(SRC, "configs", "train", "tiny_test.textproto")) as f:
            base = f.read()
        cls.mix = os.path.join(d, "mix.textproto")
        with open(cls.mix, "w") as f:
            f.write(base + f"""
data {{
  sources {{ name: "web" weight: 0.3 paths: "{d}/web" }}
  sources {{ name: "code" weight: 0.7 paths: "{d}/code" }}
  val_sources {{ name: "web" paths: "{d}/web" }}
  val_sources {{ name: "code" paths: "{d}/code" }}
}}
""")
        cls.base = base

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, *names):
        return os.path.join(self.tmp.name, *names)

    def test_a_30_70_mixture_trains_and_logs_both_validation_losses(self):
        run = self.path("run_mix")
        r = train([f"--config={self.mix}", f"--run_dir={run}", "--steps=20"])
        rows = read_metrics(run)
        steps = [m for m in rows if "loss" in m]
        self.assertEqual(len(steps), 20)
        for m in steps:
            self.assertEqual(m["tokens/web"] + m["tokens/code"], m["tokens"])
            samples = m["step"] * B * ACCUM
            if samples % 10 == 0:  # whole blocks of the 30/70 schedule: exact
                self.assertEqual(m["tokens/web"], samples * 3 // 10 * T, m)
        self.assertEqual(steps[-1]["tokens/web"], 48 * T)  # 160 samples: 48 of web, 112 of code
        vals = [m for m in rows if "val_loss" in m]
        self.assertEqual([m["step"] for m in vals], [10, 20])
        for m in vals:
            self.assertAlmostEqual(m["val_loss"], (m["val_loss/web"] + m["val_loss/code"]) / 2, places=12)
            self.assertNotEqual(m["val_loss/web"], m["val_loss/code"])
        self.assertLess(vals[-1]["val_loss/web"], np.log(VOCAB) - 1.0)  # learned, from ln 97 = 4.57
        self.assertLess(vals[-1]["val_loss/code"], np.log(VOCAB) - 1.0)
        self.assertRegex(r.stdout, r"val_loss/web \d+\.\d+ val_loss/code \d+\.\d+")
        with open(os.path.join(run, "tb", os.listdir(os.path.join(run, "tb"))[0]), "rb") as f:
            events = f.read()
        for tag in (b"val_loss/web", b"val_loss/code", b"train/tokens/web"):
            self.assertIn(tag, events)

    def test_a_mixture_resumes_onto_the_uninterrupted_losses(self):
        whole, parts = self.path("run_whole"), self.path("run_parts")
        train([f"--config={self.mix}", f"--run_dir={whole}", "--steps=16", "--eval_every=0"])
        train([f"--config={self.mix}", f"--run_dir={parts}", "--steps=7", "--eval_every=0"])
        train([f"--config={self.mix}", f"--run_dir={parts}", "--steps=16", "--eval_every=0"])
        a = {m["step"]: (m["loss"], m["tokens/web"]) for m in read_metrics(whole) if "loss" in m}
        b = {m["step"]: (m["loss"], m["tokens/web"]) for m in read_metrics(parts) if "loss" in m}
        self.assertEqual(sorted(b), list(range(1, 17)))
        self.assertEqual(a, b)  # bit-identical losses, resumed mid-block (56 samples)

    def test_a_resume_with_a_changed_weight_names_the_weight(self):
        # Issue 31: refused as "trained on other data" while both sides printed the same
        # token counts and fingerprints.
        run = self.path("run_reweighted")
        train([f"--config={self.mix}", f"--run_dir={run}", "--steps=6", "--eval_every=0", "--checkpoint_every=3"])
        heavier = self.path("mix_reweighted.textproto")
        with open(self.mix) as f:
            text = f.read().replace('name: "web" weight: 0.3', 'name: "web" weight: 0.5')
        with open(heavier, "w") as f:
            f.write(text)
        r = train([f"--config={heavier}", f"--run_dir={run}", "--steps=9", "--eval_every=0"], check=False)
        self.assertNotEqual(r.returncode, 0)
        line = r.stderr.strip().splitlines()[-1]
        self.assertIn("was trained on other data (", line)
        self.assertRegex(line, r"web: 20000 tokens, fingerprint \w+, weight 0\.3;.*this run has .*web: 20000 tokens, "
                               r"fingerprint \w+, weight 0\.5")

    def test_megatron_and_raw_files_of_the_same_tokens_train_identically(self):
        shard = self.path("web", "train_000000.bin")
        prefix = self.path("web_text_document")
        subprocess.run([sys.executable, os.path.join(SRC, "tools", "megatron_indexed.py"), f"--prefix={prefix}",
                        "--dtype=int32", f"--from_llmc={shard}", "--eos=0"], check=True, capture_output=True)
        raw = self.path("nanogpt_train.bin")
        stream(1, 24000)[:20000].astype(np.uint16).tofile(raw)
        losses = {}
        for name, data in (("llmc", [f"--data={shard}"]), ("megatron", [f"--data={prefix}"]),
                           ("megatron_idx", [f"--data={prefix}.idx"]),
                           ("raw", [f"--data={raw}", "--format=raw_uint16"])):
            run = self.path(f"run_{name}")
            train([f"--config={os.path.join(SRC, 'configs', 'train', 'tiny_test.textproto')}", f"--run_dir={run}",
                   "--steps=6", "--eval_every=0"] + data)
            losses[name] = [m["loss"] for m in read_metrics(run) if "loss" in m]
        self.assertEqual(len(losses["llmc"]), 6)
        for name in ("megatron", "megatron_idx", "raw"):
            self.assertEqual(losses[name], losses["llmc"], name)

    def test_an_id_past_2_31_is_named_as_the_file_holds_it(self):
        # A uint32 (version 2) shard's id 2^31 + 5 was reported as "token id -2147483643".
        cfg = os.path.join(SRC, "configs", "train", "tiny_test.textproto")
        wide = self.path("wide.bin")
        ids = stream(1, 3000)
        ids[::30] = 2**31 + 5  # one in every window of 33 tokens
        write_llmc(wide, ids)
        r = train([f"--config={cfg}", f"--run_dir={self.path('wide_run')}", f"--data={wide}", "--steps=1"],
                  check=False)
        self.assertNotEqual(r.returncode, 0)
        line = r.stderr.strip().splitlines()[-1]
        self.assertIn("holds token id 2147483653, outside the vocabulary V = 97", line)

    def test_a_gap_in_the_shard_numbers_is_refused_naming_the_missing_ones(self):
        # train_000000.bin and train_000005.bin trained without a word on what was left.
        cfg = os.path.join(SRC, "configs", "train", "tiny_test.textproto")
        gap = self.path("gap")
        os.makedirs(gap, exist_ok=True)
        for n in (0, 5):
            write_llmc(os.path.join(gap, f"train_{n:06d}.bin"), stream(n, 3000))
        r = train([f"--config={cfg}", f"--run_dir={self.path('gap_run')}", f"--data={gap}", "--steps=1"], check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(f"{gap}: train_000001.bin to train_000004.bin are missing from the numbering (lost shards?)",
                      r.stderr.strip().splitlines()[-1])
        self.assertFalse(os.path.exists(self.path("gap_run")))

    def test_bad_sources_are_one_line_errors(self):
        cfg = os.path.join(SRC, "configs", "train", "tiny_test.textproto")
        big = self.path("big_ids.u16")
        ids = stream(1, 3000).astype(np.uint16)
        ids[1234] = 60000
        ids.tofile(big)
        r = train([f"--config={cfg}", f"--run_dir={self.path('bad1')}", f"--data={big}", "--steps=400"], check=False)
        self.assertNotEqual(r.returncode, 0)
        line = r.stderr.strip().splitlines()[-1]
        self.assertIn(f"{big}: token 1234: training window", line)
        self.assertIn("holds token id 60000, outside the vocabulary V = 97", line)

        # A bad id in a held-out window is met at the start, before step 1 (it used to end
        # the run at its first validation, before that step's checkpoint).
        bad_val = self.path("bad_val")
        os.makedirs(bad_val, exist_ok=True)
        held = stream(3, 4000)
        held[700] = 60000
        write_llmc(os.path.join(bad_val, "val_000000.bin"), held)
        web = self.path("web")
        path = self.path("bad_val.textproto")
        with open(path, "w") as f:
            f.write(self.base + f'data {{ sources {{ name: "web" weight: 1 paths: "{web}" }} '
                                f'val_sources {{ name: "held" paths: "{bad_val}" }} }}\n')
        run_dir = self.path("bad_val_run")
        r = train([f"--config={path}", f"--run_dir={run_dir}", "--eval_windows=40", "--eval_every=6"], check=False)
        self.assertNotEqual(r.returncode, 0)
        line = r.stderr.strip().splitlines()[-1]
        self.assertIn(f"validation source held: {bad_val}/val_000000.bin: token 700: validation window 21 holds token "
                      "id 60000, outside the vocabulary V = 97", line)
        self.assertNotIn("step 1/", r.stderr)
        self.assertFalse(os.path.exists(run_dir))

        def config_error(data):
            path = self.path("bad.textproto")
            with open(path, "w") as f:
                f.write(self.base + "data { " + data + " }\n")
            r = train([f"--config={path}", f"--run_dir={self.path('bad2')}"], check=False)
            self.assertNotEqual(r.returncode, 0)
            lines = r.stderr.strip().splitlines()
            return lines[-1]

        web = self.path("web")
        self.assertIn(f"bad.textproto: data.sources[1] (b): weight -0.5 (expected a finite number >= 0)",
                      config_error(f'sources {{ name: "a" weight: 1 paths: "{web}" }} '
                                   f'sources {{ name: "b" weight: -0.5 paths: "{web}" }}'))
        self.assertIn("bad.textproto: data.sources: the weights of the 2 sources sum to 0 (expected > 0)",
                      config_error(f'sources {{ name: "a" paths: "{web}" }} sources {{ name: "b" paths: "{web}" }}'))
        self.assertIn("bad.textproto: data.sources[0] (a): weight inf (expected a finite number >= 0)",
                      config_error(f'sources {{ name: "a" weight: inf paths: "{web}" }}'))
        tiny = self.path("tiny_train.u16")
        np.arange(20, dtype=np.uint16).tofile(tiny)
        self.assertIn(f"data source small: {tiny}: holds 20 tokens, fewer than the 33 a window needs (seq_len + 1)",
                      config_error(f'sources {{ name: "web" weight: 1 paths: "{web}" }} '
                                   f'sources {{ name: "small" weight: 1 paths: "{tiny}" }}'))
        idx = self.path("web_text_document.idx")
        if not os.path.exists(idx):
            self.test_megatron_and_raw_files_of_the_same_tokens_train_identically()
        broken = self.path("broken_text_document")
        for ext in (".bin", ".idx"):
            with open(self.path("web_text_document" + ext), "rb") as f, open(broken + ext, "wb") as g:
                g.write(f.read())
        with open(broken + ".bin", "ab") as g:
            g.write(b"\0\0\0\0")
        self.assertIn(f"{broken}.bin: 80004 bytes, but its index {broken}.idx lists 20000 int32 tokens (80000 bytes)",
                      config_error(f'sources {{ name: "m" weight: 1 paths: "{broken}" }}'))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--multiscreen", required=True)
    ap.add_argument("--source", required=True)
    args, rest = ap.parse_known_args()
    BIN, SRC = os.path.abspath(args.multiscreen), os.path.abspath(args.source)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
