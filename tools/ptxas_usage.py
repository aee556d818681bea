#!/usr/bin/python3
"""Resource usage of every CUDA kernel as ptxas reports it (registers per thread, stack
frame, spill stores and loads, static shared memory), with no GPU: each kernels/cuda
source is compiled for one architecture with `nvcc --resource-usage` and the report
parsed; with --reports, the reports the nvcc build kept beside its objects
(tools/nvcc_resource_log.sh, the CUDA compiler launcher of kernels/cuda) are read instead,
so that the objects checked are the ones built and nothing is compiled twice. --check
exits 1 when any kernel spills registers to local memory (the ptxas_usage_test of the nvcc
build); --markdown prints the table of docs/performance.md.

--tensor-cores instead compiles each source that includes kernels/cuda/tensor_core.cuh
to PTX (`nvcc -ptx`) and checks that every tiled kernel entry in it (a kernel whose name
holds "Tiled") holds `mma.sync.aligned.m16n8k16` and `ldmatrix` instructions, and that
each such source has one: exit 1 when the tensor-core path of a tiled kernel was compiled
out or made unreachable (the tensor_core_ptx_test of the nvcc build). The tiled kernels'
sources (TILED_SOURCES: the screening's and the attention's) must be among them, so that
one which stops including tensor_core.cuh fails rather than drops out of the check. PTX,
not SASS: this toolkit has no cuobjdump; scripts/gpu_check looks for HMMA in the SASS
where it has one.

--step-loops prints, for each loop of a tiled kernel that holds mma.sync, its static PTX
instruction count and how many of them are mma, div.rn.f32, 64-bit integer, f64 and
global loads, then the same over the loop's longest trip (every data-dependent branch
taken the longer way: an if/else counts its longer arm, where the static count adds both),
and where a loop holds the screening kernels' interior-step arm (INTERIOR_MARK), the longest
trip through it: the instruction side of tools/perf_model.py (ISSUE_PER_STEP,
ISSUE_PER_INTERIOR_STEP).

Run: /usr/bin/python3 tools/ptxas_usage.py --nvcc=/usr/local/cuda/bin/nvcc --source=. --build=build [--arch=90]
     [--reports] [--check] [--markdown] [--tensor-cores] [--step-loops]
"""
import argparse
import concurrent.futures
import glob
import os
import re
import subprocess
import sys

ENTRY = re.compile(r"Compiling entry function '(\S+)' for 'sm_(\d+)'")
PROPS = re.compile(r"Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(.*)")
SMEM = re.compile(r"(\d+) bytes smem")


def parse_report(text, rel, arch):
    """ptxas's --resource-usage report (nvcc's stderr) of one source: [usage dict] of its
    kernels for sm_`arch` (a report of several architectures keeps that one's)."""
    kernels, current, props_of = [], None, None
    for line in text.splitlines():
        if m := ENTRY.search(line):
            current = {"name": m.group(1), "file": rel} if m.group(2) == str(arch) else None
            if current is not None:
                kernels.append(current)
        elif m := PROPS.search(line):
            props_of = m.group(1)
        elif (m := FRAME.search(line)) and current is not None and props_of == current["name"]:
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif (m := USED.search(line)) and current is not None and "registers" not in current:
            current["registers"] = int(m.group(1))
            s = SMEM.search(m.group(2))
            current["shared"] = int(s.group(1)) if s else 0
    return kernels


def compile_one(nvcc, source, build, arch, path):
    """ptxas's report of one source file, compiled here: [usage dict]."""
    cmd = [nvcc, "-O2", "-DNDEBUG", "-DMULTISCREEN_HAVE_CUDA", "-std=c++17",
           f"--generate-code=arch=compute_{arch},code=[sm_{arch}]", f"-I{source}", f"-I{build}",
           "--resource-usage", "-c", path, "-o", os.devnull]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ptxas_usage: {path}: nvcc failed:\n{r.stderr[-3000:]}")
    return parse_report(r.stderr, os.path.relpath(path, source), arch)


