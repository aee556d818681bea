// The local sweep runner and run states (sweep_runner.h).
#include "launch/sweep_runner.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_lock.h"
#include "common/log.h"
#include "common/text_file.h"
#include "nlohmann/json.hpp"

namespace multiscreen {
namespace {

namespace fs = std::filesystem;

nlohmann::json ReadJson(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

// The last step of metrics.jsonl's standing rows (0 when none).
int64_t LastStep(const fs::path& metrics) {
  std::ifstream in(metrics);
  std::string line;
  int64_t step = 0;
  while (std::getline(in, line)) {
    nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    if (!row.is_object()) continue;
    if (row.contains("resumed_from") && row["resumed_from"].is_number_integer()) {
      step = std::min(step, row["resumed_from"].get<int64_t>());
    } else if (row.contains("step") && row["step"].is_number_integer()) {
      step = row["step"].get<int64_t>();
    }
  }
  return step;
}

// The last line of train.log that names an error, else its last non-empty line.
std::string FailureReason(const fs::path& log) {
  std::ifstream in(log);
  std::string line, last, error;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (line.find("multiscreen train:") != std::string::npos || line.find("rror") != std::string::npos) error = line;
  }
  return error.empty() ? last : error;
}

volatile std::sig_atomic_t g_stop_signal = 0;
void OnStop(int sig) { g_stop_signal = sig; }

struct Child {
  size_t run = 0;
  FileLock lock;  // <run dir>/sweep.lock, held while the run's trainer lives
  uintmax_t metrics_bytes = 0;  // metrics.jsonl's size when the child started
};

// metrics.jsonl's size (0 when absent): the trainer appends to it at every step it trains
// (and when it resumes), and at nothing else.
uintmax_t MetricsBytes(const fs::path& dir) {
  std::error_code ec;
  const uintmax_t n = fs::file_size(dir / "metrics.jsonl", ec);
  return ec ? 0 : n;
}

}  // namespace

const char* RunStateName(RunState state) {
  switch (state) {
    case RunState::kDone: return "done";
    case RunState::kDiverged: return "diverged";
    case RunState::kRunning: return "running";
    case RunState::kFailed: return "failed";
    case RunState::kInterrupted: return "interrupted";
    case RunState::kPending: return "pending";
  }
  return "?";
}

RunStatus ReadRunStatus(const SweepRun& run) {
  const fs::path dir(run.dir);
  RunStatus st;
  st.step = LastStep(dir / "metrics.jsonl");
  if (FileLock::Held((dir / "sweep.lock").string())) {
    st.state = RunState::kRunning;
    return st;
  }
  if (const DivergenceVerdict v = ReadDivergence((dir / "metrics.jsonl").string(), run.run.schedule().warmup_steps());
      v.diverged) {
    st.state = RunState::kDiverged;
    st.detail = v.reason;
    return st;
  }
  const nlohmann::json status = ReadJson(dir / "status.json");
  if (status.is_object() && status.value("state", "") == "finished" && status.value("step", int64_t{-1}) >= run.run.steps()) {
    st.state = RunState::kDone;
    return st;
  }
  if (const nlohmann::json failed = ReadJson(dir / "sweep_failed.json"); failed.is_object()) {
    st.state = RunState::kFailed;
    st.detail = failed.value("reason", "unknown");
    return st;
  }
  std::error_code ec;
  if (fs::exists(dir / "checkpoints" / "latest", ec)) {
    std::ifstream in(dir / "checkpoints" / "latest");
    std::string latest;
    std::getline(in, latest);
    st.state = RunState::kInterrupted;
    st.detail = absl::StrCat("resumes from checkpoint ", latest);
    return st;
  }
  st.state = RunState::kPending;
  return st;
}

absl::Status RunLocal(const Sweep& sweep, const LocalOptions& options) {
  if (absl::Status s = WriteRunFiles(sweep); !s.ok()) return s;
  std::deque<size_t> queue;
  int done = 0;
  int diverged = 0;
  for (size_t i = 0; i < sweep.runs.size(); ++i) {
    const RunState state = ReadRunStatus(sweep.runs[i]).state;
    if (state == RunState::kDone) {
      ++done;
    } else if (state == RunState::kDiverged) {
      ++diverged;
    } else {
      queue.push_back(i);
    }
  }
  LogInfo("sweep ", sweep.file, ": ", sweep.runs.size(), " runs, ", done, " done, ", diverged, " diverged, ", queue.size(),
          " to train, ", options.jobs,
          " at a time with ", options.threads, " threads each");
  struct sigaction sa = {};
  sa.sa_handler = OnStop;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int, old_term;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_stop_signal = 0;
  std::map<pid_t, Child> active;
  int failed = 0, refused_at_start = 0, forwarded = 0;
  // Runs another runner trains (their sweep.lock held): waited for, not counted as
  // failures (issue 43: two `sweep run`s started together both exited 1 though the sweep
  // completed). Each is looked at again once this runner has nothing else to start: done
  // or diverged by the other, it counts here too; left unfinished, it is trained here.
  std::deque<size_t> held;
  std::set<size_t> said_held;
  const pid_t parent = ::getpid();
  while (!queue.empty() || !active.empty() || !held.empty()) {
    if (queue.empty() && !held.empty() && g_stop_signal == 0) {
      if (active.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));  // nothing else to wait on
      queue.insert(queue.end(), held.begin(), held.end());
      held.clear();
    }
    while (g_stop_signal == 0 && static_cast<int>(active.size()) < options.jobs && !queue.empty()) {
      const size_t i = queue.front();
      queue.pop_front();
      const SweepRun& r = sweep.runs[i];
      const fs::path dir(r.dir);
      // A run another runner held may have ended there.
      if (said_held.count(i) != 0) {
        const RunState state = ReadRunStatus(r).state;
        if (state == RunState::kDone || state == RunState::kDiverged) {
          ++(state == RunState::kDone ? done : diverged);
          LogInfo(state == RunState::kDone ? "finished " : "diverged ", r.name, " (by another runner; ", done + diverged,
                  " of ", sweep.runs.size(), " runs ended)");
          continue;
        }
      }
      // Close-on-exec, so that no other run's trainer inherits it; the child keeps a dup.
      auto lock = FileLock::Acquire((dir / "sweep.lock").string(), "sweep runner");
      if (absl::IsFailedPrecondition(lock.status())) {
        if (said_held.insert(i).second) {
          LogInfo("run ", r.name, " is being trained by another process (", (dir / "sweep.lock").string(),
                  " is held): waiting for it");
        }
        held.push_back(i);
        continue;
      }
      if (!lock.ok()) return lock.status();
      const int lock_fd = lock->fd();
      std::error_code ec;
      fs::remove(dir / "sweep_failed.json", ec);
      const std::string config_flag = absl::StrCat("--config=", (dir / "run.textproto").string());
      const std::string threads_flag = absl::StrCat("--threads=", options.threads);
      const std::string log = (dir / "train.log").string();
      const pid_t pid = ::fork();
      if (pid < 0) return absl::ResourceExhaustedError(absl::StrCat("fork: ", std::strerror(errno)));
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);  // the runner died before prctl
        if (::dup(lock_fd) < 0) ::_exit(127);     // the trainer holds its run's lock (a dup is not close-on-exec)
        signal(SIGINT, SIG_IGN);  // a terminal's ^C reaches the runner, which passes SIGTERM on
        signal(SIGTERM, SIG_DFL);
        const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (out >= 0) {
          ::dup2(out, 1);
          ::dup2(out, 2);
        }
        const std::string threads_env = std::to_string(options.threads);
        ::setenv("OMP_NUM_THREADS", threads_env.c_str(), 1);
        const char* argv[] = {options.binary.c_str(), "train", config_flag.c_str(), threads_flag.c_str(), nullptr};
        ::execv(options.binary.c_str(), const_cast<char* const*>(argv));
        std::fprintf(stderr, "multiscreen sweep run: cannot start %s: %s\n", options.binary.c_str(), std::strerror(errno));
        ::_exit(127);
      }
      active.emplace(pid, Child{i, *std::move(lock), MetricsBytes(dir)});
      LogInfo("started ", r.name, " (pid ", pid, "; ", r.run.steps(), " steps; log ", log, ")");
    }
    if (active.empty()) {
      if (g_stop_signal == 0 && !held.empty()) continue;  // only others' runs left: look at them again
      break;
    }
    if (g_stop_signal != 0 && forwarded != g_stop_signal) {
      for (const auto& [pid, child] : active) ::kill(pid, SIGTERM);  // stop with a checkpoint
      forwarded = g_stop_signal;
      LogInfo("signal ", g_stop_signal, ": the running runs stop with a checkpoint; no further run starts");
    }
    int wstatus = 0;
    const pid_t pid = ::waitpid(-1, &wstatus, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
    }
    auto it = active.find(pid);
    if (it == active.end()) continue;
    const SweepRun& r = sweep.runs[it->second.run];
    const RunStatus st = ReadRunStatus(r);  // our own lock is still held: read the files, not the lock
    const nlohmann::json status = ReadJson(fs::path(r.dir) / "status.json");
    const std::string state = status.is_object() ? status.value("state", "") : "";
    const DivergenceVerdict verdict =
        ReadDivergence((fs::path(r.dir) / "metrics.jsonl").string(), r.run.schedule().warmup_steps());
    if (verdict.diverged) {  // however the child ended: the trainer stops at a non-finite loss
      ++diverged;
      LogInfo("diverged ", r.name, ": ", verdict.reason, " (", done + diverged, " of ", sweep.runs.size(), " runs ended)");
    } else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0 && state == "finished") {
      ++done;
      LogInfo("finished ", r.name, " (", done + diverged, " of ", sweep.runs.size(), " runs ended)");
    } else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0 && state == "stopped") {
      LogInfo("stopped ", r.name, " with a checkpoint at step ", status.value("step", int64_t{0}), "; `sweep run` resumes it");
    } else {
      // A trainer that exits with an error before training a step (metrics.jsonl did not
      // grow) refused its run at start: its run file, data or run directory; the same
      // start meets the same refusal, so it is not a failure to retry.
      const bool refused = WIFEXITED(wstatus) && MetricsBytes(r.dir) == it->second.metrics_bytes;
      const std::string reason =
          WIFSIGNALED(wstatus)
              ? absl::StrCat("killed by signal ", WTERMSIG(wstatus), " (", strsignal(WTERMSIG(wstatus)), ") at step ", st.step)
              : absl::StrCat(refused ? "refused at start, " : "", "exit status ", WEXITSTATUS(wstatus), ": ",
                             FailureReason(fs::path(r.dir) / "train.log"));
      const nlohmann::json failed_json = {{"reason", reason}, {"step", st.step}, {"retryable", !refused}};
      if (absl::Status s = WriteTextFile((fs::path(r.dir) / "sweep_failed.json").string(), failed_json.dump() + "\n"); !s.ok()) {
        LogWarning(s.message());
      }
      ++failed;
      refused_at_start += refused ? 1 : 0;
      LogWarning("run ", r.name, " failed: ", reason,
                 refused ? " (not retryable: a retry meets the same refusal until its cause is fixed)" : "");
    }
    active.erase(it);  // releases the run's lock
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (g_stop_signal != 0) {
    return absl::AbortedError(absl::StrCat("stopped by signal ", g_stop_signal, ": ", done + diverged, " of ", sweep.runs.size(),
                                           " runs done or diverged; `sweep run` again resumes the rest"));
  }
  if (failed > 0) {
    const int retryable = failed - refused_at_start;
    return absl::AbortedError(absl::StrCat(
        failed, " of ", sweep.runs.size(), " runs failed", " (see `sweep status`)",
        refused_at_start > 0 ? absl::StrCat("; ", refused_at_start, " of them refused at start, which a retry meets again: ",
                                            "fix the cause their reason names first")
                             : "",
        retryable > 0 ? absl::StrCat("; `sweep run` again retries ", refused_at_start > 0 ? "the others" : "them") : ""));
  }
  return absl::OkStatus();
}

}  // namespace multiscreen
