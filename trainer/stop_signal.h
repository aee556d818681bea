// Clean stops (issue 5): SIGINT, SIGTERM, SIGUSR1 and SIGHUP ask the training loop to
// end after the current step (saving a checkpoint); a second SIGINT exits at
// once with status 130. SIGPIPE is ignored (a closed pipe on the console must not
// end a run between checkpoints).
#pragma once

namespace multiscreen {

// Installs the handlers (idempotent).
void InstallStopHandlers();
// True once a stop signal arrived; StopSignal() tells which (0 if none).
bool StopRequested();
int StopSignal();

}  // namespace multiscreen
