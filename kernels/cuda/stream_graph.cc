// BeginStreamCapture, EndStreamCapture, LaunchStreamGraph (stream_graph.h).
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
  cudaGraph_t graph = nullptr;
  MS_CUDA_CHECK("EndCapture", cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  MS_CUDA_CHECK("EndCapture", made);
  return std::make_unique<StreamGraph>(exec);
}

void LaunchStreamGraph(const CapturedGraph& graph, cudaStream_t stream) {
  MS_CUDA_CHECK("LaunchGraph", cudaGraphLaunch(static_cast<const StreamGraph&>(graph).exec(), stream));
}

}  // namespace multiscreen::kernels::cuda
