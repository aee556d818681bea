// `multiscreen sweep plan|run|status|fit|report --sweep=FILE` (issue 17): scaling-law
// sweeps. plan lists the runs with parameters, tokens, FLOPs and a time estimated from
// a short `bench train` of each model on this machine; run trains them here (--local,
// --jobs=K) or submits one Slurm job array (--slurm [-- sbatch options], --dry_run
// prints the script); status reads each run directory; fit and report hand the results
// to tools/sweep_fit.py (SciPy's L-BFGS-B, matplotlib) through <root>/sweep.json.
// `sweep fit --results=F.csv [--json]` fits results from elsewhere the same way.
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/config.h"
#include "common/input_file.h"
#include "common/text_file.h"
#include "google/protobuf/text_format.h"
#include "launch/divergence.h"
#include "launch/sweep.h"
#include "launch/sweep_runner.h"
#include "launch/sweep_slurm.h"
#include "nlohmann/json.hpp"

ABSL_DECLARE_FLAG(bool, json);  // params_command.cc
ABSL_FLAG(std::string, sweep, "", "sweep: the sweep file (SweepConfig text proto), e.g. configs/sweeps/cpu_small.textproto");
ABSL_FLAG(bool, local, false, "sweep run: train the runs on this machine");
ABSL_FLAG(bool, slurm, false, "sweep run: submit one Slurm job array (sbatch options after --)");
ABSL_FLAG(int32_t, jobs, 1, "sweep run --local / plan: runs at once (the cores are divided among them)");
ABSL_FLAG(bool, dry_run, false, "sweep run --slurm: print the batch script instead of submitting it");
ABSL_FLAG(bool, measure, true, "sweep plan: time a few training steps of each model to estimate the run times");
ABSL_FLAG(std::string, results, "", "sweep fit: fit this CSV (columns family,params,tokens,loss) instead of a sweep's runs");
ABSL_FLAG(int32_t, bootstrap, 200, "sweep fit/report: bootstrap resamples over runs for the intervals (0: none)");

namespace multiscreen::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "multiscreen sweep plan --sweep=F [--jobs=K --measure=false] | run --sweep=F (--local [--jobs=K --threads=N] | "
    "--slurm [--dry_run] [-- sbatch options]) | status --sweep=F [--json] | fit (--sweep=F | --results=F.csv) [--json --bootstrap=N] | "
    "report --sweep=F [--out=FILE.md --bootstrap=N]";

std::string SelfPath() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("multiscreen") : p.string();
}

int Cores() { return std::max(1u, std::thread::hardware_concurrency()); }

// Threads per run: --threads, else the cores divided among the jobs.
int ThreadsPerRun(int jobs) {
  const int threads = absl::GetFlag(FLAGS_threads);
  return threads > 0 ? threads : std::max(1, Cores() / std::max(1, jobs));
}

std::string Human(double x) {
  const char* units[] = {"", "k", "M", "G", "T", "P", "E"};
  int u = 0;
  while (std::abs(x) >= 1000 && u < 6) {
    x /= 1000;
    ++u;
  }
  return absl::StrFormat("%.3g%s", x, units[u]);
}

std::string Duration(double s) {
  if (!(s >= 0)) return "?";
  if (s >= 3600) return absl::StrFormat("%.1fh", s / 3600);
  if (s >= 60) return absl::StrFormat("%.1fm", s / 60);
  return absl::StrFormat("%.0fs", s);
}

// Runs argv to completion, its output to ours; returns its exit status (127: not started).
// The child dies with us (PR_SET_PDEATHSIG): a killed `sweep fit` leaves no python behind.
// `command` ("sweep fit") prefixes the line said when the child cannot start.
int Spawn(const std::string& command, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string cannot = absl::StrCat("multiscreen ", command, ": cannot start ", args[0], "\n");
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "multiscreen %s: cannot start %s (fork: %s)\n", command.c_str(), argv[0], std::strerror(errno));
    return 127;
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // we died before prctl
    ::execvp(argv[0], argv.data());
    (void)!::write(2, cannot.data(), cannot.size());
    ::_exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Training tokens/s of `run`'s model on this machine with `threads` threads: a few
