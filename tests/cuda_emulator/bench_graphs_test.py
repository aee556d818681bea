#!/usr/bin/python3
"""`multiscreen bench train --device=cuda --graphs` on the emulated device (issue 42 part 2):
every micro-batch but the run's first runs as one CUDA graph (each step captures its first
and second micro-batch, updating the graphs of the step before with cudaGraphExecUpdate; the
later ones replay the second's), with the same losses and gradient norms, bit for bit, as the
step without graphs (tiny_tiled bf16 and tiny_psi4 fp32, one and three micro-batches, T = 64
to 256, three steps: the graphs cross two step boundaries, and every update succeeds);
`--count` shows each micro-batch's kernels and products run as nodes of one cudaGraphLaunch,
a one-micro-batch step's too, with the embedding backward's scatter (its CSR depends on the
ids) the one kernel launched beside it, and no host wait more. The emulator fails a capture with a host
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
                # The run's first micro-batch uncaptured; then per step a capture of the first
                # micro-batch and (G > 1) of the second, each instantiated once and updated after.
                if accum == 1:  # steps 2 and 3: the first instantiated, then updated
                    self.assertEqual((graphed["graph_instantiations"], graphed["graph_updates"]), (1, 1))
                else:  # step 1: the second; step 2: the first, the second updated; step 3: both updated
                    self.assertEqual((graphed["graph_instantiations"], graphed["graph_updates"]), (2, 3))
                self.assertEqual((plain["graph_instantiations"], plain["graph_updates"]), (0, 0))
                # Phases are timed by waits, which a capture forbids: none reported, not host times.
                self.assertIsNone(graphed["breakdown_seconds"])
                self.assertIsNotNone(plain["breakdown_seconds"])

    def test_count_shows_every_micro_batch_as_one_graph_launch_updated_each_step(self):
        # Three steps, the last counted: its captures all update the graphs of the step before.
        common = ("--model=tiny_tiled", "--precision=bf16", "--seq_len=256", "--count", "--warmup=2", "--steps=1")
        one = run(*common, "--grad_accum=1")["counted"]
        plain = run(*common, "--grad_accum=3")["counted"]
        graphed_one_json = run(*common, "--grad_accum=1", "--graphs")
        graphed_one = graphed_one_json["counted"]
        graphed = run(*common, "--grad_accum=3", "--graphs")["counted"]
        per_micro_batch = (launches(plain["ops"]) - launches(one["ops"])) // 2
        self.assertGreater(per_micro_batch, 20)
        once = launches(one["ops"]) - per_micro_batch  # BeginStep, EndStep, the optimizer
        for counted, micro in ((graphed_one, 1), (graphed, 3)):
            with self.subTest(grad_accum=micro):
                by_name = {r["name"]: r for r in counted["ops"]}
                # The counted step is the last of three: every micro-batch one graph launch; the
                # step's first and second captures update the graphs of the step before.
                self.assertEqual(by_name["cudaGraphLaunch"]["calls"], micro)
                self.assertEqual(by_name["cudaGraphLaunch"]["kind"], "graph")
                self.assertEqual(by_name["cudaGraphExecUpdate"]["calls"], min(micro, 2))
                self.assertNotIn("cudaGraphInstantiate", by_name)
                # The same kernels and products ran as without graphs ...
                self.assertEqual(launches(counted["ops"]), launches((one if micro == 1 else plain)["ops"]))
                # ... but of each micro-batch's, all but the embedding backward's scatter as nodes
                # of its graph: the host launches the once-per-step ops and one ScatterKernel and
                # one cudaGraphLaunch per micro-batch.
                self.assertEqual(launches(counted["ops"], direct_only=True), once + micro)
                self.assertEqual(sum(r["graph_nodes"] for r in counted["ops"] if r["kind"] in ("kernel", "library")),
                                 micro * (per_micro_batch - 1))
                scatter = [r for r in counted["ops"] if r["name"].startswith("ScatterKernel")]
                self.assertEqual([(r["calls"], r["graph_nodes"]) for r in scatter], [(micro, 0)])
                # No wait more (BeginStep's scalars, the step's end, the loss read), the same copies
                # (the tile tables uploaded before the captures, not inside them).
                self.assertEqual(counted["totals"]["syncs"], 3)
                self.assertEqual(counted["totals"]["bytes_to_device"],
                                 (one if micro == 1 else plain)["totals"]["bytes_to_device"])
        self.assertEqual(plain["totals"]["syncs"], 3)
        # perf_model --counted puts the model's graphed launches beside these (G = 1).
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(graphed_one_json, f)
            f.flush()
            r = subprocess.run(["/usr/bin/python3", os.path.join(SRC, "tools", "perf_model.py"), f"--counted={f.name}",
                                "--json"], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        c = json.loads(r.stdout)
        self.assertEqual(c["counted_graph_launches"], 1)
        self.assertEqual(c["model_graph_launches"], 1)
        self.assertEqual(c["counted_graph_nodes"], per_micro_batch - 1)
        self.assertEqual(c["counted_direct_launches"] + c["counted_graph_nodes"], c["counted_launches"])
        # Not asserted: the model's split. At tiny_tiled bf16 T = 256 its launches are 53 against 59
        # counted (memsets included) and its nodes 44 against 45 (docs/performance.md, 2026-12-07).

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
