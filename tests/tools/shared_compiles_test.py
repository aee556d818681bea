#!/usr/bin/python3
"""The emulated build compiles what it shares with the default build command for command
(ctest labels unit, emulator; run in the emulated build, build-emulated/).

scripts/test builds build/ (the product) and then build-emulated/ (cmake --preset
emulated), both through ccache (scripts/setup). ccache serves an object of the second tree
from the first only when the compiler command is the same, so every object the two trees
both compile must be compiled alike:
  - outside kernels/cuda/, .cu sources and tests/ (the libraries, multiscreen's own sources): the same
    command, flags, defines and include directories in the same order, each tree's
    own build directory aside;
  - tests/: the same command plus -DMULTISCREEN_CUDA_EMULATED (every test there runs on
    the emulated device; ccache's preprocessor mode still shares the sources that do not
    use it);
  - a source elsewhere that reads the define (cli/bench_count.cc: bench train --count
    reads the emulator's tallies): the same command plus the define, no other change.
And the define must reach every object that reads it: an object whose dependencies (ninja
-t deps) include a project file that mentions MULTISCREEN_CUDA_EMULATED is compiled with
-DMULTISCREEN_CUDA_EMULATED, so that no emulated object takes the nvcc branch of
kernels/cuda/launch.h or tensor_core.cuh, or bench_count.cc's refusal.

Exits 77 (skipped, saying so) where the default build is not configured beside it.
Run: /usr/bin/python3 tests/tools/shared_compiles_test.py --build=build-emulated \\
       --default_build=build --source=. --ninja=ninja
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import unittest

ARGS = None
DEFINE = "-DMULTISCREEN_CUDA_EMULATED"
LAUNCHERS = ("ccache", "sccache")


def compile_commands(build):
    """{object path relative to build: argv} of every C/C++ compile in build's build.ninja,
    with build's absolute path written BUILD and a compiler launcher (ccache, with the
    `cmake -E env` that MULTISCREEN_CCACHE puts before it) left out."""
    build = os.path.abspath(build)
    out = subprocess.run([ARGS.ninja, "-C", build, "-t", "compdb"], capture_output=True, text=True, check=True).stdout
    commands = {}
    for entry in json.loads(out):
        argv = shlex.split(entry["command"])
        launcher = [i for i, a in enumerate(argv) if os.path.basename(a) in LAUNCHERS]
        if launcher:
            argv = argv[launcher[0] + 1:]
        if not argv or "-c" not in argv:
            continue  # a link or a custom command
        commands[entry["output"]] = [a.replace(build, "BUILD") for a in argv]
    return commands


def dependencies(build):
    """{object path: [absolute paths of the files it read]} from ninja's deps log."""
    build = os.path.abspath(build)
    out = subprocess.run([ARGS.ninja, "-C", build, "-t", "deps"], capture_output=True, text=True, check=True).stdout
    deps, current = {}, None
    for line in out.splitlines():
        if not line.strip():
            current = None
        elif not line.startswith(" "):
            current = line.split(":", 1)[0]
            deps[current] = []
        elif current is not None:
            deps[current].append(os.path.normpath(os.path.join(build, line.strip())))
    return deps


def define_readers(build, source):
    """{object: the first project file among its dependencies that mentions
    MULTISCREEN_CUDA_EMULATED} for every object of build that reads one."""
    source, mentions, readers = os.path.abspath(source), {}, {}
    for obj, paths in dependencies(build).items():
        for path in paths:
            if path not in mentions:
                mentions[path] = False
                if path.startswith(source + os.sep) and os.path.isfile(path):
                    with open(path, errors="replace") as f:
                        mentions[path] = "MULTISCREEN_CUDA_EMULATED" in f.read()
            if mentions[path]:
                readers[obj] = os.path.relpath(path, source)
                break
    return readers


class SharedCompilesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.emulated = compile_commands(ARGS.build)
        cls.default = compile_commands(ARGS.default_build)
        cls.deps_recorded = bool(dependencies(ARGS.build))
        cls.readers = define_readers(ARGS.build, ARGS.source)

    def test_the_shared_objects_compile_alike(self):
        self.assertTrue(self.deps_recorded, f"{ARGS.build}: no dependencies recorded (not built yet?)")
        shared, differ = 0, []
        for obj, argv in sorted(self.emulated.items()):
            if obj not in self.default or obj.startswith("kernels/cuda/") or obj.endswith(".cu.o"):
                continue  # kernels/cuda and .cu sources: nvcc there, the emulator's twins here
            want = self.default[obj]
            if obj.startswith("tests/"):
                self.assertIn(DEFINE, argv, f"{obj}: a test of the emulated build without {DEFINE}")
            if obj.startswith("tests/") or obj in self.readers:
                got = [a for a in argv if a != DEFINE]
            else:
                got = argv
            if got == want:
                shared += 1
            else:
                differ.append(f"{obj}:\n  default:  {shlex.join(want)}\n  emulated: {shlex.join(argv)}")
        print(f"{shared} objects compile alike in both trees", file=sys.stderr)
        self.assertEqual(differ, [], f"{len(differ)} objects of both trees compile differently (ccache cannot "
                                     "share them):\n" + "\n".join(differ[:5]))
        self.assertGreater(shared, 100)  # the libraries and multiscreen's sources: about 120 in 2026-12

    def test_every_object_that_reads_the_emulated_define_gets_it(self):
        self.assertTrue(self.deps_recorded, f"{ARGS.build}: no dependencies recorded (not built yet?)")
        missing = [f"{obj} (reads {path})" for obj, path in sorted(self.readers.items())
                   if DEFINE not in self.emulated.get(obj, [DEFINE])]
        self.assertEqual(missing, [], f"objects that read MULTISCREEN_CUDA_EMULATED but are compiled without it: "
                                      f"{missing[:10]}")
        self.assertGreater(len(self.readers), 10)  # kernels/cuda's .cu files at least


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True, help="the emulated build directory")
    p.add_argument("--default_build", required=True, help="the default build directory")
    p.add_argument("--source", required=True)
    p.add_argument("--ninja", default="ninja")
    ARGS, rest = p.parse_known_args()
    if not os.path.isfile(os.path.join(ARGS.default_build, "build.ninja")):
        print(f"*** SKIPPED: {ARGS.default_build}/build.ninja not found: configure the default build "
              "(cmake --preset default) to compare with it", file=sys.stderr)
        sys.exit(77)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
