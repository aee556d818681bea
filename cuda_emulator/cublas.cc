// The emulated device's cuBLAS and cuBLASLt: the calls the project makes
// (kernels/cuda/gemm.cu), with their documented semantics, computed by plain loops on
// the calling thread after the stream's queued work. Column-major throughout, as the
// libraries define it: a rows × cols matrix with leading dimension ld holds element
// (i, j) at p[i + j·ld], and a call touches ((cols − 1)·ld + rows) elements of it.
// Products are fp32, summed in fp32 in order of k; bf16/fp16 operands are widened with
// the toolkit's own conversions. Every operand is checked before it is touched: a
// range outside one device allocation is a report and CUBLAS_STATUS_EXECUTION_FAILED,
// reading never-written elements (column padding excluded) is a report. Handles and
// descriptors are small structs of ours; using a destroyed one is a report.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_emulator/emulator.h"
#include "cuda_emulator/internal.h"

// The library contexts the headers leave opaque (struct cublasContext, struct cublasLtContext).
struct cublasContext {
  cudaStream_t stream = nullptr;            // cublasSetStream; the legacy default stream until set
  cublasMath_t math = CUBLAS_DEFAULT_MATH;  // cublasSetMathMode
  int device = 0;                           // current at cublasCreate: the handle is tied to it
};

struct cublasLtContext {
  int device = 0;
};

namespace msemu {
namespace {

// ---- Handles and descriptors ---------------------------------------------------------

struct MatmulDesc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
};

struct Layout {
  cudaDataType_t type = CUDA_R_32F;
  int64_t rows = 0, cols = 0, ld = 0;
};

struct Preference {
  uint64_t max_workspace = 0;                // default: no workspace allowed
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D; default 256 bytes
};

// What cublasLtMatmulAlgoGetHeuristic writes into cublasLtMatmulAlgo_t: the alignments the
// preference promised, which the "chosen algorithm" then relies on.
struct AlgoRecord {
  uint64_t magic;
  uint32_t align[4];  // A, B, C, D
  int32_t ab_type;
};
static_assert(sizeof(AlgoRecord) <= sizeof(cublasLtMatmulAlgo_t));
constexpr uint64_t kAlgoMagic = 0x6d73656d75616c67;  // "msemualg"

enum class Kind { kBlas, kLt, kMatmulDesc, kLayout, kPreference };

std::mutex registry_mutex;
std::unordered_map<const void*, Kind>& Registry() {
  static auto* live = new std::unordered_map<const void*, Kind>;
  return *live;
}

void Register(const void* p, Kind kind) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  Registry()[p] = kind;
}

bool IsLive(const void* p, Kind kind) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  const auto it = Registry().find(p);
  return it != Registry().end() && it->second == kind;
}

bool Unregister(const void* p, Kind kind) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  const auto it = Registry().find(p);
  if (it == Registry().end() || it->second != kind) return false;
  Registry().erase(it);
  return true;
}

std::string Address(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

// Unregisters a live object of `kind` before its deletion; reports a dead or unknown one
// (what `fn` was given as `what`) and returns false.
bool Release(const void* p, Kind kind, const char* fn, const char* what) {
  if (Unregister(p, kind)) return true;
  Report(std::string("cuda emulator: ") + fn + ": " + what + " " + Address(p) +
         " is not a live one (destroyed twice, or never created)");
  return false;
}

// `h` as a live object of `kind`, or nullptr: null, or (reported) destroyed or never created.
template <typename T>
T* Live(const void* h, Kind kind, const char* fn, const char* what) {
  if (h == nullptr) return nullptr;
  if (!IsLive(h, kind)) {
    Report(std::string("cuda emulator: ") + fn + ": " + what + " " + Address(h) +
           " is not a live one (destroyed, or never created)");
    return nullptr;
  }
  return static_cast<T*>(const_cast<void*>(h));
}

// ---- Operands ------------------------------------------------------------------------

size_t ElementSize(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16BF:
    case CUDA_R_16F: return 2;
    default: return 0;
  }
}

const char* TypeName(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_16F: return "CUDA_R_16F";
    default: return "an unsupported cudaDataType";
  }
}

