// Stream capture and CUDA graphs on the emulated device (issue 42 part 2: one graph per
// micro-step). cudaStreamBeginCapture turns a stream into a recorder: every kernel launch,
// cuBLAS(Lt) product, async copy or memset, host function and NCCL group issued to it
// becomes a node (with its parameters copied, as the driver copies a kernel's
// arguments at capture) instead of running; cudaStreamEndCapture hands the nodes over as a
// cudaGraph_t; cudaGraphInstantiate makes an executable graph and cudaGraphLaunch replays
// its nodes, in capture order, on the stream it is launched into (a captured stream is
// linear: each node depends on the one before it).
//
// CUDA's rules, as the CUDA Programming Guide ("Prohibited and Unhandled Operations") and
// the runtime API document them, with the runtime's error codes:
// - synchronizing or querying a capturing stream (cudaStreamSynchronize, cudaStreamQuery),
//   or the device (cudaDeviceSynchronize), is cudaErrorStreamCaptureUnsupported;
// - work on the legacy stream that would synchronize with a capturing stream (a blocking
//   cudaMemcpy, cudaMemset) is cudaErrorStreamCaptureImplicit;
// - cudaMalloc and cudaFree while a capture is under way ("potentially unsafe" in the
//   default global mode) are cudaErrorStreamCaptureUnsupported;
// - any other work on the legacy stream while a blocking stream (not cudaStreamNonBlocking)
//   is captured is cudaErrorStreamCaptureImplicit too;
// - waiting on an event recorded outside any capture is cudaErrorStreamCaptureIsolation, on
//   one recorded in another capture cudaErrorStreamCaptureMerge;
// and each of these invalidates the capture: cudaStreamEndCapture then returns
// cudaErrorStreamCaptureInvalidated and no graph. Querying or synchronizing an event
// recorded inside a capture is cudaErrorCapturedEvent (the capture goes on). An event
// recorded into a capture is a dependency there, not a node (what cudaEventRecordExternal
// would make): a replay does not record it. Not emulated (a report says so): joining
// a second stream into a capture (cudaStreamWaitEvent on another stream of a captured
// event), thread-local and relaxed capture modes' differences.
//
// cudaGraphExecUpdate (below) gives an executable graph the parameters of a new capture of
// the same topology, with the runtime's failure results for one that is not.
//
// A replay checks what a GPU cannot: every device pointer a node was captured with (each
// aligned 8-byte word of its copied parameters that pointed into a live allocation then,
// so pointers inside argument structs count too, and the pointers of copies, memsets and
// products) must still point into that same allocation (not freed, not freed and made
// again at the same address). Otherwise the replay is a report naming the node, the
// parameter's offset and the allocation: the graph would have read or written memory the
// program no longer owns there (a buffer resized after the capture, say).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda_emulator/emulator.h"
#include "cuda_emulator/internal.h"

// The runtime's opaque graph handles.
struct CUgraph_st {
  std::vector<msemu::GraphNode> nodes;
};
struct CUgraphExec_st {
  std::vector<msemu::GraphNode> nodes;
};

