// `multiscreen eval ppl`: the loss by position of a model over windows of --data (token
// ids as train reads them, or text and JSONL encoded with the tokenizer), averaged and
// smoothed (eval/position_loss.h), with the verdict past the training length; --resume
// continues from the windows in --out/ppl_state.json (cli/eval_common.h).
#include <unistd.h>

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
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/device.h"
#include "cli/eval_common.h"
#include "cli/flags.h"
#include "common/input_file.h"
#include "common/status.h"
#include "common/text_file.h"
#include "data/byte_source.h"
#include "data/loader.h"
#include "data/megatron_index.h"
#include "data/token_file.h"
#include "eval/position_loss.h"

ABSL_FLAG(int64_t, documents, 0, "eval ppl: at most this many windows (0: all)");
ABSL_FLAG(int64_t, stride, 0, "eval ppl: take a window every STRIDE tokens of a document (0: one per document; --stream: N+1)");
ABSL_FLAG(bool, stream, false, "eval ppl: read the input as one token stream (as training does) instead of splitting at EOS");
ABSL_FLAG(std::string, method, "auto", "eval ppl: full (one forward per window) | decode (the decoding cache) | auto");

namespace multiscreen::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = EvalClock;

// What --data holds: token ids in one of the formats train reads (--format, as train's:
// auto, llmc, megatron, raw_uint16; auto takes a Megatron pair, a name ending in .bin,
// .idx, .u16 or .uint16, and a file that starts with llm.c's magic), else text: JSONL
// (.jsonl, .json) or plain text, one document, either plain or compressed (.gz, .zst:
// data/byte_source.h, as prepare reads them; the name before the suffix says which). Errors name --data: missing, a broken link,
// a directory, an unknown --format.
struct PplData {
  bool tokens = false;
  TokenFormat format = TokenFormat::kAuto;  // tokens only
};

// Text holds no NUL byte: token ids under a name auto does not take for tokens. The error
// for `text` (of --data, at `where`: "" or ":LINE"), OK when it has none.
absl::Status NotTextError(const std::string& path, const std::string& where, std::string_view text) {
  const size_t nul = text.find('\0');
  if (nul == std::string_view::npos) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--data=", path, where, ": a NUL byte at byte ", nul, where.empty() ? "" : " of the line",
      ": not text; token ids need --format=llmc, megatron or raw_uint16 (auto takes names ending in .bin, .idx, .u16 "
      "or .uint16, Megatron pairs and llm.c's magic)"));
}

absl::StatusOr<PplData> PplDataOf(const std::string& path, const std::vector<std::string>& given) {
  PplData d;
  if (Given(given, "format")) {
    auto f = ParseTokenFormat(absl::GetFlag(FLAGS_format));
    if (!f.ok()) return absl::InvalidArgumentError(absl::StrCat("--", f.status().message()));
    d.format = *f;
  }
  std::string bin, idx;
  if (d.format != TokenFormat::kLlmc && d.format != TokenFormat::kRawUint16 && FindMegatronPair(path, &bin, &idx)) {
    d.tokens = true;
    return d;
  }
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (fs::is_symlink(fs::symlink_status(path, ec))) {
      return absl::NotFoundError(absl::StrCat("--data=", path, ": a broken symbolic link (to ",
                                              fs::read_symlink(path, ec).string(), ")"));
    }
    return absl::NotFoundError(absl::StrCat("--data=", path, ": does not exist"));
  }
  if (fs::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("--data=", path, ": is a directory; eval ppl reads one file (a "
                                                   "token file such as DIR/val_000000.bin, or text or JSONL)"));
  }
  d.tokens = d.format != TokenFormat::kAuto || path.ends_with(".bin") || path.ends_with(".idx") ||
             path.ends_with(".u16") || path.ends_with(".uint16");
  if (!d.tokens && fs::is_regular_file(path, ec)) {
    // llm.c's magic says tokens; a NUL byte in the first 64 KiB (of what a .gz or .zst
    // file decompresses to) says not text (before a tokenizer is loaded for it).
    // DocumentReader meets later NUL bytes as it reads.
    std::string head(64 << 10, '\0');
    auto source = OpenByteSource(path);
    if (!source.ok()) return absl::Status(source.status().code(), absl::StrCat("--data=", source.status().message()));
    size_t got = 0;
    while (got < head.size()) {
      auto n = (*source)->Read(head.data() + got, head.size() - got);
      if (!n.ok()) return absl::Status(n.status().code(), absl::StrCat("--data=", n.status().message()));
      if (*n == 0) break;
      got += *n;
    }
    head.resize(got);
    int32_t magic = 0;
    if (head.size() >= 4) std::memcpy(&magic, head.data(), 4);
    if (magic == kTokenFileMagic) {  // llm.c tokens compressed: read only as stored
      if (auto s = CompressedTokenDataError(path, NamedCompression(path)); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--data=", s.message()));
      }
    }
    d.tokens = magic == kTokenFileMagic;
    if (!d.tokens) MS_RETURN_IF_ERROR(NotTextError(path, "", head));
  }
  return d;
}