# Where the nvcc build keeps each kernels/cuda object's report (tools/nvcc_resource_log.sh).
REPORT_DIR = os.path.join("kernels", "cuda", "CMakeFiles", "ms_kernels_cuda.dir")


def build_report(source, build, arch, path):
    """ptxas's report of one source file as the build compiled it (OBJECT.ptxas): [usage dict]."""
    rel = os.path.relpath(path, source)
    report = os.path.join(build, REPORT_DIR, os.path.basename(path) + ".o.ptxas")
    if not os.path.exists(report):
        sys.exit(f"ptxas_usage: {report}: no ptxas report of {rel}; build ms_kernels_cuda with nvcc first "
                 "(tools/nvcc_resource_log.sh writes the reports)")
    if os.path.getmtime(report) < os.path.getmtime(path):
        sys.exit(f"ptxas_usage: {report} is older than {rel}; rebuild ms_kernels_cuda")
    with open(report, encoding="utf-8") as f:
        return parse_report(f.read(), rel, arch)


# The sources of the tiled tensor-core kernels (issue 29); each must include tensor_core.cuh.
TILED_SOURCES = ("kernels/cuda/screening_tiled.cu", "kernels/cuda/attention_tiled.cu")

ENTRY_PTX = re.compile(r"^(?:\.visible\s+)?\.entry\s+([^\s(]+)")
MMA = "mma.sync.aligned.m16n8k16"
LDMATRIX = "ldmatrix.sync.aligned"


def ptx_text(nvcc, source, build, arch, path):
    """The PTX of one source file (nvcc -O2 -ptx for sm_`arch`)."""
    cmd = [nvcc, "-O2", "-DNDEBUG", "-DMULTISCREEN_HAVE_CUDA", "-std=c++17", f"-arch=sm_{arch}", f"-I{source}",
           f"-I{build}", "-ptx", path, "-o", "-"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ptxas_usage: {path}: nvcc -ptx failed:\n{r.stderr[-3000:]}")
    return r.stdout


def ptx_entries(nvcc, source, build, arch, path):
    """The PTX of one source file, by kernel entry: [(mangled name, mma count, ldmatrix count)]."""
    entries, current = [], None
    for line in ptx_text(nvcc, source, build, arch, path).splitlines():
        if m := ENTRY_PTX.match(line):
            current = [m.group(1), 0, 0]
            entries.append(current)
        elif current is not None and line.startswith("}"):
            current = None  # an entry's body ends at the closing brace in column 0
        elif current is not None:
            current[1] += MMA in line
            current[2] += LDMATRIX in line
    return [tuple(e) for e in entries]


def check_tensor_cores(args, source):
    """--tensor-cores: every tiled kernel of every tensor_core.cuh user holds mma.sync and ldmatrix."""
    files = [f for f in sorted(glob.glob(os.path.join(source, "kernels", "cuda", "*.cu")))
             if '#include "kernels/cuda/tensor_core.cuh"' in open(f, encoding="utf-8").read()]
    if not files:
        sys.exit("ptxas_usage: no kernels/cuda source includes kernels/cuda/tensor_core.cuh")
    missing = [t for t in TILED_SOURCES if os.path.join(source, t) not in files]
    build = os.path.abspath(args.build)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        reports = list(pool.map(lambda f: ptx_entries(args.nvcc, source, build, args.arch, f), files))
    failures = [f"{t} does not include kernels/cuda/tensor_core.cuh (or is gone): its tiled kernels are unchecked"
                for t in missing]
    for path, entries in zip(files, reports):
        rel = os.path.relpath(path, source)
        names = demangle([e[0] for e in entries]) if entries else []
        tiled = [(n, e) for n, e in zip(names, entries) if "Tiled" in n]
        if not tiled:
            failures.append(f"{rel} includes tensor_core.cuh but has no tiled kernel entry (a kernel named *Tiled*)")
        for name, (_, mma, ldmatrix) in tiled:
            print(f"{name} ({rel}, sm_{args.arch} PTX): {mma} {MMA}, {ldmatrix} ldmatrix")
            if mma == 0 or ldmatrix == 0:
                failures.append(f"{name} ({rel}) holds {mma} {MMA} and {ldmatrix} ldmatrix in its PTX: "
                                "its tensor-core path is compiled out or unreachable")
    for f in failures:
        print(f"ptxas_usage: {f}", file=sys.stderr)
    print(f"ptxas_usage: {sum(len(e) for e in reports)} kernel entries in {len(files)} tensor-core sources for "
          f"sm_{args.arch}; {len(failures)} failures", file=sys.stderr)
    if failures:
        sys.exit(1)


LABEL = re.compile(r"^(\$L__\w+):")
BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$L__\w+);")
# What --step-loops counts in a loop's PTX instructions (one line each).
STEP_CLASSES = {
    "mma": re.compile(r"^mma\."),
    "div.rn.f32": re.compile(r"^div\.rn\.f32"),
    "64-bit int": re.compile(r"^(add|sub|mul|mad|shl|shr|setp|selp|min|max|and|or|xor|neg)\S*\.[su]64\b"),
    "f64": re.compile(r"\.f64\b"),
    "ld.global": re.compile(r"^ld\.global"),
}


