#!/usr/bin/python3
"""The tree a lent GPU machine receives holds every file scripts/gpu_check needs (issue 43).

The run tool carries the tracked files and the untracked ones git does not ignore, plus
gpu_bundle/ (scripts/gpu_bundle); nothing else. A cuda-label test that reads a git-ignored
file (eval_device_test read data_cache/gpt2, the GPT-2 tokenizer) fails there, and a GPU
run is rare and a few minutes long. The checks:

- --log LOG (the emulated build, after every test of tests/cuda_tests.cmake, which ran with
  tests/tools/open_recorder.c preloaded): every path those tests opened for reading inside
  the source tree is carried or in the bundle's source overlay (gpu_bundle's
  SOURCE_OVERLAY, which gpu_check's unpack stage copies into the tree). The recorder's own
  check runs first: a preloaded process's opens of a tracked and an ignored file are
  logged, relative to the root, and the ignored one is refused.
- always: every literal $SRC/... path in scripts/gpu_check is carried or overlaid, every
  $R/data/... path is one the bundle writes, and the models its bench and compare stages
  name (configs/models/*.textproto, the compare stage's train config and its model) are
  carried.
- --build (the emulated build): every test of label cuda there (but the emulator's own)
  runs with the recorder preloaded and before this check (fixture gpu_tree).

Run: /usr/bin/python3 tests/tools/gpu_tree_test.py --source=. [--log=build-emulated/gpu_tree_opens.txt
     --recorder=build-emulated/tests/libms_open_recorder.so --build=build-emulated]
"""
import argparse
import importlib.machinery
import json
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import unittest

SRC = None
LOG = None
RECORDER = None
BUILD = None
CTEST = "ctest"


