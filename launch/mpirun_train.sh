#!/bin/bash
# Starts `multiscreen train` with Open MPI's mpirun on a list of hosts, one rank
# per GPU (ranks fill a node before the next: keep tp within a node).
#
#   launch/mpirun_train.sh --hosts=node1,node2 --ranks_per_node=8 -- \
#       --config=configs/train/psi32.textproto --data=/shared/shards --run_dir=/shared/runs/psi32 --tp=8 --pp=2
#   launch/mpirun_train.sh --ranks_per_node=2 -- --config=configs/train/tiny_test.textproto ...   # this machine
#
# Options, before `--` (everything after it goes to `train`):
#   --hosts=H1,H2,...     hosts to run on                 [this machine]
#   --hostfile=FILE       one host per line (# comments); instead of --hosts
#   --ranks_per_node=N    ranks on each host              [GPUs that nvidia-smi lists, else 1]
#   --bin=PATH            the binary                      [build/multiscreen]
#   --dry_run             print the mpirun command, run nothing
# MPIRUN_ARGS (environment) adds mpirun options, e.g. "--mca btl_tcp_if_include eth0".
# The binary, the data and the run directory must be at the same paths on every
# host (a shared file system); ranks start in the current directory, with this
# shell's OMP_*, NCCL_*, CUDA_*, UCX_* and MULTISCREEN_* variables.
#
# Stopping: SIGTERM, SIGINT (Ctrl-C), SIGHUP or SIGUSR1 to this script reach every
# rank as SIGUSR1 (the one signal mpirun forwards without ending the job itself): the
# run ends after the current step with a checkpoint, and the script exits 0 (mpirun runs
# in a session of its own, so a terminal's Ctrl-C reaches only this script; a request
# before this machine's ranks have installed their handlers, or in the first 2 s, is held
# until they can take it, at most 120 s). A second SIGINT or SIGTERM is
# passed on as it is (mpirun's abort). Should this script die of a signal it cannot
# trap (SIGKILL, the OOM killer), a watcher in a session of its own sends mpirun the
# same SIGUSR1 stop, then SIGTERM after 120 s, then SIGKILL to what is left of
# mpirun's session 10 s later: no job trains on detached, holding the run's lock.
# Signalling mpirun directly
# works too, but mpirun answers SIGTERM and SIGINT with exit code 1 even when every
# rank stopped cleanly. Running the same command again resumes from
# <run_dir>/checkpoints/latest.
set -euo pipefail

die() { echo "mpirun_train.sh: $*" >&2; exit 2; }

