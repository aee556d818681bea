// `multiscreen bench train --model=psi8 --seq_len=T --micro_batch=B [--precision=fp32|bf16|fp16|fp64]
//   [--steps=N --warmup=N --threads=N --json --grad_accum=M --graphs]`: warm-up steps, then timed training
// steps (forward, backward and AdamW on random tokens; with --grad_accum=M, M micro-batches
// of B sequences per step, composed from the stage pieces as a pipeline stage calls them:
// one BeginStep, per micro-batch Embed … EmbedBackward, one EndStep). Prints tokens/s, achieved GFLOP/s
// (trainer/flops.h's count), MFU against the hardware's fp32 multiply-add peak of the path
// it runs (kernels/cpu/fma_peak.h: probed on each thread's CPU clock; the bf16 dot-product
// peak beside it where the CPU has one) and against the machine's single-precision GEMM
// rate measured here through the same BLAS, peak resident memory, and the median time of
// each phase of a step (model/step_profile.h).
//
// `multiscreen bench screening --T=N --w=W [--micro_batch=B --tiles=N --r=R --model=psi8
//   --json]`: the screening kernel alone (forward and backward) on random projections,
// every tile with window w and acceptance width r; times per token and tile, and each
// direction's median on the calling thread's CPU clock.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/bench_count.h"
#include "cli/bench_op_times.h"
#include "cli/bench_decode.h"
#include "cli/bench_timing.h"
#include "cli/commands.h"
#include "common/peak_memory.h"
#include "cli/device.h"
#include "cli/flags.h"
#include "common/config.h"
#include "common/input_file.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/fma_peak.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/screening.h"
#include "model/init.h"
#include "model/multiscreen.h"
#include "nlohmann/json.hpp"
#include "trainer/cpu_precision.h"
#include "trainer/flops.h"

ABSL_DECLARE_FLAG(bool, json);     // params_command.cc
ABSL_DECLARE_FLAG(int64_t, steps);  // train_command.cc
ABSL_DECLARE_FLAG(double, lr);      // train_command.cc
ABSL_DECLARE_FLAG(int64_t, grad_accum);  // train_command.cc
ABSL_FLAG(int64_t, warmup, 2, "bench: untimed steps before the timed ones");
ABSL_FLAG(int64_t, head_chunk_rows, 0, "bench train: tokens per logits chunk of the head (0: the model's own)");
ABSL_FLAG(int64_t, head_vocab_block, 0, "bench train: vocabulary columns per block of the head (0: the model's own)");
ABSL_FLAG(std::string, head_path, "panels", "bench train: panels (the panel kernels where the head allows) | blas");
ABSL_FLAG(bool, compare_paths, false,
          "bench train: time the step on every instruction-set path this CPU runs, with the panel head and the "
          "BLAS head, side by side");
ABSL_FLAG(bool, count, false,
          "bench train: count what the last step runs on the emulated device (emulated build, --device=cuda): "
          "per kernel and cuBLAS product, launches, threads, global-memory bytes, GEMM m*n*k, tensor-core "
          "instructions, host synchronizations, host<->device bytes; --steps and --warmup are 1 unless given");
ABSL_FLAG(bool, op_times, false,
          "bench train: time the last step's every kernel and cuBLAS product on the device with CUDA events "
          "(--device=cuda), by the names --count uses; tools/perf_model.py --measured puts them beside the model's ops");
ABSL_FLAG(bool, graphs, false,
          "bench train: run every micro-batch but the run's first as one CUDA graph (--device=cuda, a Multiscreen "
          "model on one device; refused for the Transformer, tp, pp, dp and --op_times): a step's first and second "
          "captured into two graphs kept across steps and updated (cudaGraphExecUpdate), the later ones replayed");
ABSL_FLAG(int64_t, T, 1024, "bench screening: tokens per sequence");
ABSL_FLAG(double, w, 64, "bench screening: window of every tile (inf: the whole sequence)");
ABSL_FLAG(int64_t, tiles, 8, "bench screening: tiles per layer call");
ABSL_FLAG(double, r, 0.5, "bench screening: acceptance width r = σ(s_r) of every tile (0.5 at initialization)");
ABSL_FLAG(double, min_seconds, 1.0,
          "bench screening: time each direction for at least this many seconds, and 3 calls (0: the 3 calls alone)");

