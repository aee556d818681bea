// UTF-8 checks and repairs for corpora: finding invalid UTF-8, replacing it with U+FFFD
// the way Python's `bytes.decode("utf-8", errors="replace")` does, and replacing JSON
// escapes of lone UTF-16 surrogates (`"\udbc0"`, which JSON parsers such as nlohmann's
// refuse) the way tiktoken's encode does. `prepare` repairs by default and refuses
// with --strict_utf8; the tokenizer itself accepts only valid UTF-8.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace multiscreen {

// Byte offset of the first invalid UTF-8 sequence in `text` (overlong forms,
// surrogates and code points past U+10FFFF are invalid), or -1 when it is valid.
int64_t FindInvalidUtf8(std::string_view text);

// Replaces each maximal subpart of an ill-formed subsequence of `text` by U+FFFD
// (Unicode §3.9 "U+FFFD Substitution of Maximal Subparts", which CPython follows):
// a valid lead byte and the continuation bytes that may follow it so far become one
// U+FFFD ("\xe6\xad" + " " → U+FFFD + " "); any other bad byte becomes one U+FFFD
// each ("\xe0\x80\x80" → three). Returns the number of U+FFFD inserted; 0 leaves
// `text` untouched.
int64_t ReplaceInvalidUtf8(std::string* text);

// The length (1–3) of the UTF-8 sequence `text` ends inside: a lead byte and the
// continuation bytes valid after it so far (Unicode Table 3-7), fewer than it needs, so
// that more bytes may still complete it. 0 when `text` ends at a sequence boundary or in
// bytes that no continuation can make valid.
int64_t IncompleteUtf8Tail(std::string_view text);

// A byte stream written in pieces (`generate`'s tokens: GPT-2's byte-level BPE may end a
// token inside a character) cut so that no piece ends inside a character that the next
// bytes may complete: Push returns what may be written now, holding back such a tail
// (IncompleteUtf8Tail, at most 3 bytes); Finish returns what is held. The bytes returned,
// in order, are exactly the bytes pushed: ill-formed UTF-8 passes through unchanged once
// it cannot complete.
class Utf8Holdback {
 public:
  std::string Push(std::string_view bytes);
  std::string Finish();

 private:
  std::string held_;
};

// In JSON text `json` (valid UTF-8), the byte offset of the first `\uXXXX` escape of a
// UTF-16 surrogate that is not half of an escaped pair (a high \uD800–\uDBFF followed
// at once by a low \uDC00–\uDFFF), or -1 when there is none. An escaped backslash
// (`\\udbc0`) is not an escape of a surrogate.
int64_t FindLoneSurrogateEscape(std::string_view json);

// Rewrites each escape that FindLoneSurrogateEscape finds as `\uFFFD`; returns how
// many. The parsed strings then equal tiktoken's repair of Python's json.loads result,
// `s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")`: a lone surrogate
// becomes U+FFFD, a pair stays one character.
int64_t ReplaceLoneSurrogateEscapes(std::string* json);

}  // namespace multiscreen