// Largest power of two (≤ 256) dividing the address.
uint32_t Alignment(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// One column-major matrix of a call as it touches it.
struct Operand {
  const char* name = "";  // "A", "B", "C", "D"
  const void* p = nullptr;
  cudaDataType_t type = CUDA_R_32F;
  int64_t rows = 0, cols = 0, ld = 0;

  size_t element() const { return ElementSize(type); }
  // Elements from the first touched to one past the last: ((cols − 1)·ld + rows).
  int64_t span() const { return rows == 0 || cols == 0 ? 0 : (cols - 1) * ld + rows; }
  std::string Describe() const {
    return std::string("operand ") + name + " (" + std::to_string(rows) + "x" + std::to_string(cols) + " " +
           TypeName(type) + ", ld " + std::to_string(ld) + ", at " + Address(p) + ")";
  }
  float Load(int64_t i, int64_t j) const {
    const int64_t at = i + j * ld;
    switch (type) {
      case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[at]);
      case CUDA_R_16F: return __half2float(static_cast<const __half*>(p)[at]);
      default: return static_cast<const float*>(p)[at];
    }
  }
};

// Reports (and returns false) when the touched bytes of `o` are not inside one device
// allocation, or its address is not aligned to its elements (a misaligned access faults).
bool CheckRange(const char* fn, const Operand& o) {
  const size_t bytes = static_cast<size_t>(o.span()) * o.element();
  if (bytes == 0) return true;
  if (const std::string why = DescribeBadDeviceRange(o.p, bytes); !why.empty()) {
    Report(std::string("cuda emulator: ") + fn + ": " + o.Describe() + ": " + why);
    return false;
  }
  if (reinterpret_cast<uintptr_t>(o.p) % o.element() != 0) {
    Report(std::string("cuda emulator: ") + fn + ": " + o.Describe() + ": address not aligned to its " +
           std::to_string(o.element()) + "-byte elements");
    return false;
  }
  return true;
}

// Reports the first element of `o` read but never written (the padding between columns
// is not read, so it is not looked at).
void CheckInitialized(const char* fn, const Operand& o) {
  const char* base = static_cast<const char*>(o.p);
  const size_t column_bytes = static_cast<size_t>(o.rows) * o.element();
  for (int64_t j = 0; j < o.cols; ++j) {
    const int64_t first = FirstUninitialized(base + j * o.ld * static_cast<int64_t>(o.element()), column_bytes);
    if (first >= 0) {
      Report(std::string("cuda emulator: ") + fn + ": " + o.Describe() + " reads element (row " +
             std::to_string(first / static_cast<int64_t>(o.element())) + ", column " + std::to_string(j) +
             "), which was never written");
      return;
    }
  }
}

// Marks the elements of `o` (not its column padding) as written.
void MarkWritten(const Operand& o) {
  const char* base = static_cast<const char*>(o.p);
  for (int64_t j = 0; j < o.cols; ++j) {
    MarkInitialized(base + j * o.ld * static_cast<int64_t>(o.element()), static_cast<size_t>(o.rows) * o.element());
  }
}

// True when some element of x shares a byte with some element of y (columns compared,
// so two interleaved column blocks of one matrix do not overlap).
bool Overlap(const Operand& x, const Operand& y) {
  if (x.span() == 0 || y.span() == 0) return false;
  const int64_t x0 = static_cast<int64_t>(reinterpret_cast<uintptr_t>(x.p));
  const int64_t y0 = static_cast<int64_t>(reinterpret_cast<uintptr_t>(y.p));
  const int64_t xs = x.ld * static_cast<int64_t>(x.element()), ys = y.ld * static_cast<int64_t>(y.element());
  const int64_t xr = x.rows * static_cast<int64_t>(x.element()), yr = y.rows * static_cast<int64_t>(y.element());
  if (x0 + x.span() * static_cast<int64_t>(x.element()) <= y0) return false;
  if (y0 + y.span() * static_cast<int64_t>(y.element()) <= x0) return false;
  const int64_t y_cols = ys == 0 ? 1 : y.cols;
  for (int64_t j = 0; j < (xs == 0 ? 1 : x.cols); ++j) {
    const int64_t s = x0 + j * xs, e = s + xr;  // column j of x: [s, e)
    // First column of y ending after s: y0 + c·ys + yr > s.
    int64_t c = 0;
    if (ys > 0 && s >= y0 + yr) c = (s - y0 - yr) / ys + 1;
    if (c < y_cols && y0 + c * ys < e && y0 + c * ys + yr > s) return true;
  }
  return false;
}

// ---- The product ---------------------------------------------------------------------

