#!/usr/bin/python3
"""tools/ptxas_usage.py --step-loops on hand-written PTX: a loop's static count adds both
arms of an if/else, its longest trip one (the longer); a skipped block counts on the
longest trip; a nested loop's body counts once; a branch out of the loop ends a path; only
loops holding mma.sync are reported. No nvcc needed.

Run: /usr/bin/python3 tests/tools/ptxas_step_loops_test.py
"""
import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import ptxas_usage  # noqa: E402

MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f1, %f2, %f3, %f4};"


def entry(body):
    return ".visible .entry kernel(\n.param .u64 p\n)\n{\n" + body + "\n}\n"


# The loop head $L__BB0_1 … back branch: 2 head instructions, an if (p1) / else with arms of
# 3 and 5 instructions, an if-then of 4 skipped by @p2, a tail of 2 with the back branch.
IF_ELSE = """
	mov.u32 	%r0, 0;
$L__BB0_1:
	add.s32 	%r7, %r7, 1;
	""" + MMA + """
	@%p1 bra 	$L__BB0_3;
	add.f32 	%f5, %f5, %f6;
	add.f32 	%f5, %f5, %f6;
	bra.uni 	$L__BB0_4;
$L__BB0_3:
	mul.f32 	%f5, %f5, %f6;
	mul.f32 	%f5, %f5, %f6;
	mul.f32 	%f5, %f5, %f6;
	mul.f32 	%f5, %f5, %f6;
	mul.f32 	%f5, %f5, %f6;
$L__BB0_4:
	@%p2 bra 	$L__BB0_5;
	fma.rn.f32 	%f7, %f5, %f6, %f7;
	fma.rn.f32 	%f7, %f5, %f6, %f7;
	fma.rn.f32 	%f7, %f5, %f6, %f7;
	fma.rn.f64 	%fd1, %fd2, %fd3, %fd1;
$L__BB0_5:
	setp.lt.s32 	%p3, %r7, %r8;
	@%p3 bra 	$L__BB0_1;
	ret;
"""