namespace multiscreen::cli {
namespace {

// The best single-precision GEMM rate of the BLAS over a few square sizes.
double BestSgemmGflops(int64_t* best_n) {
  double best = 0;
  for (int64_t n : {512, 1024, 2048}) {
    const double rate = MeasureSgemmGflops(n, 0.4);
    if (rate > best) {
      best = rate;
      *best_n = n;
    }
  }
  return best;
}

// The best GEMM rate of a device's kernel table in `precision` (trainer/flops.h
// MeasureGemmGflops, each size for 0.3 s): the GPU's measured peak that MFU is taken
// against, as the BLAS's SGEMM rate is on the CPU.
double BestDeviceGemmGflops(Device device, Precision precision, int64_t* best_n) {
  auto made = MakeKernelTable<float>(device);
  if (!made.ok()) return 0;
  return MeasureGemmGflops(**made, precision, 8192, 0.3, best_n);
}

// Refuses a product of sizes past 2^31 tokens (or rows), before it overflows an index.
absl::Status CheckTokens(double a, double b, const char* what) {
  if (a * b > 2147483648.0) return absl::InvalidArgumentError(absl::StrCat(what, " is ", a * b, ", above 2^31"));
  return absl::OkStatus();
}

// ---- bench train -----------------------------------------------------------------

struct TrainResult {
  nlohmann::json counted;  // --count: the last step's work on the emulated device (bench_count.h)
  nlohmann::json op_times;  // --op_times: the last step's device time per kernel and product (bench_op_times.h)
  std::vector<double> step_seconds, losses;
  std::vector<double> grad_norms;  // ‖gradient‖₂ of each timed step, read after the step's time
  std::vector<double> step_thread_cpu_seconds;  // each timed step on the calling thread's CPU clock
  std::vector<StepProfile> profiles;
  std::vector<double> windows;  // w of every tile at initialization (the FLOP count's windows)
  int64_t graph_instantiations = 0, graph_updates = 0;  // --graphs: captures into new graphs, into updates
};

// The step's optimizer on the model's device: AdamW through the kernel table over the
// fp32 masters; the fp64 reference model steps fp32 masters on the host and copies them.
struct BenchOptimizer {
  kernels::AdamWArgs args;
  DeviceArray<float> m, v;
  std::vector<float> master, grads32;  // fp64 only
};
void OptimizerStep(kernels::KernelTable<float>& ops, BenchOptimizer& opt, float* params, const float* grads,
                   int64_t n) {
  ++opt.args.step;
  ops.AdamW(opt.args, params, grads, opt.m.data(), opt.v.data(), n);
}
void OptimizerStep(kernels::KernelTable<double>&, BenchOptimizer& opt, double* params, const double* grads, int64_t n) {
  ++opt.args.step;
  std::copy(grads, grads + n, opt.grads32.begin());
  kernels::cpu::AdamWUpdate(opt.args, opt.master.data(), opt.grads32.data(), opt.m.data(), opt.v.data(), n);
  std::copy(opt.master.begin(), opt.master.end(), params);
}

// The executable graphs `bench train --graphs` keeps from step to step (AccumulatedStep):
// one of a step's first micro-batch (its backward writes the gradients: β = 0 products and
// other kernels) and one of the later ones (they add), each instantiated at its first
// capture and updated in place by the captures of later steps.
struct MicroStepGraphs {
  std::unique_ptr<kernels::CapturedGraph> first, later;
  bool warmed = false;  // a micro-batch has run uncaptured (it grew the scratch arrays)
  int64_t instantiations = 0, updates = 0;  // captures made into a new graph, into an update
};

// One step of `micro` micro-batches of B windows of T + 1 tokens each (tokens [micro, B,
// T + 1], host), as a pipeline stage runs them (model/model_stage.h): BeginStep once, per
// micro-batch Embed, LayersForward, HeadLossDeferred (gradients scaled by 1/micro),
// LayersBackward, EmbedBackward, then EndStep. Grads readied by the caller
// (ZeroGradientsBeforeStep). The micro-batches' losses stay summed where the head runs:
// the caller reads them once (ModelStage::TakeLoss) and divides by micro; x, dx: the
// activations' buffers.
//
// With `ops` and `graphs` (--graphs; model.CanCaptureMicroStep()), every micro-batch runs
// as one CUDA graph but the run's very first (uncaptured: it grows every scratch array,
// which a capture may not allocate). Each step captures its first micro-batch's micro-step
// (Embed … LayersBackward, and EmbedScaleBackward) into graphs->first and its second's into
// graphs->later, updating the graph of the step before (cudaGraphExecUpdate: the same ops,
// this step's kernel arguments: e^{s_E}, e^{s_F}, the tiles' windows and tile tables, read
// by BeginStep) or, when the runtime refuses (another topology), instantiating anew; the
// third and later micro-batches replay graphs->later. Before the step's first capture
// PrepareMicroStep uploads the tile tables, so no capture holds their copy. Each launch is
// preceded by the copy of its ids and targets to the fixed buffers the graph reads
// (ModelStage::PreloadInputs) and followed by the embedding table's scatter, whose grid and
// CSR depend on the ids (EmbedTableBackward, uncaptured, on the same stream).
template <typename Real>
void AccumulatedStep(ModelStage<Real>& model, const Real* params, const int32_t* tokens, int64_t B, int64_t T,
                     int64_t micro, Real* grads, DeviceArray<Real>* x, DeviceArray<Real>* dx,
                     kernels::KernelTable<Real>* graph_ops = nullptr, MicroStepGraphs* graphs = nullptr) {
  const int64_t rows = B * T, dE = model.dims().d_e;
  x->Resize(rows * dE);
  dx->Resize(rows * dE);
  std::vector<int32_t> inputs, targets;
  const double grad_scale = 1.0 / double(micro);
  model.BeginStep(params);
  // Embed … LayersBackward of the micro-batch in inputs, targets.
  auto through_layers_backward = [&] {
    model.Embed(params, inputs.data(), rows, x->data());
    model.LayersForward(params, B, T, x->data());
    model.HeadLossDeferred(params, x->data(), targets.data(), rows, dx->data(), grads, grad_scale);
    model.LayersBackward(params, dx->data(), grads);
  };
  bool prepared = false;
  for (int64_t m = 0; m < micro; ++m) {
    SplitWindows(tokens + m * B * (T + 1), B, T, &inputs, &targets);
    if (graph_ops == nullptr || !graphs->warmed) {
      through_layers_backward();
      model.EmbedBackward(params, inputs.data(), rows, dx->data(), grads);
      if (graphs != nullptr) graphs->warmed = true;
      continue;
    }
    if (!prepared) {
      model.PrepareMicroStep(B, T);
      prepared = true;
    }
    model.PreloadInputs(inputs.data(), targets.data(), rows);  // before the launch, on the same stream
    std::unique_ptr<kernels::CapturedGraph>& graph = m == 0 ? graphs->first : graphs->later;
    if (m <= 1) {  // the step's first use of this graph: its kernels' arguments are this step's
      graph_ops->BeginCapture();
      through_layers_backward();
      model.EmbedScaleBackward(params, inputs.data(), rows, dx->data(), grads);
      ++(graph_ops->EndCaptureInto(&graph) ? graphs->updates : graphs->instantiations);
    }
    graph_ops->LaunchGraph(*graph);
    model.EmbedTableBackward(params, inputs.data(), rows, dx->data());
  }
  model.EndStep(grads);
}

template <typename Real>
TrainResult RunTrain(const ModelDims& dims, Precision precision, ModelOptions options, int64_t B, int64_t T,
                     int64_t warmup, int64_t steps, uint64_t seed, double lr, bool count = false,
                     bool op_times = false, int64_t grad_accum = 1, bool graphs = false) {
  StepProfile profile;
  options.precision = precision;
  options.profile = &profile;
  const std::unique_ptr<ModelStage<Real>> stage = MakeModelStage<Real>(dims, ShardSpec::Full(dims), options);
  ModelStage<Real>& model = *stage;
  const ParamLayout& layout = model.layout();
  const int64_t n = layout.size();
  auto made = MakeKernelTable<Real>(options.device);  // the device was checked by ResolveDevice
  if (!made.ok()) {
    std::fprintf(stderr, "multiscreen bench train: %s\n", std::string(made.status().message()).c_str());
    std::exit(1);
  }
  kernels::KernelTable<Real>& ops = **made;
  if (graphs && !model.CanCaptureMicroStep()) {
    std::fprintf(stderr,
                 "multiscreen bench train: --graphs captures the micro-step of a Multiscreen model on one CUDA "
                 "device only (not the Transformer's, not under tp, pp or dp): drop --graphs\n");
    std::exit(1);
  }
  // Phases of a GPU step timed by their kernels, not their launches (model/step_profile.h).
  // Not under --graphs: a wait inside a capture is an error (the phases are not timed then).
  if (options.device != Device::kCpu && !graphs) profile.synchronize = [&ops] { ops.Synchronize(); };
  std::vector<float> master(n);
  InitParams(layout, seed, master.data());
  const std::vector<Real> initial(master.begin(), master.end());
  DeviceArray<Real> params(options.device), grads(options.device);
  params.Resize(n);
  grads.Resize(n);
  ops.Upload(initial.data(), n, params.data());
  const Device optimizer_device = std::is_same_v<Real, float> ? options.device : Device::kCpu;
  BenchOptimizer opt{.m = DeviceArray<float>(optimizer_device), .v = DeviceArray<float>(optimizer_device)};
  opt.args.lr = lr;
  opt.m.Resize(n);
  opt.v.Resize(n);
  if constexpr (std::is_same_v<Real, double>) {
    opt.master = master;
    opt.grads32.resize(n);
  }
  TrainResult result;
  for (const ParamEntry& e : layout.entries()) {
    if (e.kind != ParamKind::kS_w) continue;
    for (int64_t i = 0; i < e.size(); ++i) result.windows.push_back(std::exp(double(master[e.buffer_offset + i])) + 1);
  }
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(dims.vocab - 1));
  std::vector<int32_t> tokens(grad_accum * B * (T + 1));
  DeviceArray<Real> x(options.device), dx(options.device);  // the stage pieces' activations
  MicroStepGraphs micro_graphs;  // --graphs: kept from step to step
  for (int64_t step = 0; step < warmup + steps; ++step) {
    for (int32_t& t : tokens) t = id(rng);
    profile.Clear();
    // --count: the last step, without the profile's synchronizations (the step's own only).
    const bool counted = count && step == warmup + steps - 1;
    if (counted) {
      profile.synchronize = nullptr;
      BeginDeviceCount();
    }
    // --op_times: the last step too, its calls timed by device events, not host waits.
    const bool timed = op_times && step == warmup + steps - 1;
    if (timed) {
      profile.synchronize = nullptr;
      BeginOpTimes();
    }
    const auto start = BenchClock::now();
    const double cpu_start = ThreadCpuSeconds();
    model.ZeroGradientsBeforeStep(grads.data());
    // The same pieces and bits as ForwardBackward at --grad_accum=1.
    AccumulatedStep(model, params.data(), tokens.data(), B, T, grad_accum, grads.data(), &x, &dx,
                    graphs ? &ops : nullptr, &micro_graphs);
    {
      PhaseTimer timer(&profile, StepProfile::kOptimizer);
      OptimizerStep(ops, opt, params.data(), grads.data(), n);
      ops.Synchronize();
    }
    // The step's one loss read (on a device one wait, for nothing left: the step ended).
    const double loss = model.TakeLoss() / double(grad_accum);
    const double seconds = SecondsSince(start), cpu_seconds = ThreadCpuSeconds() - cpu_start;
    if (counted) result.counted = EndDeviceCount();
    if (timed) {
      auto times = EndOpTimes();
      if (!times.ok()) {
        std::fprintf(stderr, "multiscreen bench train: %s\n", std::string(times.status().message()).c_str());
        std::exit(1);
      }
      result.op_times = *std::move(times);
    }
    if (step < warmup) continue;
    result.grad_norms.push_back(std::sqrt(ops.SumSquares(grads.data(), n)));  // a wait, after the step's time
    result.step_seconds.push_back(seconds);
    result.step_thread_cpu_seconds.push_back(cpu_seconds);
    result.losses.push_back(loss);
    result.profiles.push_back(profile);
    result.profiles.back().synchronize = nullptr;  // the times only; the table does not outlive this
  }
  result.graph_instantiations = micro_graphs.instantiations;
  result.graph_updates = micro_graphs.updates;
  return result;
}

// --compare_paths: the step on every instruction-set path this CPU runs, with the panel
// head and with the BLAS head, each the median of its timed steps; the ratio is the BLAS
// head's step time over this row's on the same path (above 1: the row is faster), so a
// path slower than BLAS shows at once. `ran()` names the precision the step computes in on
// the active path (bf16 falls back to fp32 where the path has no bf16 dot products).
template <typename Run, typename HeadUsed, typename Ran>
int ComparePaths(const ModelDims& dims, const std::string& precision, const ModelOptions& base, int64_t B, int64_t T,
                 Run run, HeadUsed head_used, Ran ran) {
  const kernels::cpu::Isa saved = kernels::cpu::ActiveIsa();
  nlohmann::json rows = nlohmann::json::array();
  if (!absl::GetFlag(FLAGS_json)) {
    std::printf("bench train --compare_paths: %s, T=%lld, B=%lld, %s, %d threads; CPU %s (best path %s)\n",
                dims.name.c_str(), (long long)T, (long long)B, precision.c_str(), omp_get_max_threads(),
                kernels::cpu::CpuModel().c_str(), kernels::cpu::IsaName(kernels::cpu::CpuIsa()));
    std::printf("  %-8s %-9s %-9s %12s %12s %10s\n", "path", "head", "computes", "step ms", "tokens/s", "vs blas");
  }
  for (kernels::cpu::Isa isa : kernels::cpu::SupportedIsas()) {
    if (auto s = kernels::cpu::SetIsaCap(isa); !s.ok()) return Fail("bench train", s);
    double blas_step = 0;
    for (HeadPath path : {HeadPath::kBlas, HeadPath::kPanels}) {
      ModelOptions options = base;
      options.head_path = path;
      const double step = Median(run(options).step_seconds);
      if (path == HeadPath::kBlas) blas_step = step;
      const char* head = path == HeadPath::kBlas ? "blas" : head_used(options);
      rows.push_back({{"isa", kernels::cpu::IsaName(isa)},
                      {"head_path", head},
                      {"step_precision", ran()},
                      {"step_seconds", step},
                      {"tokens_per_s", double(B * T) / step},
                      {"blas_over_this", blas_step / step}});
      if (!absl::GetFlag(FLAGS_json)) {
        std::printf("  %-8s %-9s %-9s %12.2f %12.0f %9.2fx\n", kernels::cpu::IsaName(isa), head, ran().c_str(),
                    1e3 * step, double(B * T) / step, blas_step / step);
      }
    }
  }
  if (auto s = kernels::cpu::SetIsaCap(saved); !s.ok()) return Fail("bench train", s);
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json j = {{"command", "bench train --compare_paths"},
                        {"model", dims.name},
                        {"seq_len", T},
                        {"micro_batch", B},
                        {"precision", precision},
                        {"threads", omp_get_max_threads()},
                        {"cpu", kernels::cpu::CpuModel()},
                        {"cpu_best_isa", kernels::cpu::IsaName(kernels::cpu::CpuIsa())},
                        {"paths", rows}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

int BenchTrain(int argc, char** argv) {
  const char* usage =
      "multiscreen bench train --model=psi8 --seq_len=T --micro_batch=B [--precision=fp32|bf16|fp16|fp64 --steps=N "
      "--warmup=N --threads=N --seed=S --lr=X --head_chunk_rows=N --head_vocab_block=N --isa=PATH "
      "--head_path=panels|blas --compare_paths --device=cpu|cuda|auto --peak_tflops=X --count --op_times --json "
      "--grad_accum=M --graphs]";
  // bench train's own defaults (train's --steps and --seq_len default to the run file's):
  // set before parsing, so that --help shows them and a flag given replaces them.
  absl::SetFlag(&FLAGS_steps, 10);
  absl::SetFlag(&FLAGS_seq_len, 256);
  if (auto s = ParseFlags(argc, argv, usage,
                          {"model", "seq_len", "micro_batch", "precision", "steps", "warmup", "threads", "json", "seed",
                           "lr", "head_chunk_rows", "head_vocab_block", "isa", "head_path", "compare_paths", "device",
                           "peak_tflops", "count", "op_times", "grad_accum", "graphs"});
      !s.ok()) {
    return Fail("bench train", s);
  }
  const absl::StatusOr<double> peak_tflops = PeakTflops();
  if (!peak_tflops.ok()) return Fail("bench train", peak_tflops.status());
  if (auto s = ApplyThreadsFlag(); !s.ok()) return Fail("bench train", s);
  if (auto s = ApplyIsaFlag(); !s.ok()) return Fail("bench train", s);
  auto dims = LoadModel(absl::GetFlag(FLAGS_model));
  if (!dims.ok()) return Fail("bench train", dims.status());
  // Unset: the model's head blocking. Given: at least 1.
  const std::vector<std::string> given = GivenFlags(argc, argv);
  auto given_or = [&](const char* name, int64_t value, int64_t unset) { return Given(given, name) ? value : unset; };
  const int64_t B = absl::GetFlag(FLAGS_micro_batch), T = absl::GetFlag(FLAGS_seq_len);
  const int64_t grad_accum = absl::GetFlag(FLAGS_grad_accum);
  // --count: one warm-up step (the GEMM plans and the buffers' growth) and one counted,
  // unless given.
  const bool count = absl::GetFlag(FLAGS_count);
  if (count && !CanCountDeviceWork()) {
    return Fail("bench train", absl::FailedPreconditionError(
                                   "--count counts what the emulated device runs: this build has no emulated device "
                                   "(build with cmake --preset emulated, then build-emulated/multiscreen bench train "
                                   "--device=cuda --count)"));
  }
  const int64_t warmup = count && !Given(given, "warmup") ? 1 : absl::GetFlag(FLAGS_warmup);
  const int64_t steps = count && !Given(given, "steps") ? 1 : absl::GetFlag(FLAGS_steps);
  ModelOptions head;
  head.head_chunk_rows = given_or("head_chunk_rows", absl::GetFlag(FLAGS_head_chunk_rows), head.head_chunk_rows);
  head.head_vocab_block = given_or("head_vocab_block", absl::GetFlag(FLAGS_head_vocab_block), head.head_vocab_block);
  const std::string head_path = absl::AsciiStrToLower(absl::GetFlag(FLAGS_head_path));
  if (head_path != "panels" && head_path != "blas") {
    return Fail("bench train", absl::InvalidArgumentError(absl::StrCat("--head_path=", head_path, ": expected panels or blas")));
  }
  head.head_path = head_path == "blas" ? HeadPath::kBlas : HeadPath::kPanels;
  const std::string precision = absl::AsciiStrToLower(absl::GetFlag(FLAGS_precision));  // as train: FP16 = fp16
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"micro_batch", B}, {"seq_len", T}, {"steps", steps},
                                    {"grad_accum", grad_accum}, {"head_chunk_rows", head.head_chunk_rows}, {"head_vocab_block", head.head_vocab_block}}) {
    if (value < 1) return Fail("bench train", absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, " must be at least 1")));
  }
  if (auto s = CheckTokens(double(B), double(T) + 1, "--micro_batch × (--seq_len + 1)"); !s.ok()) return Fail("bench train", s);
  if (warmup < 0) return Fail("bench train", absl::InvalidArgumentError(absl::StrCat("--warmup=", warmup, " must be >= 0")));
  Precision p = Precision::kFp32;
  if (precision == "bf16") {
    p = Precision::kBf16;
  } else if (precision == "fp16") {
    p = Precision::kFp16;
  } else if (precision != "fp32" && precision != "fp64") {
    return Fail("bench train", absl::InvalidArgumentError(
                             absl::StrCat("--precision=", precision, ": expected fp32, bf16, fp16 or fp64")));
  }
  const uint64_t seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_seed));
  const double lr = absl::GetFlag(FLAGS_lr);
  if (!(lr >= 0 && std::isfinite(lr))) {
    return Fail("bench train", absl::InvalidArgumentError(absl::StrCat("--lr=", lr, " must be finite and >= 0")));
  }
  // The bound train applies (common/config.h), so that a size train refuses at once is
  // not bench's to grow into until killed (issue 31 §5: 6 GB at Ψ = 8, 15 GB at Ψ = 64).
  if (const int64_t need = RunMemoryLowerBound(*dims, 1, 1, B * T, B * (T + 1)) * (precision == "fp64" ? 2 : 1),
      memory = PhysicalMemoryBytes();
      need > memory) {
    return Fail("bench train", absl::InvalidArgumentError(absl::StrCat(
                             "--micro_batch=", B, " x --seq_len=", T, " needs at least ", ByteSize(need),
                             " for model ", dims->name, ", more than the ", ByteSize(memory), " of memory this machine has")));
  }
  auto device = ResolveDevice(precision == "fp64");
  if (!device.ok()) return Fail("bench train", device.status());
  head.device = *device;
  // bf16 on a CPU path without bf16 dot products runs the fp32 step (trainer/cpu_precision.h),
  // said once, as train does; --compare_paths takes each path's.
  auto step_precision = [&] { return *device == Device::kCpu ? CpuStepPrecision(p, nullptr) : p; };
  auto ran_precision = [&] {  // its name, for the report
    return precision == "bf16" && step_precision() != Precision::kBf16 ? std::string("fp32") : precision;
  };
  if (std::string notice; *device == Device::kCpu && !absl::GetFlag(FLAGS_compare_paths)) {
    CpuStepPrecision(p, &notice);
    if (!notice.empty()) std::fprintf(stderr, "%s\n", notice.c_str());
  }
  if (count && *device == Device::kCpu) {
    return Fail("bench train", absl::InvalidArgumentError(
                                   "--count counts the device's work: add --device=cuda (fp64 runs on the CPU)"));
  }
  const bool op_times = absl::GetFlag(FLAGS_op_times);
  if (op_times && (!CanTimeDeviceOps() || *device == Device::kCpu)) {
    return Fail("bench train", absl::InvalidArgumentError(
                                   "--op_times times the device's kernels: add --device=cuda (fp64 runs on the CPU) "
                                   "in a build with CUDA"));
  }
  const bool graphs = absl::GetFlag(FLAGS_graphs);
  if (graphs && precision == "fp64") {
    return Fail("bench train", absl::InvalidArgumentError(
                                   "--graphs captures CUDA graphs, and --precision=fp64 runs on the CPU: drop one"));
  }
  if (graphs && *device == Device::kCpu) {
    return Fail("bench train", absl::InvalidArgumentError("--graphs captures CUDA graphs: add --device=cuda"));
  }
  // Events time each call the host launches; a graph's replayed nodes are launched by the
  // device, so their times would be missing from the table (and perf_model --measured).
  if (graphs && op_times) {
    return Fail("bench train", absl::InvalidArgumentError(
                                   "--op_times times the calls the host launches, not a graph's replayed nodes: "
                                   "drop --graphs or --op_times"));
  }
  auto run = [&](const ModelOptions& options) {
    return precision == "fp64"
               ? RunTrain<double>(*dims, p, options, B, T, warmup, steps, seed, lr, count, op_times, grad_accum)
               : RunTrain<float>(*dims, step_precision(), options, B, T, warmup, steps, seed, lr, count, op_times,
                                 grad_accum, graphs);
  };
  auto head_used = [&](const ModelOptions& options) {
    if (dims->transformer()) return "blas";  // its head takes each row's max: the BLAS path (model/transformer.cc)
    return precision == "fp64" ? HeadPathName<double>(*dims, 1, options.head_path)
                               : HeadPathName<float>(*dims, 1, options.head_path, step_precision());
  };
  if (absl::GetFlag(FLAGS_compare_paths)) {
    for (const char* flag : {"isa", "head_path"}) {
      if (Given(given, flag)) {
        return Fail("bench train", absl::InvalidArgumentError(absl::StrCat(
                                 "--compare_paths runs every path and both heads: --", flag, " does not apply")));
      }
    }
    if (*device != Device::kCpu) {
      return Fail("bench train", absl::InvalidArgumentError("--compare_paths compares the CPU's paths: add --device=cpu"));
    }
    return ComparePaths(*dims, precision, head, B, T, run, head_used, ran_precision);
  }
  const TrainResult r = run(head);
  const int64_t peak_rss = PeakResidentBytes(), peak_device = BufferBytesPeak(*device);
  const bool gpu = *device != Device::kCpu;
  int64_t sgemm_n = 0;
  // MFU against --peak_tflops, or the GEMM rate of the step's precision measured on its device.
  const double sgemm = *peak_tflops > 0 ? *peak_tflops * 1e3
                       : gpu            ? BestDeviceGemmGflops(*device, p, &sgemm_n)
                                        : BestSgemmGflops(&sgemm_n);

  // The hardware's peak on the path the step ran, on as many threads (CPU only).
  const kernels::cpu::HardwarePeak hw = gpu ? kernels::cpu::HardwarePeak{}
                                            : kernels::cpu::MeasureHardwarePeak(kernels::cpu::ActiveIsa(), 0.3);

  const double step = Median(r.step_seconds);
  const double tokens_per_s = double(grad_accum * B * T) / step;
  const double flops_per_token = TrainingFlopsPerToken(*dims, T, r.windows);
  const double gflops = flops_per_token * tokens_per_s / 1e9;
  const double mfu = gflops / sgemm;
  // The CPU's peak in the step's precision: fp32, fp64 (half), bf16 where the step ran bf16.
  const std::string ran = ran_precision();
  const StepPeak hw_peak = CpuStepPeak(hw, ran);
  const nlohmann::json mfu_hw = gpu ? nlohmann::json(nullptr) : nlohmann::json(gflops / hw_peak.gflops);
  // The same on the calling thread's CPU clock (bench_timing.h ThreadCpuSeconds): what a
  // loaded machine took from this thread left out.
  const double step_cpu = Median(r.step_thread_cpu_seconds);
  const double gflops_cpu = flops_per_token * double(grad_accum * B * T) / step_cpu / 1e9;
  auto or_null = [gpu](double v) { return gpu || v <= 0 ? nlohmann::json(nullptr) : nlohmann::json(v); };
  double phase[StepProfile::kPhases], phase_cpu[StepProfile::kPhases], accounted = 0, accounted_cpu = 0;
  for (int ph = 0; ph < StepProfile::kPhases; ++ph) {
    std::vector<double> v, v_cpu;
    for (const StepProfile& prof : r.profiles) {
      v.push_back(prof.seconds[ph]);
      v_cpu.push_back(prof.thread_cpu_seconds[ph]);
    }
    phase[ph] = Median(v);
    phase_cpu[ph] = Median(v_cpu);
    accounted += phase[ph];
    accounted_cpu += phase_cpu[ph];
  }
  const double other = std::max(0.0, step - accounted), other_cpu = std::max(0.0, step_cpu - accounted_cpu);
  const int threads = omp_get_max_threads();

  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json breakdown;
    for (int ph = 0; ph < StepProfile::kPhases; ++ph) breakdown[StepProfile::kNames[ph]] = phase[ph];
    breakdown["other"] = other;
    nlohmann::json breakdown_cpu;
    for (int ph = 0; ph < StepProfile::kPhases; ++ph) breakdown_cpu[StepProfile::kNames[ph]] = phase_cpu[ph];
    breakdown_cpu["other"] = other_cpu;
    nlohmann::json j = {{"command", "bench train"},
                        {"model", dims->name},
                        {"seq_len", T},
                        {"micro_batch", B},
                        {"grad_accum", grad_accum},
                        {"precision", precision},
                        {"step_precision", ran},
                        {"device", gpu ? *BindDevice(0) : "cpu"},
                        {"threads", threads},
                        {"warmup", warmup},
                        {"steps", steps},
                        {"head_chunk_rows", head.head_chunk_rows},
                        {"head_vocab_block", head.head_vocab_block},
                        {"isa", kernels::cpu::IsaName(kernels::cpu::ActiveIsa())},
                        {"cpu_best_isa", kernels::cpu::IsaName(kernels::cpu::CpuIsa())},
                        {"cpu", kernels::cpu::CpuModel()},
                        {"head_path", head_used(head)},
                        {"step_seconds", step},
                        {"step_seconds_all", r.step_seconds},
                        {"tokens_per_s", tokens_per_s},
                        {"flops_per_token", flops_per_token},
                        {"gflops", gflops},
                        {"sgemm_gflops", sgemm},
                        {"sgemm_n", sgemm_n},
                        {"mfu", mfu},
                        {"hw_peak_gflops", or_null(hw_peak.gflops)},
                        {"hw_peak_precision", gpu ? nlohmann::json(nullptr) : nlohmann::json(hw_peak.precision)},
                        {"hw_peak_fp32_gflops", or_null(hw.fp32_gflops)},
                        {"mfu_hw", mfu_hw},
                        {"step_thread_cpu_seconds", step_cpu},
                        {"mfu_hw_thread_cpu", gpu ? nlohmann::json(nullptr) : nlohmann::json(gflops_cpu / hw_peak.gflops)},
                        {"hw_peak_bf16_gflops", or_null(hw.bf16_gflops)},
                        {"hw_peak_isa", gpu ? nlohmann::json(nullptr) : nlohmann::json(kernels::cpu::IsaName(hw.isa))},
                        {"hw_peak_threads", hw.threads},
                        {"cpu_ghz", or_null(hw.ghz)},
                        {"gemm_rate_source", *peak_tflops > 0 ? "--peak_tflops"
                                              : gpu ? "device GEMM in the step's precision"
                                                    : "BLAS SGEMM"},
                        {"peak_rss_bytes", peak_rss},
                        {"peak_device_bytes", gpu ? peak_device : 0},
                        {"loss_first", r.losses.front()},
                        {"loss_last", r.losses.back()},
                        {"losses", r.losses},
                        {"grad_norms", r.grad_norms},
                        {"graphs", graphs},
                        // --graphs: captures made into new executable graphs, and into updates of the last.
                        {"graph_instantiations", r.graph_instantiations},
                        {"graph_updates", r.graph_updates},
                        // Under --graphs the phases are not timed (their waits would fall inside a capture).
                        {"breakdown_seconds", graphs ? nlohmann::json(nullptr) : breakdown},
                        {"breakdown_thread_cpu_seconds", graphs ? nlohmann::json(nullptr) : breakdown_cpu}};
    if (count) j["counted"] = r.counted;
    if (op_times) j["op_times"] = r.op_times;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("bench train: %s, T=%lld, B=%lld, %s, %d threads; %lld timed steps after %lld warm-up\n",
              dims->name.c_str(), (long long)T, (long long)B, ran.c_str(), threads, (long long)steps,
              (long long)warmup);
  if (gpu) {
    std::printf("  device          %s\n", BindDevice(0)->c_str());
  } else {
    std::printf("  CPU kernels     %s; head: %s\n", kernels::cpu::IsaDescription().c_str(), head_used(head));
  }
  std::printf("  step (median)   %10.4f s     loss %.4f -> %.4f\n", step, r.losses.front(), r.losses.back());
  std::printf("  tokens/s        %10.0f\n", tokens_per_s);
  std::printf("  model FLOPs     %10.3f GFLOP/step (%.4g per token)\n", flops_per_token * grad_accum * B * T / 1e9, flops_per_token);
  std::printf("  achieved        %10.2f GFLOP/s\n", gflops);
  if (*peak_tflops > 0) {
    std::printf("  peak (given)    %10.2f GFLOP/s (--peak_tflops)\n", sgemm);
  } else {
    std::printf("  GEMM rate       %10.2f GFLOP/s (%s, n=%lld)\n", sgemm, gpu ? "device" : "BLAS SGEMM",
                (long long)sgemm_n);
  }
  if (!gpu) {
    std::printf("  hardware peak   %10.2f GFLOP/s (%s fp32 multiply-add, %d threads, %.2f GHz: %.1f FLOPs/cycle a core)\n",
                hw.fp32_gflops, kernels::cpu::IsaName(hw.isa), hw.threads, hw.ghz, hw.fp32_flops_per_cycle);
    if (hw.bf16_gflops > 0) std::printf("  bf16 dot peak   %10.2f GFLOP/s (vdpbf16ps)\n", hw.bf16_gflops);
    if (hw_peak.precision == "fp64") std::printf("  fp64 peak       %10.2f GFLOP/s (half the fp32 lanes)\n", hw_peak.gflops);
    std::printf("  MFU (hardware)  %10.1f %%   against the %s peak (%.1f %% on the thread's CPU clock: %.4f s a step)\n",
                100 * gflops / hw_peak.gflops, hw_peak.precision.c_str(), 100 * gflops_cpu / hw_peak.gflops, step_cpu);
  }
  const char* against = *peak_tflops > 0 ? "given" : gpu ? "GEMM" : "SGEMM";
  // On the CPU the SGEMM rate is fp32's whatever the step computes in: said beside a bf16 or fp64 step.
  const std::string sgemm_note =
      !gpu && *peak_tflops <= 0 && ran != "fp32" ? absl::StrCat("   against the fp32 SGEMM rate (the step: ", ran, ")") : "";
  std::printf("  MFU (%s)%*s%10.1f %%%s\n", against, static_cast<int>(10 - std::strlen(against)), "", 100 * mfu,
              sgemm_note.c_str());
  std::printf("  peak RSS        %10.1f MiB\n", peak_rss / 1048576.0);
  if (gpu) std::printf("  peak device mem %10.1f MiB (the model's arrays)\n", peak_device / 1048576.0);
  if (graphs) {
    std::printf("  breakdown       not timed under --graphs (the phases' waits would fall inside a capture)\n");
  } else {
    std::printf("  breakdown (median per step):    wall          the thread's CPU clock\n");
  }
  auto print_phase = [&](const char* name, double wall, double cpu) {
    std::printf("    %-20s %9.2f ms  %5.1f %%   %9.2f ms  %5.1f %%\n", name, 1e3 * wall, 100 * wall / step, 1e3 * cpu,
                step_cpu > 0 ? 100 * cpu / step_cpu : 0.0);
  };
  if (!graphs) {
    for (int ph = 0; ph < StepProfile::kPhases; ++ph) print_phase(StepProfile::kNames[ph], phase[ph], phase_cpu[ph]);
    print_phase("other", other, other_cpu);
  }
  if (count) PrintDeviceCount(r.counted);
  if (op_times) PrintOpTimes(r.op_times);
  return 0;
}

