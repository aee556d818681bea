// Python's str.capitalize() over UTF-8 text, exactly as the CPython that runs
// lm-evaluation-harness computes it (its HellaSwag prompt capitalizes `ctx_b`): the first
// character by its full title-case mapping, every other by its full lower-case mapping
// (Objects/unicodeobject.c do_capitalize, CPython 3.8+), U+03A3 Σ lowered to U+03C2 ς where
// the Final_Sigma rule holds (a cased character before it and none after it, skipping
// case-ignorable ones) and to U+03C3 σ elsewhere. "they sit in the CAFÉ" → "They sit in
// the café"; "ǆemal" → "ǅemal" (title case, not upper); "ßa" → "Ssa"; "xİ" → "Xi̇"
// lowered into two code points; "ΟΔΟΣ" → "Οδος" with a final ς.
//
// The case data (eval/python_case_table.inc) is CPython's own, written out by
// tools/python_case_table.py, which --check compares with the Python at hand. Not ICU:
// it would add its 31 MB data library to the binary and to the GPU bundle, and its
// Unicode version is not CPython's (ICU 72: Unicode 15.0; CPython 3.11: 14.0), so it
// would differ on the characters one has and the other lacks; glibc's towupper/towlower
// have no title case, no one-to-many mapping and no final sigma.
#pragma once

#include <string>
#include <string_view>

namespace multiscreen::eval {

// str.capitalize() of UTF-8 `text`. Text that is not valid UTF-8 is returned unchanged.
std::string PythonCapitalize(std::string_view text);

// Where the case data came from: "CPython 3.11.2, Unicode 14.0.0".
const char* PythonCaseSource();

}  // namespace multiscreen::eval
