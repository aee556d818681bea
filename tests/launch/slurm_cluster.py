#!/usr/bin/python3
"""A throwaway one-node Slurm cluster on localhost, for tests (and for trying
launch/train.sbatch by hand).

Everything lives in one temporary directory: a fresh munge key, slurm.conf,
gres.conf, the controller's state, the node's spool and every log. munged,
slurmctld and slurmd run as root in the foreground (Debian 12's munge and
slurm-wlm 22.05), on free ports, so they neither read nor disturb /etc/slurm,
/etc/munge or a cluster that is already running. The node has the machine's
CPUs and two GPUs backed by empty files: --gpus-per-node is accepted and
allocated, nothing is bound. Partitions: "debug" (the default) and "urgent",
whose jobs preempt debug's, which Slurm then requeues (PreemptMode=REQUEUE).
Requeued jobs may start again after 5 s (cred_expire) instead of 120.

    with SlurmCluster() as cluster:      # raises ClusterError with the reason
        job = cluster.sbatch(["launch/train.sbatch"], env={...})
        cluster.wait(job, lambda j: j["JobState"] == "COMPLETED", timeout_s=60)

Stopping (on leaving the `with` or at interpreter exit, and, if this process is
killed outright, by a detached reaper that watches it) cancels every job, stops
the daemons and kills whatever is left that carries this cluster's marker in its
environment: job steps and their tasks inherit it from the submitting process.

By hand: `python3 tests/launch/slurm_cluster.py` starts one, prints the
SLURM_CONF to export, and stops it on Ctrl-C.
"""
import atexit
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

MARKER = "MS_SLURM_TEST_CLUSTER"  # env var naming the cluster's directory
DAEMONS = ("munged", "slurmctld", "slurmd")


class ClusterError(RuntimeError):
    """The cluster could not start; the message says why (with log tails)."""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path, lines=25):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return f"({e})"


def _processes_marked(directory):
    """Pids (not ours) whose environment has MARKER=directory."""
    want = f"{MARKER}={directory}".encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if want in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _kill_marked(directory, grace_s=5.0):
    """SIGTERM, then SIGKILL after grace_s, every process marked with directory."""
    pids = _processes_marked(directory)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + grace_s
        while time.time() < deadline:
            pids = [p for p in pids if os.path.exists(f"/proc/{p}") and not _zombie(p)]
            if not pids:
                return
            time.sleep(0.1)


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def parse_record(text):
    """`scontrol show -o` output (one record) into a dict of Key=Value."""
    out = {}
    for m in re.finditer(r"(\S+?)=(\S*)", text):
        out.setdefault(m.group(1), m.group(2))
    return out


