#!/usr/bin/python3
"""scripts/gpu_check builds only the targets it lists (build_targets) before it runs
`ctest -L cuda` on a lent GPU; a cuda-labelled test executable missing from that list is
not built there, and ctest reports its tests as failing (gtest discovery's NOT_BUILT
placeholder): decoder_cuda_test was missing until 2026-12-02. Every test executable that
tests/cuda_tests.cmake makes must be in the list, and the script must parse.

Run: /usr/bin/python3 tests/tools/gpu_check_targets_test.py --source=.
"""
import argparse
import os
import re
import subprocess
import sys
import unittest

SRC = None


class GpuCheckTargetsTest(unittest.TestCase):
    def test_every_cuda_test_executable_is_built_by_gpu_check(self):
        with open(os.path.join(SRC, "tests", "cuda_tests.cmake")) as f:
            cmake = f.read()
        made = set(re.findall(r"ms_add_(?:mpi_)?gtest\((\w+)", cmake))
        made |= set(re.findall(r"\$<TARGET_FILE:(\w+)>", cmake))
        made |= set(re.findall(r"COMMAND (\w+_test)\b", cmake))
        self.assertIn("decoder_cuda_test", made)  # the parse finds what it should
        with open(os.path.join(SRC, "scripts", "gpu_check")) as f:
            script = f.read()
        m = re.search(r"build_targets\(\) \{\s*local t targets=\(([^)]*)\)\s*for t in ([^;]*);", script, re.S)
        self.assertIsNotNone(m, "scripts/gpu_check: build_targets' target list not found")
        listed = set(m.group(1).split()) | set(m.group(2).split())
        self.assertEqual(sorted(made - listed), [], "cuda test executables scripts/gpu_check does not build")

    def test_the_script_runs_test_executables_where_the_build_puts_them(self):
        # The build writes test executables under tests/ (tests/CMakeLists.txt); the
        # graph_probe stage looked for build/graph_node_probe_test until 2026-12-07 and would
        # have failed on the first GPU without measuring anything.
        with open(os.path.join(SRC, "tests", "cuda_tests.cmake")) as f:
            made = set(re.findall(r"ms_add_(?:mpi_)?gtest\((\w+)", f.read()))
        with open(os.path.join(SRC, "scripts", "gpu_check")) as f:
            script = f.read()
        paths = set(re.findall(r'\$BUILD/([\w./-]+)', script))
        self.assertIn("multiscreen", paths)  # the parse finds what it should
        wrong = sorted(p for p in paths if os.path.basename(p) in made and p != "tests/" + os.path.basename(p))
        self.assertEqual(wrong, [], "scripts/gpu_check runs these as $BUILD/<path>; the build makes them in tests/")

    def test_the_script_parses(self):
        r = subprocess.run(["bash", "-n", os.path.join(SRC, "scripts", "gpu_check")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--source", required=True)
    args, rest = p.parse_known_args()
    SRC = os.path.abspath(args.source)
    unittest.main(argv=[sys.argv[0]] + rest)