const char* FormatName(TokenFormat f) {
  switch (f) {
    case TokenFormat::kLlmc: return "llmc";
    case TokenFormat::kMegatron: return "megatron";
    case TokenFormat::kRawUint16: return "raw_uint16";
    default: return "auto";
  }
}

// Documents of --data, one at a time: token ids split at EOS and at a Megatron pair's
// document boundaries (or, with --stream, read whole), a JSONL file's text field per
// line, or a text file as one document.
class DocumentReader {
 public:
  static absl::StatusOr<DocumentReader> Open(const std::string& path, const PplData& data, const ModelDims& dims,
                                             const Gpt2Tokenizer* tok, bool stream) {
    DocumentReader r;
    r.path_ = path;
    r.dims_ = dims;
    r.tok_ = tok;
    r.stream_ = stream;
    if (data.tokens) {
      auto opened = TokenStream::Open({path}, /*min_tokens_per_shard=*/0, data.format);
      if (!opened.ok()) {
        const std::string m(opened.status().message());
        return absl::Status(opened.status().code(), m.starts_with(path) ? "--data=" + m : absl::StrCat("--data=", path, ": ", m));
      }
      r.tokens_ = std::shared_ptr<const TokenStream>(std::move(*opened));
      r.kind_ = kTokens;
      r.format_ = FormatName(r.tokens_->shard_format(0));
      r.fingerprint_ = r.tokens_->Fingerprint();
      if (!stream) {
        auto boundaries = r.tokens_->DocumentBoundaries();  // a Megatron pair's documents
        if (boundaries.ok()) r.boundaries_ = std::move(*boundaries);
      }
      return r;
    }
    if (tok == nullptr) return absl::InternalError("a tokenizer is needed for text input");
    int64_t size = 0;
    auto fd = OpenRegularFile(path, "text file", INT64_MAX, &size);
    if (!fd.ok()) return absl::Status(fd.status().code(), absl::StrCat("--data=", fd.status().message()));
    ::close(*fd);
    auto fingerprint = SampledFileFingerprint(path, "text file");
    if (!fingerprint.ok()) return fingerprint.status();
    r.fingerprint_ = *fingerprint;
    const std::string name = WithoutCompressionSuffix(path);
    r.kind_ = name.ends_with(".jsonl") || name.ends_with(".json") ? kJsonl : kText;
    if (r.kind_ == kJsonl) {
      auto lines = LineReader::Open(path);
      if (!lines.ok()) return absl::Status(lines.status().code(), absl::StrCat("--data=", lines.status().message()));
      r.lines_ = std::make_shared<LineReader>(std::move(*lines));
    } else {
      auto source = OpenByteSource(path);
      if (!source.ok()) return absl::Status(source.status().code(), absl::StrCat("--data=", source.status().message()));
      r.source_ = std::shared_ptr<ByteSource>(std::move(*source));
    }
    r.format_ = r.kind_ == kJsonl ? "jsonl" : "text";
    return r;
  }

