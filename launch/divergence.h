// The "diverged" verdict of a training run (issue 18's stability study; the paper's Fig. 7
// and Table 6): a run diverged when it blew up — its loss became non-finite, or, after
// warmup, its smoothed training loss stayed far above where it had been (never one noisy
// step: issue 31's sweep lost 7 of 8 healthy runs to a single step above step 1). Read from the run's metrics.jsonl, so it applies
// alike to a run the trainer stopped (fp32/bf16 stop at the first non-finite step; fp16
// skips non-finite steps and stops after max_nonfinite_steps of them in a row) and to one
// that trained to its last step. `sweep status` and the local runner use it (sweep_runner.h).
#pragma once

#include <cstdint>
#include <istream>
#include <string>

namespace multiscreen {

struct DivergenceVerdict {
  bool diverged = false;
  int64_t step = 0;           // the first step that shows it (0: not diverged)
  std::string reason;         // e.g. "non-finite loss at step 57"; empty when not diverged
  double initial_loss = 0;    // the loss of the first training step (0: no training step)
  int64_t last_step = 0;      // the last training step read
};

// Consecutive standing training losses averaged into one smoothed loss.
inline constexpr int kDivergenceWindow = 10;
// How far above the reference a smoothed loss must be: at least this fraction of the first
// step's loss (≈ ln V at initialization: 1.1 nats for GPT-2's vocabulary), and at least
// kDivergenceProgressShare of the progress the run had made (first step's loss minus the
// lowest mean), so that a run near zero loss on easy data is not judged by nats that are
// noise there (a tiny synthetic run went 0.16 → 0.72 and back).
inline constexpr double kDivergenceMargin = 0.1;
inline constexpr double kDivergenceProgressShare = 1.0 / 3;

// Judges the rows of a metrics.jsonl stream (trainer/trainer.cc's format): training rows
// {"step", "loss" (null when non-finite), ...}, validation rows {"step", "val_loss"}, and
// {"resumed_from": s} rows, after which the steps past s are those of the resumed run (the
// earlier attempt's rows past s no longer stand). Diverged when
//   - a standing training loss or validation loss is null or non-finite, or
//   - at a step > warmup_steps, the mean of the last kDivergenceWindow standing training
//     losses exceeds the reference — the lowest such mean before it, or the first step's
//     loss if lower — by more than the margin: the larger of kDivergenceMargin × the
//     first step's loss and kDivergenceProgressShare × (first step's loss − lowest mean).
// So one noisy step, a spike that recovers within the window, or a spike while the lr ramps
// up does not count; a loss that jumps and stays does, even when it stays below the first
// step's. The reason gives the evidence (both windows). A skipped fp16 step with a finite
// loss (an overflow of the scaled gradients) does not count either. Lines that are not JSON
// objects are ignored (a line cut by a kill).
DivergenceVerdict JudgeDivergence(std::istream& metrics, int64_t warmup_steps);

// The same for the file at `path`; a missing file is a run with no steps (not diverged).
DivergenceVerdict ReadDivergence(const std::string& path, int64_t warmup_steps);

}  // namespace multiscreen
