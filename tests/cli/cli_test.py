#!/usr/bin/python3
"""End-to-end checks of build/multiscreen's command-line contract (DESIGN
"Command-line contract"): params, init and forward, and a one-line error with
a non-zero exit for every bad input.

Run: /usr/bin/python3 tests/cli/cli_test.py --multiscreen=build/multiscreen
"""
import argparse
import glob
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import unittest

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
from random_tokens import write_tokens  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
# The default tokenizer (scripts/fetch_data), by the checkout's path: ctest runs elsewhere.
TOKENIZER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data_cache", "gpt2")
from cli_errors import OneLineErrors  # noqa: E402

BIN = None

PAPER = {
    "psi8": (4134146, 917698),
    "psi16": (27546626, 14680834),
    "psi32": (286347266, 234884098),
    "psi48": (1304884226, 1189092098),
    "psi64": (3963961346, 3758108674),
}

# The Transformer baseline's Table 4 (spec "Transformer baseline"): total, non-embedding.
PAPER_TRANSFORMER = {
    "transformer_8m": (7613312, 1180416),
    "transformer_45m": (44609024, 18877440),
    "transformer_353m": (353453056, 301989888),
    "transformer_1_3b": (1310935040, 1208008704),
}


def run(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=120)


class CliTest(OneLineErrors):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_a_commands_help_lists_its_own_flags_grouped(self):
        # Issue 31: `train --help` printed 181 lines, every command's flags.
        for command, own, other in ((["train"], "--config", "--prompt"), (["generate"], "--prompt", "--grad_accum"),
                                    (["eval", "passkey"], "--contexts", "--grad_accum")):
            r = run(*command, "--help")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"\n  {own}  ", r.stdout)
            self.assertNotIn(f"  {other}  ", r.stdout)
            self.assertIn("--helpfull lists the flags of every command.", r.stdout)
        # `eval passkey --help`: passkey's usage and flags, not every evaluation's.
        r = run("eval", "passkey", "--help")
        self.assertTrue(r.stdout.startswith("usage: multiscreen eval passkey (--checkpoint=DIR | --weights=W.h5)"),
                        r.stdout)
        for other in ("multiscreen eval ppl", "multiscreen eval ttft", "multiscreen eval abcdigits", "\n  --data  ",
                      "\n  --repeats  ", "\n  --task  "):
            self.assertNotIn(other, r.stdout)
        self.assertIn("--threads=N", r.stdout)
        self.assertIn("\n  --threads  ", r.stdout)
        lines = run("train", "--help").stdout.splitlines()
        self.assertLess(len(lines), 60)
        self.assertIn("train flags:", lines)
        # --helpfull: every command's flags, listed as --help lists a command's, exit 0 (absl's exited 1).
        for command in (["train"], ["eval", "passkey"], ["bench", "decode"]):
            r = run(*command, "--helpfull")
            self.assertEqual((r.returncode, r.stderr), (0, ""), command)
            for own in ("--config", "--prompt", "--grad_accum", "--contexts", "--prompt_tokens", "--threads"):
                self.assertIn(f"\n  {own}  ", r.stdout)
            self.assertGreater(len([l for l in r.stdout.splitlines() if l.startswith("  --")]), 90)
            self.assertIn("\ntrain flags:\n", r.stdout)
            self.assertNotIn("absl", r.stdout)

    def test_a_failed_write_of_the_standard_output_is_an_error(self):
        # `params > /dev/full` exited 0 with nothing written.
        for args in (("params", "--model=tiny_psi4"), ("params", "--model=tiny_psi4", "--json")):
            with open("/dev/full", "w") as full:
                r = subprocess.run([BIN, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
            self.assert_one_line_error(r, "multiscreen params: cannot write the standard output: No space left on device")
        # --help and --version too (they exited 0 into /dev/full).
        for args, who in ((("--help",), "--help"), (("--version",), "--version"), (("train", "--help"), "--help")):
            with open("/dev/full", "w") as full:
                r = subprocess.run([BIN, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
            self.assert_one_line_error(r, f"multiscreen {who}: cannot write the standard output: No space left on device")

    def test_params_json_reproduces_the_paper_table(self):
        for model, (total, non_embedding) in PAPER.items():
            r = run("params", f"--model={model}", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            j = json.loads(r.stdout)
            self.assertEqual(j["total"], total, model)
            self.assertEqual(j["non_embedding"], non_embedding, model)

    def test_params_json_reproduces_the_transformer_table(self):
        for model, (total, non_embedding) in PAPER_TRANSFORMER.items():
            r = run("params", f"--model={model}", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            j = json.loads(r.stdout)
            self.assertEqual(j["family"], "transformer", model)
            self.assertEqual(j["total"], total, model)
            self.assertEqual(j["non_embedding"], non_embedding, model)
            # Per layer 4 d^2 + 3 d floor(8d/3) + 2 d (spec), no final-norm gain.
            d, n_l = j["d_e"], j["n_layers"]
            self.assertEqual(j["d_ff"], 8 * d // 3, model)
            self.assertEqual(j["non_embedding"], n_l * (4 * d * d + 3 * d * (8 * d // 3) + 2 * d), model)
            self.assertEqual(j["norm_gains"], 2 * d * n_l, model)

    def test_transformer_switches_add_their_scalars(self):
        # qk_norm: one scale per head and layer; sio: s_E and s_F.
        path = os.path.join(self.dir, "t8m_all.textproto")
        with open(path, "w") as f:
            f.write('name: "t"\nfamily: TRANSFORMER\nn_layers: 6\nn_heads: 4\nd_e: 128\n'
                    "qk_norm: true\nsio: true\npl_norm: true\n")
        j = json.loads(run("params", f"--model={path}", "--json").stdout)
        self.assertEqual(j["total"], 7613312 + 6 * 4 + 2)
        self.assertEqual((j["qk_norm"], j["sio"], j["pl_norm"]), (True, True, True))

    def test_params_of_the_ablation_model_files_match_the_standard_models(self):
        # Issue 30 (docs/ablations.md): NoPE/RoPE change no count; the gateless files give
        # W_G's parameters to d_v = 96 and match exactly; the table and --json say so.
        for base in ("psi8", "psi32"):
            want = json.loads(run("params", f"--model={base}", "--json").stdout)
            for suffix, position, gate in (("_nope", "nope", True), ("_rope", "rope", True),
                                           ("_nogate", "mipe", False)):
                j = json.loads(run("params", f"--model={base}{suffix}", "--json").stdout)
                self.assertEqual((j["total"], j["non_embedding"]), (want["total"], want["non_embedding"]),
                                 base + suffix)
                self.assertEqual((j["position"], j["output_gate"]), (position, gate), base + suffix)
        table = run("params", "--model=psi8_nogate").stdout
        self.assertIn("output_gate=0", table.splitlines()[0])
        self.assertIn("tile matrices W_Q W_K W_V W_O ", table)
        self.assertIn("4134146", table)
        self.assertIn("position=rope", run("params", "--model=psi8_rope").stdout.splitlines()[0])
        path = os.path.join(self.dir, "t_rope.textproto")
        with open(path, "w") as f:
            f.write("family: TRANSFORMER\nn_layers: 2\nn_heads: 2\nd_e: 8\nposition: ROPE\n")
        self.assert_one_line_error(run("params", f"--model={path}"), "position is a Multiscreen switch")

    def test_ckpt_inspect_prints_the_models_sizes_and_every_switch_its_family_has(self):
        # It printed the model's name only: a checkpoint's attention kind or ablation
        # switches could not be told without reading manifest.json.
        for model, line in (
                ("tiny_transformer_screening",
                 "  family transformer: n_layers=2 n_heads=2 d_e=8 d_k=4 vocab=37 w_th=256 pl_norm=true qk_norm=false "
                 "sio=true attention=screening"),
                ("tiny_transformer",
                 "  family transformer: n_layers=2 n_heads=2 d_e=8 d_k=4 vocab=37 pl_norm=false qk_norm=false "
                 "sio=false attention=softmax"),
                ("tiny_psi4_rope_nogate",
                 "  family multiscreen: n_layers=4 n_heads=4 d_e=16 d_k=8 d_v=16 vocab=97 w_th=16 pl_norm=true "
                 "tanh_norm=true position=rope output_gate=false")):
            out = os.path.join(self.dir, model)
            r = run("ckpt", "init", f"--model={model}", f"--out={out}")
            self.assertEqual(r.returncode, 0, r.stderr)
            r = run("ckpt", "inspect", f"--checkpoint={out}")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"  model {model}, step 0,", r.stdout)
            self.assertIn(line + "\n", r.stdout)

    def test_transformer_model_files_refuse_what_does_not_apply(self):
        path = os.path.join(self.dir, "bad.textproto")
        for body, why in (("family: TRANSFORMER\nn_layers: 2\nn_heads: 3\nd_e: 8\n", "even head width"),
                          ("family: TRANSFORMER\nn_layers: 2\nn_heads: 2\nd_e: 8\nd_k: 4\n", "d_k is a Multiscreen field"),
                          ("psi: 2\nqk_norm: true\n", "qk_norm is a Transformer switch")):
            with open(path, "w") as f:
                f.write(body)
            self.assert_one_line_error(run("params", f"--model={path}"), why)

    def test_an_empty_config_flag_is_named_not_read_as_an_empty_run(self):
        # `--config=` (an unset shell variable) read as an empty run file blamed a later field.
        d = os.path.join(self.dir, "never")
        self.assert_one_line_error(run("train", "--config=", "--data=x", f"--run_dir={d}"),
                                   "--config= is empty: give a run file, or leave the flag out")
        self.assertFalse(os.path.exists(d))

    def test_transformer_forward_writes_every_gradient_and_refuses_cuda(self):
        w, t = self._init_and_tokens(2 * 9, model="tiny_transformer_all")
        r, out = self._forward(w, t, "--device=cpu")
        self.assertEqual(r.returncode, 0, r.stderr)
        with h5py.File(out) as f, h5py.File(w) as wf:
            family = wf.attrs["family"]
            self.assertEqual(family.decode() if isinstance(family, bytes) else family, "transformer")
            names = []
            wf.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
            self.assertEqual(len(names), 3 + 2 * 10)  # W_E, s_E, s_F; 10 tensors per layer
            self.assertAlmostEqual(float(f["loss"][()]), float(np.mean(f["token_losses"][()])), places=5)
            for n in names:
                self.assertEqual(f["grad/" + n].shape, wf[n].shape, n)
                self.assertGreater(np.linalg.norm(f["grad/" + n][()]), 0, n)
        self.assert_one_line_error(self._forward(w, t, "--device=cuda")[0], "--device=cuda: ")
        # generate runs a Transformer (its KV cache, issue 18); this one's V = 37 cannot hold GPT-2's ids.
        self.assert_one_line_error(run("generate", f"--weights={w}", "--prompt=hi"), "is past the model's V = 37")

    def test_a_file_whose_transformer_head_width_disagrees_is_refused_before_any_work(self):
        # d_k sizes the Transformer's buffers: a file whose d_k is not d_e / n_heads (once a
        # heap overrun) or a Multiscreen file with a Transformer switch is one line.
        for model, attr, why in (("tiny_transformer", "d_k", "d_k = 1000 is not the Transformer's head width"),
                                 ("tiny_psi2", "qk_norm", "qk_norm is a Transformer switch")):
            w, t = self._init_and_tokens(2 * 9, model=model)
            with h5py.File(w, "r+") as f:
                f.attrs[attr] = np.int64(1000 if attr == "d_k" else 1)
                if attr == "qk_norm":  # as in a file written before issue 43, with every switch
                    f.attrs["sio"], f.attrs["attention"] = np.int64(0), np.bytes_("softmax")
            self.assert_one_line_error(self._forward(w, t, "--device=cpu")[0], w, why)

    def test_integer_flags_take_decimal_digits_only(self):
        # absl reads integer flags with base detection and blanks stripped: --steps=0x3 trained
        # 3 steps, --steps=" 3" and --seed=+7 were taken. One line naming the flag and its text.
        cfg = os.path.join(self.dir, "never.textproto")
        for flag in ("--steps=0x3", "--steps= 3", "--steps=3 ", "--seed=+7", "--micro_batch=0X10", "--threads=0x2"):
            self.assert_exact_error(run("train", f"--config={cfg}", flag),
                                    f"multiscreen train: {flag}: expected an integer in decimal digits (e.g. 3 or -1; "
                                    "no hex, '+' or blanks)")
        self.assert_one_line_error(run("train", f"--config={cfg}", "--steps", "0x3"), "--steps=0x3: expected an integer in")
        self.assert_one_line_error(run("eval", "abcdigits", "--generate_only", "--generator_seed=0x7b"),
                                   "--generator_seed=0x7b: expected an integer in decimal digits")
        self.assert_one_line_error(run("bench", "decode", "--prompt_tokens= 8"), "--prompt_tokens= 8: expected an integer")
        # A uint64 past 2^64 - 1 is out of range (it said "expected an integer >= 0", which it is).
        self.assert_exact_error(run("eval", "abcdigits", "--generate_only", "--generator_seed=18446744073709551616"),
                                "multiscreen eval abcdigits: --generator_seed=18446744073709551616: expected an integer "
                                "from 0 to 2^64 - 1")
        # The integers of list flags take the same digits ('+320' was 320).
        w, _ = self._init_and_tokens(8, model="tiny_gpt2_vocab")
        self.assert_one_line_error(run("eval", "abcdigits", f"--weights={w}", "--contexts=+320", f"--out={self.dir}/o"),
                                   "--contexts=+320: '+320' is not a positive integer")
        # Decimal digits still reach the command's own checks (a leading zero is decimal, as absl reads it).
        self.assert_one_line_error(run("generate", "--max_tokens=-1", "--prompt=x"), "--max_tokens=-1: expected 0 to")
        self.assert_one_line_error(run("generate", "--max_tokens=010", "--weights=/nonexistent.h5", "--prompt=x"),
                                   "/nonexistent.h5")

    def test_floating_point_flags_take_plain_decimals_only(self):
        # absl reads double flags as strtod does: --lr=0x1p-4 trained at 2^-4, --min_seconds=inf
        # timed for ever, --dp_bucket_mb=" 16" was 16. One line naming the flag and its text.
        cfg = os.path.join(self.dir, "never.textproto")
        for flag in ("--lr=0x1p-4", "--lr=nan", "--dp_bucket_mb= 16", "--collective_timeout=inf", "--lr=1e999"):
            self.assert_one_line_error(run("train", f"--config={cfg}", flag),
                                       f"{flag}: expected a decimal number (e.g. 16, 0.0625 or 1e-3; no hex")
        self.assert_one_line_error(run("train", f"--config={cfg}", "--lr", "0x10"), "--lr=0x10: expected a decimal")
        self.assert_one_line_error(run("bench", "screening", "--min_seconds=inf"), "--min_seconds=inf: expected a decimal")
        self.assert_one_line_error(run("eval", "abcdigits", "--generate_only", "--depth=0x0.8"),
                                   "--depth=0x0.8: expected a decimal")
        flagfile = os.path.join(self.dir, "flags")
        with open(flagfile, "w") as f:
            f.write("--lr=0X1P-4\n")
        self.assert_one_line_error(run("train", f"--flagfile={flagfile}"), "--lr=0X1P-4: expected a decimal")
        r = subprocess.run([BIN, "train", "--fromenv=lr"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, FLAGS_lr="inf"))
        self.assert_one_line_error(r, "--lr=inf: expected a decimal")
        # bench's --w takes inf (the whole sequence); decimals pass the check and reach the command.
        self.assert_one_line_error(run("bench", "screening", "--model=tiny_psi2", "--w=inf", "--T=0"),
                                   "--T=0: must be >= 1")
        self.assert_one_line_error(run("train", f"--config={cfg}", "--lr=1e-3"), cfg)

    def test_a_weights_file_with_an_attribute_or_dataset_its_model_lacks_or_needs_is_refused(self):
        # A screening Transformer's file without its `attention` attribute loaded as softmax,
        # s_w and s_r ignored; a Transformer's w_th (fixed at 256) was ignored when edited.
        # Both readers (forward, and forward --no_grad's streamed one) refuse, naming file
        # and attribute or dataset.
        def refused(edit, model, *why):
            w, t = self._init_and_tokens(2 * 9, model=model)
            with h5py.File(w, "r+") as f:
                edit(f)
                del f.attrs["params_crc32c"]  # as an edit with h5py must (the checksum is not the check here)
            for flags in ((), ("--no_grad",)):
                r, _ = self._forward(w, t, "--device=cpu", *flags)
                self.assert_one_line_error(r, f"{w}: ", *why)

        def delete(name):
            return lambda f: f.attrs.__delitem__(name)

        def put(name, value):
            return lambda f: f.attrs.__setitem__(name, value)

        refused(delete("qk_norm"), "tiny_transformer_screening",
                "root attribute qk_norm is missing, though family, which files gained with it, is present")
        refused(delete("tanh_norm"), "tiny_psi2", "root attribute tanh_norm is missing, though position")
        refused(delete("output_gate"), "tiny_psi2", "root attribute output_gate is missing, though position")
        refused(delete("attention"), "tiny_transformer",
                "root attribute attention is missing, though sigmoid_bias, which files gained after it, is present")
        refused(put("sigmoid_bias", np.bytes_(b"per_key")), "tiny_transformer",
                "root attribute sigmoid_bias = \"per_key\" is not train_length or per_query")
        refused(put("w_thh", np.int64(16)), "tiny_psi2", "root attribute w_thh is not one a weights file has")
        refused(put("w_th", 16.0), "tiny_transformer_screening",
                "w_th = 16: a Transformer's is 256 (model files cannot set it)")
        refused(put("d_v", np.int64(7)), "tiny_transformer",
                "d_v = 7: a Transformer's is its head width d_k = 4")
        refused(lambda f: f.create_dataset("layers/000/s_x", data=np.zeros(2, np.float32)), "tiny_psi2",
                "dataset layers/000/s_x is not a parameter of model tiny_psi2")
        # A screening file read as softmax (no attribute attention, and no later one either)
        # holds s_w and s_r, which a softmax Transformer has not.
        refused(lambda f: [f.attrs.__delitem__(a) for a in ("attention", "sigmoid_bias")],
                "tiny_transformer_screening", "dataset layers/000/s_r is not a parameter of model "
                "tiny_transformer_screening (family transformer, attention softmax, as the root attributes say)")
        # Files written before the switches (no tanh_norm, attention, position, output_gate;
        # the oldest no family, qk_norm, sio either) still load, as their defaults.
        for names in (("tanh_norm", "position", "output_gate"),
                      ("family", "tanh_norm", "position", "output_gate")):
            w, t = self._init_and_tokens(2 * 9)
            with h5py.File(w, "r+") as f:
                for name in names:
                    del f.attrs[name]
            r, _ = self._forward(w, t, "--device=cpu")  # the parameters unchanged: their checksum holds
            self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_weights_file_holds_its_familys_switches_only_and_older_files_with_both_still_load(self):
        # A Transformer file said position = mipe and output_gate = 1, a Multiscreen one
        # attention = softmax: a converter could misread them. Files written before (every
        # switch, the other family's at its default) still load; the generations still
        # apply to them; the other family's switch at another value is refused.
        own = {"tiny_transformer_screening": {"qk_norm": 0, "sio": 1, "attention": "screening",
                                              "sigmoid_bias": "train_length"},
               "tiny_psi4_rope_nogate": {"tanh_norm": 1, "position": "rope", "output_gate": 0}}
        foreign = {"tiny_transformer_screening": {"tanh_norm": 1, "position": "mipe", "output_gate": 1},
                   "tiny_psi4_rope_nogate": {"qk_norm": 0, "sio": 0, "attention": "softmax"}}
        sizes = ("format", "format_version", "name", "n_layers", "n_heads", "d_e", "d_k", "d_v", "vocab",
                 "w_th", "pl_norm", "eos_token", "family", "params_crc32c")
        for model, vocab in (("tiny_transformer_screening", 37), ("tiny_psi4_rope_nogate", 97)):
            w, t = self._init_and_tokens(2 * 9, vocab=vocab, model=model)
            with h5py.File(w, "r") as f:
                attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
            self.assertEqual(set(attrs), set(sizes) | set(own[model]), model)
            self.assertEqual({k: attrs[k] for k in own[model]}, own[model], model)
            # The file as a build before this one wrote it: loads, the same model.
            with h5py.File(w, "r+") as f:
                for k, v in foreign[model].items():
                    f.attrs[k] = np.bytes_(v) if isinstance(v, str) else np.int64(v)  # as our writer stores them
            r, _ = self._forward(w, t, "--device=cpu")
            self.assertEqual(r.returncode, 0, f"{model}: {r.stderr}")
        # The old layout keeps its generations: a Transformer's tanh_norm deleted while
        # attention (gained after it) is present was edited.
        w, t = self._init_and_tokens(2 * 9, model="tiny_transformer_screening")
        with h5py.File(w, "r+") as f:
            f.attrs["position"], f.attrs["output_gate"] = np.bytes_("mipe"), np.int64(1)
        r, _ = self._forward(w, t, "--device=cpu")
        self.assert_one_line_error(r, f"{w}: root attribute tanh_norm is missing, though attention")
        with h5py.File(w, "r+") as f:
            f.attrs["tanh_norm"], f.attrs["position"] = np.int64(1), np.bytes_("rope")
            del f.attrs["params_crc32c"]
        r, _ = self._forward(w, t, "--device=cpu")
        self.assert_one_line_error(r, f"{w}: position is a Multiscreen switch, not the Transformer's")

    def test_version_names_the_build_and_checkpoints_record_it(self):
        # Issue 43: `multiscreen --version` was an unknown command, and nothing recorded
        # the build. The commit is `git describe --always --dirty` of the source at build
        # time ("-dirty" may differ from now: the commit itself may not).
        source = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
        git = subprocess.run(["git", "-C", source, "describe", "--always"], capture_output=True, text=True)
        for flag in ("--version", "version"):
            r = run(flag)
            self.assertEqual(r.returncode, 0, r.stderr)
            m = re.fullmatch(r"multiscreen (\d+\.\d+) \((\S+)\)\n", r.stdout)
            self.assertIsNotNone(m, r.stdout)
        version, commit = m.groups()
        self.assertEqual(version, "0.1")  # CMakeLists.txt's project(VERSION)
        # What the build recorded (build/generated/build_version.h), a commit of this
        # repository (HEAD itself when nothing was committed since the build).
        with open(os.path.join(os.path.dirname(BIN), "generated", "build_version.h")) as f:
            self.assertIn(f'#define MULTISCREEN_COMMIT "{commit}"\n', f.read())
        if git.returncode == 0:
            # (rev-parse reads describe's forms: a hash, or TAG-N-gHASH.)
            found = subprocess.run(["git", "-C", source, "rev-parse", "--verify", "-q",
                                    commit.removesuffix("-dirty") + "^{commit}"], capture_output=True, text=True)
            self.assertEqual(found.returncode, 0, commit)
        else:
            self.assertEqual(commit, "unknown")
        self.assertIn("'multiscreen --version' the build", run("--help").stdout)
        # A checkpoint's manifest records it; ckpt inspect says it.
        out = os.path.join(self.dir, "ckpt")
        r = run("ckpt", "init", "--model=tiny_psi2", f"--out={out}")
        self.assertEqual(r.returncode, 0, r.stderr)
        step = glob.glob(os.path.join(out, "checkpoints", "step_*"))[0]
        with open(os.path.join(step, "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual(manifest["build"], {"version": version, "commit": commit})
        self.assertIn(f"  written by multiscreen {version} ({commit})\n", run("ckpt", "inspect", f"--checkpoint={out}").stdout)
        # One written before builds were recorded still reads, and says so; a build field
        # of the wrong type is named.
        del manifest["build"]
        with open(os.path.join(step, "manifest.json"), "w") as f:
            json.dump(manifest, f)
        r = run("ckpt", "inspect", f"--checkpoint={out}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("  written by a build that did not record itself\n", r.stdout)
        manifest["build"] = {"version": "0.1", "commit": 7}
        with open(os.path.join(step, "manifest.json"), "w") as f:
            json.dump(manifest, f)
        self.assert_one_line_error(run("ckpt", "inspect", f"--checkpoint={step}"),
                                   "field build.commit is the number 7, expected a string")

    def test_the_commit_of_a_source_tree_without_git_is_unknown(self):
        # A release tarball (no .git): cmake/build_version.cmake writes "unknown", also
        # where the tarball was unpacked inside another repository.
        source = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
        for where in (self.dir, os.path.join(os.path.dirname(BIN), "version_test_tarball")):
            os.makedirs(where, exist_ok=True)
            try:
                out = os.path.join(self.dir, "build_version.h")
                r = subprocess.run(["cmake", f"-DSOURCE_DIR={where}", "-DVERSION=0.1", f"-DOUT={out}", "-P",
                                    os.path.join(source, "cmake", "build_version.cmake")],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(r.returncode, 0, r.stderr)
                with open(out) as f:
                    text = f.read()
                self.assertIn('#define MULTISCREEN_VERSION "0.1"\n', text)
                self.assertIn('#define MULTISCREEN_COMMIT "unknown"\n', text)
            finally:
                if where != self.dir:
                    shutil.rmtree(where, ignore_errors=True)

    def test_params_table_lists_the_groups(self):
        r = run("params", "--model=psi16")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("27546626", r.stdout)
        self.assertIn("tile matrices", r.stdout)

    def test_unknown_model_is_one_line_naming_it(self):
        self.assert_one_line_error(run("params", "--model=psi9"), "unknown model 'psi9'")

    def test_malformed_model_file_names_file_line_and_column(self):
        path = os.path.join(self.dir, "bad.textproto")
        with open(path, "w") as f:
            f.write("psi: 8\nd_k: x\n")
        self.assert_one_line_error(run("params", f"--model={path}"), f"{path}:2:")

    def test_a_bad_isa_variable_is_a_user_error_of_every_command(self):
        # Issue 43: the kernels' first use ended the process with "error: MULTISCREEN_ISA=..."
        # and exit 2, where a user error is "multiscreen CMD: ..." and exit 1. --isa overrides it.
        w, t = self._init_and_tokens(2 * 9)
        out = os.path.join(self.dir, "out.h5")
        env = dict(os.environ, MULTISCREEN_ISA="sse9")
        for args in (("forward", f"--weights={w}", f"--tokens={t}", "--micro_batch=2", "--seq_len=8", f"--out={out}"),
                     ("generate", f"--weights={w}", "--prompt=x", "--max_tokens=1")):
            r = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=120, env=env)
            self.assert_one_line_error(r, f"multiscreen {args[0]}: MULTISCREEN_ISA=sse9: unknown instruction-set path 'sse9'")
            self.assertEqual(r.returncode, 1)
        r = subprocess.run([BIN, "bench", "screening", "--T=64", "--min_seconds=0.01", "--isa=generic"], capture_output=True,
                           text=True, timeout=120, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_flag_errors_are_one_line_naming_the_command_and_the_flag(self):
        # Field reports: absl's "ERROR: Illegal value 'abc' specified for flag 'steps'" had no
        # "multiscreen train:"; train without --config said "n_layers = 0 must be positive";
        # eval's --seq_len=-1 was "required", its --out=FILE "cannot create the directory";
        # bench's --w=nan said "or inf; no ... inf".
        for args, line in ((["train", "--steps=abc"], "multiscreen train: --steps=abc: expected an integer"),
                           (["train", "--steps"], "multiscreen train: --steps: no value given"),
                           (["params", "--json=maybe"], "multiscreen params: --json=maybe: expected true or false"),
                           (["eval", "ppl", "--seq_len", "x"], "multiscreen eval ppl: --seq_len x: expected an integer"),
                           (["train", "--bogus=1"], "multiscreen train: --bogus is not a flag of this command"),
                           (["tokenize", "--nodecoded"], "multiscreen tokenize: --nodecoded is not a flag of this command"),
                           (["bench", "screening", "--w=nan"],
                            "multiscreen bench screening: --w=nan: expected a decimal number (e.g. 16, 0.0625 or 1e-3) or inf "
                            "(no hex, nan or blanks)")):
            r = run(*args)
            self.assert_one_line_error(r, line)
            self.assertTrue(r.stderr.startswith(line), r.stderr)
        data = os.path.join(self.dir, "shards")
        os.makedirs(data)
        write_tokens(os.path.join(data, "train_000000.bin"), np.arange(100) % 37)
        self.assert_one_line_error(run("train", f"--run_dir={self.dir}/run", f"--data={data}"),
                                   "multiscreen train: --config: required")
        no_model = os.path.join(self.dir, "no_model.textproto")
        with open(no_model, "w") as f:
            f.write("steps: 2\n")
        self.assert_one_line_error(run("train", f"--config={no_model}", f"--run_dir={self.dir}/run", f"--data={data}"),
                                   f"--config={no_model}: names no model")
        tokens = os.path.join(data, "train_000000.bin")
        self.assert_one_line_error(run("eval", "ppl", "--seq_len=-1", f"--data={tokens}", f"--out={self.dir}/o"),
                                   "--seq_len=-1: must be positive")
        self.assert_one_line_error(run("eval", "ppl", "--seq_len=8", f"--data={tokens}", f"--out={tokens}"),
                                   f"--out={tokens}: is a file, not a directory")

    def test_unknown_command_and_stray_arguments_fail(self):
        self.assertNotEqual(run("frobnicate").returncode, 0)
        self.assert_one_line_error(run("params", "psi8"), "unexpected argument 'psi8'")

    def _init_and_tokens(self, count, vocab=37, model="tiny_psi2"):
        w = os.path.join(self.dir, "w.h5")
        r = run("init", f"--model={model}", "--seed=3", f"--out={w}")
        self.assertEqual(r.returncode, 0, r.stderr)
        t = os.path.join(self.dir, "t.bin")
        write_tokens(t, np.random.default_rng(0).integers(0, vocab, size=count))
        return w, t

    def test_single_process_commands_under_a_launcher_of_several_processes_are_refused_once(self):
        # Under `mpirun -n 2` every command but train ran on every rank, each writing the same
        # files: rank 0 says so in one line, every rank exits 1, and nothing is written. One
        # process under a launcher (mpirun -n 1) runs.
        w, t = self._init_and_tokens(2 * 9)
        text = os.path.join(self.dir, "corpus.txt")
        with open(text, "w") as f:
            f.write("a few words\n")
        outs = {"forward": os.path.join(self.dir, "f.h5"), "init": os.path.join(self.dir, "i.h5"),
                "ckpt": os.path.join(self.dir, "run"), "prepare": os.path.join(self.dir, "shards"),
                "eval": os.path.join(self.dir, "ppl")}
        commands = {
            "forward": ["forward", f"--weights={w}", f"--tokens={t}", "--micro_batch=2", "--seq_len=8", f"--out={outs['forward']}"],
            "generate": ["generate", f"--weights={w}", "--prompt=", "--max_tokens=2"],
            "init": ["init", "--model=tiny_psi2", "--seed=1", f"--out={outs['init']}"],
            "ckpt": ["ckpt", "init", "--model=tiny_psi2", "--seed=1", "--tp=1", "--pp=1", f"--out={outs['ckpt']}"],
            "prepare": ["prepare", f"--input={text}", f"--output={outs['prepare']}", "--val_tokens=0",
                        f"--tokenizer={TOKENIZER}"],
            "eval": ["eval", "ppl", f"--weights={w}", f"--data={t}", "--seq_len=8", "--stream", f"--out={outs['eval']}"],
            "params": ["params", "--model=tiny_psi2"],
            "bench": ["bench", "screening", "--T=16", "--w=4", "--min_seconds=0.01"],
            # sweep run's train children joined one job; status of a sweep that is not there
            # is refused for that reason alone in one process.
            "sweep": ["sweep", "status", f"--sweep={os.path.join(self.dir, 'none.textproto')}"],
        }
        mpirun = shutil.which("mpirun")
        for name, args in commands.items():
            with self.subTest(command=name):
                why = (f"{name} is single-process: the launcher started 2 processes (OMPI_COMM_WORLD_SIZE=2); run it "
                       "without mpirun or srun")
                for rank in (0, 1):
                    r = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60,
                                       env=dict(os.environ, OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_RANK=str(rank)))
                    if rank == 0:
                        self.assert_one_line_error(r, why)
                    else:
                        self.assertEqual((r.returncode, r.stderr), (1, ""))
                if mpirun is not None:
                    r = subprocess.run([mpirun, "--oversubscribe", "--allow-run-as-root", "-np", "2", BIN, *args],
                                       capture_output=True, text=True, timeout=120)
                    self.assertNotEqual(r.returncode, 0, r.stdout)
                    self.assertEqual(r.stderr.count(why), 1, r.stderr)
                if name in outs:
                    self.assertFalse(os.path.exists(outs[name]), outs[name])
                r = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=60,
                                   env=dict(os.environ, OMPI_COMM_WORLD_SIZE="1", OMPI_COMM_WORLD_RANK="0"))
                if name == "sweep":
                    self.assert_one_line_error(r, "none.textproto")
                else:
                    self.assertEqual(r.returncode, 0, r.stderr)

    def test_forward_writes_loss_token_losses_and_every_gradient(self):
        w, t = self._init_and_tokens(3 * 9)
        out = os.path.join(self.dir, "out.h5")
        r = run("forward", f"--weights={w}", f"--tokens={t}", "--micro_batch=3", "--seq_len=8", f"--out={out}")
        self.assertEqual(r.returncode, 0, r.stderr)
        with h5py.File(out) as f, h5py.File(w) as wf:
            self.assertEqual(f["token_losses"].shape, (3, 8))
            self.assertAlmostEqual(float(f["loss"][()]), float(np.mean(f["token_losses"][()])), places=5)
            names = []
            wf.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
            self.assertEqual(len(names), 3 + 2 * 8)
            for n in names:
                self.assertEqual(f["grad/" + n].shape, wf[n].shape, n)
                self.assertTrue(np.all(np.isfinite(f["grad/" + n][()])), n)

    def test_an_output_that_is_a_fifo_or_a_device_is_refused_not_replaced(self):
        # Outputs are written beside their path and renamed into place: a FIFO or device
        # node there would be replaced by a regular file (as root, --out=/dev/null would
        # replace the machine's /dev/null).
        w, t = self._init_and_tokens(3 * 9)
        nodes = {"FIFO (named pipe)": os.path.join(self.dir, "fifo")}
        os.mkfifo(nodes["FIFO (named pipe)"])
        if os.geteuid() == 0:  # a private /dev/null twin (mknod needs root)
            nodes["character device"] = os.path.join(self.dir, "null")
            os.mknod(nodes["character device"], 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        for kind, node in nodes.items():
            mode = os.lstat(node).st_mode
            commands = {"init": ["init", "--model=tiny_psi2", "--seed=1", f"--out={node}"],
                        "forward": ["forward", f"--weights={w}", f"--tokens={t}", "--micro_batch=3", "--seq_len=8",
                                    f"--out={node}"],
                        "forward --no_grad": ["forward", "--no_grad", f"--weights={w}", f"--tokens={t}",
                                              "--micro_batch=3", "--seq_len=8", f"--out={node}"]}
            for name, args in commands.items():
                with self.subTest(kind=kind, command=name):
                    self.assert_one_line_error(run(*args), f"--out={node}: is a {kind}, not a regular file")
                    self.assertEqual(os.lstat(node).st_mode, mode)
                    self.assertFalse(os.path.exists(node + ".tmp"))
        # A directory is named as such, before any work.
        self.assert_one_line_error(run("init", "--model=tiny_psi2", "--seed=1", f"--out={self.dir}"),
                                   f"--out={self.dir}: is a directory")

    def test_flagfiles_are_checked_before_absl_reads_them(self):
        # absl reads a flagfile that names itself for ever, its memory growing by GBs a
        # minute; a directory read as an empty flagfile.
        def write(name, text):
            path = os.path.join(self.dir, name)
            with open(path, "w") as f:
                f.write(text)
            return path

        def params(*args):
            try:
                return subprocess.run([BIN, "params", *args], capture_output=True, text=True, timeout=30)
            except subprocess.TimeoutExpired:
                self.fail(f"params {' '.join(args)}: still running after 30 s")

        good = write("good", "--model=tiny_psi2\n")
        r = params(f"--flagfile={good}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("tiny_psi2", r.stdout)
        loop = write("loop", "--model=tiny_psi2\n--flagfile=" + os.path.join(self.dir, "loop") + "\n")
        self.assert_one_line_error(params(f"--flagfile={loop}"), f"--flagfile={loop}: names itself")
        a = write("a", f"--flagfile={os.path.join(self.dir, 'b')}\n")
        write("b", f"--flagfile={good},{a}\n")
        self.assert_one_line_error(params("--flagfile", a), "names itself", "a -> ", "b -> ")
        self.assert_one_line_error(params(f"--flagfile={self.dir}"), f"{self.dir}: is a directory")
        missing = os.path.join(self.dir, "missing")
        self.assert_one_line_error(params(f"--flagfile={good},{missing}"), f"--flagfile={missing}: cannot open flagfile")

    def test_a_flag_given_twice_is_refused_naming_both(self):
        # absl keeps a repeated flag's last value: `prepare --input=a --input=b` read b
        # alone, `params --model=psi8 --model=tiny_psi2` counted tiny_psi2, without a word.
        self.assert_one_line_error(run("params", "--model=psi8", "--model=tiny_psi2"),
                                   "--model is given twice (--model=psi8, then --model=tiny_psi2): a flag takes one "
                                   "value and the last would silently replace the first; give it once")
        self.assert_one_line_error(run("params", "--model", "psi8", "--json", "--model=tiny_psi2"),
                                   "--model is given twice (--model psi8, then --model=tiny_psi2)")
        self.assert_one_line_error(run("params", "--json", "--model=tiny_psi2", "--nojson"),
                                   "--json is given twice (--json, then --nojson)")
        flagfile = os.path.join(self.dir, "flags")
        with open(flagfile, "w") as f:
            f.write("--model=psi8\n")
        self.assert_one_line_error(run("params", f"--flagfile={flagfile}", "--model=tiny_psi2"),
                                   "--model is given twice (--model=psi8, then --model=tiny_psi2)")
        # A list flag says how to give several values.
        self.assert_one_line_error(run("prepare", "--input=a.txt", "--input=b.txt", f"--output={self.dir}/o"),
                                   "--input is given twice (--input=a.txt, then --input=b.txt)",
                                   "its values comma-separated (--input=A,B)")
        r = run("params", f"--flagfile={flagfile}", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_forward_refuses_a_short_token_file(self):
        w, t = self._init_and_tokens(20)
        r = run("forward", f"--weights={w}", f"--tokens={t}", "--micro_batch=3", "--seq_len=8",
                f"--out={self.dir}/o.h5")
        self.assert_one_line_error(r, t, "20 tokens", "27 needed")
        self.assertFalse(os.path.exists(f"{self.dir}/o.h5"))

    def test_forward_refuses_token_ids_past_the_vocabulary(self):
        w, t = self._init_and_tokens(27, vocab=40)
        write_tokens(t, [39] * 27)
        r = run("forward", f"--weights={w}", f"--tokens={t}", "--micro_batch=3", "--seq_len=8",
                f"--out={self.dir}/o.h5")
        self.assert_one_line_error(r, t, "39", "V = 37")

    def test_forward_names_a_missing_dataset(self):
        w, t = self._init_and_tokens(27)
        with h5py.File(w, "r+") as f:
            del f["layers/001/W_G"]
        r = run("forward", f"--weights={w}", f"--tokens={t}", "--micro_batch=3", "--seq_len=8",
                f"--out={self.dir}/o.h5")
        self.assert_one_line_error(r, w, "layers/001/W_G")

    def test_forward_names_a_misshaped_dataset(self):
        w, t = self._init_and_tokens(27)
        with h5py.File(w, "r+") as f:
            del f["layers/000/W_O"]
            f["layers/000/W_O"] = np.zeros((2, 5, 8), dtype=np.float32)
        r = run("forward", f"--weights={w}", f"--tokens={t}", "--micro_batch=3", "--seq_len=8",
                f"--out={self.dir}/o.h5")
        self.assert_one_line_error(r, w, "layers/000/W_O", "[2, 5, 8]", "[2, 6, 8]")

    def test_forward_refuses_weights_that_fail_their_checksum(self):
        w, t = self._init_and_tokens(27)
        with h5py.File(w, "r+") as f:
            self.assertIn("params_crc32c", f.attrs)
            f["layers/000/W_O"][0, 0, 0] += 1e-3  # one value changed after the file was written
        r = run("forward", f"--weights={w}", f"--tokens={t}", "--micro_batch=3", "--seq_len=8",
                f"--out={self.dir}/o.h5")
        self.assert_one_line_error(r, w, "CRC-32C", "corrupted")
        with h5py.File(w, "r+") as f:  # a file from before the checksum: loads unchecked
            del f.attrs["params_crc32c"]
        r = run("forward", f"--weights={w}", f"--tokens={t}", "--micro_batch=3", "--seq_len=8",
                f"--out={self.dir}/o.h5")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_forward_refuses_a_bad_token_header(self):
        w, t = self._init_and_tokens(27)
        with open(t, "r+b") as f:
            f.write(np.int32(12345).tobytes())
        r = run("forward", f"--weights={w}", f"--tokens={t}", "--micro_batch=3", "--seq_len=8",
                f"--out={self.dir}/o.h5")
        self.assert_one_line_error(r, t, "magic")

    def test_forward_refuses_a_file_that_is_not_hdf5(self):
        _, t = self._init_and_tokens(27)
        r = run("forward", f"--weights={t}", f"--tokens={t}", "--micro_batch=3", "--seq_len=8",
                f"--out={self.dir}/o.h5")
        self.assert_one_line_error(r, t, "HDF5")

    # ---- --device ------------------------------------------------------------------

    CUDA_REASONS = ("no CUDA kernels", "no CUDA device is visible", "driver is too old")

    def _forward(self, w, t, *flags):
        out = os.path.join(self.dir, f"out{len(os.listdir(self.dir))}.h5")
        r = run("forward", f"--weights={w}", f"--tokens={t}", "--micro_batch=2", "--seq_len=8", f"--out={out}", *flags)
        return r, out

    def test_forward_gives_an_overflowing_window_its_limit_and_refuses_a_non_finite_loss(self):
        # s_w = 1000 (w = e^{s_w} + 1 overflows: the plain causal mask) gave a NaN gradient of
        # s_w with exit code 0; its limit is 0. A loss that does overflow (e^{s_O} past fp32,
        # in Multiscreen and in the Transformer's screening heads' s_w alike) is an error.
        for model, vocab in (("tiny_psi2", 37), ("tiny_transformer_screening", 37)):
            w, t = self._init_and_tokens(2 * 9, vocab=vocab, model=model)
            with h5py.File(w, "r+") as f:
                f["layers/000/s_w"][0] = 1000.0
                del f.attrs["params_crc32c"]
            r, out = self._forward(w, t, "--device=cpu")
            self.assertEqual(r.returncode, 0, r.stderr)
            with h5py.File(out) as f:
                self.assertEqual(float(f["grad/layers/000/s_w"][0]), 0.0, model)
                for name in ("loss", "grad/layers/000/s_w", "grad/layers/001/s_w", "grad/embed/W_E"):
                    self.assertTrue(np.all(np.isfinite(f[name][()])), f"{model} {name}")
        w, t = self._init_and_tokens(2 * 9)
        with h5py.File(w, "r+") as f:
            f["layers/000/s_O"][0] = 1000.0
            del f.attrs["params_crc32c"]
        r, out = self._forward(w, t, "--device=cpu")
        self.assert_one_line_error(r, f"{out}: the loss is nan (the file is written for inspection)")
        r = run("forward", f"--weights={w}", f"--tokens={t}", "--micro_batch=2", "--seq_len=8", "--no_grad",
                f"--out={out}.no_grad")
        self.assert_one_line_error(r, f"{out}.no_grad: the loss is nan")

    def test_device_cpu_is_the_default_here_and_gives_the_same_gradients(self):
        w, t = self._init_and_tokens(2 * 9)
        r_cpu, cpu = self._forward(w, t, "--device=cpu")
        self.assertEqual(r_cpu.returncode, 0, r_cpu.stderr)
        r_auto, auto = self._forward(w, t, "--device=auto")
        self.assertEqual(r_auto.returncode, 0, r_auto.stderr)
        with h5py.File(cpu) as a, h5py.File(auto) as b:
            if subprocess.run(["sh", "-c", "command -v nvidia-smi && nvidia-smi -L"], capture_output=True).returncode:
                # No GPU: auto is the CPU, so the outputs are the same bits.
                self.assertEqual(float(a["loss"][()]), float(b["loss"][()]))
            else:
                self.assertAlmostEqual(float(a["loss"][()]), float(b["loss"][()]), delta=1e-5 * float(a["loss"][()]))

    def test_device_cuda_fails_with_its_reason_or_matches_the_cpu(self):
        w, t = self._init_and_tokens(2 * 9)
        r_cpu, cpu = self._forward(w, t, "--device=cpu")
        self.assertEqual(r_cpu.returncode, 0, r_cpu.stderr)
        r, gpu = self._forward(w, t, "--device=cuda")
        if r.returncode != 0:  # this machine: one line naming the flag and why
            self.assert_one_line_error(r, "--device=cuda: ")
            self.assertTrue(any(reason in r.stderr for reason in self.CUDA_REASONS), r.stderr)
            self.assertFalse(os.path.exists(gpu))
            return
        with h5py.File(cpu) as a, h5py.File(gpu) as b:  # a machine with a GPU: fp32 within 1e-5
            self.assertAlmostEqual(float(a["loss"][()]), float(b["loss"][()]), delta=1e-5 * float(a["loss"][()]))
            for name in a["grad"]:
                ref, got = a["grad"][name][()], b["grad"][name][()]
                self.assertLessEqual(np.linalg.norm(got - ref), 1e-5 * max(np.linalg.norm(ref), 1e-30), name)

    def test_device_flag_refuses_unknown_names_and_fp64_on_cuda(self):
        w, t = self._init_and_tokens(2 * 9)
        self.assert_one_line_error(self._forward(w, t, "--device=tpu")[0], "--device=tpu: expected cpu, cuda or auto")
        self.assert_one_line_error(self._forward(w, t, "--device=cuda", "--precision=fp64")[0], "--device=cuda: ",
                                   "fp64")
        r = run("bench", "train", "--model=tiny_psi2", "--device=cuda", "--precision=fp64", "--steps=1")
        self.assert_one_line_error(r, "--device=cuda: ", "fp64")
        # fp64 with auto quietly takes the CPU.
        self.assertEqual(self._forward(w, t, "--device=auto", "--precision=fp64")[0].returncode, 0)

    def assert_exact_error(self, result, line):
        """`result` exited 1 with exactly `line` (the whole of it) on stderr; a subtest of
        its own, so that every message of a test is checked, each reported on its own."""
        with self.subTest(line=line):
            stderr = result.stderr.decode("utf-8", "backslashreplace") if isinstance(result.stderr, bytes) else result.stderr
            self.assertEqual(result.returncode, 1, stderr)
            self.assertEqual(stderr, line + "\n")

    def test_absls_special_flag_forms_are_one_line_of_ours(self):
        # Field report: `--nojson=1` and `--fromenv=model` (FLAGS_model unset) ended in absl's
        # own "ERROR: ..." lines, without the command's name.
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLAGS_")}

        def ms(*args, **extra):
            return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=120, env=dict(env, **extra))

        self.assert_exact_error(ms("params", "--nojson=1"),
                                "multiscreen params: --nojson=1: the negative form takes no value (--nojson alone, or "
                                "--json=1)")
        self.assert_exact_error(ms("params", "--fromenv=model"),
                                "multiscreen params: --fromenv=model: FLAGS_model is not set in the environment "
                                "(--fromenv reads each flag named from FLAGS_<name>; --tryfromenv skips those unset)")
        for form in ("--fromenv=bogus", "--tryfromenv=bogus", "--fromenv=flagfile"):
            self.assert_exact_error(ms("params", form), f"multiscreen params: {form}: {form.split('=')[1]} is not a "
                                                        "flag of this program")
        self.assert_exact_error(ms("params", "--flagfile"), "multiscreen params: --flagfile: no value given (--flagfile=FILE)")
        # absl's other listings and --version (absl's view: every command's flags by file, a
        # "Debug build" line; --help=false printed "No flags matched" and exited 1).
        for form in ("--version", "--helpshort", "--helppackage", "--helpon=flags", "--helpmatch=seed", "--help=false"):
            self.assert_exact_error(ms("params", form), f"multiscreen params: {form}: not a flag of this command (--help "
                                                        "lists its flags, --helpfull every command's)")
        self.assert_exact_error(ms("params", "--fromenv"), "multiscreen params: --fromenv: no value given (--fromenv=NAME,...)")
        # What absl takes still works, and what --fromenv sets counts as given.
        r = ms("params", "--fromenv=model", "--json", FLAGS_model="tiny_psi2")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["model"], "tiny_psi2")
        self.assertEqual(ms("params", "--tryfromenv=model", "--nojson").returncode, 0)
        self.assert_exact_error(ms("params", "--fromenv=model", "--model=psi8", FLAGS_model="tiny_psi2"),
                                "multiscreen params: --model is given twice (--fromenv=model, then --model=psi8): a flag "
                                "takes one value and the last would silently replace the first; give it once")

    def test_a_known_subcommand_names_itself_and_an_unknown_one_exits_1(self):
        # Field report: `bench` and `sweep` errors said "multiscreen bench:" / "multiscreen sweep:"
        # whatever the subcommand, and `bench bogus` exited 2 where ckpt, eval and sweep exit 1.
        csv_path = os.path.join(self.dir, "r.csv")
        with open(csv_path, "w") as f:
            f.write("family,params,tokens,loss\n")
        for args, line in (
                (["bench", "bogus"], "multiscreen bench: unknown subcommand 'bogus': expected train, screening or decode"),
                (["bench"], "multiscreen bench: expected a subcommand: train, screening or decode"),
                (["sweep", "bogus"], "multiscreen sweep: unknown subcommand 'bogus': expected plan, run, status, fit or report"),
                (["ckpt", "bogus"], "multiscreen ckpt: unknown subcommand 'bogus': expected plan, init, reshard, export or "
                                    "inspect"),
                (["bench", "screening", "--min_seconds=-1"],
                 "multiscreen bench screening: --min_seconds=-1: must be >= 0 (seconds to time for)"),
                (["bench", "screening", "--T=0"], "multiscreen bench screening: --T=0: must be >= 1"),
                (["bench", "screening", "--tiles=-3"], "multiscreen bench screening: --tiles=-3: must be >= 1"),
                (["bench", "train", "--steps=x"], "multiscreen bench train: --steps=x: expected an integer from -2^63 to "
                                                  "2^63 - 1"),
                (["sweep", "fit", f"--results={csv_path}", "--bootstrap=-1"],
                 "multiscreen sweep fit: --bootstrap=-1: must be >= 0 (resamples; 0: no intervals)"),
                (["sweep", "plan", "--sweep=x", "--jobs=0"], "multiscreen sweep plan: --jobs=0: must be >= 1"),
                (["sweep", "run", "--sweep=x", "--threads=-2"],
                 "multiscreen sweep run: --threads=-2: must be >= 0 (0: all cores)"),
                (["sweep", "fit", "--results=/nonexistent.csv"],
                 "multiscreen sweep fit: --results=/nonexistent.csv: No such file or directory"),
                (["ckpt", "init", "--bogus=1"], "multiscreen ckpt init: --bogus is not a flag of this command; usage: "),
                (["eval", "ttft", "--context=0"], "multiscreen eval ttft: --context=0: must be >= 1"),
                (["eval", "ttft", "--context=8", "--warmup=-1"], "multiscreen eval ttft: --warmup=-1: must be >= 0"),
                (["eval", "ppl", "--data=x", "--out=o", "--seq_len=8", "--stride=-4"], "multiscreen eval ppl: --stride=-4: must be >= 0"),
                (["eval", "ppl", "--data=x", "--out=o", "--seq_len=8", "--documents=-1"], "multiscreen eval ppl: --documents=-1: must be >= 0"),
                (["generate", "--train_len=0", "--weights=w.h5"], "multiscreen generate: --train_len=0: must be >= 1"),
        ):
            r = run(*args)
            if line.endswith("usage: "):
                with self.subTest(line=line):
                    self.assertEqual(r.returncode, 1, r.stderr)
                    self.assertTrue(r.stderr.startswith(line) and r.stderr.count("\n") == 1, r.stderr)
            else:
                self.assert_exact_error(r, line)

    def test_outputs_inputs_and_stdin_that_cannot_be_used_say_why(self):
        # Field report: each of these failed without its reason, or named the wrong file.
        w, t = self._init_and_tokens(64)
        text = os.path.join(self.dir, "a.txt")
        with open(text, "w") as f:
            f.write("A document of a few words. " * 20)
        out_file = os.path.join(self.dir, "out_file")
        with open(out_file, "w") as f:
            f.write("x")
        self.assert_exact_error(
            run("prepare", f"--tokenizer={TOKENIZER}", f"--input={text}", f"--output={out_file}", "--val_tokens=0"),
            f"multiscreen prepare: --output={out_file}: is a file, not a directory")
        self.assert_exact_error(
            run("prepare", f"--tokenizer={TOKENIZER}", f"--input={text}", f"--output={out_file}/sub", "--val_tokens=0"),
            f"multiscreen prepare: --output={out_file}/sub: {out_file} is a file, not a directory")
        # /proc and /sys report 0 bytes free: the output was refused for its space, not for what it is.
        self.assert_exact_error(run("init", "--model=tiny_psi2", "--out=/proc/x.h5"),
                                "multiscreen init: /proc/x.h5: /proc is not a writable directory (creating a file there: "
                                "No such file or directory); choose another path")
        self.assert_one_line_error(run("ckpt", "init", "--model=tiny_psi2", "--tp=1", "--pp=1", "--out=/sys/run"),
                                   "/sys/run: /sys is not a writable directory")
        self.assert_exact_error(run("eval", "ppl", f"--weights={w}", f"--data={t}", "--seq_len=8", "--out=/proc/x"),
                                "multiscreen eval ppl: --out=/proc/x: cannot create /proc/x: No such file or directory")
        self.assert_exact_error(run("init", "--model=tiny_psi2", "--out=/nonexistent/x.h5"),
                                "multiscreen init: /nonexistent/x.h5: cannot create HDF5 file: no directory /nonexistent")
        self.assert_exact_error(run("tokenize", f"--tokenizer={text}"),
                                f"multiscreen tokenize: {text}: is a file, and a tokenizer is a directory holding "
                                "vocab.json and merges.txt (e.g. data_cache/gpt2)")
        root = os.open("/", os.O_RDONLY)  # `multiscreen tokenize < /`
        try:
            r = subprocess.run([BIN, "tokenize", f"--tokenizer={TOKENIZER}"], stdin=root, capture_output=True, text=True,
                               timeout=120)
        finally:
            os.close(root)
        self.assert_exact_error(r, "multiscreen tokenize: stdin is a directory, not text (multiscreen tokenize "
                                   "--tokenizer=DIR < FILE)")
        r = subprocess.run([BIN, "tokenize", f"--tokenizer={TOKENIZER}", "--decode"], input=b"1 \xff\xfeA\x01 2",
                           capture_output=True, timeout=120)
        with self.subTest(line="tokenize --decode of bytes that are not UTF-8"):  # the bytes themselves, not decoded
            self.assertEqual((r.returncode, r.stderr),
                             (1, b"multiscreen tokenize: stdin: '\\xff\\xfeA\\x01' (token 1) is not a token id\n"))
        self.assert_exact_error(run("eval", "relevance", f"--weights={w}", f"--text={self.dir}/missing.txt",
                                    f"--out={self.dir}/rel"),
                                f"multiscreen eval relevance: --text={self.dir}/missing.txt: No such file or directory")
        self.assert_exact_error(run("init", "--memory=99999999T", f"--out={self.dir}/w2.h5"),
                                "multiscreen init: --memory=99999999T: too large (at most 2^63 - 1 bytes, 8 EiB)")
        self.assert_exact_error(run("eval", "abcdigits", "--generate_only", "--length=-8", f"--dump={self.dir}/d.jsonl"),
                                "multiscreen eval abcdigits: --length=-8: must be >= 1")
        self.assert_exact_error(run("eval", "abcdigits", "--generate_only", f"--dump={self.dir}/d.jsonl"),
                                "multiscreen eval abcdigits: --generate_only needs --length=N")

    def test_number_lists_take_no_blanks_or_empty_values(self):
        # Field report: --depths=" 0.5" and "0.5, 1" were taken, though the lists are
        # comma-separated without blanks (docs/commands.md).
        w, _ = self._init_and_tokens(8, model="tiny_gpt2_vocab")  # passkey's prompts are GPT-2 text
        for i, (flag, value, line) in enumerate((
                ("depths", " 0.5", "' 0.5' holds a blank (values are comma-separated without blanks, e.g. --depths=A,B)"),
                ("depths", "0.5, 1", "' 1' holds a blank (values are comma-separated without blanks, e.g. --depths=A,B)"),
                ("depths", "0.5,,1", "an empty value (values are comma-separated, e.g. --depths=A,B)"),
                ("contexts", "64,", "an empty value (values are comma-separated, e.g. --contexts=A,B)"),
                ("contexts", "64,\t128", "'\\t128' holds a blank (values are comma-separated without blanks, e.g. "
                                         "--contexts=A,B)"))):
            r = run("eval", "passkey", f"--weights={w}", f"--out={self.dir}/pk{i}", f"--{flag}={value}", "--instances=1")
            shown = value.replace("\t", "\\t")
            self.assert_exact_error(r, f"multiscreen eval passkey: --{flag}={shown}: {line}")
        text = os.path.join(self.dir, "a.txt")
        with open(text, "w") as f:
            f.write("a few words")
        self.assert_exact_error(run("eval", "relevance", f"--weights={w}", f"--out={self.dir}/rel", f"--text={text}",
                                    "--layers=0, 1"),
                                "multiscreen eval relevance: --layers=0, 1: ' 1' holds a blank (values are "
                                "comma-separated without blanks, e.g. --layers=A,B)")

    def test_openmp_threads_wait_passively_unless_the_user_chose(self):
        # Spinning idle OpenMP threads made `generate` and `bench decode` 5-13x slower with 2
        # threads on a loaded machine; libgomp reads OMP_WAIT_POLICY at load, so multiscreen
        # sets it (passive) and starts itself again, once, the same process id; a value the
        # user set is kept. `tokenize` waiting on stdin is looked at through /proc.
        # The started-again process keeps the program's name (pkill multiscreen, top).
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        for given, expected in ((None, "passive"), ("active", "active"), ("", "passive")):
            e = dict(env) if given is None else dict(env, OMP_WAIT_POLICY=given)
            p = subprocess.Popen([BIN, "tokenize", f"--tokenizer={TOKENIZER}"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e)
            try:
                found, deadline = None, time.monotonic() + 20
                while time.monotonic() < deadline:
                    with open(f"/proc/{p.pid}/environ", "rb") as f:
                        environ = [v.decode() for v in f.read().split(b"\0") if v]
                    with open(f"/proc/{p.pid}/cmdline", "rb") as f:
                        cmdline = f.read()
                    # (Until Popen's child has executed BIN, /proc shows this test's own.)
                    found = [v for v in environ if v.startswith("OMP_WAIT_POLICY=")]
                    if cmdline.split(b"\0")[1:3] == [b"tokenize", f"--tokenizer={TOKENIZER}".encode()] and \
                            found == [f"OMP_WAIT_POLICY={expected}"]:
                        break
                    time.sleep(0.05)
                self.assertEqual(found, [f"OMP_WAIT_POLICY={expected}"], given)
                with open(f"/proc/{p.pid}/comm") as f:
                    self.assertEqual(f.read().strip(), os.path.basename(os.path.realpath(BIN))[:15], given)
                out, err = p.communicate(b"hello", timeout=60)  # the started-again process does its work, once
                self.assertEqual((p.returncode, out.split()), (0, [b"31373"]), err)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        # Started through the dynamic loader (/proc/self/exe is the loader) or under valgrind
        # (its preloads), it does not execute itself again: that ran the loader on "params".
        for loader in glob.glob("/lib64/ld-linux-*.so.2")[:1]:
            r = subprocess.run([loader, BIN, "params", "--model=tiny_psi2"], capture_output=True, text=True, env=env,
                               timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("non-embedding", r.stdout)
        # generate takes --threads as eval and bench decode do (it was "not a flag of this command").
        self.assert_exact_error(run("generate", "--threads=2000", "--prompt=x"),
                                "multiscreen generate: --threads=2000: expected 0 (all cores) to 1024")

    def test_help_names_every_precision_and_one_default(self):
        # Field report: bench's --precision help left out fp64; --isa's help gave two defaults.
        for command in (["bench", "train"], ["train"], ["eval", "ppl"], ["generate"], ["forward"]):
            r = run(*command, "--help")
            self.assertEqual(r.returncode, 0, r.stderr)
            for line in r.stdout.splitlines():
                self.assertLessEqual(line.count("default"), 1, line)
        precision = [l for l in run("bench", "train", "--help").stdout.splitlines() if l.startswith("  --precision  ")]
        self.assertEqual(len(precision), 1)
        self.assertIn("bench train: those and fp64", precision[0])


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    args, rest = p.parse_known_args()
    BIN = os.path.abspath(args.multiscreen)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