def load_gpu_bundle():
    """scripts/gpu_bundle as a module (it has no .py suffix): its SOURCE_OVERLAY and SHARDS."""
    path = os.path.join(SRC, "scripts", "gpu_bundle")
    loader = importlib.machinery.SourceFileLoader("gpu_bundle", path)
    spec = importlib.util.spec_from_loader("gpu_bundle", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def carried_files(source):
    """What the run tool carries of the checkout: tracked files and untracked, not ignored ones."""
    r = subprocess.run(["git", "-C", source, "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise unittest.SkipTest(f"{source} is not a git checkout ({r.stderr.strip()}): what is carried is unknown")
    return {p for p in r.stdout.split("\0") if p}


class Tree:
    """The files of the GPU machine's tree (carried + overlay) and every directory above them."""

    def __init__(self, source):
        bundle = load_gpu_bundle()
        self.overlay = set(bundle.overlay_files(source))
        # gpu_bundle/ travels as the run call's carry: what scripts/gpu_bundle writes there.
        self.carry = {os.path.join("gpu_bundle", f) for f in ("deps.tar.gz", "MANIFEST.json")}
        self.files = carried_files(source) | self.overlay | self.carry
        self.dirs = {""}
        for f in self.files:
            d = os.path.dirname(f)
            while d not in self.dirs:
                self.dirs.add(d)
                d = os.path.dirname(d)
        self.bundle = bundle

    def has(self, rel):
        rel = os.path.normpath(rel).rstrip("/") if rel not in ("", ".") else ""
        return rel in self.files or rel in self.dirs

    def missing(self, paths):
        return sorted(p for p in set(paths) if not self.has(p))


class GpuTreeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tree = Tree(SRC)

    def test_the_bundle_overlays_the_tokenizer(self):
        self.assertIn("data_cache/gpt2/encoder.json", self.tree.overlay)
        self.assertIn("data_cache/gpt2/vocab.bpe", self.tree.overlay)
        self.assertNotIn("data_cache/gpt2/encoder.json", carried_files(SRC))  # ignored: carried only by the bundle

    def test_the_recorder_logs_reads_inside_the_tree(self):
        if RECORDER is None:
            self.skipTest("no --recorder (the emulated build passes it)")
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "opens.txt")
            script = ("import os\n"
                      "open('configs/models/tiny_psi4.textproto').read()\n"
                      "open('./tools/../data_cache/gpt2/vocab.bpe').read(1)\n"
                      "os.listdir('configs/models')\n"
                      f"open(os.path.join({tmp!r}, 'outside'), 'w').write('x')\n"  # outside the root
                      f"open(os.path.join({tmp!r}, 'outside')).read()\n")
            env = {**os.environ, "LD_PRELOAD": RECORDER, "MS_OPEN_ROOT": SRC, "MS_OPEN_LOG": log}
            r = subprocess.run(["/usr/bin/python3", "-c", script], cwd=SRC, env=env, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(log) as f:
                seen = set(f.read().split())
        self.assertEqual(seen, {"configs/models/tiny_psi4.textproto", "data_cache/gpt2/vocab.bpe", "configs/models"})
        # The ignored file is in the tree only through the overlay; without it, it is refused.
        self.assertEqual(self.tree.missing(seen), [])
        files = self.tree.files
        try:
            self.tree.files = files - self.tree.overlay
            self.assertEqual(self.tree.missing(seen), ["data_cache/gpt2/vocab.bpe"])
        finally:
            self.tree.files = files

    def test_every_file_the_cuda_tests_opened_is_on_the_gpu_machine(self):
        if LOG is None:
            self.skipTest("no --log (the emulated build's run of tests/cuda_tests.cmake writes one)")
        if not os.path.exists(LOG):
            self.skipTest(f"{LOG}: no test of tests/cuda_tests.cmake opened a file in the tree in this run")
        with open(LOG, errors="replace") as f:
            opened = [line.rstrip("\n") for line in f if line.strip()]
        missing = self.tree.missing(opened)
        self.assertEqual(missing, [], "files the cuda-label tests read that the GPU machine would not have "
                         "(neither carried by the run tool nor in scripts/gpu_bundle's SOURCE_OVERLAY)")
        print(f"{len(set(opened))} distinct paths opened by the cuda-label tests, all on the GPU machine",
              file=sys.stderr)

    def test_every_cuda_test_runs_with_the_recorder_before_this_check(self):
        """Else the check above passes on what it never saw (gtest_discover_tests dropped the
        fixture and all but the first variable of the environment it was given)."""
        if BUILD is None:
            self.skipTest("no --build (the emulated build passes it)")
        r = subprocess.run([CTEST, "--test-dir", BUILD, "--show-only=json-v1", "-L", "cuda", "-LE", "emulator"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        tests = json.loads(r.stdout)["tests"]
        self.assertGreater(len(tests), 100)  # the gtest cases one by one, and the add_test ones
        unwatched = []
        for test in tests:
            if test["name"] in ("gpu_tree_reset", "gpu_tree_test"):
                continue
            props = {p["name"]: p["value"] for p in test.get("properties", [])}
            env = props.get("ENVIRONMENT", [])
            if "gpu_tree" not in props.get("FIXTURES_REQUIRED", []) or f"LD_PRELOAD={RECORDER}" not in env:
                unwatched.append(test["name"])
        self.assertEqual(unwatched, [], "cuda-label tests that run without the open recorder or before this check")

    def test_every_path_gpu_check_names_is_on_the_gpu_machine(self):
        with open(os.path.join(SRC, "scripts", "gpu_check")) as f:
            script = f.read()
        src_paths = set(re.findall(r"\$SRC/([A-Za-z0-9_./-]+)", script))
        # The script's default output directory ($OUT) is made by it, not read.
        src_paths = {p for p in src_paths if not p.endswith("/") and p != "gpu_check_out"}
        self.assertIn("configs/train/psi8_demo.textproto", src_paths)  # the parse finds what it should
        self.assertEqual(self.tree.missing(src_paths), [], "scripts/gpu_check names $SRC paths the GPU machine lacks")
        # $R/data/...: what the bundle writes under data/ (the shards) and source/.
        data = set(re.findall(r"\$R/data/([A-Za-z0-9_./-]+)", script))
        bundled = {"shards"} | {f"shards/{s}" for s in self.tree.bundle.SHARDS}
        self.assertTrue(data, "no $R/data path found in scripts/gpu_check")
        self.assertEqual(sorted(data - bundled), [], "scripts/gpu_check reads bundle data that gpu_bundle does not write")
        # The models of the bench stages and of the compare stage's train config.
        models = set(re.findall(r"stage_bench_\w+\(\) \{ bench_run (\w+); \}", script))
        self.assertIn("psi32", models)
        for config in (p for p in src_paths if p.startswith("configs/train/")):
            with open(os.path.join(SRC, config)) as f:
                m = re.search(r'^model: "(\w+)"', f.read(), re.M)
            self.assertIsNotNone(m, config)
            models.add(m.group(1))
        self.assertEqual(self.tree.missing(f"configs/models/{m}.textproto" for m in models), [])


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--source", required=True)
    p.add_argument("--log")
    p.add_argument("--recorder")
    p.add_argument("--build", help="the emulated build: its cuda-label tests are checked to run with the recorder")
    p.add_argument("--ctest", default="ctest")
    args, rest = p.parse_known_args()
    BUILD = os.path.abspath(args.build) if args.build else None
    CTEST = args.ctest
    SRC = os.path.abspath(args.source)
    LOG = os.path.abspath(args.log) if args.log else None
    RECORDER = os.path.abspath(args.recorder) if args.recorder else None
    unittest.main(argv=[sys.argv[0]] + rest)
