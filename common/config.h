// Loading and checking configuration files (configs/config.proto).
// Parses text-format files with file:line:column errors, resolves a
// ModelConfig into concrete sizes (ModelDims), and checks a RunConfig for
// semantic errors with a one-line reason naming the field.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "configs/config.pb.h"
#include "kernels/attention_kind.h"
#include "kernels/screening_types.h"

namespace multiscreen {

// The two model families (config.proto ModelConfig.Family).
enum class ModelFamily { kMultiscreen, kTransformer };

// Concrete model sizes (spec "Symbols"), every default applied. For the Transformer
// baseline (spec "Transformer baseline") n_heads are attention heads, d_k = d_E/N_H is
// the head width, d_v and w_th are unused, and pl_norm, qk_norm, sio are its switches.
struct ModelDims {
  std::string name;
  ModelFamily family = ModelFamily::kMultiscreen;
  int64_t n_layers = 0;  // N_L
  int64_t n_heads = 0;   // N_H (tiles per layer)
  int64_t d_e = 0;       // d_E
  int64_t d_k = 16;      // d_K
  int64_t d_v = 64;      // d_V
  int64_t vocab = 50257; // V
  double w_th = 256.0;   // MiPE threshold
  bool pl_norm = true;   // PLNorm on (spec step 14)
  int64_t eos_token = 50256;
  bool qk_norm = false;  // Transformer: unit q, k with a learned scale per head
  bool sio = false;      // Transformer: unit-row tied embeddings, learned e^{s_E}, e^{s_F}
  bool tanh_norm = true; // Multiscreen: TanhNorm (spec step 11) on; off = identity (ablation, issue 18)
  // Transformer: the attention mechanism (issue 30; kernels/cpu/attention.h). SSMax adds
  // a learned s_SS per head and layer; SCREENING the screening unit per head (model/
  // transformer.h) with a learned s_w, s_r per head and layer (w_th applies, d_v does not).
  AttentionKind attention = AttentionKind::kSoftmax;
  // Attention SIGMOID: the n of its bias −log n (kernels/attention_kind.h); the default for
  // every other attention (which ignores it).
  SigmoidBias sigmoid_bias = SigmoidBias::kTrainLength;
  // Multiscreen ablation switches (issue 30; docs/ablations.md): the positional encoding
  // and the output gate (off: no W_G, u not gated).
  kernels::PositionKind position = kernels::PositionKind::kMipe;
  bool output_gate = true;

