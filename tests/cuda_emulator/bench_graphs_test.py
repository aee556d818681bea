#!/usr/bin/python3
"""`multiscreen bench train --device=cuda --graphs` on the emulated device (issue 42 part 2):
every micro-batch after a step's first runs as one CUDA graph (the second captured, the later
ones replayed), with the same losses and gradient norms, bit for bit, as the step without
graphs (tiny_tiled bf16 and tiny_psi4 fp32, one and three micro-batches, T = 64 to 256, three
steps); `--count` shows each later micro-batch's kernels and products run as nodes of one
cudaGraphLaunch, with the embedding backward's scatter (its CSR depends on the ids) the one
kernel launched beside it, and no host wait more. The emulator fails a capture with a host
wait inside (the proof that the captured micro-step has none), and the phases are not timed
(their waits). --graphs without a device, for the Transformer, and with --op_times (whose
events would miss the replayed nodes) is refused in one line.

Run: /usr/bin/python3 tests/cuda_emulator/bench_graphs_test.py --multiscreen=build-emulated/multiscreen --source=.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

BIN = SRC = None


def bench(*args):
    return subprocess.run([BIN, "bench", "train", "--micro_batch=1", *args], capture_output=True, text=True,
                          timeout=600)


def run(*args):
    r = bench("--device=cuda", "--json", *args)
    if r.returncode != 0:
        raise AssertionError(f"bench train {' '.join(args)} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def launches(ops, direct_only=False):
    """Kernel launches and cuBLAS(Lt) products of a counted step; direct_only: those not
    run as nodes of a graph."""
    return sum(r["calls"] - (r["graph_nodes"] if direct_only else 0) for r in ops
               if r["kind"] in ("kernel", "library"))


class BenchGraphsTest(unittest.TestCase):
    def test_losses_and_gradient_norms_are_bit_identical_with_graphs(self):
        for model, precision, seq, accum in (("tiny_tiled", "bf16", 64, 3), ("tiny_tiled", "bf16", 256, 1),
                                             ("tiny_tiled", "bf16", 128, 3), ("tiny_psi4", "fp32", 64, 3),
                                             ("tiny_psi4", "fp32", 256, 1)):
            with self.subTest(model=model, precision=precision, seq=seq, grad_accum=accum):
                common = (f"--model={model}", f"--precision={precision}", f"--seq_len={seq}",
                          f"--grad_accum={accum}", "--steps=3", "--warmup=0")
                plain, graphed = run(*common), run(*common, "--graphs")
                self.assertFalse(plain["graphs"])
                self.assertTrue(graphed["graphs"])
                self.assertEqual(len(plain["losses"]), 3)
                self.assertEqual(len(plain["grad_norms"]), 3)
                # Python's floats are the binary64 values printed exactly (repr round-trips).
                self.assertEqual(graphed["losses"], plain["losses"])
                self.assertEqual(graphed["grad_norms"], plain["grad_norms"])
                self.assertGreater(min(plain["grad_norms"]), 0)
                # Phases are timed by waits, which a capture forbids: none reported, not host times.
                self.assertIsNone(graphed["breakdown_seconds"])
                self.assertIsNotNone(plain["breakdown_seconds"])

    def test_count_shows_later_micro_batches_as_one_graph_launch_each(self):
        common = ("--model=tiny_tiled", "--precision=bf16", "--seq_len=256", "--count")
        one = run(*common, "--grad_accum=1")["counted"]
        plain = run(*common, "--grad_accum=3")["counted"]
        graphed_json = run(*common, "--grad_accum=3", "--graphs")
        graphed = graphed_json["counted"]
        by_name = {r["name"]: r for r in graphed["ops"]}
        # Micro-batches 2 and 3: one capture, two launches; the first runs uncaptured.
        self.assertEqual(by_name["cudaGraphLaunch"]["calls"], 2)
        self.assertEqual(by_name["cudaGraphLaunch"]["kind"], "graph")
        self.assertNotIn("cudaGraphLaunch", {r["name"] for r in plain["ops"]})
        # The same kernels and products ran ...
        self.assertEqual(launches(graphed["ops"]), launches(plain["ops"]))
        per_micro_batch = (launches(plain["ops"]) - launches(one["ops"])) // 2
        self.assertGreater(per_micro_batch, 20)
        # ... but of each later micro-batch's, all but the embedding backward's scatter as
        # nodes of its graph: the step launches what a one-micro-batch step does, plus one
        # ScatterKernel and one cudaGraphLaunch per later micro-batch.
        self.assertEqual(launches(graphed["ops"], direct_only=True), launches(one["ops"]) + 2)
        self.assertEqual(sum(r["graph_nodes"] for r in graphed["ops"] if r["kind"] in ("kernel", "library")),
                         2 * (per_micro_batch - 1))
        scatter = [r for r in graphed["ops"] if r["name"].startswith("ScatterKernel")]
        self.assertEqual([(r["calls"], r["graph_nodes"]) for r in scatter], [(3, 0)])
        # No wait more (BeginStep's scalars, the step's end, the loss read), the same copies.
        self.assertEqual(graphed["totals"]["syncs"], 3)
        self.assertEqual(plain["totals"]["syncs"], 3)
        self.assertEqual(graphed["totals"]["bytes_to_device"], plain["totals"]["bytes_to_device"])
        # The model's launches are the host's: perf_model --counted refuses a --graphs count.
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(graphed_json, f)
            f.flush()
            r = subprocess.run(["/usr/bin/python3", os.path.join(SRC, "tools", "perf_model.py"), f"--counted={f.name}"],
                               capture_output=True, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("counted with --graphs", r.stderr)

    def test_graphs_without_a_capturing_device_for_the_transformer_or_with_op_times_are_refused_in_one_line(self):
        for args, message in ((("--model=tiny_psi4", "--device=cpu"),
                               "--graphs captures CUDA graphs: add --device=cuda"),
                              (("--model=tiny_transformer", "--device=cuda"),
                               "--graphs captures the micro-step of a Multiscreen model on one CUDA device"),
                              (("--model=tiny_tiled", "--device=cuda", "--op_times"),
                               "--op_times times the calls the host launches, not a graph's replayed nodes")):
            with self.subTest(args=args):
                r = bench(*args, "--graphs", "--steps=1", "--warmup=0", "--seq_len=64")
                self.assertNotEqual(r.returncode, 0)
                lines = [l for l in r.stderr.splitlines() if l.strip()]
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertIn(message, lines[0])


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--multiscreen", required=True)
    p.add_argument("--source", required=True)
    a, rest = p.parse_known_args()
    BIN, SRC = os.path.abspath(a.multiscreen), os.path.abspath(a.source)
    unittest.main(argv=[sys.argv[0], *rest])
