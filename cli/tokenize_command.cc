// `multiscreen tokenize --tokenizer=DIR [--decode]`: GPT-2 ids of stdin as one line of
// space-separated integers, or with --decode the text (raw bytes) of stdin's ids.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "data/gpt2_tokenizer.h"

ABSL_FLAG(bool, decode, false, "read whitespace-separated ids from stdin and write their text");

namespace multiscreen::cli {
namespace {

std::string ReadStdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), {});
}

}  // namespace

int TokenizeCommand(int argc, char** argv) {
  if (int rc = RefuseSeveralProcesses("tokenize"); rc != 0) return rc;
  if (auto s = ParseFlags(argc, argv, "multiscreen tokenize --tokenizer=DIR [--decode] < INPUT", {"tokenizer", "decode"}); !s.ok()) {
    return Fail("tokenize", s);
  }
  auto tok = Gpt2Tokenizer::Load(absl::GetFlag(FLAGS_tokenizer));
  if (!tok.ok()) return Fail("tokenize", tok.status());
  const std::string input = ReadStdin();
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
                                    absl::StrCat("stdin: '", word, "' (token ", ids.size(), ") is not a token id")));
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
