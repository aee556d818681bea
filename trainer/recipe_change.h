// What a resume may change of a run's optimization without a word before (field report
// B2: another --lr or --precision resumed silently, while another --seq_len or global
// batch warned): the peak lr, the precision, AdamW's other fields, gradient clipping, and
// the schedule's shape. run.json records them when the run starts (RecipeOf); a resume
// that differs warns once per field, as for --seq_len.
//
// None is refused: the state a checkpoint holds (fp32 weights, fp32 AdamW moments, the
// step, the data position, the loss scale) is the same under every precision and every
// recipe, so each of these continues that state exactly and only the steps after it
// follow another trajectory — what lowering the lr after a loss spike, or finishing a run
// in bf16, asks for. (Turning fp16 on starts its loss scale at initial_loss_scale: a
// checkpoint of fp32 or bf16 saved none.)
#pragma once

#include <string>
#include <vector>

#include "configs/config.pb.h"
#include "nlohmann/json.hpp"

namespace multiscreen {

// The recipe of `run` (ApplyRunDefaults applied) as run.json's "recipe" object:
// {"optimizer.lr": 0.0625, "precision": "fp32", "optimizer.beta1": 0.9, ...,
//  "schedule.kind": "WARMUP_CONSTANT", "schedule.warmup_steps": 10, ...}, keyed by the run
// file's field names.
nlohmann::json RecipeOf(const config::RunConfig& run);

// One warning per field of `started` (run.json's "recipe"; null or not an object: none,
// a run started before run.json had it) whose value `now` changes, in key order:
// "--lr is now 0.01; the run started with 0.0625 (<run_json>): its trajectory changes
// here" — named by its flag where it has one (--lr, --precision), else by its field.
std::vector<std::string> RecipeChanges(const nlohmann::json& started, const nlohmann::json& now,
                                       const std::string& run_json);

}  // namespace multiscreen
