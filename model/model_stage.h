// The seam between a model family and everything that runs one (the pipeline stage,
// the trainer, `forward`): one shard of a model — Multiscreen (model/multiscreen.h) or
// the Transformer baseline (model/transformer.h) — as the stage pieces a pipeline
// stage calls, in this order per step:
//   BeginStep; ZeroGradientsBeforeStep (training: on the instance whose backward runs
//   first); per micro-batch Embed (first stage), LayersForward, HeadLoss (last stage),
//   LayersBackward, EmbedBackward (first stage); EndStep (that instance's first).
// plus the whole-model conveniences ForwardBackward and Loss. Both families are
// written once over kernel tables; MakeModelStage picks the family from ModelDims.
// Not thread-safe: one instance holds the activations of one micro-batch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "kernels/communicator.h"
#include "kernels/device_array.h"
#include "kernels/kernel_table.h"
#include "model/param_layout.h"
#include "model/step_profile.h"
#include "model/tile_weights.h"

namespace multiscreen {

struct ModelOptions {
  Device device = Device::kCpu;  // where the step computes (its kernel table's device)
  Precision precision = Precision::kFp32;
  HeadPath head_path = HeadPath::kPanels;
  int64_t head_chunk_rows = 512;  // tokens per logits chunk: [chunk, V] is the largest logits block
  int64_t head_vocab_block = 512;  // vocabulary columns a thread takes at a time in the fused head (whole panels of 32)
  // The CUDA table's screening kernels (KernelOptions::screening_kernel): kAuto, tiled
  // under bf16 and simple otherwise; tests pin one to compare the two.
  ScreeningKernel screening_kernel = ScreeningKernel::kAuto;
  // KernelOptions::screening_u_operand: the tiled bf16 forward writes U's bf16 GEMM operand
  // itself (true), or fp32 U then PackRounded (false: the tests' bit-for-bit reference).
  bool screening_u_operand = true;
  // KernelOptions::screening_gradient_operand: the CUDA table's bf16 tiled backward writes
  // ∂L/∂P as the projections' bf16 operand; tests turn it off to compare with the fp32 ∂L/∂P
  // packed after (the same bits).
  bool screening_gradient_operand = true;
  StepProfile* profile = nullptr;  // when set, each phase's wall time is added to it
  // No backward piece (HeadLoss with dx, LayersBackward, EmbedBackward, EndStep) will be
  // called: gradient buffers the forward does not need are not allocated (Multiscreen:
  // ∂Ē, [V, d_E]). Results are the same bits either way. For inference-only stages
  // (model/streamed_forward.h).
  bool forward_only = false;
};

// Windows [B, T+1] (sequence b is tokens[b(T+1) .. (b+1)(T+1))) → inputs (the first
// T of each) and next-token targets (the last T), both [B·T] (host).
void SplitWindows(const int32_t* tokens, int64_t B, int64_t T, std::vector<int32_t>* inputs,
                  std::vector<int32_t>* targets);

template <typename Real>
class ModelStage {
 public:
  virtual ~ModelStage() = default;
  virtual const ParamLayout& layout() const = 0;
  const ModelDims& dims() const { return layout().dims(); }

  // ---- the whole model (a shard with embed and head) --------------------------------
  // One micro-batch: tokens [B, T+1] (sequence b is tokens[b(T+1) .. (b+1)(T+1))),
  // inputs the first T of each, targets the last T. Returns the mean next-token
  // cross-entropy over the B·T positions; adds grad_scale · ∂loss/∂params into grads;
  // writes token_losses [B, T] when non-null.
  // Composed once, here, from the stage pieces below.
  double ForwardBackward(const Real* params, const int32_t* tokens, int64_t B, int64_t T, Real* grads,
                         Real* token_losses = nullptr, double grad_scale = 1.0);
  // The same loss without gradients.
  double Loss(const Real* params, const int32_t* tokens, int64_t B, int64_t T, Real* token_losses = nullptr);

  // ---- stage pieces (see each family's header for what they compute) ---------------
  virtual void BeginStep(const Real* params) = 0;
  // Readies grads [layout().size()] for a step's accumulation: afterwards every
  // gradient holds what adding the step's parts into zeros gives. Called once per step
  // before any piece that writes grads (HeadLoss adds ∂s_F in the forward), on the
  // instance whose LayersBackward and EndStep run first in the step: a family may zero
  // only what its first backward does not overwrite, and flag that instance's next
  // LayersBackward and EndStep to write instead of add (Multiscreen: issue 42). The
  // Transformer's is one Fill of the whole buffer.
  virtual void ZeroGradientsBeforeStep(Real* grads) = 0;
  // x [n, d_E] from token ids [n] (host). Needs shard.embed.
  virtual void Embed(const Real* params, const int32_t* ids, int64_t n, Real* x) = 0;
  // x ← the shard's layers applied to x [B·T, d_E]; keeps what the backward needs.
  virtual void LayersForward(const Real* params, int64_t B, int64_t T, Real* x,
                             const InferenceOptions* inference = nullptr) = 0;
  // Mean loss of x [n, d_E] against targets [n]; with dx non-null, dx written and the
  // head's gradients added, scaled by grad_scale/n. Needs shard.head.
  virtual double HeadLoss(const Real* params, const Real* x, const int32_t* targets, int64_t n, Real* dx, Real* grads,
                          double grad_scale, Real* token_losses) = 0;
  // HeadLoss without the loss's host read: its mean loss is added, in call order from 0
  // after each TakeLoss, to a sum kept where the head runs, so that a step of micro-batches
  // reads its loss once (TakeLoss). This default reads each HeadLoss's result on the host
  // (the Transformer; Multiscreen keeps the sum on its single-rank device head).
  virtual void HeadLossDeferred(const Real* params, const Real* x, const int32_t* targets, int64_t n, Real* dx,
                                Real* grads, double grad_scale) {
    deferred_loss_ += HeadLoss(params, x, targets, n, dx, grads, grad_scale, nullptr);
  }
  // The sum of the HeadLossDeferred losses since the last take; restarts it at 0. On a
  // device one host read that waits for the work issued before it.
  virtual double TakeLoss() {
    const double sum = deferred_loss_;
    deferred_loss_ = 0;
    return sum;
  }
  // dx ← ∂L/∂(the layers' input) from ∂L/∂(their output); adds the layers' gradients.
  virtual void LayersBackward(const Real* params, Real* dx, Real* grads) = 0;
  // Adds the embedding's gradients from dx [n, d_E].
  virtual void EmbedBackward(const Real* params, const int32_t* ids, int64_t n, const Real* dx, Real* grads) = 0;
  // Moves the tied table's gradient gathered over the step into W_E's slot of grads.
  virtual void EndStep(Real* grads) = 0;