// steps of `bench train` in a child process. 0 when the measurement fails.
double MeasureTokensPerSecond(const SweepRun& run, int threads) {
  // The file name carries no part of the sweep file (a model name may hold quotes or
  // shell syntax, and the path goes through popen's shell): the process and a counter.
  static int measured = 0;
  const fs::path model =
      fs::temp_directory_path() / absl::StrCat("multiscreen_sweep_", getpid(), "_", measured++, ".textproto");
  std::string text;
  google::protobuf::TextFormat::PrintToString(run.run.model_config(), &text);
  if (!WriteTextFile(model.string(), text).ok()) return 0;
  const std::string cmd = absl::StrCat("'", SelfPath(), "' bench train --model='", model.string(), "' --seq_len=", run.run.seq_len(),
                                       " --micro_batch=", run.run.micro_batch(), " --steps=3 --warmup=1 --json --threads=", threads,
                                       " 2>/dev/null");
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r"); p != nullptr) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    pclose(p);
  }
  std::error_code ec;
  fs::remove(model, ec);
  const nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  return j.is_object() && j.contains("tokens_per_s") && j["tokens_per_s"].is_number() ? j["tokens_per_s"].get<double>() : 0;
}

int Plan(const Sweep& sweep) {
  const int jobs = absl::GetFlag(FLAGS_jobs);
  const int threads = ThreadsPerRun(jobs);
  // Measured training FLOP/s of each model (`bench train`); a model bench cannot time (it
  // times Multiscreen models only) gets the median rate of the measured ones.
  std::map<std::string, double> rate;
  std::vector<double> measured;
  if (absl::GetFlag(FLAGS_measure)) {
    for (const SweepRun& r : sweep.runs) {
      if (rate.count(r.model)) continue;
      rate[r.model] = MeasureTokensPerSecond(r, threads) * r.flops_per_token;
      if (rate[r.model] > 0) measured.push_back(rate[r.model]);
    }
  }
  std::sort(measured.begin(), measured.end());
  const double fallback = measured.empty() ? 0 : measured[measured.size() / 2];
  std::printf("sweep %s: %zu runs under %s (%s; %lld tokens per step)\n", sweep.file.c_str(), sweep.runs.size(), sweep.root.c_str(),
              sweep.one_run_per_model ? "one run per model serves every budget" : "one run per budget",
              static_cast<long long>(sweep.step_tokens));
  size_t width = 3;
  for (const SweepRun& r : sweep.runs) width = std::max(width, r.name.size());
  std::printf("%-*s %-11s %10s %10s %8s %-24s %10s %9s\n", static_cast<int>(width), "run", "family", "params", "non-emb", "steps",
              "budgets (tokens)", "FLOPs", "est. time");
  double total_flops = 0, total_s = 0;
  bool all_measured = true, any_fallback = false;
  for (const SweepRun& r : sweep.runs) {
    const double tokens = static_cast<double>(r.budgets.back().tokens);
    const double flops = r.flops_per_token * tokens;
    // Validation passes: forward only, about a third of a training token's cost.
    const int64_t eval_windows =
        r.run.eval().windows() > 0 ? r.run.eval().windows() : r.run.eval().batches() * r.run.micro_batch();
    const double eval_tokens =
        static_cast<double>(r.run.steps() / r.run.eval().every()) * eval_windows * r.run.seq_len();
    const bool own = rate.count(r.model) && rate[r.model] > 0;
    const double flops_per_s = own ? rate[r.model] : fallback;
    const double seconds = flops_per_s > 0 ? (tokens + eval_tokens / 3) * r.flops_per_token / flops_per_s : -1;
    all_measured = all_measured && seconds >= 0;
    any_fallback = any_fallback || (!own && seconds >= 0);
    total_flops += flops;
    total_s += std::max(0.0, seconds);
    std::vector<std::string> budgets;
    for (const SweepBudget& b : r.budgets) budgets.push_back(Human(static_cast<double>(b.tokens)));
    std::printf("%-*s %-11s %10s %10s %8lld %-24s %10s %9s\n", static_cast<int>(width), r.name.c_str(), FamilyName(r.dims.family),
                Human(r.params).c_str(), Human(r.non_embedding_params).c_str(), static_cast<long long>(r.run.steps()),
                absl::StrJoin(budgets, ",").c_str(), Human(flops).c_str(),
                seconds < 0 ? "-" : absl::StrCat(own ? "" : "*", Duration(seconds)).c_str());
  }
  std::printf("total: %s model FLOPs (trainer/flops.h); ", Human(total_flops).c_str());
  if (all_measured) {
    std::printf("%s of training, about %s wall with --jobs=%d (%d threads each, measured here by `bench train`%s)\n",
                Duration(total_s).c_str(), Duration(total_s / jobs).c_str(), jobs, threads,
                any_fallback ? "; *: at the median FLOP/s of the measured models, which bench cannot time" : "");
  } else {
    std::printf("time not estimated%s\n", absl::GetFlag(FLAGS_measure) ? " (no model could be timed)" : " (--measure=false)");
  }
  return 0;
}