  // "llmc", "megatron", "raw_uint16" (as read), "jsonl" or "text".
  const std::string& format() const { return format_; }
  // The content's sampled fingerprint: TokenStream::Fingerprint of token input (train's),
  // SampledFileFingerprint of a text file's bytes.
  const std::string& fingerprint() const { return fingerprint_; }

  // The next document; false at the end. Errors name the file (and line or token index).
  absl::StatusOr<bool> Next(std::vector<int32_t>* doc) {
    doc->clear();
    if (kind_ == kTokens) {
      constexpr int64_t kChunk = 1 << 16;
      while (pos_ < tokens_->size()) {
        if (next_boundary_ < boundaries_.size() && boundaries_[next_boundary_] <= pos_) {
          ++next_boundary_;
          if (!doc->empty() && boundaries_[next_boundary_ - 1] == pos_) return true;  // a document of the index ends
          continue;
        }
        if (chunk_at_ >= static_cast<int64_t>(chunk_.size())) {
          chunk_.resize(static_cast<size_t>(std::min(kChunk, tokens_->size() - pos_)));
          tokens_->Read(pos_, static_cast<int64_t>(chunk_.size()), chunk_.data());
          chunk_at_ = 0;
        }
        const uint32_t id = static_cast<uint32_t>(chunk_[chunk_at_]);  // a uint32 id past 2^31 - 1 is negative as int32
        if (id >= static_cast<uint32_t>(dims_.vocab)) {
          return absl::InvalidArgumentError(absl::StrCat("--data=", tokens_->Locate(pos_), " is ", id,
                                                         ", past the model's V = ", dims_.vocab));
        }
        ++pos_;
        ++chunk_at_;
        if (!stream_ && static_cast<int64_t>(id) == dims_.eos_token) {
          if (!doc->empty()) return true;
          continue;
        }
        doc->push_back(static_cast<int32_t>(id));
      }
      return !doc->empty();
    }
    if (kind_ == kText) {
      if (done_) return false;
      done_ = true;
      std::string text;
      std::vector<char> buf(1 << 20);
      while (true) {
        auto n = source_->Read(buf.data(), buf.size());
        if (!n.ok()) return absl::Status(n.status().code(), absl::StrCat("--data=", n.status().message()));
        if (*n == 0) break;
        text.append(buf.data(), *n);
      }
      MS_RETURN_IF_ERROR(CheckText(text, ""));
      return Encode(text, doc, "");
    }
    std::string line;
    while (true) {
      auto more = lines_->Next(&line);
      if (!more.ok()) return absl::Status(more.status().code(), absl::StrCat("--data=", more.status().message()));
      if (!*more) break;
      ++line_;
      MS_RETURN_IF_ERROR(CheckText(line, absl::StrCat(":", line_)));
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const json j = json::parse(line, nullptr, false);
      const std::string field = "text";
      if (!j.is_object() || !j.contains(field) || !j[field].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat("--data=", path_, ":", line_, ": not a JSON object with a string \"",
                                                       field, "\""));
      }
      if (!Encode(j[field].get<std::string>(), doc, absl::StrCat(":", line_)).ok()) return false;
      if (!doc->empty()) return true;
    }
    return false;
  }

 private:
  enum Kind { kTokens, kJsonl, kText };
  absl::Status CheckText(std::string_view text, const std::string& where) const { return NotTextError(path_, where, text); }
  absl::StatusOr<bool> Encode(const std::string& text, std::vector<int32_t>* doc, const std::string& where) {
    auto ids = tok_->Encode(text);
    if (!ids.ok()) return absl::InvalidArgumentError(absl::StrCat("--data=", path_, where, ": ", ids.status().message()));
    *doc = std::move(*ids);
    return !doc->empty();
  }
  std::string path_, format_, fingerprint_;
  ModelDims dims_;
  const Gpt2Tokenizer* tok_ = nullptr;
  bool stream_ = false, done_ = false;
  Kind kind_ = kTokens;
  std::shared_ptr<LineReader> lines_;   // JSONL
  std::shared_ptr<ByteSource> source_;  // text
  std::shared_ptr<const TokenStream> tokens_;
  std::vector<int64_t> boundaries_;  // where documents start (a Megatron pair's), then size(); empty: EOS only
  size_t next_boundary_ = 0;
  std::vector<int32_t> chunk_;       // tokens [pos_ - chunk_at_, ...) of the stream
  int64_t pos_ = 0, chunk_at_ = 0, line_ = 0;
};

}  // namespace

