// Step time of ComputeGradients on one layout (a quick benchmark, not a test):
//   mpirun -np N --oversubscribe parallel_step_bench --model=tiny_psi4 --tp=2 --pp=1
//          --micro_batches=4 --micro_batch=2 --seq_len=64 --steps=5
// The global batch is dp·M·B sequences; to compare layouts at the same global
// batch, divide --micro_batches (or --micro_batch) by dp. Prints one line from
// rank 0: the layout, the median step time, tokens per second, and the exposed
// communication (StepCommTimes: what the step waited for after its compute, the
// largest over the ranks, median over the steps; dp_wait_s its dp part).
// --dp_overlap=on|off (default on), --zero=0|1, --bucket_mb=16 (MiB per dp bucket),
// --json: the same as one JSON object.
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
  DataParallelOptions dp_options;
  dp_options.overlap = std::strcmp(Flag(argc, argv, "--dp_overlap", "on"), "off") != 0;
  dp_options.zero1 = std::atoi(Flag(argc, argv, "--zero", "0")) == 1;
  const double bucket_mb = std::atof(Flag(argc, argv, "--bucket_mb", "16"));
  dp_options.bucket_elements = std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * (1 << 20) / 4));
  bool json = false;
  for (int i = 1; i < argc; ++i) json |= std::strcmp(argv[i], "--json") == 0;
  auto dims = LoadModel(model_name);
  AbortJobIfError(dims.status());
  auto grid = ProcessGrid::Create(tp, pp);
  AbortJobIfError(grid.status());
  auto model = ParallelModel::Create(**grid, *dims, ModelOptions{}, dp_options);
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
  std::vector<double> times, exposed, dp_wait;
  double loss = 0;
  for (int s = 0; s < steps + 1; ++s) {
    (*grid)->world().Barrier();
    const auto t0 = std::chrono::steady_clock::now();
    auto l = ComputeGradients(**grid, **model, params.data(), tokens.data(), StepShape{M, B, T}, grads.data());
    AbortJobIfError(l.status());
    loss = *l;
    (*grid)->world().Barrier();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double waits[2] = {(*model)->comm_times().exposed_s(), (*model)->comm_times().dp_wait_s};
    (*grid)->world().AllReduce(waits, 2, ReduceOp::kMax);
    if (s > 0) {  // the first step warms up
      times.push_back(dt);
      exposed.push_back(waits[0]);
      dp_wait.push_back(waits[1]);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  if ((*grid)->world_rank() == 0) {
    const GridShape& g = (*grid)->shape();
    const double step = median(times), tokens_per_s = double(g.dp * M * B * T) / step;
    const char* overlap = (*model)->data_parallel().overlapped() ? "on" : "off";
    if (json) {
      std::printf("{\"model\": \"%s\", \"tp\": %d, \"pp\": %d, \"dp\": %d, \"M\": %lld, \"B\": %lld, \"T\": %lld, "
                  "\"zero\": %d, \"dp_overlap\": \"%s\", \"bucket_mb\": %g, \"step_s\": %.6f, \"tokens_per_s\": %.1f, "
                  "\"comm_exposed_s\": %.6f, \"dp_wait_s\": %.6f, \"loss\": %.6f}\n",
                  model_name.c_str(), g.tp, g.pp, g.dp, (long long)M, (long long)B, (long long)T,
                  dp_options.zero1 ? 1 : 0, overlap, bucket_mb, step, tokens_per_s, median(exposed), median(dp_wait),
                  loss);
    } else {
      std::printf("model %s tp %d pp %d dp %d M %lld B %lld T %lld zero %d dp_overlap %s: %.2f ms/step, %.0f tokens/s, "
                  "comm exposed %.2f ms (dp wait %.2f ms), loss %.4f\n",
                  model_name.c_str(), g.tp, g.pp, g.dp, (long long)M, (long long)B, (long long)T,
                  dp_options.zero1 ? 1 : 0, overlap, step * 1e3, tokens_per_s, median(exposed) * 1e3,
                  median(dp_wait) * 1e3, loss);
    }
  }
  return 0;
}