// `sweep status`: a line per run and the counts; with --json one object instead:
// {"sweep", "root", "runs": [{"name", "state", "step", "steps", "detail", "diverged",
// "diverged_step", "initial_loss"}]} (tools/stability_report.py reads it).
int Status(const Sweep& sweep) {
  std::map<RunState, int> counts;
  size_t width = 0;
  for (const SweepRun& r : sweep.runs) width = std::max(width, r.name.size());
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json runs = nlohmann::json::array();
    for (const SweepRun& r : sweep.runs) {
      const RunStatus st = ReadRunStatus(r);
      const DivergenceVerdict v =
          ReadDivergence((fs::path(r.dir) / "metrics.jsonl").string(), r.run.schedule().warmup_steps());
      runs.push_back({{"name", r.name},
                      {"state", RunStateName(st.state)},
                      {"step", st.step},
                      {"steps", r.run.steps()},
                      {"detail", st.detail},
                      {"diverged", st.state == RunState::kDiverged},
                      {"diverged_step", st.state == RunState::kDiverged ? nlohmann::json(v.step) : nlohmann::json(nullptr)},
                      {"initial_loss", v.last_step > 0 ? nlohmann::json(v.initial_loss) : nlohmann::json(nullptr)}});
    }
    const nlohmann::json j = {{"sweep", fs::absolute(sweep.file).lexically_normal().string()}, {"root", sweep.root}, {"runs", runs}};
    std::printf("%s\n", j.dump(1).c_str());
    return 0;
  }
  for (const SweepRun& r : sweep.runs) {
    const RunStatus st = ReadRunStatus(r);
    ++counts[st.state];
    std::printf("%-*s %-11s step %6lld/%-6lld%s%s\n", static_cast<int>(width), r.name.c_str(), RunStateName(st.state),
                static_cast<long long>(st.step),
                static_cast<long long>(r.run.steps()), st.detail.empty() ? "" : "  ", st.detail.c_str());
  }
  std::printf("%zu runs: %d done, %d diverged, %d running, %d failed, %d interrupted, %d pending\n", sweep.runs.size(),
              counts[RunState::kDone], counts[RunState::kDiverged], counts[RunState::kRunning], counts[RunState::kFailed],
              counts[RunState::kInterrupted], counts[RunState::kPending]);
  return 0;
}

int RunSlurm(const Sweep& sweep, const std::vector<std::string>& sbatch_args) {
  std::vector<size_t> todo;
  for (size_t i = 0; i < sweep.runs.size(); ++i) {
    const RunState state = ReadRunStatus(sweep.runs[i]).state;
    if (state != RunState::kDone && state != RunState::kDiverged) todo.push_back(i);
  }
  if (todo.empty()) {
    std::printf("sweep %s: all %zu runs are done or diverged\n", sweep.file.c_str(), sweep.runs.size());
    return 0;
  }
  const std::string script = SlurmArrayScript(sweep, todo, SelfPath(), SourcePath("launch/train.sbatch"), ThreadsPerRun(1));
  if (absl::GetFlag(FLAGS_dry_run)) {
    std::printf("%s", script.c_str());
    return 0;
  }
  if (absl::Status s = WriteRunFiles(sweep); !s.ok()) return Fail("sweep run", s);
  std::error_code ec;
  fs::create_directories(fs::path(sweep.root) / "slurm", ec);
  if (ec) return Fail("sweep run", absl::PermissionDeniedError(absl::StrCat(sweep.root, "/slurm: ", ec.message())));
  const std::string path = (fs::path(sweep.root) / "sweep.sbatch").string();
  if (absl::Status s = WriteTextFile(path, script); !s.ok()) return Fail("sweep run", s);
  // --output on the command line (no quoting to get wrong; the user's options after it win).
  std::vector<std::string> argv = {"sbatch", absl::StrCat("--output=", SlurmOutputPattern(sweep))};
  argv.insert(argv.end(), sbatch_args.begin(), sbatch_args.end());
  argv.push_back(path);
  const int rc = Spawn("sweep run", argv);
  if (rc != 0) return Fail("sweep run", absl::UnavailableError(absl::StrCat("sbatch ", path, " exited with status ", rc)));
  return 0;
}

// An input the fit tool reads whole: a regular file (stat only, so a FIFO cannot block),
// e.g. "--results=/dev/zero: is a character device, not a regular file".
absl::Status CheckInputFile(const std::string& flag, const std::string& path) {
  const absl::Status s = CheckRegularInput(path);
  if (s.ok() || flag.empty()) return s;
  return absl::Status(s.code(), absl::StrCat(flag, "=", s.message()));
}

