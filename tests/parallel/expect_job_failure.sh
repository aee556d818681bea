#!/bin/sh
# Usage: expect_job_failure.sh TIMEOUT_S REGEX COMMAND...
# Passes when COMMAND fails (non-zero exit) within TIMEOUT_S seconds and its
# output matches REGEX (grep -E); fails when it succeeds, hangs or says otherwise.
timeout_s=$1; regex=$2; shift 2
out=$(timeout --kill-after=5 "$timeout_s" "$@" 2>&1); rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 0 ]; then echo "expect_job_failure: the job succeeded; expected a failure"; exit 1; fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "expect_job_failure: the job hung (killed after ${timeout_s} s)"; exit 1; fi
if ! printf '%s\n' "$out" | grep -Eq "$regex"; then echo "expect_job_failure: output lacks /$regex/"; exit 1; fi
echo "expect_job_failure: failed as expected (exit $rc)"