namespace msemu {
namespace {

// One capture under way.
struct Capture {
  bool blocking = true;  // the stream synchronizes with the legacy stream (not cudaStreamNonBlocking)
  std::vector<GraphNode> nodes;
  cudaError_t invalidated = cudaSuccess;  // the first rule broken, if any
  std::unordered_set<const void*> events;  // recorded inside it
};

std::mutex g_mutex;
std::atomic<int> g_active{0};  // captures under way: the launch path's fast "none"
std::unordered_map<cudaStream_t, Capture>& Captures() {
  static auto* captures = new std::unordered_map<cudaStream_t, Capture>();
  return *captures;
}

// Marks `capture` invalidated by `error` (the first rule it broke is the one kept) and
// returns the error.
cudaError_t Invalidate(Capture& capture, cudaError_t error) {
  if (capture.invalidated == cudaSuccess) capture.invalidated = error;
  return error;
}

// The live allocation holding p, as (base, serial); {0, 0} when none.
std::pair<uintptr_t, uint64_t> Owner(const void* p) {
  const Allocation* a = FindAllocation(p);
  return a == nullptr ? std::pair<uintptr_t, uint64_t>{0, 0} : std::pair<uintptr_t, uint64_t>{a->base, a->serial};
}

}  // namespace

bool Capturing(cudaStream_t stream) {
  if (g_active.load(std::memory_order_relaxed) == 0) return false;
  if (stream == nullptr || stream == cudaStreamLegacy) return false;
  std::lock_guard lock(g_mutex);
  return Captures().count(stream) != 0;
}

bool RecordNode(cudaStream_t stream, std::string what, std::function<void(cudaStream_t)> replay,
                std::shared_ptr<const void> params, size_t params_bytes, const std::vector<const void*>& pointers,
                GraphNode::Type type, int copy_kind) {
  if (!Capturing(stream)) return false;
  GraphNode node{.what = std::move(what), .type = type, .copy_kind = copy_kind, .replay = std::move(replay),
                 .params = std::move(params)};
  // Device pointers among the copied parameters: aligned words that point into memory.
  const auto* bytes = static_cast<const unsigned char*>(node.params.get());
  for (size_t offset = 0; bytes != nullptr && offset + sizeof(uintptr_t) <= params_bytes; offset += sizeof(uintptr_t)) {
    const void* word = nullptr;
    std::memcpy(&word, bytes + offset, sizeof word);
    if (const auto [base, serial] = Owner(word); base != 0) node.pointers.push_back({offset, word, base, serial});
  }
  for (size_t i = 0; i < pointers.size(); ++i) {
    if (const auto [base, serial] = Owner(pointers[i]); base != 0) {
      node.pointers.push_back({~size_t(0) - i, pointers[i], base, serial});
    }
  }
  std::lock_guard lock(g_mutex);
  Captures()[stream].nodes.push_back(std::move(node));
  return true;
}

cudaError_t CaptureForbids(cudaStream_t stream, cudaError_t error) {
  std::lock_guard lock(g_mutex);
  bool any = false;
  for (auto& [s, capture] : Captures()) {
    if (stream != nullptr && s != stream) continue;
    Invalidate(capture, error);
    any = true;
  }
  return any ? error : cudaSuccess;
}

void NoteCapturedEvent(cudaStream_t stream, const void* event) {
  std::lock_guard lock(g_mutex);
  if (auto it = Captures().find(stream); it != Captures().end()) it->second.events.insert(event);
}

cudaError_t CapturedEventUse(const void* event, cudaStream_t waiting) {
  std::lock_guard lock(g_mutex);
  auto waiting_capture = waiting != nullptr ? Captures().find(waiting) : Captures().end();
  for (auto& [s, capture] : Captures()) {
    if (capture.events.count(event) == 0) continue;
    if (s == waiting) return cudaSuccess;  // ordered within its own capture: no node needed
    if (waiting == nullptr) return cudaErrorCapturedEvent;  // the host may not use it (the capture goes on)
    if (waiting_capture != Captures().end()) {  // two capture sequences would merge
      return Invalidate(waiting_capture->second, cudaErrorStreamCaptureMerge);
    }
    Report(Format("cuda emulator: cudaStreamWaitEvent: stream %p waits on an event recorded in the capture of "
                  "stream %p: joining a second stream into a capture is not emulated",
                  static_cast<const void*>(waiting), static_cast<const void*>(s)));
    return cudaErrorNotSupported;
  }
  if (waiting_capture != Captures().end()) {  // an event from outside the capture
    return Invalidate(waiting_capture->second, cudaErrorStreamCaptureIsolation);
  }
  return cudaSuccess;
}

void ForgetCapturedEvent(const void* event) {
  std::lock_guard lock(g_mutex);
  for (auto& [s, capture] : Captures()) capture.events.erase(event);
}

cudaError_t LegacyWorkDuringCapture(cudaStream_t stream) {
  if (g_active.load(std::memory_order_relaxed) == 0) return cudaSuccess;
  if (stream != nullptr && stream != cudaStreamLegacy) return cudaSuccess;
  std::lock_guard lock(g_mutex);
  bool any = false;
  for (auto& [s, capture] : Captures()) {
    if (!capture.blocking) continue;
    Invalidate(capture, cudaErrorStreamCaptureImplicit);
    any = true;
  }
  return any ? cudaErrorStreamCaptureImplicit : cudaSuccess;
}

bool AnyCapture() { return g_active.load() != 0; }

}  // namespace msemu

