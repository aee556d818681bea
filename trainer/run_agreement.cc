// The ranks' agreement on the run (run_agreement.h).
#include "trainer/run_agreement.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>

#include <cstdint>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace multiscreen {
namespace {

// FNV-1a, cut to 52 bits: exact in a double, so that MPI's max over doubles compares it.
double Hash52(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<double>(h & ((uint64_t{1} << 52) - 1));
}

// min and max of each value over the ranks (max of −x for the min).
void MinMax(Communicator& world, std::vector<double> values, std::vector<double>* lo, std::vector<double>* hi) {
  *hi = values;
  world.AllReduce(hi->data(), static_cast<int64_t>(hi->size()), ReduceOp::kMax);
  for (double& v : values) v = -v;
  world.AllReduce(values.data(), static_cast<int64_t>(values.size()), ReduceOp::kMax);
  lo->resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) (*lo)[i] = -values[i];
}

// `text` of rank `root`, on every rank.
std::string BroadcastString(Communicator& world, std::string text, int root) {
  int64_t size = static_cast<int64_t>(text.size());
  world.Broadcast(&size, sizeof(size), root);
  text.resize(size);
  if (size > 0) world.Broadcast(text.data(), size, root);
  return text;
}

std::string Shorten(std::string value) {
  constexpr size_t kMax = 240;
  if (value.size() > kMax) value = absl::StrCat(value.substr(0, kMax), "...");
  return value.empty() ? "(unset)" : value;
}

// A run directory as it resolves: absolute, `.`, `..` and symlinks resolved (as far as it
// exists), without a trailing slash, so that one directory spelled two ways is one value
// (weakly_canonical keeps the slash of a directory that does not exist yet: `runs/r/`).
std::string ResolvedDir(const std::string& dir) {
  if (dir.empty()) return dir;
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(dir, ec);
  if (ec) return dir;
  // weakly_canonical leaves a path none of whose parts exist as given: absolute first.
  const std::filesystem::path p = std::filesystem::weakly_canonical(absolute, ec);
  std::string resolved = ec ? absolute.lexically_normal().string() : p.string();
  while (resolved.size() > 1 && resolved.back() == '/') resolved.pop_back();
  return resolved;
}

// Appends `m`'s leaf fields under `prefix` (RunConfigFields).
void AddLeaves(const google::protobuf::Message& m, const std::string& prefix,
               std::vector<std::pair<std::string, std::string>>* out) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  google::protobuf::TextFormat::Printer printer;
  printer.SetSingleLineMode(true);
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (prefix.empty() && (f->name() == "logging" || f->name() == "data" || f->name() == "model" ||
                           f->name() == "model_config")) {
      continue;
    }
    const std::string path = prefix.empty() ? f->name() : absl::StrCat(prefix, ".", f->name());
    if (f->is_repeated()) {
      std::vector<std::string> items(r->FieldSize(m, f));
      for (int k = 0; k < int(items.size()); ++k) printer.PrintFieldValueToString(m, f, k, &items[k]);
      out->emplace_back(path, absl::StrCat("[", absl::StrJoin(items, ", "), "]"));
    } else if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
      AddLeaves(r->GetMessage(m, f), path, out);
    } else if (f->has_presence() && !r->HasField(m, f)) {
      out->emplace_back(path, "(unset)");
    } else {
      std::string value;
      printer.PrintFieldValueToString(m, f, -1, &value);
      out->emplace_back(path, prefix.empty() && f->name() == "run_dir" ? ResolvedDir(r->GetString(m, f)) : value);
    }
  }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> RunConfigFields(const config::RunConfig& run) {
  std::vector<std::pair<std::string, std::string>> fields;
  AddLeaves(run, "", &fields);
  return fields;
}

std::vector<std::pair<std::string, std::string>> ModelAgreementFields(const ModelDims& dims) {
  std::vector<std::pair<std::string, std::string>> fields{{"the model's name", dims.name}};
  for (const ModelField& f : ModelFields(dims)) fields.emplace_back(absl::StrCat("the model's ", f.name), f.value);
  fields.emplace_back("the model's eos_token", absl::StrCat(dims.eos_token));
  return fields;
}

absl::Status AgreeOnRun(Communicator& world, const std::vector<std::pair<std::string, std::string>>& fields) {
  if (world.size() <= 1) return absl::OkStatus();
  // The same number of fields first (ranks running other builds may not have it).
  std::vector<double> lo, hi;
  MinMax(world, {double(fields.size())}, &lo, &hi);
  if (lo[0] != hi[0]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ranks disagree on what a run is: between ", lo[0], " and ", hi[0],
        " fields (do all ranks run the same multiscreen binary?)"));
  }
  std::vector<double> hashes;
  for (const auto& [name, value] : fields) hashes.push_back(Hash52(absl::StrCat(name, "=", value)));
  MinMax(world, hashes, &lo, &hi);
  size_t field = 0;
  while (field < fields.size() && lo[field] == hi[field]) ++field;
  if (field == fields.size()) return absl::OkStatus();
  // The lowest rank whose value differs from rank 0's, and both values.
  double zero = hashes[field];
  world.Broadcast(&zero, 1, 0);
  double other = hashes[field] != zero ? double(world.size() - world.rank()) : 0;
  world.AllReduce(&other, 1, ReduceOp::kMax);
  const int rank = world.size() - static_cast<int>(other);
  const std::string mine = fields[field].second;
  const std::string at_zero = BroadcastString(world, mine, 0), at_rank = BroadcastString(world, mine, rank);
  return absl::FailedPreconditionError(absl::StrCat(
      "ranks disagree on ", fields[field].first, ": rank 0 has ", Shorten(at_zero), ", rank ", rank, " has ",
      Shorten(at_rank),
      " (every rank must start the same run: a node-local run file or model file, a flag given to some ranks, "
      "or another file at the same path?)"));
}

absl::Status AgreeOnError(Communicator& world, const absl::Status& mine, bool name_rank) {
  // The lowest failing rank, counted from the top so that max finds it.
  double lowest = mine.ok() ? 0 : double(world.size() - world.rank());
  world.AllReduce(&lowest, 1, ReduceOp::kMax);
  if (lowest == 0) return absl::OkStatus();
  const int root = world.size() - static_cast<int>(lowest);
  double code = static_cast<double>(mine.code());
  world.Broadcast(&code, 1, root);
  std::string message = BroadcastString(world, std::string(mine.message()), root);
  if (name_rank) {
    double failing = mine.ok() ? 0 : 1;
    world.AllReduce(&failing, 1, ReduceOp::kSum);
    if (failing < world.size()) message = absl::StrCat("rank ", root, " of ", world.size(), ": ", message);
  }
  return absl::Status(static_cast<absl::StatusCode>(static_cast<int>(code)), message);
}

}  // namespace multiscreen
