// The ranks' agreement on the run (run_agreement.h).
#include "trainer/run_agreement.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

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

}  // namespace

std::vector<std::pair<std::string, std::string>> RunConfigFields(const config::RunConfig& run) {
  std::vector<std::pair<std::string, std::string>> fields;
  const google::protobuf::Descriptor* d = run.GetDescriptor();
  const google::protobuf::Reflection* r = run.GetReflection();
  google::protobuf::TextFormat::Printer printer;
  printer.SetSingleLineMode(true);
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->name() == "logging" || f->name() == "data") continue;
    config::RunConfig only;
    if (f->is_repeated() ? r->FieldSize(run, f) > 0 : r->HasField(run, f)) {
      only = run;
      for (int j = 0; j < d->field_count(); ++j) {
        if (j != i) only.GetReflection()->ClearField(&only, d->field(j));
      }
    }
    std::string text;
    printer.PrintToString(only, &text);
    std::string value(absl::StripAsciiWhitespace(text));
    if (absl::StartsWith(value, f->name() + ": ")) value = value.substr(f->name().size() + 2);  // a scalar's value
    fields.emplace_back(f->name(), value);
  }
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
