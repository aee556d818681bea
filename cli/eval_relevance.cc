// `multiscreen eval relevance`: the relevance maps of a Multiscreen model's tiles over one
// text (eval/relevance.h), the fraction of nonzero pairs per tile, and the maps of the
// chosen layers and tiles.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/eval_common.h"
#include "cli/flags.h"
#include "common/input_file.h"
#include "common/status.h"
#include "common/text_file.h"
#include "eval/relevance.h"

ABSL_FLAG(std::string, text, "", "eval relevance: a UTF-8 text file to inspect");
ABSL_FLAG(std::string, layers, "", "eval relevance: layers whose maps are written (comma-separated; empty: all)");
ABSL_FLAG(std::string, map_tiles, "", "eval relevance: tiles of those layers whose maps are written (empty: all)");

namespace multiscreen::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = EvalClock;

// A list flag of indices in [0, n); empty means all of them.
absl::StatusOr<std::vector<bool>> ParseIndexSet(const std::string& flag, const std::string& text, int64_t n) {
  std::vector<bool> set(n, text.empty());
  MS_ASSIGN_OR_RETURN(const std::vector<std::string> parts, SplitListFlag(flag, text));
  for (const std::string& part : parts) {
    int64_t v;
    if (!IsDecimalInteger(part) || !absl::SimpleAtoi(part, &v) || v < 0 || v >= n) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, "=", text, ": '", part, "' is not an index in [0, ", n, ")"));
    }
    set[v] = true;
  }
  return set;
}

constexpr int64_t kMaxRelevanceTokens = 8192;

}  // namespace

