// `multiscreen params --model=NAME [--json]`: parameter counts from the layout
// the model uses (model/param_layout.h), with a per-group breakdown.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/config.h"
#include "model/param_layout.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(bool, json, false, "print one JSON object instead of a table");

namespace multiscreen::cli {

int ParamsCommand(int argc, char** argv) {
  if (int rc = RefuseSeveralProcesses("params"); rc != 0) return rc;
  if (auto s = ParseFlags(argc, argv, "multiscreen params --model=psi8 [--json]", {"model", "json"}); !s.ok()) return Fail("params", s);
  auto dims = LoadModel(absl::GetFlag(FLAGS_model));
  if (!dims.ok()) return Fail("params", dims.status());
  const ParamCounts c = CountParams(*dims);
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json j = {{"model", dims->name},
                        {"total", c.total},
                        {"non_embedding", c.non_embedding},
                        {"embedding", c.embedding},
                        {"embed_head_scalars", c.embed_head_scalars},
                        {"tile_matrices", c.tile_matrices},
                        {"tile_scalars", c.tile_scalars},
                        {"n_layers", dims->n_layers},
                        {"n_heads", dims->n_heads},
                        {"d_e", dims->d_e},
                        {"d_k", dims->d_k},
                        {"d_v", dims->d_v},
                        {"vocab", dims->vocab},
                        {"family", FamilyName(dims->family)}};
    if (dims->transformer()) {
      j["norm_gains"] = c.norm_gains;
      j["ffn_matrices"] = c.ffn_matrices;
      j["d_ff"] = dims->d_ff();
      j["qk_norm"] = dims->qk_norm;
      j["sio"] = dims->sio;
      j["pl_norm"] = dims->pl_norm;
      j["attention"] = AttentionKindName(dims->attention);
      if (dims->attention == AttentionKind::kSigmoid) j["sigmoid_bias"] = SigmoidBiasName(dims->sigmoid_bias);
    } else {  // Multiscreen's ablation switches (issue 30)
      j["tanh_norm"] = dims->tanh_norm;
      j["position"] = kernels::PositionKindName(dims->position);
      j["output_gate"] = dims->output_gate;
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  if (dims->transformer()) {
    std::printf("model %s (transformer): N_L=%lld N_H=%lld d_E=%lld d_head=%lld d_ff=%lld V=%lld qk_norm=%d sio=%d pl_norm=%d attention=%s%s\n",
                dims->name.c_str(), (long long)dims->n_layers, (long long)dims->n_heads, (long long)dims->d_e,
                (long long)dims->d_k, (long long)dims->d_ff(), (long long)dims->vocab, dims->qk_norm, dims->sio,
                dims->pl_norm, AttentionKindName(dims->attention),
                dims->attention == AttentionKind::kSigmoid
                    ? absl::StrCat(" sigmoid_bias=", SigmoidBiasName(dims->sigmoid_bias)).c_str()
                    : "");
    std::printf("  %-34s %15lld\n", "embedding W_E", (long long)c.embedding);
    std::printf("  %-34s %15lld\n", "s_E, s_F (sio)", (long long)c.embed_head_scalars);
    std::printf("  %-34s %15lld\n", "attention W_Q W_K W_V W_O", (long long)c.tile_matrices);
    std::printf("  %-34s %15lld\n", "FFN W_gate W_up W_down", (long long)c.ffn_matrices);
    std::printf("  %-34s %15lld\n", "RMSNorm gains", (long long)c.norm_gains);
    // The per-head scalars this model's switches add (qk_norm: s_QK; SSMAX: s_SS; SCREENING: s_w, s_r).
    std::string scalars = dims->qk_norm ? "s_QK" : "";
    if (dims->attention == AttentionKind::kSsmax) scalars += scalars.empty() ? "s_SS" : " s_SS";
    if (dims->attention == AttentionKind::kScreening) scalars = "s_w s_r";  // refuses qk_norm
    std::printf("  %-34s %15lld\n", ("head scalars " + (scalars.empty() ? std::string("(none)") : scalars)).c_str(),
                (long long)c.tile_scalars);
    std::printf("  %-34s %15lld\n", "non-embedding", (long long)c.non_embedding);
    std::printf("  %-34s %15lld\n", "total", (long long)c.total);
    return 0;
  }
  std::printf("model %s: N_L=%lld N_H=%lld d_E=%lld d_K=%lld d_V=%lld V=%lld%s%s%s\n", dims->name.c_str(),
              (long long)dims->n_layers, (long long)dims->n_heads, (long long)dims->d_e, (long long)dims->d_k,
              (long long)dims->d_v, (long long)dims->vocab,
              dims->position != kernels::PositionKind::kMipe
                  ? (std::string(" position=") + kernels::PositionKindName(dims->position)).c_str()
                  : "",
              dims->output_gate ? "" : " output_gate=0", dims->tanh_norm ? "" : " tanh_norm=0");
  std::printf("  %-34s %15lld\n", "embedding W_E", (long long)c.embedding);
  std::printf("  %-34s %15lld\n", "s_E, s_F", (long long)c.embed_head_scalars);
  std::printf("  %-34s %15lld\n", dims->output_gate ? "tile matrices W_Q W_K W_V W_G W_O" : "tile matrices W_Q W_K W_V W_O",
              (long long)c.tile_matrices);
  std::printf("  %-34s %15lld\n", "tile scalars s_w s_r s_O", (long long)c.tile_scalars);
  std::printf("  %-34s %15lld\n", "non-embedding", (long long)c.non_embedding);
  std::printf("  %-34s %15lld\n", "total", (long long)c.total);
  return 0;
}

}  // namespace multiscreen::cli