// tools/sweep_fit.py `mode` with the fit's flags.
int FitTool(const std::string& mode, const std::vector<std::string>& input, const std::vector<std::string>& given) {
  std::vector<std::string> argv = {"/usr/bin/python3", SourcePath("tools/sweep_fit.py"), mode};
  argv.insert(argv.end(), input.begin(), input.end());
  argv.push_back(absl::StrCat("--bootstrap=", absl::GetFlag(FLAGS_bootstrap)));
  if (absl::GetFlag(FLAGS_json)) argv.push_back("--json");
  if (Given(given, "out")) argv.push_back(absl::StrCat("--out=", absl::GetFlag(FLAGS_out)));
  return Spawn(absl::StrCat("sweep ", mode), argv);
}

// `sweep report --out=FILE` writes FILE and FILE's figures/ beside it: never the sweep
// file, nothing inside the sweep's root (its runs' metrics and checkpoints), and no
// existing file but a Markdown one (an earlier report). Errors name the flag.
absl::Status CheckReportOut(const Sweep& sweep, const std::string& out) {
  std::error_code ec;
  const fs::path target = fs::weakly_canonical(fs::absolute(out), ec);
  const fs::path file = fs::weakly_canonical(fs::absolute(sweep.file), ec);
  const fs::path root = fs::weakly_canonical(fs::absolute(sweep.root), ec);
  auto inside = [](const fs::path& p, const fs::path& dir) {
    const fs::path rel = p.lexically_relative(dir);
    return !rel.empty() && *rel.begin() != "..";
  };
  if (target == file) return absl::InvalidArgumentError(absl::StrCat("--out=", out, " is the sweep file itself"));
  if (inside(target, root)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--out=", out, " is inside the sweep's root ", sweep.root, " (its runs' files): write the report elsewhere"));
  }
  if (fs::exists(target, ec) && (!fs::is_regular_file(target, ec) || target.extension() != ".md")) {
    return absl::AlreadyExistsError(
        absl::StrCat("--out=", out, " exists and is not a Markdown report (.md): choose a new file"));
  }
  return absl::OkStatus();
}

}  // namespace

