// Loading and checking configuration files (configs/config.proto).
// Parses text-format files with file:line:column errors, resolves a
// ModelConfig into concrete sizes (ModelDims), and checks a RunConfig for
// semantic errors with a one-line reason naming the field.
#pragma once

#include <cstdint>
#include <string>


#include "absl/status/statusor.h"
#include "configs/config.pb.h"

namespace multiscreen {

// Concrete model sizes (spec "Symbols"), every default applied.
struct ModelDims {
  std::string name;
  int64_t n_layers = 0;  // N_L
  int64_t n_heads = 0;   // N_H (tiles per layer)
  int64_t d_e = 0;       // d_E
  int64_t d_k = 16;      // d_K
  int64_t d_v = 64;      // d_V
  int64_t vocab = 50257; // V
  double w_th = 256.0;   // MiPE threshold
  bool pl_norm = true;   // PLNorm on (spec step 14)
  int64_t eos_token = 50256;
};

// The directory holding models/ and train/ (env MULTISCREEN_CONFIG_DIR, else
// the source tree's configs/ compiled in).
std::string ConfigDir();

// Parses a text-format file into `message`. Errors name "file:line:column: message".
absl::Status ParseTextFile(const std::string& path, google::protobuf::Message* message);

// `name_or_path`: a file path (contains '/' or ends in .textproto) or a model
// name looked up as <ConfigDir()>/models/<name>.textproto.
// Errors: unknown name (lists the known ones), unreadable or malformed file.
absl::StatusOr<config::ModelConfig> LoadModelConfig(const std::string& name_or_path);

// Applies defaults (psi → N_L = N_H = psi, d_E = psi²) and checks every size.
// `source` names the file or flag in error messages.
absl::StatusOr<ModelDims> ResolveModel(const config::ModelConfig& model, const std::string& source);

// LoadModelConfig + ResolveModel.
absl::StatusOr<ModelDims> LoadModel(const std::string& name_or_path);

// Reads a run file (RunConfig in text format).
absl::StatusOr<config::RunConfig> LoadRunConfig(const std::string& path);

// Fills the run's unset fields with their defaults: lr 2^-4, grad_accum 1, tp = pp = 1,
// β = (0.9, 0.95), ε = 1e-8, eval batches 4, keep_last 3, console_every 1,
// max_nonfinite_steps 10, initial_loss_scale 65536.
void ApplyRunDefaults(config::RunConfig* run);

// Semantic checks of a run against its model: positive sizes, tp | N_H,
// pp | N_L, lr ≥ 0, betas in [0, 1), ... Errors name the field, e.g.
// "parallel.tp = 3 does not divide N_H = 8".
absl::Status ValidateRun(const config::RunConfig& run, const ModelDims& dims);

}  // namespace multiscreen