# The comment screening_tiled.cu's StepPairs puts in the arm of a step whose pairs all lie
# inside the window (perf_model.ISSUE_PER_INTERIOR_STEP).
INTERIOR_MARK = "// screening step: interior"
# The comment the query pass puts in the arm of MiPE's rate term, which only tiles with
# w < w_th run (rate ≠ 0): perf_model.ISSUE_MIPE_RATE counts that arm apart.
RATE_MARK = "// screening step: MiPE rate"


def instruction_lines(lines):
    """The PTX instructions among `lines` (stripped; directives, labels and comments dropped).
    An inline-asm statement nvcc wraps in braces on one line (`{  cvt.rn.bf16.f32 %rs1, %f1;}`,
    as cuda_bf16.hpp's conversions come) counts as its instruction: with the braces kept, the
    line ended in `}` and the bf16 conversions of the step loops went uncounted."""
    body = [l.strip() for l in lines]
    body = [l[1:-1].strip() if l.startswith("{") and l.endswith(";}") else l for l in body]
    return [l for l in body if l.endswith(";") and not l.startswith((".", "//"))]


def longest_trip(lines, first, last, labels, through=None, avoid=None):
    """The instructions of the longest path through one trip of the loop lines[first..last]
    (first: its head label; last: the branch back to it): the loop body's control flow with
    every back edge dropped (a nested loop's body counted once) is acyclic, so the longest
    path from the head to the back branch is found in one pass in line order. A branch out of
    the loop ends its path. This is what one trip issues when every data-dependent branch goes
    the longer way: an if/else counts one arm, where the static count adds both. `through`: a
    comment the path must pass (a kernel's `asm volatile("// …")` marking one arm), or None;
    [] when no trip passes it. `avoid`: a comment no block of the path may hold (an arm the
    trip leaves out, as the warps of a tile that never enter it), or None."""
    starts = {first}
    for i in range(first, last + 1):
        s = lines[i].strip()
        if LABEL.match(lines[i]):
            starts.add(i)
        if BRANCH.search(s) or s.startswith(("ret", "exit")):
            starts.add(i + 1)
    starts = sorted(x for x in starts if first <= x <= last)
    blocks = [(x, (starts[k + 1] - 1 if k + 1 < len(starts) else last)) for k, x in enumerate(starts)]
    block_at = {x: k for k, (x, _) in enumerate(blocks)}
    # best[k][seen]: the longest path reaching block k, having passed `through` (seen) or not.
    best = [[None, None] for _ in blocks]
    best[0][through is None] = []
    trips = []  # the paths that reach the back branch having passed `through`
    for k, (x, y) in enumerate(blocks):
        marked = through is not None and any(through in l for l in lines[x:y + 1])
        if avoid is not None and any(avoid in l for l in lines[x:y + 1]):
            continue  # no path passes this block
        for seen in (False, True):
            if best[k][seen] is None:
                continue
            path, now = best[k][seen] + instruction_lines(lines[x:y + 1]), seen or marked
            if k == len(blocks) - 1:
                if now:
                    trips.append(path)
                continue
            end = path[-1] if path else ""
            successors = []
            if b := BRANCH.search(end):
                target = labels.get(b.group(1))
                if target is not None and x < target <= last:
                    successors.append(block_at[target])
                if end.startswith("@"):
                    successors.append(k + 1)  # a conditional branch falls through too
            elif not end.startswith(("ret", "exit")):
                successors.append(k + 1)
            for n in successors:
                if best[n][now] is None or len(path) > len(best[n][now]):
                    best[n][now] = path
    return max(trips, key=len, default=[])