int EvalPpl(const std::vector<std::string>& given) {
  const int64_t N = absl::GetFlag(FLAGS_seq_len);
  if (N < 1) {
    return Fail("eval ppl", absl::InvalidArgumentError(
                                N == 0 ? "--seq_len=N (positions per window, >= 1) is required"
                                       : absl::StrCat("--seq_len=", N, ": must be positive (positions per window)")));
  }
  if (absl::GetFlag(FLAGS_data).empty()) return Fail("eval ppl", absl::InvalidArgumentError("--data=FILE is required"));
  const std::string method_flag = absl::GetFlag(FLAGS_method);
  if (method_flag != "auto" && method_flag != "full" && method_flag != "decode") {
    return Fail("eval ppl", absl::InvalidArgumentError(absl::StrCat("--method=", method_flag, ": expected full, decode or auto")));
  }
  for (const auto& [name, value] : {std::pair<const char*, int64_t>{"stride", absl::GetFlag(FLAGS_stride)},
                                    {"documents", absl::GetFlag(FLAGS_documents)}}) {
    if (value < 0) return Fail("eval ppl", absl::InvalidArgumentError(absl::StrCat("--", name, "=", value, ": must be >= 0")));
  }
  const std::string data = absl::GetFlag(FLAGS_data);
  if (auto s = RefuseInputInsideOut("data", data, absl::GetFlag(FLAGS_out)); !s.ok()) return Fail("eval ppl", s);
  auto data_kind = PplDataOf(data, given);
  if (!data_kind.ok()) return Fail("eval ppl", data_kind.status());
  const bool text_input = !data_kind->tokens;
  // The decoding cache (model/decoder.h) runs on either device, on the CPU in fp32 only:
  // there --method=decode is refused under bf16, and auto takes the full pass.
  auto device = DeviceFlags(given);
  if (!device.ok()) return Fail("eval ppl", device.status());
  const bool on_device = device->device != Device::kCpu, bf16 = device->precision != Precision::kFp32;
  if (method_flag == "decode" && !on_device && bf16) {
    return Fail("eval ppl", absl::InvalidArgumentError(
                                "--method=decode with --precision=bf16: the CPU's decoding cache runs in fp32; use "
                                "--method=full (or auto), or --device=cuda for bf16 decoding"));
  }
  auto setup = Setup(given, text_input);
  if (!setup.ok()) return Fail("eval ppl", setup.status());
  if (auto s = setup->UseScalingFor(N); !s.ok()) return Fail("eval ppl", s);
  eval::ModelRunner runner(setup->weights, setup->options, setup->device);
  // Full pass when it fits in memory (it is the cheaper one: the decode path computes the
  // whole vocabulary's logits at every position); else the decoding cache.
  // Either pass also holds the loss by position (sums, means, the smoothed curve: about 32
  // bytes a position), in double so that a huge --seq_len saturates rather than wraps.
  auto with_sums = [N](int64_t bytes) {
    const double total = double(bytes) + 32.0 * double(N);
    return total >= 9.2e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(total);
  };
  std::string method = method_flag;
  if (on_device) {
    // Either pass on the device: its activations, or its decoding cache, against the
    // device's free memory (read after the parameters were uploaded); auto takes the full
    // pass when it fits. Then the host's part: besides the weights already loaded, one
    // window's tokens and losses and the loss by position (about 32 bytes a position).
    const int64_t free_bytes = eval::DeviceFreeBytes(), full_bytes = runner.FullPassBytes(N),
                  decode_bytes = runner.DecodeBytes(N < std::numeric_limits<int64_t>::max() ? N + 1 : N);
    if (method == "auto") method = free_bytes == 0 || full_bytes < free_bytes * 0.8 ? "full" : "decode";
    const int64_t need = method == "full" ? full_bytes : decode_bytes;
    if (free_bytes > 0 && need > free_bytes) {
      return Fail("eval ppl", absl::ResourceExhaustedError(absl::StrCat(
                                  "--seq_len=", N, ": the ", method, " pass on ", DeviceName(setup->device.device),
                                  " needs about ", GiB(need), ", ", GiB(free_bytes), " free on the device (full pass ",
                                  GiB(full_bytes), ", decoding cache ", GiB(decode_bytes), ")")));
    }
    if (const int64_t avail = eval::AvailableMemoryBytes(), host_need = with_sums(0); avail > 0 && host_need > avail) {
      return Fail("eval ppl", absl::ResourceExhaustedError(absl::StrCat("--seq_len=", N, ": the loss by position needs about ",
                                                                        GiB(host_need), " of host memory, ", GiB(avail),
                                                                        " available")));
    }
  } else {
    const int64_t avail = eval::AvailableMemoryBytes(), full_bytes = with_sums(runner.FullPassBytes(N)),
                  decode_bytes = with_sums(runner.DecodeBytes(N < std::numeric_limits<int64_t>::max() ? N + 1 : N));
    if (method == "auto") method = avail == 0 || full_bytes < avail * 0.8 || bf16 ? "full" : "decode";
    const int64_t need = method == "full" ? full_bytes : decode_bytes;
    if (avail > 0 && need > avail) {
      return Fail("eval ppl", absl::ResourceExhaustedError(absl::StrCat(
                                  "--seq_len=", N, ": the ", method, " pass needs about ", GiB(need), ", ", GiB(avail),
                                  " available (full pass ", GiB(full_bytes), ", decoding cache ", GiB(decode_bytes), ")")));
    }
  }
  auto reader = DocumentReader::Open(data, *data_kind, setup->weights.dims, setup->tokenizer.get(), absl::GetFlag(FLAGS_stream));
  if (!reader.ok()) return Fail("eval ppl", reader.status());

  const std::string out = setup->out, state_path = out + "/ppl_state.json";
  eval::PositionLoss acc(N);
  int64_t skip_windows = 0;
  json identity = SetupJson(*setup);
  identity["data"] = data;
  // What --data held (its format as read, and a sampled fingerprint of its content, as
  // train's manifest records): a file overwritten between two runs shows.
  identity["data_format"] = reader->format();
  identity["data_fingerprint"] = reader->fingerprint();
  identity["seq_len"] = N;
  identity["stride"] = absl::GetFlag(FLAGS_stride);
  identity["stream"] = absl::GetFlag(FLAGS_stream);
  if (absl::GetFlag(FLAGS_resume)) {
    const json state = ReadJsonFile(state_path);
    if (!state.is_object()) {
      return Fail("eval ppl", absl::NotFoundError(absl::StrCat("--resume: ", state_path, " is missing or not JSON")));
    }
    const json saved = WithDeviceDefaults(state.value("identity", json()));
    if (const std::string differs = IdentityDifferences(saved, identity); !differs.empty()) {
      // The same --data path with another content: the windows would be averaged with
      // another file's under one result.
      if (saved.is_object() && saved.value("data", json()) == identity["data"] &&
          saved.value("data_fingerprint", json()) != identity["data_fingerprint"]) {
        return Fail("eval ppl", absl::FailedPreconditionError(absl::StrCat(
                                    "--resume: --data=", data,
                                    saved.contains("data_fingerprint")
                                        ? absl::StrCat(" changed since ", state_path, " was written")
                                        : absl::StrCat(" may have changed: ", state_path,
                                                       " is from before eval recorded what --data held"),
                                    ", and its windows would be averaged with another file's; rerun without --resume "
                                    "(into a new --out): ",
                                    differs)));
      }
      return Fail("eval ppl", absl::FailedPreconditionError(
                                  absl::StrCat("--resume: ", state_path, " is of another evaluation: ", differs)));
    }
    skip_windows = state["windows"].get<int64_t>();
    // A smaller --documents cannot take back windows already averaged (it was ignored).
    if (const int64_t limit = absl::GetFlag(FLAGS_documents); limit > 0 && skip_windows > limit) {
      return Fail("eval ppl", absl::FailedPreconditionError(absl::StrCat(
                                  "--resume: --documents=", limit, " is fewer than the ", skip_windows, " windows ",
                                  state_path, " already averages; give --documents=", skip_windows,
                                  " or more (0: all), or rerun without --resume into a new --out")));
    }
    acc.Restore(state["sums"].get<std::vector<double>>(), skip_windows);
    std::fprintf(stderr, "eval ppl: resuming after %lld windows\n", static_cast<long long>(skip_windows));
  }
  const int64_t max_windows = absl::GetFlag(FLAGS_documents);
  const int64_t stride = absl::GetFlag(FLAGS_stride) > 0 ? absl::GetFlag(FLAGS_stride)
                         : absl::GetFlag(FLAGS_stream) ? N + 1
                                                       : 0;
  std::vector<int32_t> doc;
  std::vector<float> losses(N);
  int64_t documents = 0, skipped = 0, windows = 0, longest = 0, tokens_timed = 0;
  double seconds = 0;
  const auto start = Clock::now();
  auto last_report = start;
  auto save = [&](bool final) -> absl::Status {
    json state = {{"identity", identity}, {"windows", acc.documents()}, {"sums", acc.sums()}};
    MS_RETURN_IF_ERROR(WriteTextFile(state_path, state.dump()));
    const auto mean = acc.Mean();
    const auto smooth = acc.Smoothed();
    const eval::FlatVerdict verdict = eval::PastTrainingLength(smooth, setup->options.train_len);
    json result = identity;
    result["complete"] = final;
    result["method"] = method;
    result["documents"] = acc.documents();
    result["documents_read"] = documents;
    result["skipped_short"] = skipped;
    result["tokens_per_s"] = seconds > 0 ? tokens_timed / seconds : 0.0;
    // The most bytes the process held on the GPU (0 on the CPU; the kernel tables' workspaces included).
    result["device_bytes_peak"] = BufferBytesPeak(Device::kCuda);
    result["mean_loss_all"] = acc.documents() ? std::accumulate(mean.begin(), mean.end(), 0.0) / N : 0.0;
    result["verdict"] = {{"applicable", verdict.applicable}, {"flat", verdict.flat}, {"before", verdict.before},
                         {"after", verdict.after}, {"line", verdict.line}};
    std::vector<int64_t> positions(N);
    std::iota(positions.begin(), positions.end(), 1);
    result["position"] = positions;
    result["mean_loss"] = mean;
    result["smoothed_loss"] = smooth;
    MS_RETURN_IF_ERROR(WriteTextFile(out + "/ppl.json", result.dump()));
    std::string csv = "position,mean_loss,smoothed_loss,perplexity,documents\n";
    for (int64_t p = 0; p < N; ++p) {
      csv += absl::StrFormat("%d,%.6f,%.6f,%.4f,%d\n", p + 1, mean[p], smooth[p], std::exp(smooth[p]), acc.documents());
    }
    return WriteTextFile(out + "/ppl.csv", csv);
  };
  bool full = false;
  while (!full) {
    auto more = reader->Next(&doc);
    if (!more.ok()) return Fail("eval ppl", more.status());
    if (!*more) break;
    ++documents;
    longest = std::max<int64_t>(longest, doc.size());
    if (static_cast<int64_t>(doc.size()) < N + 1) {
      ++skipped;
      continue;
    }
    for (int64_t off = 0; off + N + 1 <= static_cast<int64_t>(doc.size()); off += stride) {
      if (max_windows > 0 && windows >= max_windows) {
        full = true;
        break;
      }
      if (windows++ < skip_windows) {
        if (stride == 0) break;
        continue;
      }
      const auto t0 = Clock::now();
      if (method == "full") {
        runner.TokenLossesFull(doc.data() + off, N + 1, losses.data());
      } else {
        runner.TokenLossesDecode(doc.data() + off, N + 1, losses.data());
      }
      seconds += Seconds(t0);
      tokens_timed += N;
      acc.Add(losses.data());
      if (Seconds(last_report) > 10) {
        last_report = Clock::now();
        if (auto s = save(false); !s.ok()) return Fail("eval ppl", s);
        const double rate = tokens_timed / seconds;
        const std::string eta = max_windows > 0 ? Duration((max_windows - windows) * double(N) / rate) : "?";
        std::fprintf(stderr, "eval ppl: %lld windows, %.0f tokens/s, ETA %s\n", static_cast<long long>(windows), rate, eta.c_str());
      }
      if (stride == 0) break;
    }
  }
  if (acc.documents() == 0) {
    return Fail("eval ppl", absl::InvalidArgumentError(absl::StrCat(
                                "--data=", data, ": no document has --seq_len + 1 = ", N + 1, " tokens (", skipped,
                                " of ", documents, " skipped as shorter; the longest has ", longest,
                                ")", absl::GetFlag(FLAGS_stream) ? "" : "; --stream reads the input as one stream")));
  }
  if (auto s = save(true); !s.ok()) return Fail("eval ppl", s);
  const auto smooth = acc.Smoothed();
  const eval::FlatVerdict verdict = eval::PastTrainingLength(smooth, setup->options.train_len);
  std::printf("eval ppl: %lld windows of %lld tokens from %s (%lld documents shorter than %lld skipped), %s pass (%s), "
              "train_len %lld (%s), %s windows\n",
              static_cast<long long>(acc.documents()), static_cast<long long>(N), data.c_str(), static_cast<long long>(skipped),
              static_cast<long long>(N + 1), method.c_str(),
              DeviceWords(setup->device).c_str(), static_cast<long long>(setup->options.train_len),
              setup->train_len_source.c_str(), setup->options.expand_windows ? "expanded" : "as-learned");
  for (int64_t p : {int64_t{1}, std::min(N, setup->options.train_len), N}) {
    std::printf("  position %7lld: smoothed loss %.4f (perplexity %.2f)\n", static_cast<long long>(p), smooth[p - 1],
                std::exp(smooth[p - 1]));
  }
  if (setup->options.yarn_factor != 1.0) {
    std::printf("  YaRN factor %.6g%s, %s's ramp\n", setup->options.yarn_factor,
                setup->yarn.automatic ? " (context-matched: seq_len / train_len)" : "",
                setup->options.yarn_ramp == kernels::cpu::YarnRamp::kCode ? "the authors' code" : "the paper");
  }
  if (const int64_t n = SigmoidBiasLength(setup->weights.dims, &setup->options, 0); n > 0) {
    std::printf("  sigmoid bias -log %lld%s\n", static_cast<long long>(n),
                setup->sigmoid_bias.automatic ? " (context-matched: seq_len)"
                : setup->sigmoid_bias.length > 0 ? " (--sigmoid_bias_length)" : " (the training length)");
  }
  std::printf("  %.0f tokens/s\n  %s\n", seconds > 0 ? tokens_timed / seconds : 0.0, verdict.line.c_str());
  std::printf("  results: %s/ppl.json, %s/ppl.csv\n", out.c_str(), out.c_str());
  if (absl::GetFlag(FLAGS_plot)) {
    if (auto s = Plot(out, "ppl"); !s.ok()) return Fail("eval ppl", s);
  }
  return 0;
}


}  // namespace multiscreen::cli
