// The CUDA screening kernels' tile tables kept on the device between calls
// (kernels/cuda/screening_table_cache.h): a scratch that sees several tables in turn gives
// each call the results a fresh scratch gives, bit for bit (the key holds every input of
// the tables), uploads each distinct table once, and recycles stale entries.
// Skips, visibly, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/cuda/screening.h"
#include "kernels/cuda/screening_table_cache.h"
#include "kernels/device_array.h"
#include "tests/cuda/cuda_test.h"

namespace multiscreen {
namespace {

class ScreeningTableCacheTest : public CudaTest {};

// One screening call's inputs: a shape and the tiles' scalars, named for the field that
// differs from the base.
struct Variant {
  std::string name;
  kernels::ScreeningShape shape;
  std::vector<kernels::TileScalars> tiles;
};

std::vector<Variant> Variants() {
  kernels::ScreeningShape base{1, 120, 4, 16, 64, 0, 256.0};
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<kernels::TileScalars> tiles = {
      {3.5, 0.9, 0.6, 3.5}, {40.0, 0.5, 0.7, 40.0}, {300.0, 0.7, 0.8, 300.0}, {inf, 0.3, 0.9, 300.0}};
  std::vector<Variant> v = {{"base", base, tiles}};
  auto with_tile = [&](const char* name, auto change) {
    Variant x{name, base, tiles};
    change(&x.tiles[1]);
    v.push_back(x);
  };
  with_tile("r", [](kernels::TileScalars* t) { t->r = 0.6; });
  with_tile("w", [](kernels::TileScalars* t) { t->w = 41.0; });
  with_tile("scale", [](kernels::TileScalars* t) { t->scale = 0.75; });
  with_tile("mipe_w", [](kernels::TileScalars* t) { t->mipe_w = 60.0; });
  auto with_shape = [&](const char* name, auto change) {
    Variant x{name, base, tiles};
    change(&x.shape);
    v.push_back(x);
  };
  with_shape("seq", [](kernels::ScreeningShape* s) { s->seq = 100; });  // fewer keys: mask_ld and keys differ
  with_shape("w_th", [](kernels::ScreeningShape* s) { s->w_th = 32.0; });
  with_shape("position nope", [](kernels::ScreeningShape* s) { s->position = kernels::PositionKind::kNope; });
  with_shape("position rope", [](kernels::ScreeningShape* s) { s->position = kernels::PositionKind::kRope; });
  with_shape("rope scaling", [](kernels::ScreeningShape* s) {
    s->position = kernels::PositionKind::kRope;
    s->rope_scaling.factor = 4.0;
    s->rope_scaling.original_len = 64.0;
  });
  return v;
}

// What one forward and two backwards (host gradients, then device ones) leave.
struct Results {
  std::vector<float> U, dP, dP_device, g;
  std::vector<double> grads;
};

DeviceArray<float> Upload(const std::vector<float>& host) {
  DeviceArray<float> a(Device::kCuda);
  a.Resize(static_cast<int64_t>(host.size()));
  EXPECT_EQ(cudaMemcpy(a.data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  return a;
}

std::vector<float> Download(const DeviceArray<float>& a) {
  std::vector<float> v(a.size());
  EXPECT_EQ(cudaMemcpy(v.data(), a.data(), v.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

Results RunCalls(const Variant& v, kernels::cuda::ScreeningScratch* scratch) {
  const kernels::ScreeningShape& s = v.shape;
  const int64_t rows = s.batch * s.seq * s.tiles, nt = s.tiles;
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> P(s.batch * s.seq * nt * s.p_cols()), dU(rows * s.d_v);
  for (auto& x : P) x = n(rng);
  for (auto& x : dU) x = n(rng);
  auto zeros = [](int64_t count) { return Upload(std::vector<float>(count, 0.f)); };
  DeviceArray<float> Pd = Upload(P), dUd = Upload(dU), U = zeros(rows * s.d_v), dP = zeros(P.size());
  DeviceArray<float> dP2 = zeros(P.size()), g = zeros(3 * nt);
  DeviceArray<float> qt = zeros(rows * s.d_k), kt = zeros(rows * s.d_k), vb = zeros(rows * s.d_v);
  DeviceArray<float> qn = zeros(rows), kn = zeros(rows), vn = zeros(rows), h = zeros(rows * s.d_v);
  const kernels::ScreeningSaved<float> saved{qt.data(), kt.data(), vb.data(), qn.data(),
                                             kn.data(), vn.data(), h.data()};
  std::vector<kernels::TileScalarGrads> grads(nt);
  kernels::cuda::ScreeningForward(s, Pd.data(), v.tiles.data(), saved, U.data(), scratch, 0);
  kernels::cuda::ScreeningBackward(s, Pd.data(), v.tiles.data(), saved, dUd.data(), dP.data(), grads.data(), scratch,
                                   0);
  kernels::cuda::ScreeningBackward(s, Pd.data(), v.tiles.data(), saved, dUd.data(), dP2.data(),
                                   {g.data(), g.data() + nt, g.data() + 2 * nt}, scratch, 0);
  Results r{Download(U), Download(dP), Download(dP2), Download(g), {}};
  for (const auto& t : grads) r.grads.insert(r.grads.end(), {t.w, t.r, t.scale});
  return r;
}

void ExpectSame(const Results& got, const Results& want) {
  EXPECT_EQ(got.U, want.U);
  EXPECT_EQ(got.dP, want.dP);
  EXPECT_EQ(got.dP_device, want.dP_device);
  EXPECT_EQ(got.g, want.g);
  EXPECT_EQ(got.grads, want.grads);
}

// Every variant differs from the base in one input of the tables; a key without that
// input would hand the variant the base's tables (seen: r left out of ScreeningTableKey
// fails the "r" rows).
TEST_F(ScreeningTableCacheTest, AlternatedTablesGiveAFreshScratchsResultsAndUploadOnce) {
  const std::vector<Variant> variants = Variants();
  std::vector<Results> fresh;
  for (const Variant& v : variants) {
    kernels::cuda::ScreeningScratch own;
    fresh.push_back(RunCalls(v, &own));
    EXPECT_EQ(own.tables.uploads(), 1) << v.name;  // the forward's; both backwards hit
  }
  for (size_t i = 1; i < variants.size(); ++i) {  // each variant changes what the kernels compute
    EXPECT_NE(fresh[i].dP, fresh[0].dP) << variants[i].name;
  }
  kernels::cuda::ScreeningScratch shared;
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < variants.size(); ++i) {
      SCOPED_TRACE(variants[i].name + ", round " + std::to_string(round));
      ExpectSame(RunCalls(variants[i], &shared), fresh[i]);
    }
    // One upload per distinct table: the second round copies nothing.
    EXPECT_EQ(shared.tables.uploads(), static_cast<int64_t>(variants.size()));
    EXPECT_EQ(shared.tables.entries(), static_cast<int64_t>(variants.size()));
  }
  // A new step: stale entries still hit by content, and a miss recycles one.
  shared.tables.MarkStale();
  ExpectSame(RunCalls(variants[0], &shared), fresh[0]);
  EXPECT_EQ(shared.tables.uploads(), static_cast<int64_t>(variants.size()));
  Variant other = variants[0];
  other.tiles[2].r = 0.65;
  kernels::cuda::ScreeningScratch own;
  const Results other_fresh = RunCalls(other, &own);
  ExpectSame(RunCalls(other, &shared), other_fresh);
  EXPECT_EQ(shared.tables.uploads(), static_cast<int64_t>(variants.size()) + 1);
  EXPECT_EQ(shared.tables.entries(), static_cast<int64_t>(variants.size()));  // recycled, not added
  // The recycled entry's old content is gone; the base (not recycled) still hits.
  ExpectSame(RunCalls(variants[0], &shared), fresh[0]);
  EXPECT_EQ(shared.tables.uploads(), static_cast<int64_t>(variants.size()) + 1);
}

// The key compares bytes: every field FillScreeningTables reads changes it, and fields it
// does not read (batch, pos0, d_v, the switches the kernels read themselves) do not.
TEST(ScreeningTableKeyTest, HoldsExactlyTheTablesInputs) {
  const std::vector<Variant> variants = Variants();
  const auto base = kernels::cuda::ScreeningTableKey(variants[0].shape, variants[0].tiles.data());
  for (size_t i = 1; i < variants.size(); ++i) {
    EXPECT_NE(kernels::cuda::ScreeningTableKey(variants[i].shape, variants[i].tiles.data()), base) << variants[i].name;
  }
  kernels::ScreeningShape same = variants[0].shape;
  same.batch = 3;
  same.pos0 = 77;
  same.d_v = 32;
  same.tanh_norm = false;
  same.output_gate = false;
  same.rope_scaling.factor = 8.0;  // read for ROPE only
  EXPECT_EQ(kernels::cuda::ScreeningTableKey(same, variants[0].tiles.data()), base);
}

}  // namespace
}  // namespace multiscreen