// ---- bench screening -------------------------------------------------------------

int BenchScreening(int argc, char** argv) {
  const char* usage =
      "multiscreen bench screening --T=N --w=W [--micro_batch=B --tiles=N --r=R --model=psi8 --threads=N --seed=S "
      "--min_seconds=X --isa=PATH --json]";
  if (auto s = ParseFlags(argc, argv, usage,
                          {"T", "w", "r", "tiles", "micro_batch", "min_seconds", "model", "threads", "seed", "json",
                           "isa"});
      !s.ok()) {
    return Fail("bench screening", s);
  }
  if (auto s = ApplyThreadsFlag(); !s.ok()) return Fail("bench screening", s);
  if (auto s = ApplyIsaFlag(); !s.ok()) return Fail("bench screening", s);
  auto dims = LoadModel(absl::GetFlag(FLAGS_model));
  if (!dims.ok()) return Fail("bench screening", dims.status());
  const int64_t T = absl::GetFlag(FLAGS_T), B = absl::GetFlag(FLAGS_micro_batch), nt = absl::GetFlag(FLAGS_tiles);
  const double w = absl::GetFlag(FLAGS_w), r = absl::GetFlag(FLAGS_r), min_seconds = absl::GetFlag(FLAGS_min_seconds);
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"T", T}, {"micro_batch", B}, {"tiles", nt}}) {
    if (value < 1) {
      return Fail("bench screening", absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": must be >= 1")));
    }
  }
  if (auto s = CheckTokens(double(B) * double(T), double(nt), "--micro_batch × --T × --tiles"); !s.ok()) return Fail("bench screening", s);
  if (!(w >= 1)) return Fail("bench screening", absl::InvalidArgumentError(absl::StrCat("--w=", w, " must be >= 1")));
  if (!(r > 0 && r <= 1)) return Fail("bench screening", absl::InvalidArgumentError(absl::StrCat("--r=", r, " must be in (0, 1]")));
  if (!(min_seconds >= 0)) {
    return Fail("bench screening", absl::InvalidArgumentError(
                                       absl::StrCat("--min_seconds=", min_seconds, ": must be >= 0 (seconds to time for)")));
  }

  kernels::cpu::ScreeningShape shape;
  shape.batch = B;
  shape.seq = T;
  shape.tiles = nt;
  shape.d_k = dims->d_k;
  shape.d_v = dims->d_v;
  shape.w_th = dims->w_th;
  shape.tanh_norm = dims->tanh_norm;  // the model file's ablation switches (issues 18, 30)
  shape.position = dims->position;
  shape.output_gate = dims->output_gate;
  const int64_t rows = B * T, C = shape.p_cols(), dk = shape.d_k, dv = shape.d_v;
  std::vector<float> P(rows * nt * C), U(rows * nt * dv), dU(rows * nt * dv), dP(rows * nt * C);
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& x : P) x = normal(rng);
  for (float& x : dU) x = normal(rng);
  std::vector<float> qt(rows * nt * dk), kt(rows * nt * dk), vb(rows * nt * dv), qn(rows * nt), kn(rows * nt),
      vn(rows * nt), h(rows * nt * dv), gate(rows * nt * 2 * dv);
  // As the model's CPU step calls them: the forward keeps the gate and its derivative.
  const kernels::cpu::ScreeningSaved<float> saved{qt.data(), kt.data(), vb.data(), qn.data(), kn.data(), vn.data(), h.data(),
                                                  gate.data()};
  std::vector<kernels::cpu::TileScalars> scalars(nt, kernels::cpu::TileScalars{w, r, 1.0, w});
  std::vector<kernels::cpu::TileScalarGrads> grads(nt);
  kernels::cpu::ScreeningWorkspace<float> workspace;

  auto forward = [&] { kernels::cpu::ScreeningForward(shape, P.data(), scalars.data(), saved, U.data(), &workspace); };
  auto backward = [&] {
    kernels::cpu::ScreeningBackward(shape, P.data(), scalars.data(), saved, dU.data(), dP.data(), grads.data(), &workspace);
  };
  // Repeats fn (after one warm-up call) for at least min_seconds; the median call on the
  // wall clock, and the median on the calling thread's CPU clock (*cpu: what the machine's
  // other tenants do not inflate; with --threads=1 the kernel's whole CPU time).
  auto time = [&](auto&& fn, double* cpu) {
    fn();
    std::vector<double> calls, cpu_calls;
    const auto start = BenchClock::now();
    do {
      const auto t0 = BenchClock::now();
      const double c0 = ThreadCpuSeconds();
      fn();
      cpu_calls.push_back(ThreadCpuSeconds() - c0);
      calls.push_back(SecondsSince(t0));
    } while (SecondsSince(start) < min_seconds || calls.size() < 3);
    *cpu = Median(cpu_calls);
    return Median(calls);
  };
  double fwd_cpu = 0, bwd_cpu = 0;
  const double fwd = time(forward, &fwd_cpu), bwd = time(backward, &bwd_cpu);

  // The work that exists: in-window pairs, and the fraction Trim accepts (s > 1 − r).
  const int64_t keys = static_cast<int64_t>(std::min(double(T), std::ceil(w)));
  int64_t pairs = 0, accepted = 0;
  for (int64_t task = 0; task < B * nt; ++task) {
    const float* q = qt.data() + task * T * dk;
    const float* k = kt.data() + task * T * dk;
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t j = std::max<int64_t>(0, i - keys + 1); j <= i; ++j) {
        float s = 0;
        for (int64_t c = 0; c < dk; ++c) s += q[i * dk + c] * k[j * dk + c];
        ++pairs;
        accepted += s > float(1 - r);
      }
    }
  }
  const double tile_tokens = double(rows * nt);
  const double fwd_ns = 1e9 * fwd / tile_tokens, bwd_ns = 1e9 * bwd / tile_tokens;
  const int threads = omp_get_max_threads();
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json j = {{"command", "bench screening"},
                        {"T", T},
                        {"w", std::isinf(w) ? nlohmann::json("inf") : nlohmann::json(w)},
                        {"r", r},
                        {"micro_batch", B},
                        {"tiles", nt},
                        {"d_k", dk},
                        {"d_v", dv},
                        {"threads", threads},
                        {"isa", kernels::cpu::IsaName(kernels::cpu::ActiveIsa())},
                        {"cpu_best_isa", kernels::cpu::IsaName(kernels::cpu::CpuIsa())},
                        {"cpu", kernels::cpu::CpuModel()},
                        {"keys", keys},
                        {"pairs_per_token", double(pairs) / tile_tokens},
                        {"accepted_fraction", pairs > 0 ? double(accepted) / double(pairs) : 0.0},
                        {"forward_seconds", fwd},
                        {"backward_seconds", bwd},
                        {"forward_ns_per_tile_token", fwd_ns},
                        {"backward_ns_per_tile_token", bwd_ns},
                        {"forward_thread_cpu_seconds", fwd_cpu},
                        {"backward_thread_cpu_seconds", bwd_cpu}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("bench screening: T=%lld, w=%g (%lld keys), r=%g, B=%lld, %lld tiles, d_K=%lld, d_V=%lld, %d threads\n",
              (long long)T, w, (long long)keys, r, (long long)B, (long long)nt, (long long)dk, (long long)dv, threads);
  std::printf("  CPU kernels: %s\n", kernels::cpu::IsaDescription().c_str());
  std::printf("  in-window pairs per token %.1f, accepted by Trim %.2f %%\n", double(pairs) / tile_tokens,
              pairs > 0 ? 100.0 * double(accepted) / double(pairs) : 0.0);
  std::printf("  forward   %10.3f ms   %8.1f ns per token and tile\n", 1e3 * fwd, fwd_ns);
  std::printf("  backward  %10.3f ms   %8.1f ns per token and tile\n", 1e3 * bwd, bwd_ns);
  std::printf("  on the calling thread's CPU clock: forward %.3f ms, backward %.3f ms\n", 1e3 * fwd_cpu,
              1e3 * bwd_cpu);
  return 0;
}

}  // namespace

int BenchCommand(int argc, char** argv) {
  // One process: copies under a launcher would time each other.
  if (int rc = RefuseSeveralProcesses("bench"); rc != 0) return rc;
  const std::string what = argc >= 2 ? argv[1] : "";
  if (what == "train") return BenchTrain(argc - 1, argv + 1);
  if (what == "screening") return BenchScreening(argc - 1, argv + 1);
  if (what == "decode") return BenchDecode(argc - 1, argv + 1);
  if (what == "--help" || what == "-h" || what == "help") {
    std::printf("usage: multiscreen bench train --model=psi8 --seq_len=T --micro_batch=B [...]\n"
                "       multiscreen bench screening --T=N --w=W [...]\n"
                "       multiscreen bench decode --model=psi8 --prompt_tokens=N [...]\n"
                "'multiscreen bench train --help' lists the flags.\n");
    return 0;
  }
  // As ckpt, eval and sweep: a user error, exit 1 (2 is main's, for no command or an unknown one).
  return Fail("bench", absl::InvalidArgumentError(
                           what.empty() ? "expected a subcommand: train, screening or decode"
                                        : absl::StrCat("unknown subcommand '", what, "': expected train, screening or decode")));
}

}  // namespace multiscreen::cli