// fp32 rounded to TF32 (10 mantissa bits, nearest even), as tensor cores read it.
float RoundTf32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7f800000u) != 0x7f800000u) {
    bits += 0xfffu + ((bits >> 13) & 1u);
    bits &= ~0x1fffu;
  }
  std::memcpy(&x, &bits, 4);
  return x;
}

struct Product {
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.f, beta = 0.f;
  bool read_ab = true;  // false: the BLAS quick return (k == 0 or alpha == 0), A and B not referenced
  bool tf32 = false;    // operands rounded to TF32 (cuBLAS's CUBLAS_TF32_TENSOR_OP_MATH)
  Operand a, b, c, d;   // c is not read when beta == 0
};

// D = alpha · op(A) · op(B) + beta · C: fp32 products summed in fp32 in order of k, then
// stored in D's type (a 16-bit D rounded to nearest even once, from the fp32 value). Every
// read happens before the first write, so D may be C.
void Compute(const Product& g) {
  const int64_t m = g.m, n = g.n, k = g.read_ab ? g.k : 0;
  std::vector<float> a(m * k), b(n * k);  // op(A) by rows a[i·k + p], op(B) by columns b[j·k + p]
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      const float v = g.trans_a == CUBLAS_OP_N ? g.a.Load(i, p) : g.a.Load(p, i);
      a[i * k + p] = g.tf32 ? RoundTf32(v) : v;
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t p = 0; p < k; ++p) {
      const float v = g.trans_b == CUBLAS_OP_N ? g.b.Load(p, j) : g.b.Load(j, p);
      b[j * k + p] = g.tf32 ? RoundTf32(v) : v;
    }
  }
  std::vector<float> out(m * n);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      float acc = 0.f;
      const float* ai = a.data() + i * k;
      const float* bj = b.data() + j * k;
      for (int64_t p = 0; p < k; ++p) acc += ai[p] * bj[p];
      float value = g.read_ab ? g.alpha * acc : 0.f;
      if (g.beta != 0.f) value += g.beta * g.c.Load(i, j);
      out[i + j * m] = value;
    }
  }
  void* d = const_cast<void*>(g.d.p);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < m; ++i) {
      const int64_t at = i + j * g.d.ld;
      const float v = out[i + j * m];
      switch (g.d.type) {
        case CUDA_R_16BF: static_cast<__nv_bfloat16*>(d)[at] = __float2bfloat16_rn(v); break;
        case CUDA_R_16F: static_cast<__half*>(d)[at] = __float2half_rn(v); break;
        default: static_cast<float*>(d)[at] = v;
      }
    }
  }
}

// Adds one product to the work tally under its function and shape, e.g.
// "cublasLtMatmul 640x256x16 op(A)=T op(B)=N bf16,bf16->f32 beta=1": m·n·k, and while
// counting, the sectors of each operand's columns (rows × element bytes apart by ld) that
// it reads (A, B; C when beta != 0) and writes (D).
void CountProduct(const char* fn, const Product& g) {
  CallCounts counts{.stamp = NextCountStamp()};
  auto columns = [&](const Operand& o, bool write) {
    const size_t column = size_t(o.rows) * o.element(), stride = size_t(o.ld) * o.element();
    for (int64_t j = 0; j < o.cols; ++j) CountSectors(static_cast<const char*>(o.p) + j * stride, column, write, &counts);
  };
  if (counts.stamp != 0) {
    if (g.read_ab) columns(g.a, false), columns(g.b, false);
    if (g.beta != 0.f) columns(g.c, false);
    columns(g.d, true);
  }
  auto op = [](cublasOperation_t t) { return t == CUBLAS_OP_N ? "N" : "T"; };
  auto type = [](cudaDataType_t t) { return t == CUDA_R_16BF ? "bf16" : t == CUDA_R_16F ? "f16" : "f32"; };
  const std::string name = Format("%s %lldx%lldx%lld op(A)=%s op(B)=%s %s,%s->%s beta=%g", fn, (long long)g.m,
                                  (long long)g.n, (long long)g.k, op(g.trans_a), op(g.trans_b), type(g.a.type),
                                  type(g.b.type), type(g.d.type), double(g.beta));
  AddWork(name, WorkTally{.kind = WorkKind::kLibrary, .calls = 1,
                          .gemm_mnk = g.read_ab ? uint64_t(g.m) * uint64_t(g.n) * uint64_t(g.k) : 0,
                          .bytes_read = counts.bytes_read, .bytes_written = counts.bytes_written});
}