int EvalRelevance(const std::vector<std::string>& given) {
  const std::string path = absl::GetFlag(FLAGS_text);
  if (path.empty()) return Fail("eval relevance", absl::InvalidArgumentError("--text=FILE is required"));
  if (absl::Status s = CheckRegularInput(path); !s.ok()) {  // "--text=a.txt: No such file or directory", "...: is a directory, ..."
    return Fail("eval relevance", absl::Status(s.code(), absl::StrCat("--text=", s.message())));
  }
  if (auto s = RefuseInputInsideOut("text", path, absl::GetFlag(FLAGS_out)); !s.ok()) return Fail("eval relevance", s);
  auto setup = Setup(given, true, /*multiscreen_only=*/true);
  if (!setup.ok()) return Fail("eval relevance", setup.status());
  const ModelDims& d = setup->weights.dims;
  auto layers = ParseIndexSet("layers", absl::GetFlag(FLAGS_layers), d.n_layers);
  if (!layers.ok()) return Fail("eval relevance", layers.status());
  auto tiles = ParseIndexSet("map_tiles", absl::GetFlag(FLAGS_map_tiles), d.n_heads);
  if (!tiles.ok()) return Fail("eval relevance", tiles.status());
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  auto ids = setup->tokenizer->Encode(text.str());
  if (!ids.ok()) return Fail("eval relevance", absl::InvalidArgumentError(absl::StrCat("--text=", path, ": ", ids.status().message())));
  if (ids->empty()) return Fail("eval relevance", absl::InvalidArgumentError(absl::StrCat("--text=", path, ": no tokens")));
  if (static_cast<int64_t>(ids->size()) > kMaxRelevanceTokens) {
    return Fail("eval relevance", absl::InvalidArgumentError(absl::StrCat("--text=", path, ": ", ids->size(), " tokens; the inspection forward (double precision, O(T·w) per tile) takes at most ", kMaxRelevanceTokens)));
  }
  for (int32_t id : *ids) {
    if (id >= d.vocab) return Fail("eval relevance", absl::InvalidArgumentError(absl::StrCat("--text=", path, ": token ", id, " is past the model's V = ", d.vocab, " (wrong --tokenizer?)")));
  }
  std::vector<std::vector<bool>> keep(d.n_layers, std::vector<bool>(d.n_heads, false));
  for (int64_t l = 0; l < d.n_layers; ++l) {
    for (int64_t t = 0; t < d.n_heads; ++t) keep[l][t] = (*layers)[l] && (*tiles)[t];
  }
  // position ROPE: auto is the text's length over train_len
  if (auto s = setup->UseScalingFor(static_cast<int64_t>(ids->size())); !s.ok()) return Fail("eval relevance", s);
  const auto start = Clock::now();
  const std::vector<eval::TileRelevance> rel = eval::InspectRelevance(setup->weights, setup->options, *ids, keep, nullptr);
  json tokens = json::array();
  for (int32_t id : *ids) {
    auto piece = setup->tokenizer->Decode({id});
    tokens.push_back(piece.ok() ? *piece : "?");
  }
  json tiles_json = json::array(), maps = json::array();
  std::string csv = "layer,tile,w,r,w_used,window_pairs,nonzero_pairs,fraction_nonzero\n";
  for (const eval::TileRelevance& t : rel) {
    const double frac = t.window_pairs ? double(t.nonzero_pairs) / t.window_pairs : 0.0;
    const json w_used = std::isinf(t.w_used) ? json("inf") : json(t.w_used);
    tiles_json.push_back({{"layer", t.layer}, {"tile", t.tile}, {"w", t.w}, {"r", t.r}, {"w_used", w_used},
                          {"window_pairs", t.window_pairs}, {"nonzero_pairs", t.nonzero_pairs}, {"fraction_nonzero", frac}});
    csv += absl::StrFormat("%d,%d,%.6g,%.6g,%s,%d,%d,%.6f\n", t.layer, t.tile, t.w, t.r,
                           std::isinf(t.w_used) ? "inf" : absl::StrFormat("%.6g", t.w_used), t.window_pairs, t.nonzero_pairs, frac);
    if (!keep[t.layer][t.tile]) continue;
    json pairs = json::array();
    for (const eval::RelevancePair& p : t.pairs) pairs.push_back({p.i, p.j, p.alpha, p.mask});
    maps.push_back({{"layer", t.layer}, {"tile", t.tile}, {"pairs", pairs}});
  }
  json result = SetupJson(*setup);
  result.update({{"text", path}, {"tokens", tokens}, {"tiles", tiles_json}, {"maps", maps},
                 {"pair_fields", {"i", "j", "alpha", "m"}}});
  if (auto s = WriteTextFile(setup->out + "/relevance.json", result.dump()); !s.ok()) return Fail("eval relevance", s);
  if (auto s = WriteTextFile(setup->out + "/tiles.csv", csv); !s.ok()) return Fail("eval relevance", s);
  std::printf("eval relevance: %zu tokens of %s, %lld x %lld tiles in %s, %s windows (train_len %lld)\n", ids->size(), path.c_str(),
              static_cast<long long>(d.n_layers), static_cast<long long>(d.n_heads), Duration(Seconds(start)).c_str(),
              setup->options.expand_windows ? "expanded" : "as-learned", static_cast<long long>(setup->options.train_len));
  std::printf("  %5s %4s %10s %7s %10s\n", "layer", "tile", "w", "r", "nonzero");
  for (const eval::TileRelevance& t : rel) {
    std::printf("  %5lld %4lld %10.1f %7.3f %9.1f%%%s\n", static_cast<long long>(t.layer), static_cast<long long>(t.tile), t.w, t.r,
                t.window_pairs ? 100.0 * t.nonzero_pairs / t.window_pairs : 0.0, std::isinf(t.w_used) ? "  (w expanded to inf)" : "");
  }
  std::printf("  results: %s/relevance.json (maps of %zu tiles), %s/tiles.csv\n", setup->out.c_str(), maps.size(), setup->out.c_str());
  if (absl::GetFlag(FLAGS_plot)) {
    if (auto s = Plot(setup->out, "relevance"); !s.ok()) return Fail("eval relevance", s);
  }
  return 0;
}

}  // namespace multiscreen::cli
