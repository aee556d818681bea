// The Python tools of the source tree (tools/*.py) that commands run: `plan` (tools/plan.py),
// `train`'s up-front fit check (tools/plan_fit.py), `eval --plot` (tools/plot_eval.py). One
// way to start them: Debian's /usr/bin/python3 (where python3-matplotlib and torch live;
// else python3 on PATH), the arguments passed as they are (no shell, no quoting), and the
// child dies with this process (PR_SET_PDEATHSIG: a `plan` killed by SIGTERM or SIGINT
// leaves no python behind).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace multiscreen::cli {

// <ConfigDir()>/../tools/<name> (the tools beside configs/); NotFound naming the path and
// `what` ("the planner") when it is not a regular file.
absl::StatusOr<std::string> PythonToolPath(const std::string& name, const std::string& what);

// Runs `script` (a path, PythonToolPath's) with `args` and waits for it: its exit status
// (0 to 255). Its stderr is this process's; its stdout too, unless `captured` is given,
// which then receives all of it. A tool killed by SIGPIPE writing this process's stdout
// (its reader gone: `plan | head`) ends this process by SIGPIPE too, as a pipe's writer.
// Errors (one line, naming the script): python3 cannot be started (with the reason: not
// found), the tool ended by another signal.
absl::StatusOr<int> RunPythonTool(const std::string& script, const std::vector<std::string>& args,
                                  std::string* captured = nullptr);

}  // namespace multiscreen::cli
