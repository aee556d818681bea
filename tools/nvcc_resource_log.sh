#!/bin/sh
# The CUDA compiler launcher of kernels/cuda (CMake's CUDA_COMPILER_LAUNCHER; nvcc build
# only): runs the nvcc command line it is given, which asks for --resource-usage, and keeps
# ptxas's report of the object in OBJECT.ptxas instead of printing it; the compiler's other
# output passes through to stderr. tools/ptxas_usage.py --reports reads these files, so the
# ptxas_usage_test checks the very objects the build made without compiling them again.
# Exit status: nvcc's.
obj=
prev=
for arg in "$@"; do
  if [ "$prev" = "-o" ]; then obj=$arg; fi
  prev=$arg
done
if [ -z "$obj" ]; then exec "$@"; fi
report='^ptxas info|^ +[0-9]+ bytes stack frame'
"$@" 2>"$obj.stderr"
rc=$?
grep -E "$report" "$obj.stderr" >"$obj.ptxas.tmp"
grep -vE "$report" "$obj.stderr" >&2
rm -f "$obj.stderr"
if [ "$rc" -eq 0 ]; then mv -f "$obj.ptxas.tmp" "$obj.ptxas"; else rm -f "$obj.ptxas.tmp" "$obj.ptxas"; fi
exit "$rc"