def step_counts(body):
    """Instructions of `body` and how many of each STEP_CLASSES class."""
    return {"instructions": len(body), **{k: sum(1 for l in body if c.search(l)) for k, c in STEP_CLASSES.items()}}


def mma_loops(ptx, avoid=None):
    """Per kernel entry of `ptx`, its loops that hold mma.sync, from the branches back to an
    earlier label: [(mangled name, [(depth, first line, static counts, longest-trip counts,
    interior counts)])], depth 0 the outermost such loop; static counts: the PTX instructions of
    the loop's lines (a nested loop's once) and those of each STEP_CLASSES class; longest-trip
    counts: the same over the instructions of longest_trip; interior counts: over the longest
    trip through the arm marked INTERIOR_MARK, None where no trip passes it. avoid: the trips
    leave out every block holding that comment (longest_trip's `avoid`); the static count
    does not."""
    out = []
    for chunk in re.split(r"\n(?=(?:\.visible\s+)?\.entry\s)", ptx):
        m = ENTRY_PTX.match(chunk)
        if not m:
            continue
        lines = chunk.splitlines()
        labels = {lm.group(1): i for i, l in enumerate(lines) if (lm := LABEL.match(l))}
        spans = [(labels[b.group(1)], i) for i, l in enumerate(lines)
                 if (b := BRANCH.search(l)) and labels.get(b.group(1), i) < i]
        spans = [(a, b) for a, b in spans if any(MMA in l for l in lines[a:b + 1])]
        loops = []
        for a, b in sorted(set(spans)):
            depth = sum(1 for a2, b2 in spans if a2 <= a and b <= b2 and (a2, b2) != (a, b))
            interior = longest_trip(lines, a, b, labels, through=INTERIOR_MARK, avoid=avoid)
            loops.append((depth, a, step_counts(instruction_lines(lines[a:b + 1])),
                          step_counts(longest_trip(lines, a, b, labels, avoid=avoid)),
                          step_counts(interior) if interior else None))
        out.append((m.group(1), loops))
    return out