  bool transformer() const { return family == ModelFamily::kTransformer; }
  // Whether the model screens with learned windows (Multiscreen, or a Transformer with
  // attention SCREENING): the inference window rule and --as_learned apply.
  bool screens() const { return !transformer() || attention == AttentionKind::kScreening; }
  // Whether positions enter by RoPE (what YaRN rescales): the Transformer, unless it screens
  // (MiPE), and Multiscreen with position ROPE.
  bool has_rope() const {
    return transformer() ? attention != AttentionKind::kScreening : position == kernels::PositionKind::kRope;
  }
  // The Transformer's SwiGLU hidden width ⌊8 d_E/3⌋.
  int64_t d_ff() const { return 8 * d_e / 3; }
};

// "multiscreen" or "transformer".
const char* FamilyName(ModelFamily family);

// One field of a model's shape or switches, as checkpoints and weights files name it,
// with its value as text ("attention", "softmax"; "d_e", "16"; "tanh_norm", "true").
struct ModelField {
  const char* name;
  std::string value;
  bool applies;  // whether the family uses it (a Transformer has no position; w_th only with SCREENING)
};

// Every field that makes two models the same model (the name and eos_token do not): family,
// n_layers, n_heads, d_e, d_k, d_v, vocab, w_th, pl_norm, qk_norm, sio, tanh_norm,
// attention, position, output_gate, sigmoid_bias, in that order.
std::vector<ModelField> ModelFields(const ModelDims& dims);

// The ModelFields in which `a` and `b` differ, each "field = A in a_label, B in b_label"
// (e.g. "attention = softmax in the checkpoint, screening in the model being loaded");
// empty when they are the same model.
std::vector<std::string> ModelDifferences(const ModelDims& a, const ModelDims& b, const std::string& a_label,
                                          const std::string& b_label);

// The directory holding models/ and train/ (env MULTISCREEN_CONFIG_DIR, else
// the source tree's configs/ compiled in).
std::string ConfigDir();

// Largest run or model file read (they are a few hundred bytes).
inline constexpr int64_t kMaxConfigFileBytes = int64_t{16} << 20;

// Parses a text-format file into `message`. Errors name "file:line:column: message";
// also a path that is not a regular file (a FIFO, a directory, /dev/zero) or is larger
// than kMaxConfigFileBytes, refused before reading.
absl::Status ParseTextFile(const std::string& path, google::protobuf::Message* message);

// `name_or_path`: a file path (contains '/' or ends in .textproto) or a model
// name looked up as <ConfigDir()>/models/<name>.textproto.
// Errors: unknown name (lists the known ones), unreadable or malformed file.
absl::StatusOr<config::ModelConfig> LoadModelConfig(const std::string& name_or_path);

// Applies defaults (psi → N_L = N_H = psi, d_E = psi²) and checks every field against
// its schema: `family` a known value (MULTISCREEN or TRANSFORMER; proto3 text format
// accepts unknown enum numbers; a Transformer needs N_H | d_E with an even head width
// and no Multiscreen-only field and a known `attention`, a Multiscreen no qk_norm, sio
// or attention), sizes positive and at most kMaxModelSize, d_K >= 2, V < 2^31 (token ids
// are int32), at most kMaxModelParams parameters, w_th finite and positive.
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

// Bounds of ResolveModel: each size, and the parameter count (which keeps every
// offset of the layout far from int64 overflow).
inline constexpr int64_t kMaxModelSize = int64_t{1} << 24;
inline constexpr double kMaxModelParams = 1e12;

// Whether a model name can go into messages and file names: one line of at most 256
// characters, none of them a control character.
bool IsPrintableModelName(const std::string& name);

// The parameter count of the whole model, in double (no overflow whatever the sizes):
// V·d_E + 2 + N_L·N_H·(d_E·(2d_K + 3d_V) + 3), ParamLayout's total (spec "Parameter
// count"); for the Transformer V·d_E + N_L·(4d_E² + 3·d_E·⌊8d_E/3⌋ + 2d_E), plus
// N_L·N_H scales with qk_norm, N_L·N_H more with attention SSMAX, 2·N_L·N_H with attention
// SCREENING (s_w, s_r), and 2 with sio.
double ModelParamCount(const ModelDims& dims);

// Where a run's fields came from, for ValidateRun's messages: the run file (may be
// empty) and the fields that command-line flags set (field path -> flag name, e.g.
// "optimizer.lr" -> "lr").
struct RunSource {
  std::string file;
  std::map<std::string, std::string> flags;
  // "--lr (optimizer.lr)" when a flag set `field`, else "FILE: optimizer.lr", or the
  // bare field when there is no file.
  std::string Name(const std::string& field) const;
};

// Tokens in one micro-batch (micro_batch · (seq_len + 1)) and in one step on one rank
// (grad_accum times that) index int32 arrays: at most 2^31 - 1.
inline constexpr int64_t kMaxBatchTokens = (int64_t{1} << 31) - 1;
// eval.batches: validation micro-batches per pass.
inline constexpr int64_t kMaxEvalBatches = int64_t{1} << 20;

// Rough lower bound of the bytes one rank holds: its share of the parameters and
// gradients (fp32), the activations one micro-batch of `tokens`
// tokens keeps for the backward, and its loader's batches of `step_tokens` int32
// tokens. What ValidateRun compares with the machine's memory.
int64_t RunMemoryLowerBound(const ModelDims& dims, int64_t tp, int64_t pp, int64_t tokens, int64_t step_tokens);

// This machine's physical memory in bytes (INT64_MAX where it cannot be read).
int64_t PhysicalMemoryBytes();

// Checks every field of a run (after ApplyRunDefaults) against its schema and its
// model, so that no value can crash, hang or silently train on NaN: enums known
// values; every number finite and in range (steps >= 1; micro_batch, seq_len >= 1
// with micro_batch · (seq_len + 1) · grad_accum <= kMaxBatchTokens and
// RunMemoryLowerBound within physical memory; lr in [0, 1]; betas in [0, 1); eps in
// (0, 1]; weight_decay >= 0 with lr · weight_decay <= 1; grad_clip >= 0; schedule
// ratios in [0, 1]; tp | N_H (for the Transformer too: its d_ff is split with the heads); pp | N_L; zero 0 or 1; eval.batches <=
// kMaxEvalBatches; initial_loss_scale in (0, 2^64]). Errors are one line naming the
// file and field (or flag), e.g. "run.textproto: parallel.tp = 3 does not divide N_H = 8".
absl::Status ValidateRun(const config::RunConfig& run, const ModelDims& dims, const RunSource& source = {});

}  // namespace multiscreen