using msemu::GraphNode;

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  (void)mode;  // global, thread-local and relaxed: checked alike (global's rules)
  if (stream == nullptr || stream == cudaStreamLegacy) {
    msemu::SetLastError(cudaErrorStreamCaptureUnsupported);
    return cudaErrorStreamCaptureUnsupported;  // the legacy stream cannot be captured
  }
  std::lock_guard lock(msemu::g_mutex);
  if (msemu::Captures().count(stream) != 0) {
    msemu::SetLastError(cudaErrorIllegalState);
    return cudaErrorIllegalState;
  }
  unsigned flags = cudaStreamDefault;
  if (stream != cudaStreamPerThread) cudaStreamGetFlags(stream, &flags);
  msemu::Captures()[stream].blocking = (flags & cudaStreamNonBlocking) == 0;
  msemu::g_active.fetch_add(1);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (graph == nullptr) return cudaErrorInvalidValue;
  *graph = nullptr;
  msemu::Capture capture;
  {
    std::lock_guard lock(msemu::g_mutex);
    auto it = msemu::Captures().find(stream);
    if (it == msemu::Captures().end()) {
      msemu::SetLastError(cudaErrorIllegalState);
      return cudaErrorIllegalState;
    }
    capture = std::move(it->second);
    msemu::Captures().erase(it);
    msemu::g_active.fetch_sub(1);
  }
  if (capture.invalidated != cudaSuccess) {
    msemu::SetLastError(cudaErrorStreamCaptureInvalidated);
    return cudaErrorStreamCaptureInvalidated;
  }
  *graph = new CUgraph_st{std::move(capture.nodes)};
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (status == nullptr) return cudaErrorInvalidValue;
  std::lock_guard lock(msemu::g_mutex);
  auto it = msemu::Captures().find(stream);
  *status = it == msemu::Captures().end()                     ? cudaStreamCaptureStatusNone
            : it->second.invalidated != cudaSuccess ? cudaStreamCaptureStatusInvalidated
                                                    : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (graph == nullptr || count == nullptr) return cudaErrorInvalidValue;
  if (nodes != nullptr) return cudaErrorNotSupported;  // the count only (node handles are not emulated)
  *count = graph->nodes.size();
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (exec == nullptr || graph == nullptr || flags != 0) return cudaErrorInvalidValue;
  *exec = new CUgraphExec_st{graph->nodes};
  msemu::AddWork("cudaGraphInstantiate", msemu::WorkTally{.kind = msemu::WorkKind::kGraph, .calls = 1});
  return cudaSuccess;
}

