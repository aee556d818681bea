// One line of an evaluation dump (`--dump=F.jsonl`), written exactly as Python's
// json.dumps writes the same dict (ensure_ascii: `"`, `\`, control characters and
// everything outside printable ASCII escaped; ", " and ": " separators), so that dumps
// compare byte for byte with tools/abcdigits_reference.py's.
#pragma once

#include <string>
#include <string_view>

namespace multiscreen::eval {

// A JSON string literal of `s` (UTF-8; an invalid byte becomes \ufffd), as json.dumps.
std::string PythonJsonString(std::string_view s);

// {"prompt": ..., "answer": ...} and a newline.
std::string TaskLine(std::string_view prompt, std::string_view answer);

}  // namespace multiscreen::eval
