// `multiscreen forward --weights=FILE.h5 --tokens=FILE.bin --micro_batch=B
// --seq_len=T --out=OUT.h5 [--precision=fp32|bf16|fp64 --device=cpu|cuda|auto]`: the parity hook for
// reference implementations. Reads the first B·(T+1) tokens of --tokens, a token file
// in any format train reads (--format=auto|llmc|megatron|raw_uint16, data/loader.h;
// sequence b is tokens [b(T+1), (b+1)(T+1))) and writes `loss` (scalar), `token_losses`
// [B, T] and `grad/<name>` (gradient of the mean loss) for every parameter.
// With --no_grad [--memory=BOUND]: `loss` and `token_losses` only (the same bits),
// the model read a stage at a time (model/streamed_forward.h) so that a model
// larger than memory runs: peak about the largest stage (the tied table) rather
// than the model twice plus its gradients.
// A non-finite loss or gradient is written, then reported as an error (exit 1).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/weights_file.h"
#include "cli/weights_source.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "cli/flags.h"
#include "cli/memory_bound.h"
#include "common/log.h"
#include "common/status.h"
#include "data/loader.h"
#include "kernels/host_staging.h"
#include "model/model_stage.h"
#include "model/streamed_forward.h"
#include "trainer/stop_signal.h"

ABSL_FLAG(std::string, weights, "", "consolidated weights file (.h5) from init or ckpt export");
ABSL_FLAG(std::string, checkpoint, "", "a checkpoint directory or a run directory (its latest checkpoint)");
ABSL_FLAG(std::string, tokens, "", "token file: an llm.c .bin, a Megatron pair or raw uint16 (--format)");
ABSL_DECLARE_FLAG(std::string, format);
ABSL_FLAG(bool, no_grad, false,
          "forward: loss and token_losses only, the model read one stage at a time (bounded by --memory)");

