// Compares one shard's flat buffer against the same logical tensors of a
// full-model buffer, slice by slice (ParamEntry offsets): the parity check of
// parallel layouts against the single process. The error of an element is
// |shard − full| / scale, the scale being the tensor's largest |full| value.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>

#include "model/param_layout.h"

namespace multiscreen::testing {

struct ShardComparison {
  double worst = 0;  // max error / its tensor's tolerance; ≤ 1 passes
  std::string worst_name;
  int64_t worst_index = -1;
  double worst_error = 0;  // that element's error
  int64_t compared = 0;
};

// Shard elements with flat index in [begin, end) (end < 0: all) against `full`
// (a buffer of the full layout). Tolerance `tol`, or overrides[name].
inline ShardComparison CompareShard(const ParamLayout& shard, const float* shard_values, const ParamLayout& full,
                                    const float* full_values, double tol,
                                    const std::map<std::string, double>& overrides = {}, int64_t begin = 0,
                                    int64_t end = -1) {
  if (end < 0) end = shard.size();
  ShardComparison c;
  for (const ParamEntry& e : shard.entries()) {
    const ParamEntry* g = full.Find(e.name);
    if (g == nullptr) {
      c.worst = INFINITY;
      c.worst_name = e.name + " (missing in the full layout)";
      return c;
    }
    const auto o = overrides.find(e.name);
    const double t = o != overrides.end() ? o->second : tol;
    double scale = 1e-30;
    for (int64_t i = 0; i < g->size(); ++i) scale = std::max(scale, std::abs(double(full_values[g->buffer_offset + i])));
    const int64_t inner = e.shape.empty() ? 1 : e.size() / e.shape[0];
    const int64_t skip = e.offset.empty() ? 0 : e.offset[0] * inner;
    for (int64_t i = 0; i < e.size(); ++i) {
      const int64_t flat = e.buffer_offset + i;
      if (flat < begin || flat >= end) continue;
      const double err = std::abs(double(shard_values[flat]) - full_values[g->buffer_offset + skip + i]) / scale;
      ++c.compared;
      if (!(err / t <= c.worst)) {
        c.worst = err / t;
        c.worst_error = err;
        c.worst_name = e.name;
        c.worst_index = i;
      }
    }
  }
  return c;
}

inline std::string Describe(const ShardComparison& c) {
  std::ostringstream s;
  s << "worst relative error " << c.worst_error << " (" << c.worst << " of its tolerance) at " << c.worst_name << "["
    << c.worst_index << "] over " << c.compared << " elements";
  return s.str();
}

}  // namespace multiscreen::testing