// cudaGraphExecUpdate with the runtime API's rules for what a captured stream makes (a
// linear chain, so equal node counts mean equal edges): the node counts differ →
// cudaGraphExecUpdateErrorTopologyChanged; node i's type differs →
// cudaGraphExecUpdateErrorNodeTypeChanged; a copy's direction (its source or destination
// memory type) differs → cudaGraphExecUpdateErrorParametersChanged; a node the emulator
// records as neither kernel, product, copy, memset nor host function (a captured graph
// launch, an NCCL group) → cudaGraphExecUpdateErrorNotSupported. Each returns
// cudaErrorGraphExecUpdateFailure and leaves the executable graph as it was. Kernel
// arguments, pointers, launch shapes, products' scalars and a changed kernel function
// (allowed since CUDA 11.2 within one context) update. Launches already issued keep the
// nodes they were issued with (cudaGraphLaunch copies them). resultInfo's node handles are
// null: node handles are not emulated. Counted as "cudaGraphExecUpdate" (kind graph).
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo* info) {
  if (info != nullptr) *info = cudaGraphExecUpdateResultInfo{cudaGraphExecUpdateError, nullptr, nullptr};
  if (exec == nullptr || graph == nullptr) return cudaErrorInvalidValue;
  msemu::AddWork("cudaGraphExecUpdate", msemu::WorkTally{.kind = msemu::WorkKind::kGraph, .calls = 1});
  cudaGraphExecUpdateResult result = cudaGraphExecUpdateSuccess;
  if (exec->nodes.size() != graph->nodes.size()) {
    result = cudaGraphExecUpdateErrorTopologyChanged;
  } else {
    for (size_t i = 0; i < graph->nodes.size() && result == cudaGraphExecUpdateSuccess; ++i) {
      const GraphNode& was = exec->nodes[i];
      const GraphNode& now = graph->nodes[i];
      if (was.type != now.type) {
        result = cudaGraphExecUpdateErrorNodeTypeChanged;
      } else if (now.type == GraphNode::Type::kOther) {
        result = cudaGraphExecUpdateErrorNotSupported;
      } else if (now.type == GraphNode::Type::kMemcpy && was.copy_kind != now.copy_kind) {
        result = cudaGraphExecUpdateErrorParametersChanged;
      }
    }
  }
  if (info != nullptr) info->result = result;
  if (result != cudaGraphExecUpdateSuccess) {
    msemu::SetLastError(cudaErrorGraphExecUpdateFailure);
    return cudaErrorGraphExecUpdateFailure;
  }
  exec->nodes = graph->nodes;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return cudaErrorInvalidValue;
  if (const cudaError_t sticky = msemu::StickyError(); sticky != cudaSuccess) return sticky;
  // Launched into a capturing stream: the whole graph is one node of that capture.
  auto nodes = std::make_shared<const std::vector<GraphNode>>(exec->nodes);
  auto replay = [nodes](cudaStream_t s) {
    msemu::AddWork("cudaGraphLaunch", msemu::WorkTally{.kind = msemu::WorkKind::kGraph, .calls = 1});
    struct Replaying {  // the nodes' work tallied as graph nodes (work_tally.cc)
      Replaying() { ++msemu::t_graph_replays; }
      ~Replaying() { --msemu::t_graph_replays; }
    } replaying;
    for (size_t i = 0; i < nodes->size(); ++i) {
      const GraphNode& node = (*nodes)[i];
      bool intact = true;
      for (const GraphNode::Pointer& p : node.pointers) {
        const msemu::Allocation* a = msemu::FindAllocation(p.value);
        if (a != nullptr && a->base == p.base && a->serial == p.serial) continue;
        const std::string where = p.offset > (size_t(1) << 62)
                                      ? msemu::Format("pointer %zu", ~size_t(0) - p.offset)
                                      : msemu::Format("the parameter word at byte %zu", p.offset);
        msemu::Report(msemu::Format(
            "cuda emulator: cudaGraphLaunch: node %zu (%s): %s, %p, pointed into the allocation at 0x%llx when the "
            "graph was captured, which has been freed since%s: the replay would use memory the program no longer "
            "owns there (capture the graph again after the buffer changes)",
            i, node.what.c_str(), where.c_str(), p.value, static_cast<unsigned long long>(p.base),
            a != nullptr ? " (and another allocation made there)" : ""));
        intact = false;
      }
      if (!intact) return;
      node.replay(s);
    }
  };
  if (msemu::RecordNode(stream, "cudaGraphLaunch", replay, nullptr, 0, {}, GraphNode::Type::kOther)) return cudaSuccess;
  if (const cudaError_t e = msemu::LegacyWorkDuringCapture(stream); e != cudaSuccess) {
    msemu::SetLastError(e);
    return e;
  }
  replay(stream);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

}  // extern "C"