namespace multiscreen::cli {
namespace {

// Writes the loss and the per-token losses [B, T].
template <typename Real>
absl::Status WriteLosses(H5Writer& h5, double loss, int64_t B, int64_t T, const Real* token_losses) {
  if (auto s = h5.Write("loss", {}, &loss); !s.ok()) return s;
  return h5.Write("token_losses", {B, T}, token_losses);
}

// The first non-finite result, as an error naming `out_path` (written all the same, so that
// what overflowed can be looked at): the loss, else the first gradient element (`grads` may
// be null: --no_grad). A model whose parameters overflow (e^{s_O} past fp32's range, say)
// gives NaN; `forward` exited 0 with it.
template <typename Real>
absl::Status CheckResultsFinite(const std::string& out_path, double loss, const ParamLayout* layout, const Real* grads) {
  const std::string written = " (the file is written for inspection): the parameters overflow somewhere";
  if (!std::isfinite(loss)) return absl::DataLossError(absl::StrCat(out_path, ": the loss is ", loss, written));
  if (grads == nullptr) return absl::OkStatus();
  for (const ParamEntry& e : layout->entries()) {
    for (int64_t i = 0; i < e.size(); ++i) {
      const double g = grads[e.buffer_offset + i];
      if (!std::isfinite(g)) {
        return absl::DataLossError(absl::StrCat(out_path, ": grad/", e.name, " holds ", g, " at element ", i, written));
      }
    }
  }
  return absl::OkStatus();
}

template <typename Real>
absl::Status Run(const Weights& w, const std::vector<int32_t>& tokens, int64_t B, int64_t T, Precision precision,
                 Device device, const std::string& out_path) {
  ModelOptions options;
  options.precision = precision;
  options.device = device;
  auto staging = HostStaging<Real>::Create(device);
  if (!staging.ok()) return staging.status();
  const std::unique_ptr<ModelStage<Real>> stage = MakeModelStage<Real>(w.dims, ShardSpec::Full(w.dims), options);
  ModelStage<Real>& model = *stage;
  const ParamLayout& layout = model.layout();
  std::vector<Real> params(w.params.begin(), w.params.end()), grads(layout.size(), Real(0)), token_losses(B * T);
  const double loss = model.ForwardBackward(staging->In(params.data(), layout.size()), tokens.data(), B, T,
                                            staging->GradientsFor(grads.data(), layout.size()), token_losses.data());
  staging->AddOut(grads.data());
  // The gradients are the model's size: a SIGINT / SIGTERM while they are written stops
  // between tensors, the writer removing the partial OUT.h5.tmp (trainer/stop_signal.h, as
  // init does). Installed only now: before, a signal ends forward the default way.
  InstallStopHandlers();
  const std::function<bool()> cancelled = [] { return StopRequested(); };
  auto out = H5Writer::Create(out_path);
  if (!out.ok()) return out.status();
  H5Writer& h5 = **out;
  if (auto s = WriteLosses(h5, loss, B, T, token_losses.data()); !s.ok()) return s;
  for (const ParamEntry& e : layout.entries()) {
    if (cancelled()) {
      return absl::CancelledError(
          absl::StrCat(out_path, ": interrupted; the unfinished ", out_path, ".tmp removed, nothing written in its place"));
    }
    if (auto s = h5.Write("grad/" + e.name, e.global_shape, grads.data() + e.buffer_offset); !s.ok()) return s;
  }
  MS_RETURN_IF_ERROR(h5.Commit(cancelled));
  return CheckResultsFinite(out_path, loss, &layout, grads.data());
}

// --no_grad: StreamedLoss over `weights` (verified by the caller), each stage's
// tensors read `block_bytes` at a time.
template <typename Real>
absl::Status RunNoGrad(const StreamedWeights& weights, const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                       Precision precision, Device device, int64_t block_bytes, const std::string& out_path) {
  ModelOptions options;
  options.precision = precision;
  options.device = device;
  const TensorSource& source = weights.source;
  const StageLoader<Real> load = [&source, block_bytes](const ParamLayout& layout, Real* params) {
    return FillShardParams(source, layout, block_bytes, params);
  };
  std::vector<Real> token_losses(B * T);
  auto loss = StreamedLoss<Real>(weights.dims, options, load, tokens.data(), B, T, token_losses.data());
  if (!loss.ok()) return loss.status();
  auto out = H5Writer::Create(out_path);
  if (!out.ok()) return out.status();
  if (auto s = WriteLosses(**out, *loss, B, T, token_losses.data()); !s.ok()) return s;
  MS_RETURN_IF_ERROR((*out)->Commit());
  return CheckResultsFinite<Real>(out_path, *loss, nullptr, nullptr);
}

// What forward --no_grad holds beside StreamedLossBytes's stages, in bytes, for `real_bytes`
// compute, a --memory bound of `bound` and `threads` OpenMP threads (omp_get_max_threads();
// a field report: psi8 at --seq_len=140 passed --memory=64M on the stages' estimate, 63.8
// MiB, and peaked at 71.7 MiB):
//   - the ids and losses: the B·(T+1) tokens read, their inputs and targets, token_losses;
//   - one read block (BlockBytes): verify reads the weights a block at a time, and glibc
//     keeps a freed block that large resident (its mmap threshold rises to it), where the
//     stages' buffers then reuse it only in part;
//   - kProgramGrowthBytes: what the program itself touches after start-up (HDF5's caches,
//     code paged in, the first thread's BLAS packing buffer): measured 5.3-7.3 MiB on psi8,
//     psi16 and tiny_psi4 with 1 and 2 threads (VmHWM over the start-up figure);
//   - with more than one thread, OpenBLAS's threaded GEMM: each thread packs its share of
//     a layer GEMM's B·T rows, a K block deep (K = d_E or N_H·d_V; OpenBLAS's block is at
//     most kBlasKBlock), into that thread's own buffer, which stays resident beside the
//     single-threaded path's; and per further thread its stack, its packed panel of the
//     weights and OpenMP's own (kPerThreadBytes). Measured on psi8 (d_E = 64, N_H·d_V =
//     512): 1 -> 2 threads adds 820 B per row (6.5 MiB at 8192 rows, 12.8 at 16384), each
//     thread past the second 0.35-0.55 MiB; this term: 1536 B per row and 2 MiB per
//     thread. Not glibc's per-thread arenas: heaptrack's heap peak is the same 155.4 MB
//     at 1 and 2 threads (psi8, 8192 rows), and MALLOC_ARENA_MAX=1 changes no peak.
constexpr int64_t kProgramGrowthBytes = int64_t{8} << 20;
constexpr int64_t kBlasKBlock = 384;  // OpenBLAS 0.3.21's SGEMM_DEFAULT_Q on Haswell and Zen
constexpr int64_t kPerThreadBytes = int64_t{2} << 20;
int64_t NoGradOverheadBytes(const ModelDims& dims, int64_t B, int64_t T, int64_t real_bytes, int64_t bound,
                            int64_t threads) {
  const int64_t rows = B * T;
  const int64_t k_block = std::min(std::max(dims.d_e, dims.n_heads * dims.d_v), kBlasKBlock);
  const int64_t threaded_gemm = threads > 1 ? real_bytes * rows * k_block + (threads - 1) * kPerThreadBytes : 0;
  return 4 * (B * (T + 1) + 2 * rows) + real_bytes * rows + BlockBytes(bound) + kProgramGrowthBytes + threaded_gemm;
}

// forward --no_grad: the bound checked against the model's estimate before the
// weights are verified (minutes for a large model), then StreamedLoss.
int NoGrad(const std::string& weights_path, const std::string& tokens_path, TokenFormat format, int64_t B, int64_t T,
           const std::string& precision, Precision compute, Device device, const std::string& out) {
  auto bound = MemoryBoundBytes();
  if (!bound.ok()) return Fail("forward", bound.status());
  auto weights = OpenWeightsStreamed(weights_path, absl::GetFlag(FLAGS_checkpoint), BlockBytes(*bound));
  if (!weights.ok()) return Fail("forward", weights.status());
  const int64_t real_bytes = precision == "fp64" ? 8 : 4;
  const int64_t threads = omp_get_max_threads();
  const int64_t needed = StreamedLossBytes(weights->dims, B, T, real_bytes) +
                         NoGradOverheadBytes(weights->dims, B, T, real_bytes, *bound, threads);
  if (needed > *bound) {
    return Fail("forward", absl::ResourceExhaustedError(absl::StrFormat(
                               "--memory=%s: --no_grad of %s at --micro_batch=%d --seq_len=%d needs about %.2f GiB "
                               "(its largest stage: the tied embedding table W_E with its unit rows and the head's "
                               "packed copy, or one layer, plus activations; a read block, the program's own "
                               "growth and, with more than one OpenMP thread, their GEMM packing buffers)",
                               absl::GetFlag(FLAGS_memory), weights->dims.name, B, T,
                               double(needed) / double(int64_t{1} << 30))));
  }
  auto tokens = ReadTokens(tokens_path, format, B * (T + 1), weights->dims.vocab);
  if (!tokens.ok()) return Fail("forward", tokens.status());
  if (auto s = weights->verify(); !s.ok()) return Fail("forward", s);
  const absl::Status s =
      precision == "fp64"
          ? RunNoGrad<double>(*weights, *tokens, B, T, Precision::kFp32, device, BlockBytes(*bound), out)
          : RunNoGrad<float>(*weights, *tokens, B, T, compute, device, BlockBytes(*bound), out);
  if (!s.ok()) return Fail("forward", s);
  // The estimate beside the peak, for a reader (and a test) to compare them.
  LogInfo(absl::StrFormat("forward --no_grad: estimate %.1f MiB for %d threads", double(needed) / (1 << 20), threads));
  ReportPeakMemory("forward --no_grad", *bound);
  return 0;
}

}  // namespace

int ForwardCommand(int argc, char** argv) {
  if (auto s = ParseFlags(argc, argv,
                          "multiscreen forward (--weights=FILE.h5 | --checkpoint=DIR) --tokens=FILE.bin --micro_batch=B --seq_len=T "
                          "--out=OUT.h5 [--format=auto|llmc|megatron|raw_uint16 --precision=fp32|bf16|fp64 "
                          "--device=cpu|cuda|auto] [--no_grad [--memory=1G]]",
                          {"weights", "checkpoint", "tokens", "format", "micro_batch", "seq_len", "precision", "out",
                           "device", "no_grad", "memory"});
      !s.ok()) {
    return Fail("forward", s);
  }
  // One process: under `mpirun -n 2` every rank wrote the same --out.
  if (int rc = RefuseSeveralProcesses("forward"); rc != 0) return rc;
  const std::string weights_path = absl::GetFlag(FLAGS_weights), tokens_path = absl::GetFlag(FLAGS_tokens);
  const std::string out = absl::GetFlag(FLAGS_out), precision = absl::AsciiStrToLower(absl::GetFlag(FLAGS_precision));
  const int64_t B = absl::GetFlag(FLAGS_micro_batch), T = absl::GetFlag(FLAGS_seq_len);
  if (tokens_path.empty()) return Fail("forward", absl::InvalidArgumentError("--tokens: a token .bin file is required"));
  if (out.empty()) return Fail("forward", absl::InvalidArgumentError("--out: an output .h5 path is required"));
  if (auto s = CheckOutputFile("out", out, {weights_path, tokens_path}); !s.ok()) return Fail("forward", s);
  if (B <= 0) return Fail("forward", absl::InvalidArgumentError(absl::StrCat("--micro_batch=", B, " must be positive")));
  if (T <= 0) return Fail("forward", absl::InvalidArgumentError(absl::StrCat("--seq_len=", T, " must be positive")));
  if (precision != "fp32" && precision != "bf16" && precision != "fp64") {
    return Fail("forward", absl::InvalidArgumentError(absl::StrCat("--precision=", precision, ": expected fp32, bf16 or fp64")));
  }
  auto device = ResolveDevice(precision == "fp64");
  if (!device.ok()) return Fail("forward", device.status());
  // B·(T + 1) tokens index int32 arrays; the file's header bounds them further.
  if (double(B) * (double(T) + 1) > double(INT32_MAX)) {
    return Fail("forward", absl::InvalidArgumentError(absl::StrCat("--micro_batch=", B, " --seq_len=", T, ": ",
                                                                   "more than 2^31 - 1 tokens")));
  }
  // --tokens in any format train reads (data/loader.h TokenFormat; auto by default).
  auto format = ParseTokenFormat(absl::GetFlag(FLAGS_format));
  if (!format.ok()) return Fail("forward", absl::InvalidArgumentError(absl::StrCat("--", format.status().message())));
  const Precision compute = precision == "bf16" ? Precision::kBf16 : Precision::kFp32;
  if (absl::GetFlag(FLAGS_no_grad)) {
    return NoGrad(weights_path, tokens_path, *format, B, T, precision, compute, *device, out);
  }
  if (Given(GivenFlags(argc, argv), "memory")) {
    return Fail("forward", absl::InvalidArgumentError(
                               "--memory bounds forward --no_grad only (the gradient forward holds the whole model)"));
  }
  auto weights = LoadWeights(weights_path, absl::GetFlag(FLAGS_checkpoint));
  if (!weights.ok()) return Fail("forward", weights.status());
  // Every id read is checked against the model's vocabulary (a version-2 id past
  // 2^31 - 1 would be negative as int32).
  auto tokens = ReadTokens(tokens_path, *format, B * (T + 1), weights->dims.vocab);
  if (!tokens.ok()) return Fail("forward", tokens.status());
  const absl::Status s = precision == "fp64" ? Run<double>(*weights, *tokens, B, T, Precision::kFp32, *device, out)
                                             : Run<float>(*weights, *tokens, B, T, compute, *device, out);
  if (!s.ok()) return Fail("forward", s);
  return 0;
}

}  // namespace multiscreen::cli