// Checks the operands a call touches and runs it: ranges (a report and
// CUBLAS_STATUS_EXECUTION_FAILED when one is not device memory), an output overlapping
// an input other than as C == D (a report; the result would depend on the order of the
// device's writes), then after the stream's queued work the reads of never-written
// elements (reports; the call still runs, as a device would on garbage).
cublasStatus_t CheckAndRun(const char* fn, const Product& g, cudaStream_t stream) {
  const bool read_c = g.beta != 0.f;
  bool ok = true;
  if (g.read_ab) ok = CheckRange(fn, g.a) & ok;
  if (g.read_ab) ok = CheckRange(fn, g.b) & ok;
  if (read_c && g.c.p != g.d.p) ok = CheckRange(fn, g.c) & ok;
  ok = CheckRange(fn, g.d) & ok;
  if (!ok) return CUBLAS_STATUS_EXECUTION_FAILED;
  std::vector<const Operand*> inputs;
  if (g.read_ab) inputs = {&g.a, &g.b};
  if (read_c && g.c.p != g.d.p) inputs.push_back(&g.c);
  for (const Operand* in : inputs) {
    if (Overlap(*in, g.d)) {
      Report(std::string("cuda emulator: ") + fn + ": output " + g.d.Describe() + " overlaps input " + in->Describe());
      return CUBLAS_STATUS_EXECUTION_FAILED;
    }
  }
  // Captured (graph.cc): the product with its scalars as given now, run at each replay.
  if (RecordNode(stream, fn, [fn, g](cudaStream_t s) { CheckAndRun(fn, g, s); }, nullptr, 0,
                 {g.read_ab ? g.a.p : nullptr, g.read_ab ? g.b.p : nullptr, read_c ? g.c.p : nullptr, g.d.p},
                 GraphNode::Type::kKernel)) {
    return CUBLAS_STATUS_SUCCESS;
  }
  if (LegacyWorkDuringCapture(stream) != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  WaitStream(stream);
  CountProduct(fn, g);
  if (g.read_ab) {
    CheckInitialized(fn, g.a);
    CheckInitialized(fn, g.b);
  }
  if (read_c) CheckInitialized(fn, g.c);
  Compute(g);
  MarkWritten(g.d);
  return CUBLAS_STATUS_SUCCESS;
}

// Reports alpha or beta given as device memory: the pointer mode is host (the default,
// the only one the emulator offers), so the library would dereference it on the host.
bool ScalarOnHost(const char* fn, const char* name, const void* p) {
  if (FindAllocation(p) == nullptr) return true;
  Report(std::string("cuda emulator: ") + fn + ": " + name + " " + Address(p) +
         " is device memory, but the pointer mode is CUBLAS_POINTER_MODE_HOST");
  return false;
}

// Reports a call on a handle while another device is current (a cuBLAS handle is tied to
// the device current at cublasCreate).
bool OnHandleDevice(const char* fn, int device) {
  if (CurrentDevice() == device) return true;
  Report(std::string("cuda emulator: ") + fn + ": the handle belongs to device " + std::to_string(device) +
         " but device " + std::to_string(CurrentDevice()) + " is current");
  return false;
}

// ---- cuBLASLt's supported combination --------------------------------------------------

// The combinations the emulated cuBLASLt runs, those of cuBLASLt's table for
// CUBLAS_COMPUTE_32F with CUDA_R_32F scale (cublasLtMatmul, "Datatypes Supported"): A and B
// both CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F; C and D CUDA_R_32F, or both of A's 16-bit type
// (D rounded to nearest even from the fp32 alpha·AB + beta·C); no empty dimension.
bool Supported(const MatmulDesc& desc, const Layout& a, const Layout& b, const Layout& c, const Layout& d) {
  if (desc.compute != CUBLAS_COMPUTE_32F || desc.scale != CUDA_R_32F) return false;
  if (a.type != b.type || ElementSize(a.type) == 0) return false;
  if (c.type != d.type || (d.type != CUDA_R_32F && d.type != a.type)) return false;
  return a.rows > 0 && a.cols > 0 && b.rows > 0 && b.cols > 0 && d.rows > 0 && d.cols > 0;
}

// The documented consistency of a matmul's layouts: op(A) is m × k, op(B) k × n, D m × n;
// C has D's type, rows and columns; every ld ≥ rows (C's may also be 0, a broadcast
// column, when C is not D).
bool Consistent(const MatmulDesc& desc, const Layout& a, const Layout& b, const Layout& c, const Layout& d) {
  const int64_t m = d.rows, n = d.cols;
  const bool na = desc.trans_a == CUBLAS_OP_N, nb = desc.trans_b == CUBLAS_OP_N;
  const int64_t a_rows = na ? a.rows : a.cols, k = na ? a.cols : a.rows;
  const int64_t b_rows = nb ? b.rows : b.cols, b_cols = nb ? b.cols : b.rows;
  if (a_rows != m || b_rows != k || b_cols != n) return false;
  if (c.type != d.type || c.rows != d.rows || c.cols != d.cols) return false;
  if (a.ld < std::max<int64_t>(1, a.rows) || b.ld < std::max<int64_t>(1, b.rows)) return false;
  if (d.ld < std::max<int64_t>(1, d.rows)) return false;
  return c.ld == 0 || c.ld >= c.rows;
}

cublasStatus_t SetValue(void* field, size_t field_size, const void* buf, size_t size) {
  if (buf == nullptr || size != field_size) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(field, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

MatmulDesc* AsDesc(cublasLtMatmulDesc_t d) { return reinterpret_cast<MatmulDesc*>(d); }
Layout* AsLayout(cublasLtMatrixLayout_t l) { return reinterpret_cast<Layout*>(l); }
Preference* AsPreference(cublasLtMatmulPreference_t p) { return reinterpret_cast<Preference*>(p); }

}  // namespace
}  // namespace msemu

using msemu::Kind;

// ---- cuBLAS ------------------------------------------------------------------------------

// Creates a handle tied to the current device, on the legacy default stream, default
// math (cublasCreate): INVALID_VALUE for a null out-pointer.
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* h = new cublasContext;
  h->device = msemu::CurrentDevice();
  msemu::Register(h, Kind::kBlas);
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

// Releases a handle (cublasDestroy): NOT_INITIALIZED for a null or dead one.
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!msemu::Release(handle, Kind::kBlas, "cublasDestroy", "handle")) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