def print_step_loops(args, source):
    """--step-loops: the mma loops of the tiled kernels (TILED_SOURCES), for the performance model."""
    build = os.path.abspath(args.build)
    for rel in TILED_SOURCES:
        ptx = ptx_text(args.nvcc, source, build, args.arch, os.path.join(source, rel))
        entries, plain = mma_loops(ptx), mma_loops(ptx, avoid=RATE_MARK)
        for name, (_, loops), (_, plain_loops) in zip(demangle([e[0] for e in entries]), entries, plain):
            for (depth, first, static, trip, interior), (_, _, _, trip_p, interior_p) in zip(loops, plain_loops):
                line = (f"{name} ({rel}, sm_{args.arch} PTX) loop at line {first}, depth {depth}: " +
                        ", ".join(f"{v} {k}" for k, v in static.items()) + "; longest trip: " +
                        ", ".join(f"{v} {k}" for k, v in trip.items()) +
                        ("" if interior is None else "; interior steps: " +
                         ", ".join(f"{v} {k}" for k, v in interior.items())))
                if (trip_p, interior_p) != (trip, interior):  # the loop holds the MiPE rate arm
                    line += (f"; without the MiPE rate arm (tiles with w >= w_th): longest trip "
                             f"{trip_p['instructions']}" +
                             ("" if interior_p is None else f", interior steps {interior_p['instructions']}"))
                print(line)


def demangle(names):
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
    out = []
    for full in r.stdout.splitlines():
        short = re.sub(r"multiscreen::kernels::cuda::(\(anonymous namespace\)::)?", "", full)
        short = re.sub(r"^void ", "", short)
        out.append(short.split("(")[0])
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nvcc", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--build", required=True, help="the build directory (generated headers)")
    p.add_argument("--arch", default="90")
    p.add_argument("--check", action="store_true", help="exit 1 when a kernel spills")
    p.add_argument("--reports", action="store_true",
                   help="read the reports the nvcc build kept beside its objects (tools/nvcc_resource_log.sh)\n"
                        "instead of compiling each source again")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--step-loops", action="store_true",
                   help="print the PTX instruction counts of the tiled kernels' loops that hold mma.sync instead\n"
                        "(static: a nested loop's instructions once; tools/perf_model.py ISSUE_PER_STEP)")
    p.add_argument("--tensor-cores", action="store_true",
                   help="check the tiled kernels' PTX for mma.sync and ldmatrix instead (exit 1 when one lacks them)")
    args = p.parse_args()
    source = os.path.abspath(args.source)
    if args.tensor_cores:
        check_tensor_cores(args, source)
        return
    if args.step_loops:
        print_step_loops(args, source)
        return
    files = sorted(glob.glob(os.path.join(source, "kernels", "cuda", "*.cu")))
    build = os.path.abspath(args.build)
    if args.reports:
        reports = [build_report(source, build, args.arch, f) for f in files]
    else:
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            reports = list(pool.map(lambda f: compile_one(args.nvcc, source, build, args.arch, f), files))
    kernels = [k for report in reports for k in report]
    for k, name in zip(kernels, demangle([k["name"] for k in kernels])):
        k["short"] = name
    if args.markdown:
        print(f"| kernel (sm_{args.arch}) | file | registers | stack (B) | spill stores (B) | spill loads (B) | "
              "static shared (B) |")
        print("|---|---|---|---|---|---|---|")
        for k in sorted(kernels, key=lambda k: (k["file"], k["short"])):
            print(f"| `{k['short']}` | {os.path.basename(k['file'])} | {k['registers']} | {k['stack']} | "
                  f"{k['spill_stores']} | {k['spill_loads']} | {k['shared']} |")
    else:
        for k in kernels:
            print(f"{k['short']}: {k['registers']} registers, {k['stack']} B stack, "
                  f"{k['spill_stores']}/{k['spill_loads']} B spilled, {k['shared']} B shared")
    spilling = [k for k in kernels if k["spill_stores"] or k["spill_loads"]]
    print(f"ptxas_usage: {len(kernels)} kernels in {len(files)} files for sm_{args.arch}; "
          f"{len(spilling)} spill registers", file=sys.stderr)
    if not kernels:
        sys.exit("ptxas_usage: no kernel found in the report (has nvcc's output format changed?)")
    if args.check and spilling:
        for k in spilling:
            print(f"ptxas_usage: {k['short']} ({k['file']}) spills {k['spill_stores']} B stores, "
                  f"{k['spill_loads']} B loads at {k['registers']} registers", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
