// Step time of ComputeGradients on one layout (a quick benchmark, not a test):
//   mpirun -np N --oversubscribe parallel_step_bench --model=tiny_psi4 --tp=2 --pp=1
//          --micro_batches=4 --micro_batch=2 --seq_len=64 --steps=5
// The global batch is dp·M·B sequences; to compare layouts at the same global
// batch, divide --micro_batches (or --micro_batch) by dp. Prints one line from
// rank 0: the layout, the median step time, and tokens per second.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "model/init.h"
#include "parallel/fatal.h"
#include "parallel/mpi_session.h"
#include "parallel/step.h"

namespace {

const char* Flag(int argc, char** argv, const char* name, const char* fallback) {
  const size_t n = std::strlen(name);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], name, n) == 0 && argv[i][n] == '=') return argv[i] + n + 1;
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace multiscreen;
  auto session = MpiSession::Init(&argc, &argv);
  AbortJobIfError(session.status());
  const std::string model_name = Flag(argc, argv, "--model", "tiny_psi4");
  const int tp = std::atoi(Flag(argc, argv, "--tp", "1")), pp = std::atoi(Flag(argc, argv, "--pp", "1"));
  const int64_t M = std::atoll(Flag(argc, argv, "--micro_batches", "4"));
  const int64_t B = std::atoll(Flag(argc, argv, "--micro_batch", "2"));
  const int64_t T = std::atoll(Flag(argc, argv, "--seq_len", "64"));
  const int steps = std::atoi(Flag(argc, argv, "--steps", "5"));
  auto dims = LoadModel(model_name);
  AbortJobIfError(dims.status());
  auto grid = ProcessGrid::Create(tp, pp);
  AbortJobIfError(grid.status());
  auto model = ParallelModel::Create(**grid, *dims);
  AbortJobIfError(model.status());
  const ParamLayout& layout = (*model)->layout();
  std::vector<float> params(layout.size()), grads(layout.size());
  InitParams(layout, 1, params.data());
  // This dp rank's slice of one global batch: the loss is the same for every layout.
  const int64_t per_rank = M * B * (T + 1), first = (*grid)->coord().dp * per_rank;
  std::vector<int32_t> tokens(per_rank);
  for (int64_t i = 0; i < per_rank; ++i) {
    tokens[i] = static_cast<int32_t>((uint64_t(first + i) * 2654435761u) % uint64_t(dims->vocab));
  }
  std::vector<double> times;
  double loss = 0;
  for (int s = 0; s < steps + 1; ++s) {
    (*grid)->world().Barrier();
    const auto t0 = std::chrono::steady_clock::now();
    auto l = ComputeGradients(**grid, **model, params.data(), tokens.data(), StepShape{M, B, T}, grads.data());
    AbortJobIfError(l.status());
    loss = *l;
    (*grid)->world().Barrier();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) times.push_back(dt);  // the first step warms up
  }
  std::sort(times.begin(), times.end());
  if ((*grid)->world_rank() == 0) {
    const GridShape& g = (*grid)->shape();
    const double median = times[times.size() / 2];
    std::printf("model %s tp %d pp %d dp %d M %lld B %lld T %lld: %.2f ms/step, %.0f tokens/s, loss %.4f\n",
                model_name.c_str(), g.tp, g.pp, g.dp, (long long)M, (long long)B, (long long)T, median * 1e3,
                double(g.dp * M * B * T) / median, loss);
  }
  return 0;
}