// Sets the stream the handle's calls run on, null meaning the legacy default stream
// (cublasSetStream): NOT_INITIALIZED for a null or dead handle.
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  cublasContext* h = msemu::Live<cublasContext>(handle, Kind::kBlas, "cublasSetStream", "handle");
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

// Sets the math mode (cublasSetMathMode): CUBLAS_DEFAULT_MATH, CUBLAS_PEDANTIC_MATH or
// CUBLAS_TF32_TENSOR_OP_MATH (TF32-rounded operands from then on), each optionally with
// CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION; anything else is INVALID_VALUE.
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  cublasContext* h = msemu::Live<cublasContext>(handle, Kind::kBlas, "cublasSetMathMode", "handle");
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const unsigned base =
      static_cast<unsigned>(mode) & ~static_cast<unsigned>(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_PEDANTIC_MATH && base != CUBLAS_TF32_TENSOR_OP_MATH) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  h->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

// The description of a status (cublasGetStatusString); "unknown error" for other values.
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "the functionality requested requires some license";
  }
  return "unknown error";
}

// C = alpha · op(A) · op(B) + beta · C, column-major, op(A) m × k, op(B) k × n (cublasSgemm,
// 64-bit sizes). INVALID_VALUE as documented: m, n or k < 0; transa or transb not N, T or
// C; lda < max(1, m) for N, max(1, k) otherwise; ldb < max(1, k) for N, max(1, n)
// otherwise; ldc < max(1, m); alpha or beta null; C null (when written). Quick returns
// as the reference BLAS: nothing for m or n = 0; A and B not read when k = 0 or alpha = 0
// (C = beta · C); C not read when beta = 0 (NaNs there do not propagate). Runs on the
// handle's stream, with the handle's device current.
cublasStatus_t cublasSgemm_v2_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                                 int64_t n, int64_t k, const float* alpha, const float* A, int64_t lda, const float* B,
                                 int64_t ldb, const float* beta, float* C, int64_t ldc) {
  const char* fn = "cublasSgemm";
  cublasContext* h = msemu::Live<cublasContext>(handle, Kind::kBlas, fn, "handle");
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto valid_op = [](cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
  if (m < 0 || n < 0 || k < 0 || !valid_op(transa) || !valid_op(transb)) return CUBLAS_STATUS_INVALID_VALUE;
  const bool na = transa == CUBLAS_OP_N, nb = transb == CUBLAS_OP_N;  // C is T for real data
  if (lda < std::max<int64_t>(1, na ? m : k) || ldb < std::max<int64_t>(1, nb ? k : n) ||
      ldc < std::max<int64_t>(1, m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (alpha == nullptr || beta == nullptr || (C == nullptr && m > 0 && n > 0)) return CUBLAS_STATUS_INVALID_VALUE;
  if (!msemu::ScalarOnHost(fn, "alpha", alpha) || !msemu::ScalarOnHost(fn, "beta", beta)) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if (!msemu::OnHandleDevice(fn, h->device)) return CUBLAS_STATUS_EXECUTION_FAILED;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;

  msemu::Product g;
  g.trans_a = na ? CUBLAS_OP_N : CUBLAS_OP_T;
  g.trans_b = nb ? CUBLAS_OP_N : CUBLAS_OP_T;
  g.m = m, g.n = n, g.k = k;
  g.alpha = *alpha, g.beta = *beta;
  g.read_ab = k > 0 && g.alpha != 0.f;
  g.tf32 = (static_cast<unsigned>(h->math) & 0xfu) == CUBLAS_TF32_TENSOR_OP_MATH;
  g.a = {"A", A, CUDA_R_32F, na ? m : k, na ? k : m, lda};
  g.b = {"B", B, CUDA_R_32F, nb ? k : n, nb ? n : k, ldb};
  g.c = {"C", C, CUDA_R_32F, m, n, ldc};
  g.d = g.c;
  return msemu::CheckAndRun(fn, g, h->stream);
}

// ---- cuBLASLt ----------------------------------------------------------------------------

// Creates a cuBLASLt handle (cublasLtCreate): INVALID_VALUE for a null out-pointer.
cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* h = new cublasLtContext;
  h->device = msemu::CurrentDevice();
  msemu::Register(h, Kind::kLt);
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

// Releases a cuBLASLt handle (cublasLtDestroy): NOT_INITIALIZED for a null or dead one.
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!msemu::Release(handle, Kind::kLt, "cublasLtDestroy", "handle")) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

// Creates a matmul descriptor with its compute and scale types, TRANSA = TRANSB = N
// (cublasLtMatmulDescCreate); an unsupported combination shows later as NOT_SUPPORTED.
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new msemu::MatmulDesc;
  d->compute = compute;
  d->scale = scale;
  msemu::Register(d, Kind::kMatmulDesc);
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

// Releases a matmul descriptor (cublasLtMatmulDescDestroy); null is a no-op.
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  if (desc == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (!msemu::Release(desc, Kind::kMatmulDesc, "cublasLtMatmulDescDestroy", "descriptor")) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  delete msemu::AsDesc(desc);
  return CUBLAS_STATUS_SUCCESS;
}

// Sets TRANSA or TRANSB (int32_t cublasOperation_t: N, T, or C meaning T for real data)
// or TRANSC, which the docs allow only as CUBLAS_OP_N (cublasLtMatmulDescSetAttribute).
// INVALID_VALUE for a null buf, a size other than the attribute's, or a value outside
// those; NOT_SUPPORTED for the attributes the emulator does not implement (the project
// sets none of them).
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  msemu::MatmulDesc* d =
      msemu::Live<msemu::MatmulDesc>(desc, Kind::kMatmulDesc, "cublasLtMatmulDescSetAttribute", "descriptor");
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr != CUBLASLT_MATMUL_DESC_TRANSA && attr != CUBLASLT_MATMUL_DESC_TRANSB &&
      attr != CUBLASLT_MATMUL_DESC_TRANSC) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  int32_t op = 0;
  if (const cublasStatus_t s = msemu::SetValue(&op, sizeof(op), buf, size); s != CUBLAS_STATUS_SUCCESS) return s;
  if (attr == CUBLASLT_MATMUL_DESC_TRANSC) {
    return op == CUBLAS_OP_N ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  }
  if (op != CUBLAS_OP_N && op != CUBLAS_OP_T && op != CUBLAS_OP_C) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasOperation_t value = op == CUBLAS_OP_N ? CUBLAS_OP_N : CUBLAS_OP_T;
  (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->trans_a : d->trans_b) = value;
  return CUBLAS_STATUS_SUCCESS;
}

