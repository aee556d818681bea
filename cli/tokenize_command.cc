// `multiscreen tokenize --tokenizer=DIR [--decode]`: GPT-2 ids of stdin as one line of
// space-separated integers, or with --decode the text (raw bytes) of stdin's ids.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "data/gpt2_tokenizer.h"
#include "data/utf8.h"

ABSL_FLAG(bool, decode, false, "read whitespace-separated ids from stdin and write their text");

namespace multiscreen::cli {
namespace {

// All of stdin. Errors: stdin is a directory (`tokenize < /` read as a C++ stream said
// "basic_filebuf::underflow"), a failed read, with the system's reason.
absl::StatusOr<std::string> ReadStdin() {
  struct stat st = {};
  if (::fstat(STDIN_FILENO, &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError("stdin is a directory, not text (multiscreen tokenize --tokenizer=DIR < FILE)");
  }
  std::string input;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(STDIN_FILENO, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::DataLossError(absl::StrCat("stdin: read failed (", std::strerror(errno), ")"));
    if (n == 0) return input;
    input.append(buffer, static_cast<size_t>(n));
  }
}

// `word` for a message: its first 40 bytes (then how many there were), the bytes that
// are not valid UTF-8 as \xNN (a binary file fed to --decode was echoed raw).
std::string Shown(const std::string& word) {
  constexpr size_t kShown = 40;
  std::string_view rest(word.data(), std::min(word.size(), kShown));
  std::string out;
  while (!rest.empty()) {
    const int64_t bad = FindInvalidUtf8(rest);
    if (bad < 0) {
      out.append(rest);
      break;
    }
    out.append(rest.substr(0, static_cast<size_t>(bad)));
    absl::StrAppend(&out, "\\x", absl::Hex(static_cast<unsigned char>(rest[static_cast<size_t>(bad)]), absl::kZeroPad2));
    rest.remove_prefix(static_cast<size_t>(bad) + 1);
  }
  if (word.size() > kShown) absl::StrAppend(&out, "... (", word.size(), " bytes)");
  return out;
}

}  // namespace

int TokenizeCommand(int argc, char** argv) {
  if (int rc = RefuseSeveralProcesses("tokenize"); rc != 0) return rc;
  if (auto s = ParseFlags(argc, argv, "multiscreen tokenize --tokenizer=DIR [--decode] < INPUT", {"tokenizer", "decode"}); !s.ok()) {
    return Fail("tokenize", s);
  }
  auto tok = Gpt2Tokenizer::Load(absl::GetFlag(FLAGS_tokenizer));
  if (!tok.ok()) return Fail("tokenize", tok.status());
  auto read = ReadStdin();
  if (!read.ok()) return Fail("tokenize", read.status());
  const std::string& input = *read;
  if (absl::GetFlag(FLAGS_decode)) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (true) {
      i = input.find_first_not_of(" \t\r\n", i);
      if (i == std::string::npos) break;
      size_t end = input.find_first_of(" \t\r\n", i);
      if (end == std::string::npos) end = input.size();
      const std::string word = input.substr(i, end - i);
      int32_t id;
      if (!absl::SimpleAtoi(word, &id)) {
        return Fail("tokenize", absl::InvalidArgumentError(
                                    absl::StrCat("stdin: '", Shown(word), "' (token ", ids.size(), ") is not a token id")));
      }
      ids.push_back(id);
      i = end;
    }
    auto text = (*tok)->Decode(ids);
    if (!text.ok()) return Fail("tokenize", absl::InvalidArgumentError(absl::StrCat("stdin: ", text.status().message())));
    std::fwrite(text->data(), 1, text->size(), stdout);
    return std::fflush(stdout) == 0 ? 0 : 1;
  }
  std::vector<int32_t> ids;
  if (absl::Status s = (*tok)->Encode(input, &ids); !s.ok()) {
    return Fail("tokenize", absl::InvalidArgumentError(absl::StrCat("stdin: ", s.message())));
  }
  std::string out;
  out.reserve(ids.size() * 6);
  for (size_t k = 0; k < ids.size(); ++k) absl::StrAppend(&out, k ? " " : "", ids[k]);
  out += '\n';
  std::fwrite(out.data(), 1, out.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace multiscreen::cli
