// Stream capture into an executable CUDA graph for the kernel tables (KernelTable::
// BeginCapture, EndCapture, LaunchGraph; issue 42 part 2, `bench train --graphs`): the
// work issued to a stream between BeginStreamCapture and EndStreamCapture becomes one
// cudaGraphExec_t, which LaunchStreamGraph replays with one cudaGraphLaunch (or
// EndStreamCaptureInto updates an earlier one from it). Capture mode
// is global (cudaStreamCaptureModeGlobal), so a cudaMalloc or a legacy-stream call from any
// thread meanwhile fails the capture, as a host wait on the stream does.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "kernels/kernel_table.h"

namespace multiscreen::kernels::cuda {

// Starts recording `stream`. Failures are fatal (check.h), naming BeginCapture.
void BeginStreamCapture(cudaStream_t stream);

// Ends the recording and instantiates it. A capture the device invalidated (a host wait,
// a synchronous copy, an allocation inside it) is fatal, naming EndCapture and the error.
std::unique_ptr<CapturedGraph> EndStreamCapture(cudaStream_t stream);

// EndStreamCapture into *graph: an executable graph already there is updated from the
// capture (cudaGraphExecUpdate; true), else, or when the runtime refuses the update
// (cudaErrorGraphExecUpdateFailure: another topology), *graph is replaced by a new
// instantiation (false). Other failures are fatal, naming EndCapture.
bool EndStreamCaptureInto(cudaStream_t stream, std::unique_ptr<CapturedGraph>* graph);

// Launches `graph` (from EndStreamCapture) on `stream`. Failures are fatal, naming LaunchGraph.
void LaunchStreamGraph(const CapturedGraph& graph, cudaStream_t stream);

}  // namespace multiscreen::kernels::cuda