// Creates a column-major layout: type, rows, cols and leading dimension
// (cublasLtMatrixLayoutCreate). As documented it only allocates; an ld smaller than rows
// is rejected (INVALID_VALUE) by the heuristic and the matmul that meet it.
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* l = new msemu::Layout;
  l->type = type;
  l->rows = static_cast<int64_t>(rows);
  l->cols = static_cast<int64_t>(cols);
  l->ld = ld;
  msemu::Register(l, Kind::kLayout);
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}

// Releases a layout (cublasLtMatrixLayoutDestroy); null is a no-op.
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  if (layout == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (!msemu::Release(layout, Kind::kLayout, "cublasLtMatrixLayoutDestroy", "layout")) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  delete msemu::AsLayout(layout);
  return CUBLAS_STATUS_SUCCESS;
}

// Creates a heuristic preference: no workspace, 256-byte alignment assumed for A, B, C
// and D, the documented defaults (cublasLtMatmulPreferenceCreate).
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* p = new msemu::Preference;
  msemu::Register(p, Kind::kPreference);
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(p);
  return CUBLAS_STATUS_SUCCESS;
}

// Releases a preference (cublasLtMatmulPreferenceDestroy); null is a no-op.
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (pref == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (!msemu::Release(pref, Kind::kPreference, "cublasLtMatmulPreferenceDestroy", "preference")) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  delete msemu::AsPreference(pref);
  return CUBLAS_STATUS_SUCCESS;
}