class SlurmCluster:
    def __init__(self, cpus=None, gpus=2, keep_dir=False):
        self.cpus = cpus or os.cpu_count() or 1
        self.gpus = gpus
        self.keep_dir = keep_dir
        self.dir = None
        self.procs = {}
        self._reaper = None
        self._stopped = False

    # --- life cycle -----------------------------------------------------------------

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        if os.geteuid() != 0:
            raise ClusterError(f"the test cluster runs munged, slurmctld and slurmd as root; this is uid {os.geteuid()}")
        path = ":".join(["/usr/sbin", "/usr/bin", os.environ.get("PATH", "")])
        for tool in ("munged", "munge", "unmunge", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel",
                     "srun"):
            if shutil.which(tool, path=path) is None:
                raise ClusterError(f"{tool} not found: install Debian's slurm-wlm and munge (scripts/setup does)")
        self.dir = tempfile.mkdtemp(prefix="ms-slurm-")
        atexit.register(self.stop)
        os.chmod(self.dir, 0o755)  # munged wants its socket's directory reachable by all
        for sub in ("etc", "state", "spool", "log", "run", "munge"):
            os.makedirs(os.path.join(self.dir, sub), mode=0o755)
        self.conf = os.path.join(self.dir, "etc", "slurm.conf")
        self.munge_socket = os.path.join(self.dir, "munge", "munge.socket")
        self.env = dict(os.environ, PATH=path, SLURM_CONF=self.conf, **{MARKER: self.dir})
        for var in [v for v in self.env if v.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and v != "SLURM_CONF"]:
            del self.env[var]  # a test run inside someone's allocation must not leak it into ours
        self._start_reaper()
        self._start_munge()
        self._write_config()
        self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", self.conf, "-v"])
        self._wait_for(lambda: self._run(["scontrol", "ping"], check=False).returncode == 0, 30,
                       "slurmctld did not answer `scontrol ping`", "slurmctld")
        self._spawn("slurmd", ["slurmd", "-D", "-N", "localhost", "-f", self.conf, "-v"])
        self._wait_for(self._node_idle, 60, "node localhost did not become idle", "slurmd")
        return self

    def stop(self):
        if self._stopped or self.dir is None:
            return
        self._stopped = True
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self._run(["scancel", "--full", "--quiet", "--user=root"], check=False, timeout=10)
            self._run(["scancel", "--quiet", "--user=root"], check=False, timeout=10)
            deadline = time.time() + 15
            while time.time() < deadline and self._run(["squeue", "-h"], check=False, timeout=10).stdout.strip():
                time.sleep(0.3)
        for name in reversed(DAEMONS):
            p = self.procs.get(name)
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        _kill_marked(self.dir)  # slurmstepd and job tasks left behind
        if self._reaper is not None:
            try:
                os.kill(self._reaper, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def log(self, name):
        return os.path.join(self.dir, "log", f"{name}.log")

    def logs(self, names=DAEMONS, lines=25):
        return "\n".join(f"--- {self.log(n)} (last {lines} lines) ---\n{_tail(self.log(n), lines)}" for n in names)

    # --- clients ----------------------------------------------------------------------

    def sbatch(self, args, env=None, cwd=None):
        """Submits; returns the job id. `env` is added to the submitting environment."""
        r = self._run(["sbatch", "--parsable", *args], env=env, cwd=cwd, check=False)
        if r.returncode != 0:
            raise ClusterError(f"sbatch {' '.join(args)} failed: {r.stderr.strip()}\n{self.logs(['slurmctld'])}")
        return r.stdout.strip().split(";")[0]

    def job(self, job_id):
        """`scontrol show job` as a dict (JobState, Restarts, ExitCode, ...)."""
        r = self._run(["scontrol", "show", "job", "-o", job_id], check=False)
        if r.returncode != 0:
            raise ClusterError(f"scontrol show job {job_id}: {r.stderr.strip()}")
        return parse_record(r.stdout)

    def wait(self, job_id, done, timeout_s, what="the job"):
        """Polls the job until done(record) is true; returns the record."""
        deadline = time.time() + timeout_s
        while True:
            rec = self.job(job_id)
            if done(rec):
                return rec
            if time.time() > deadline:
                raise AssertionError(f"{what} (job {job_id}) not done after {timeout_s}s: JobState={rec.get('JobState')} "
                                     f"Reason={rec.get('Reason')} Restarts={rec.get('Restarts')}\n{self.logs(['slurmctld', 'slurmd'])}")
            self._check_daemons()
            time.sleep(0.2)

    def run(self, args, **kw):
        """Runs a Slurm client command against this cluster."""
        return self._run(args, **kw)

    # --- internals --------------------------------------------------------------------

    def _run(self, args, env=None, check=True, timeout=60, cwd=None):
        full_env = dict(self.env, **(env or {}))
        r = subprocess.run(args, env=full_env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
        if check and r.returncode != 0:
            raise ClusterError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
        return r

    def _spawn(self, name, args):
        out = open(self.log(name + ".stderr"), "w")
        try:
            self.procs[name] = subprocess.Popen(args, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            raise ClusterError(f"cannot start {name}: {e}")
        finally:
            out.close()

    def _check_daemons(self):
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise ClusterError(f"{name} exited with status {p.returncode}\n"
                                   f"{self.logs([name, name + '.stderr'])}")

    def _wait_for(self, ready, timeout_s, message, daemon):
        deadline = time.time() + timeout_s
        while not ready():
            self._check_daemons()
            if time.time() > deadline:
                raise ClusterError(f"{message} within {timeout_s}s\n{self.logs([daemon, daemon + '.stderr'])}")
            time.sleep(0.2)

    def _node_idle(self):
        r = self._run(["scontrol", "show", "node", "-o", "localhost"], check=False)
        state = parse_record(r.stdout).get("State", "") if r.returncode == 0 else ""
        if "DRAIN" in state or "INVAL" in state:
            raise ClusterError(f"node localhost is {state}: {parse_record(r.stdout).get('Reason', '')}\n"
                               f"{self.logs(['slurmd', 'slurmctld'])}")
        return state.startswith("IDLE")

    def _start_munge(self):
        key = os.path.join(self.dir, "munge", "munge.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(128))
        m = os.path.join(self.dir, "munge")
        self._spawn("munged", ["munged", "-F", f"--key-file={key}", f"--socket={self.munge_socket}",
                               f"--pid-file={m}/munged.pid", f"--seed-file={m}/munged.seed",
                               f"--log-file={self.log('munged')}"])

        def ready():
            r = subprocess.run(f"munge -n -S {self.munge_socket} | unmunge -S {self.munge_socket}", shell=True,
                               capture_output=True, text=True, env=self.env)
            return r.returncode == 0
        self._wait_for(ready, 20, "munged did not encode and decode a credential", "munged")

    def _write_config(self):
        d = self.dir
        mpi = "pmix" if os.path.exists("/usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix.so") or \
            any(os.path.exists(os.path.join(p, "mpi_pmix.so")) for p in ("/usr/lib/slurm-wlm", "/usr/lib64/slurm")) else "none"
        conf = f"""# Generated by tests/launch/slurm_cluster.py: a one-node test cluster.
ClusterName=mstest
SlurmctldHost=localhost
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it may start again (default 120 s).
AuthInfo=socket={self.munge_socket},cred_expire=5
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd.pid
SlurmctldLogFile={self.log('slurmctld')}
SlurmdLogFile={self.log('slurmd')}
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={d}/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault={mpi}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
# Schedule (and preempt) on submission and every second, not every minute.
SchedulerParameters=sched_interval=1,batch_sched_delay=0,sched_min_interval=100000
JobRequeue=1
ReturnToService=2
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MailProg=/bin/true
KillWait=10
MinJobAge=600
InactiveLimit=0
GresTypes=gpu
NodeName=localhost NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=1000 Gres=gpu:{self.gpus} State=UNKNOWN
# Jobs in "urgent" preempt jobs in "debug", which Slurm then requeues.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=urgent Nodes=localhost MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
"""
        with open(self.conf, "w") as f:
            f.write(conf)
        with open(os.path.join(d, "etc", "gres.conf"), "w") as f:
            # Slurm drops file-less GPUs; empty files stand in for /dev/nvidia0.. (no cgroups
            # here, so nothing opens them).
            os.makedirs(os.path.join(d, "dev"))
            for i in range(self.gpus):
                open(os.path.join(d, "dev", f"gpu{i}"), "w").close()
            f.write(f"NodeName=localhost Name=gpu File={d}/dev/gpu[0-{self.gpus - 1}]\n")
        open(os.path.join(d, "etc", "plugstack.conf"), "w").close()

    def _start_reaper(self):
        """A detached watcher (double-forked, so killing this process's tree
        misses it) that cleans up if this process dies without stop()."""
        code = ("import os, sys, time\n"
                "if os.fork(): os._exit(0)\n"
                "os.setsid()\n"
                "with open(sys.argv[2] + '/run/reaper.tmp', 'w') as f: f.write(str(os.getpid()))\n"
                "os.rename(sys.argv[2] + '/run/reaper.tmp', sys.argv[2] + '/run/reaper.pid')\n"
                "sys.path.insert(0, sys.argv[3])\n"
                "import slurm_cluster as c\n"
                "owner, d = int(sys.argv[1]), sys.argv[2]\n"
                "while os.path.exists(f'/proc/{owner}') and not c._zombie(owner): time.sleep(1)\n"
                "c._kill_marked(d)\n"
                "import shutil; shutil.rmtree(d, ignore_errors=True)\n")
        env = {k: v for k, v in os.environ.items() if k != MARKER}
        subprocess.run([sys.executable, "-c", code, str(os.getpid()), self.dir,
                        os.path.dirname(os.path.abspath(__file__))],
                       env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True, timeout=30)
        pid_file = os.path.join(self.dir, "run", "reaper.pid")
        deadline = time.time() + 10
        while not os.path.exists(pid_file) and time.time() < deadline:
            time.sleep(0.05)
        with open(pid_file) as f:
            self._reaper = int(f.read())

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    with SlurmCluster(keep_dir="--keep" in sys.argv) as c:
        print(f"export SLURM_CONF={c.conf} {MARKER}={c.dir}\n(Ctrl-C stops the cluster)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