  // ---- one captured micro-step (`bench train --graphs`, issue 42) ---------------------
  // Whether Embed, LayersForward, HeadLossDeferred, LayersBackward and EmbedScaleBackward
  // of a micro-batch issue only device work without host waits or host-dependent sizes once
  // PreloadInputs gave them their inputs, so that they can be captured as one graph and
  // replayed for the step's later micro-batches (kernels' scalar arguments are the step's:
  // a graph is valid until the next BeginStep, which a capture of the next step updates). Multiscreen on one rank with embedding and
  // head, on a device that captures; not the Transformer, tp, or a stage of a pipeline.
  virtual bool CanCaptureMicroStep() const { return false; }
  // Before capturing a micro-step of B windows of T tokens: does now, uncaptured, the device
  // work its calls would issue only on their first call of the step (the screening tile
  // tables' upload, KernelTable::PrepareScreeningTables), so that the capture holds the same
  // ops every step and can update the graph of the step before. After BeginStep.
  virtual void PrepareMicroStep(int64_t B, int64_t T) { (void)B, (void)T; }
  // A micro-batch's ids and targets [n] (host) copied to where Embed and HeadLossDeferred,
  // given the same values, read them (KernelTable::PreloadInputs).
  virtual void PreloadInputs(const int32_t* ids, const int32_t* targets, int64_t n) {
    (void)ids, (void)targets, (void)n;
  }
  // EmbedBackward in two parts, together the same bits: the table's gradient, whose work
  // depends on the ids' values (a device groups them on the host, kernels/cuda/embedding.h),
  // and the rest (fixed shapes: capturable). Defaults: the whole of it in the second part.
  virtual void EmbedTableBackward(const Real* params, const int32_t* ids, int64_t n, const Real* dx) {
    (void)params, (void)ids, (void)n, (void)dx;
  }
  virtual void EmbedScaleBackward(const Real* params, const int32_t* ids, int64_t n, const Real* dx, Real* grads) {
    EmbedBackward(params, ids, n, dx, grads);
  }

  // A hook for overlapping communication with the backward (parallel/pipeline.h):
  // while set, LayersBackward calls it with the global index of each layer as soon as
  // that layer's gradients in `grads` are written for this call (last layer first),
  // before going on to the layer below. On a device the writes were issued on the
  // device's stream; on the CPU they are complete. Empty (the default): no calls.
  using LayerGradientsDone = std::function<void(int64_t layer)>;
  void set_layer_gradients_done(LayerGradientsDone hook) { layer_gradients_done_ = std::move(hook); }

 protected:
  explicit ModelStage(Device device) : step_x_(device), step_dx_(device) {}
  // SplitWindows into step_inputs_ / step_targets_.
  void SplitWindows(const int32_t* tokens, int64_t B, int64_t T) {
    multiscreen::SplitWindows(tokens, B, T, &step_inputs_, &step_targets_);
  }

  // For the families' LayersBackward: tells the hook, if any, that `layer` is done.
  void LayerGradientsWritten(int64_t layer) {
    if (layer_gradients_done_) layer_gradients_done_(layer);
  }

  DeviceArray<Real> step_x_, step_dx_;  // the whole model's activations and their gradients
  double deferred_loss_ = 0;            // the default HeadLossDeferred's sum
  LayerGradientsDone layer_gradients_done_;
  std::vector<int32_t> step_inputs_, step_targets_;
};

// The kernel options a model's tables are made with: the head's blocking, the step's
// precision, and the CUDA kernels' choice by it (screening; the Transformer's attention).
KernelOptions KernelOptionsOf(const ModelOptions& options);

// The kernel table of options.device with KernelOptionsOf(options); a failure ends the
// process with one line naming --device (the command line checks the device before
// building a model). For the model families' constructors.
template <typename Real>
std::unique_ptr<kernels::KernelTable<Real>> KernelTableFor(const ModelOptions& options);

// Prints "multiscreen: fatal: <what>" and exits 1: a model that cannot be built.
[[noreturn]] void FatalModelError(const std::string& what);

// The model of dims.family on `shard`. `tp`: the shard's tensor-parallel group (null:
// one). An unusable device or layout is fatal here with one line (callers check the
// device first: ResolveDevice in cli/device.h).
template <typename Real>
std::unique_ptr<ModelStage<Real>> MakeModelStage(const ModelDims& dims, const ShardSpec& shard,
                                                 ModelOptions options = {}, Communicator* tp = nullptr);

}  // namespace multiscreen