int SweepCommand(int argc, char** argv) {
  if (argc < 2) return Fail("sweep", absl::InvalidArgumentError("expected a subcommand: plan, run, status, fit or report"));
  const std::string sub = argv[1];
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::printf("usage: %s\n", kUsage);
    return 0;
  }
  // Every subcommand in one process: run's children are train processes of their own,
  // which under a launcher's environment would join one job.
  if (int rc = RefuseSeveralProcesses("sweep"); rc != 0) return rc;
  std::vector<std::string_view> accepted = {"sweep"};
  if (sub == "plan") {
    accepted.insert(accepted.end(), {"jobs", "threads", "measure"});
  } else if (sub == "run") {
    accepted.insert(accepted.end(), {"local", "slurm", "jobs", "threads", "dry_run"});
  } else if (sub == "status") {
    accepted.insert(accepted.end(), {"json"});
  } else if (sub == "fit") {
    accepted.insert(accepted.end(), {"results", "json", "bootstrap"});
  } else if (sub == "report") {
    accepted.insert(accepted.end(), {"out", "bootstrap"});
  } else {
    return Fail("sweep", absl::InvalidArgumentError(absl::StrCat("unknown subcommand '", sub, "': expected plan, run, status, fit or report")));
  }
  // From here on the subcommand is known: errors say "multiscreen sweep fit: ...".
  const std::string cmd = absl::StrCat("sweep ", sub);
  const std::vector<std::string> given = GivenFlags(argc - 1, argv + 1);
  for (const std::string& g : given) {
    if (std::find(accepted.begin(), accepted.end(), g) == accepted.end()) {
      return Fail(cmd.c_str(), absl::InvalidArgumentError(absl::StrCat("--", g, " is not a flag of 'sweep ", sub, "'")));
    }
  }
  std::vector<std::string> args;
  if (auto s = ParseFlagsAndArgs(argc - 1, argv + 1, kUsage,
                                 {"sweep", "jobs", "threads", "measure", "local", "slurm", "dry_run", "results", "json", "bootstrap", "out"},
                                 &args);
      !s.ok()) {
    return Fail(cmd.c_str(), s);
  }
  const bool slurm = sub == "run" && absl::GetFlag(FLAGS_slurm);
  if (!args.empty() && !slurm) return Fail(cmd.c_str(), absl::InvalidArgumentError(absl::StrCat("unexpected argument '", args[0], "'")));
  if (const int32_t jobs = absl::GetFlag(FLAGS_jobs); jobs < 1) {
    return Fail(cmd.c_str(), absl::InvalidArgumentError(absl::StrCat("--jobs=", jobs, ": must be >= 1")));
  }
  if (const int32_t threads = absl::GetFlag(FLAGS_threads); threads < 0) {
    return Fail(cmd.c_str(), absl::InvalidArgumentError(absl::StrCat("--threads=", threads, ": must be >= 0 (0: all cores)")));
  }
  if (const int32_t bootstrap = absl::GetFlag(FLAGS_bootstrap); bootstrap < 0) {
    return Fail(cmd.c_str(), absl::InvalidArgumentError(
                                 absl::StrCat("--bootstrap=", bootstrap, ": must be >= 0 (resamples; 0: no intervals)")));
  }

  if (sub == "fit" && Given(given, "results")) {
    if (Given(given, "sweep")) return Fail(cmd.c_str(), absl::InvalidArgumentError("give --sweep or --results, not both"));
    // The child reads the file to its end: /dev/zero never ends, a FIFO blocks.
    const std::string results = absl::GetFlag(FLAGS_results);
    if (absl::Status s = CheckInputFile("--results", results); !s.ok()) return Fail(cmd.c_str(), s);
    return FitTool("fit", {absl::StrCat("--results=", results)}, given);
  }
  if (absl::GetFlag(FLAGS_sweep).empty()) return Fail(cmd.c_str(), absl::InvalidArgumentError(absl::StrCat("--sweep is required; usage: ", kUsage)));
  auto sweep = LoadSweep(absl::GetFlag(FLAGS_sweep));
  if (!sweep.ok()) return Fail(cmd.c_str(), sweep.status());
  // plan and run: data each run's trainer would refuse at start is refused now, before any run starts.
  if (sub == "plan" || sub == "run") {
    if (absl::Status s = CheckSweepData(*sweep); !s.ok()) return Fail(cmd.c_str(), s);
  }
  if (sub == "plan") return Plan(*sweep);
  if (sub == "status") return Status(*sweep);
  if (sub == "report" && Given(given, "out")) {
    if (absl::Status s = CheckReportOut(*sweep, absl::GetFlag(FLAGS_out)); !s.ok()) return Fail(cmd.c_str(), s);
  }
  if (sub == "fit" || sub == "report") {
    // Nothing to read before `sweep run` made the root (and no directory made as a side effect).
    std::error_code ec;
    if (!fs::is_directory(sweep->root, ec)) {
      return Fail(cmd.c_str(), absl::FailedPreconditionError(absl::StrCat(
                               sweep->root, ": no such directory (the root of ", sweep->file,
                               "): no run has started yet, nothing to ", sub, "; `sweep run` first")));
    }
    if (absl::Status s = WriteManifest(*sweep); !s.ok()) return Fail(cmd.c_str(), s);
    const std::string manifest = (fs::path(sweep->root) / "sweep.json").string();
    if (absl::Status s = CheckInputFile("", manifest); !s.ok()) return Fail(cmd.c_str(), s);
    return FitTool(sub, {absl::StrCat("--manifest=", manifest)}, given);
  }
  // run
  if (absl::GetFlag(FLAGS_local) == slurm) {
    return Fail(cmd.c_str(), absl::InvalidArgumentError(slurm ? "--local and --slurm are both given: give one of them"
                                                              : "needs --local or --slurm (train here, or submit a Slurm job array)"));
  }
  // A dry run prints the script and writes nothing.
  if (!(slurm && absl::GetFlag(FLAGS_dry_run))) {
    if (absl::Status s = WriteManifest(*sweep); !s.ok()) return Fail(cmd.c_str(), s);
  }
  if (slurm) return RunSlurm(*sweep, args);
  LocalOptions options;
  options.jobs = absl::GetFlag(FLAGS_jobs);
  options.threads = ThreadsPerRun(options.jobs);
  options.binary = SelfPath();
  if (absl::Status s = RunLocal(*sweep, options); !s.ok()) return Fail(cmd.c_str(), s);
  int diverged = 0;
  for (const SweepRun& r : sweep->runs) diverged += ReadRunStatus(r).state == RunState::kDiverged ? 1 : 0;
  if (diverged > 0) {
    std::printf("sweep %s: all %zu runs ended: %zu done, %d diverged\n", sweep->file.c_str(), sweep->runs.size(),
                sweep->runs.size() - diverged, diverged);
  } else {
    std::printf("sweep %s: all %zu runs done\n", sweep->file.c_str(), sweep->runs.size());
  }
  return 0;
}

}  // namespace multiscreen::cli