hosts="" hostfile="" rpn="" bin="build/multiscreen" dry_run=0
while (($#)); do
  case "$1" in
    --hosts=*) hosts=${1#*=} ;;
    --hostfile=*) hostfile=${1#*=} ;;
    --ranks_per_node=*) rpn=${1#*=} ;;
    --bin=*) bin=${1#*=} ;;
    --dry_run) dry_run=1 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (train flags go after --)" ;;
  esac
  shift
done

if [[ -n $hostfile ]]; then
  [[ -r $hostfile ]] || die "--hostfile=$hostfile: cannot read it"
  hosts=$(sed 's/#.*//; s/[[:space:]].*//' "$hostfile" | grep -v '^$' | paste -sd, -)
  [[ -n $hosts ]] || die "--hostfile=$hostfile: no hosts in it"
fi
if [[ -z $rpn ]]; then
  rpn=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  ((rpn > 0)) || rpn=1
fi
[[ $rpn =~ ^[1-9][0-9]*$ ]] || die "--ranks_per_node=$rpn: expected a positive integer"
command -v mpirun >/dev/null || die "mpirun not found (Debian: apt-get install openmpi-bin)"

cmd=(mpirun --wdir "$PWD" --bind-to none)
if [[ -n $hosts ]]; then
  IFS=, read -r -a list <<< "$hosts"
  slots=()
  for h in "${list[@]}"; do slots+=("$h:$rpn"); done
  cmd+=(-np $((${#list[@]} * rpn)) --host "$(IFS=,; echo "${slots[*]}")" --map-by "ppr:$rpn:node")
else
  cmd+=(-np "$rpn")
  (($(nproc) >= rpn)) || cmd+=(--oversubscribe)
fi
[[ $(id -u) -ne 0 ]] || cmd+=(--allow-run-as-root)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
for var in $(compgen -e); do
  case "$var" in OMP_*|NCCL_*|CUDA_*|UCX_*|MULTISCREEN_*) cmd+=(-x "$var") ;; esac
done
read -r -a extra <<< "${MPIRUN_ARGS:-}"
cmd+=("${extra[@]}" "$bin" train "$@")

echo "[launch] ${cmd[*]}" >&2
((dry_run)) && exit 0
pid="" signals=0 interrupted=0 pending="" holding=0
# This machine's ranks: every one of them without --hosts, else those of the hosts that
# name this machine (a remote rank cannot be seen from here: only the 2 s hold covers it).
local_ranks=$rpn
if [[ -n $hosts ]]; then
  local_ranks=0 me=$(hostname 2>/dev/null || true)
  for h in "${list[@]}"; do
    [[ $h == localhost || $h == 127.0.0.1 || $h == "$me" || $h == "${me%%.*}" ]] && local_ranks=$((local_ranks + rpn))
  done
fi
# Whether this machine's ranks all catch SIGUSR1 yet: as many of mpirun's child processes
# as it runs here with bit 10 of /proc/PID/status's SigCgt set (a rank that gets SIGUSR1
# before its handler dies of it, exit 138; a wrapper still starting one does not count).
ranks_ready() {
  local n=0 p mask
  for p in $(ps -o pid= --ppid "$pid" 2>/dev/null); do
    mask=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$p/status" 2>/dev/null)
    [[ -n $mask ]] && (((0x$mask >> 9) & 1)) && n=$((n + 1))
  done
  ((n >= local_ranks))
}
forward() {  # the first stop request as USR1, a second one as it came
  interrupted=1
  signals=$((signals + 1))
  [[ -n $pid ]] || { pending=$1; return; }  # before mpirun exists: sent once it does
  if ((signals > 1)) && [[ $1 != USR1 ]]; then kill -"$1" "$pid" 2>/dev/null || true; return; fi
  ((holding)) && return  # a USR1 while the first request is held: that one stop
  # mpirun forwards USR1 only once it is up, and a rank dies of USR1 before its handler
  # is installed: the request waits for both (at most 120 s; not past mpirun's end).
  holding=1
  local deadline=$((started + 120))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
    ((SECONDS - started >= 2)) && ranks_ready && break
    sleep 0.1
  done
  holding=0
  kill -USR1 "$pid" 2>/dev/null || true
}
for sig in TERM INT HUP USR1; do trap "forward $sig" "$sig"; done
# The watcher: in a session of its own (a signal to this script's process group spares
# it), it reads mpirun's pid and then waits on a pipe whose write end only this script
# holds. The pipe closes when this script ends, however it ends; a mpirun still running
# then is stopped as a stop request would (USR1), then ended.
exec {alive}> >(exec setsid bash -c '
  read -r job || exit 0
  cat >/dev/null
  kill -0 "$job" 2>/dev/null || exit 0
  echo "mpirun_train.sh: the launch script ended; stopping mpirun ($job) with SIGUSR1" >&2
  kill -USR1 "$job" 2>/dev/null
  for ((i = 0; i < 1200; ++i)); do kill -0 "$job" 2>/dev/null || exit 0; sleep 0.1; done
  kill -TERM "$job" 2>/dev/null
  sleep 10
  for p in $(ps -o pid= --sid "$job" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done')
# mpirun in a session of its own: a terminal's Ctrl-C (sent to the whole foreground
# process group) reaches this script alone, which turns it into the USR1 stop (mpirun
# answers SIGINT itself with exit code 1). It does not inherit the watcher's pipe.
started=$SECONDS
setsid "${cmd[@]}" {alive}>&- &
pid=$!
echo "$pid" >&"$alive"
if [[ -n $pending ]]; then signals=0; forward "$pending"; fi
while :; do
  interrupted=0
  rc=0
  wait "$pid" || rc=$?
  ((interrupted)) || break  # a trapped signal ends `wait` early: wait again for mpirun's own status
done
exit "$rc"
