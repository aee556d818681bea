// BeginStreamCapture, EndStreamCapture(Into), LaunchStreamGraph (stream_graph.h).
#include "kernels/cuda/stream_graph.h"

#include "kernels/cuda/check.h"

namespace multiscreen::kernels::cuda {
namespace {

class StreamGraph final : public CapturedGraph {
 public:
  explicit StreamGraph(cudaGraphExec_t exec) : exec_(exec) {}
  ~StreamGraph() override { cudaGraphExecDestroy(exec_); }
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraphExec_t exec_;
};

}  // namespace

void BeginStreamCapture(cudaStream_t stream) {
  MS_CUDA_CHECK("BeginCapture", cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
}

std::unique_ptr<CapturedGraph> EndStreamCapture(cudaStream_t stream) {
  std::unique_ptr<CapturedGraph> graph;
  EndStreamCaptureInto(stream, &graph);
  return graph;
}

bool EndStreamCaptureInto(cudaStream_t stream, std::unique_ptr<CapturedGraph>* graph) {
  cudaGraph_t captured = nullptr;
  MS_CUDA_CHECK("EndCapture", cudaStreamEndCapture(stream, &captured));
  if (*graph != nullptr) {
    cudaGraphExecUpdateResultInfo info{};
    const cudaError_t updated = cudaGraphExecUpdate(static_cast<StreamGraph&>(**graph).exec(), captured, &info);
    if (updated == cudaSuccess) {
      cudaGraphDestroy(captured);
      return true;
    }
    if (updated != cudaErrorGraphExecUpdateFailure) {
      cudaGraphDestroy(captured);
      MS_CUDA_CHECK("EndCapture", updated);
    }
    // Refused (another topology): an answer, not an error. Clear it from cudaGetLastError, so
    // that the next launch check does not report it, and instantiate anew.
    (void)cudaGetLastError();
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, captured, 0);
  cudaGraphDestroy(captured);  // the executable graph keeps what it needs
  MS_CUDA_CHECK("EndCapture", made);
  *graph = std::make_unique<StreamGraph>(exec);
  return false;
}

void LaunchStreamGraph(const CapturedGraph& graph, cudaStream_t stream) {
  MS_CUDA_CHECK("LaunchGraph", cudaGraphLaunch(static_cast<const StreamGraph&>(graph).exec(), stream));
}

}  // namespace multiscreen::kernels::cuda