class StepLoopsTest(unittest.TestCase):
    def loops(self, body):
        (name, loops), = ptxas_usage.mma_loops(entry(body))
        self.assertEqual(name, "kernel")
        return loops

    def test_if_else_counts_one_arm_on_the_longest_trip(self):
        (depth, _, static, trip, interior), = self.loops(IF_ELSE)
        self.assertIsNone(interior)  # no arm marked
        self.assertEqual(depth, 0)
        # head 2 (add, mma) + branch 1 + arm A 3 (2 adds, bra.uni) + arm B 5 + branch 1 +
        # then-block 4 + tail 2.
        self.assertEqual(static["instructions"], 2 + 1 + 3 + 5 + 1 + 4 + 2)
        # The longest trip: head, branch, arm B (5 > 3), branch, then-block, tail.
        self.assertEqual(trip["instructions"], 2 + 1 + 5 + 1 + 4 + 2)
        self.assertEqual(trip["mma"], 1)
        self.assertEqual(trip["f64"], 1)

    def test_a_nested_loop_body_counts_once_and_an_exit_ends_a_path(self):
        body = """
$L__BB0_1:
	""" + MMA + """
$L__BB0_2:
	add.f32 	%f5, %f5, %f6;
	add.f32 	%f5, %f5, %f6;
	@%p1 bra 	$L__BB0_2;
	@%p2 bra 	$L__BB0_9;
	sub.f32 	%f5, %f5, %f6;
	@%p3 bra 	$L__BB0_1;
$L__BB0_9:
	ret;
"""
        loops = self.loops(body)
        self.assertEqual(len(loops), 1)  # the inner loop holds no mma: not reported
        (_, _, static, trip, _), = loops
        self.assertEqual(static["instructions"], 1 + 3 + 1 + 2)
        # mma, the inner body once (2 adds and its back branch), the exit test, sub, back branch.
        self.assertEqual(trip["instructions"], 1 + 3 + 1 + 2)

    def test_a_path_that_only_leaves_the_loop_is_not_a_trip(self):
        body = """
$L__BB0_1:
	""" + MMA + """
	@%p1 bra 	$L__BB0_9;
	add.f32 	%f5, %f5, %f6;
	@%p3 bra 	$L__BB0_1;
$L__BB0_9:
	mul.f32 	%f5, %f5, %f6;
	mul.f32 	%f5, %f5, %f6;
	mul.f32 	%f5, %f5, %f6;
	ret;
"""
        (_, _, _, trip, _), = self.loops(body)
        self.assertEqual(trip["instructions"], 4)

    def test_the_marked_arm_is_counted_on_its_own(self):
        # The same loop with the shorter arm (2 adds) marked as interior steps.
        marked = IF_ELSE.replace("\tadd.f32 \t%f5, %f5, %f6;\n\tadd.f32", "\t" + ptxas_usage.INTERIOR_MARK +
                                 "\n\tadd.f32 \t%f5, %f5, %f6;\n\tadd.f32", 1)
        self.assertNotEqual(marked, IF_ELSE)
        (_, _, static, trip, interior), = self.loops(marked)
        self.assertEqual(static["instructions"], 2 + 1 + 3 + 5 + 1 + 4 + 2)  # a comment is no instruction
        self.assertEqual(trip["instructions"], 2 + 1 + 5 + 1 + 4 + 2)
        self.assertEqual(interior["instructions"], 2 + 1 + 3 + 1 + 4 + 2)
        # Marked in the block every trip ends in: the longest trip passes it.
        tail = IF_ELSE.replace("\tsetp.lt.s32", "\t" + ptxas_usage.INTERIOR_MARK + "\n\tsetp.lt.s32", 1)
        (_, _, _, trip, interior), = self.loops(tail)
        self.assertEqual(interior["instructions"], trip["instructions"])

    def test_an_avoided_arm_is_left_out(self):
        # The longer arm (5 muls) marked as one a trip may leave out: the longest trip avoiding
        # it takes the shorter arm; the interior trip through a mark in the tail does too.
        rate = IF_ELSE.replace("\tmul.f32", "\t" + ptxas_usage.RATE_MARK + "\n\tmul.f32", 1)
        self.assertNotEqual(rate, IF_ELSE)
        (_, _, static, trip, _), = ptxas_usage.mma_loops(entry(rate), avoid=ptxas_usage.RATE_MARK)[0][1]
        self.assertEqual(static["instructions"], 2 + 1 + 3 + 5 + 1 + 4 + 2)
        self.assertEqual(trip["instructions"], 2 + 1 + 3 + 1 + 4 + 2)
        both = rate.replace("\tsetp.lt.s32", "\t" + ptxas_usage.INTERIOR_MARK + "\n\tsetp.lt.s32", 1)
        (_, _, _, trip, interior), = ptxas_usage.mma_loops(entry(both))[0][1]
        self.assertEqual(interior["instructions"], 2 + 1 + 5 + 1 + 4 + 2)
        (_, _, _, trip, interior), = ptxas_usage.mma_loops(entry(both), avoid=ptxas_usage.RATE_MARK)[0][1]
        self.assertEqual(interior["instructions"], 2 + 1 + 3 + 1 + 4 + 2)

    def test_braced_inline_asm_counts(self):
        # cuda_bf16.hpp's conversions reach the PTX as one-line braced inline asm; each is one
        # instruction (they went uncounted while the line ended in "}"); a lone brace is none.
        braced = IF_ELSE.replace("\tsetp.lt.s32", "\t{  cvt.rn.bf16.f32 %rs1, %f5;}\n\t{ cvt.f32.bf16 %f8, %rs1;}\n"
                                 "\t{\n\t}\n\tsetp.lt.s32", 1)
        self.assertNotEqual(braced, IF_ELSE)
        (_, _, static, trip, _), = self.loops(braced)
        self.assertEqual(static["instructions"], 2 + 1 + 3 + 5 + 1 + 4 + 2 + 2)
        self.assertEqual(trip["instructions"], 2 + 1 + 5 + 1 + 4 + 2 + 2)


if __name__ == "__main__":
    unittest.main()