// Sets MAX_WORKSPACE_BYTES (uint64_t) or MIN_ALIGNMENT_{A,B,C,D}_BYTES (uint32_t)
// (cublasLtMatmulPreferenceSetAttribute): INVALID_VALUE for a null buf or a size other
// than the attribute's; NOT_SUPPORTED for the attributes the emulator does not implement.
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  msemu::Preference* p =
      msemu::Live<msemu::Preference>(pref, Kind::kPreference, "cublasLtMatmulPreferenceSetAttribute", "preference");
  if (p == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return msemu::SetValue(&p->max_workspace, sizeof(p->max_workspace), buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return msemu::SetValue(&p->align[0], 4, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return msemu::SetValue(&p->align[1], 4, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return msemu::SetValue(&p->align[2], 4, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return msemu::SetValue(&p->align[3], 4, buf, size);
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

// One algorithm for a supported combination (cublasLtMatmulAlgoGetHeuristic): it needs no
// workspace and relies on the alignments the preference promised, so a later matmul with
// a less aligned pointer is NOT_SUPPORTED. INVALID_VALUE for requestedAlgoCount ≤ 0, a null
// argument, or inconsistent layouts (op(A) m × k, op(B) k × n, C and D m × n, ld ≥ rows);
// NOT_SUPPORTED (no heuristic) for any other combination than CUBLAS_COMPUTE_32F with
// CUDA_R_32F scale, A and B both CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F, C and D CUDA_R_32F
// or both A's 16-bit type (Supported).
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a_desc, cublasLtMatrixLayout_t b_desc,
                                              cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  const char* fn = "cublasLtMatmulAlgoGetHeuristic";
  if (msemu::Live<cublasLtContext>(handle, Kind::kLt, fn, "handle") == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const auto* d = msemu::Live<msemu::MatmulDesc>(desc, Kind::kMatmulDesc, fn, "matmul descriptor");
  const auto* a = msemu::Live<msemu::Layout>(a_desc, Kind::kLayout, fn, "layout A");
  const auto* b = msemu::Live<msemu::Layout>(b_desc, Kind::kLayout, fn, "layout B");
  const auto* c = msemu::Live<msemu::Layout>(c_desc, Kind::kLayout, fn, "layout C");
  const auto* dd = msemu::Live<msemu::Layout>(d_desc, Kind::kLayout, fn, "layout D");
  const auto* p = msemu::Live<msemu::Preference>(pref, Kind::kPreference, fn, "preference");
  if (d == nullptr || a == nullptr || b == nullptr || c == nullptr || dd == nullptr || p == nullptr || requested <= 0 ||
      results == nullptr || returned == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *returned = 0;
  if (!msemu::Supported(*d, *a, *b, *c, *dd)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!msemu::Consistent(*d, *a, *b, *c, *dd)) return CUBLAS_STATUS_INVALID_VALUE;
  msemu::AlgoRecord record{};
  record.magic = msemu::kAlgoMagic;
  std::copy(p->align, p->align + 4, record.align);
  record.ab_type = a->type;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  std::memcpy(&results[0].algo, &record, sizeof(record));
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// D = alpha · op(A) · op(B) + beta · C (cublasLtMatmul), column-major, host-pointer alpha
// and beta of the scale type, fp32 accumulation, C not read when beta = 0. As documented:
// C == D (in place) needs Cdesc's layout equal to Ddesc's; otherwise C has D's type, rows
// and columns and any ld (0 broadcasts C's first column); a null Cdesc means Ddesc. A
// null algo lets the library pick one (any alignment); a heuristic's algo is NOT_SUPPORTED
// when a pointer is less aligned than its preference promised. INVALID_VALUE for null
// arguments, inconsistent layouts, a workspace size without a pointer, or a workspace not
// 256-byte aligned; NOT_SUPPORTED for combinations cublasLtMatmulAlgoGetHeuristic refuses.
// Operands and workspace outside device memory are reported: EXECUTION_FAILED.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a_desc, const void* B, cublasLtMatrixLayout_t b_desc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t c_desc, void* D,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  const char* fn = "cublasLtMatmul";
  if (msemu::Live<cublasLtContext>(handle, Kind::kLt, fn, "handle") == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const auto* d = msemu::Live<msemu::MatmulDesc>(desc, Kind::kMatmulDesc, fn, "matmul descriptor");
  const auto* al = msemu::Live<msemu::Layout>(a_desc, Kind::kLayout, fn, "layout A");
  const auto* bl = msemu::Live<msemu::Layout>(b_desc, Kind::kLayout, fn, "layout B");
  const auto* dl = msemu::Live<msemu::Layout>(d_desc, Kind::kLayout, fn, "layout D");
  const auto* cl = c_desc == nullptr ? dl : msemu::Live<msemu::Layout>(c_desc, Kind::kLayout, fn, "layout C");
  if (d == nullptr || al == nullptr || bl == nullptr || cl == nullptr || dl == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (alpha == nullptr || beta == nullptr || A == nullptr || B == nullptr || D == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (!msemu::Supported(*d, *al, *bl, *cl, *dl)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!msemu::Consistent(*d, *al, *bl, *cl, *dl)) return CUBLAS_STATUS_INVALID_VALUE;
  if (!msemu::ScalarOnHost(fn, "alpha", alpha) || !msemu::ScalarOnHost(fn, "beta", beta)) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  const float alpha_value = *static_cast<const float*>(alpha), beta_value = *static_cast<const float*>(beta);
  if (beta_value != 0.f && C == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (C == D && cl->ld != dl->ld) return CUBLAS_STATUS_INVALID_VALUE;  // in place: Cdesc == Ddesc
  if (workspace_bytes > 0 && workspace == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (workspace != nullptr && reinterpret_cast<uintptr_t>(workspace) % 256 != 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (algo != nullptr) {
    msemu::AlgoRecord record{};
    std::memcpy(&record, algo, sizeof(record));
    if (record.magic != msemu::kAlgoMagic) return CUBLAS_STATUS_INVALID_VALUE;  // not from the heuristic
    if (record.ab_type != al->type) return CUBLAS_STATUS_NOT_SUPPORTED;
    const void* pointers[4] = {A, B, C, D};
    for (int i = 0; i < 4; ++i) {
      if (pointers[i] != nullptr && msemu::Alignment(pointers[i]) < record.align[i]) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
  }
  if (workspace != nullptr && workspace_bytes > 0) {
    if (const std::string why = msemu::DescribeBadDeviceRange(workspace, workspace_bytes); !why.empty()) {
      msemu::Report(std::string("cuda emulator: ") + fn + ": workspace (" + std::to_string(workspace_bytes) +
                    " bytes at " + msemu::Address(workspace) + "): " + why);
      return CUBLAS_STATUS_EXECUTION_FAILED;
    }
  }

  msemu::Product g;
  g.trans_a = d->trans_a;
  g.trans_b = d->trans_b;
  g.m = dl->rows, g.n = dl->cols, g.k = d->trans_a == CUBLAS_OP_N ? al->cols : al->rows;
  g.alpha = alpha_value, g.beta = beta_value;
  g.a = {"A", A, al->type, al->rows, al->cols, al->ld};
  g.b = {"B", B, bl->type, bl->rows, bl->cols, bl->ld};
  g.c = {"C", C, cl->type, cl->rows, cl->cols, cl->ld};
  g.d = {"D", D, dl->type, dl->rows, dl->cols, dl->ld};
  return msemu::CheckAndRun(fn, g, stream);
}
