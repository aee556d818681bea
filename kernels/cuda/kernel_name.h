// The name a kernel is reported under, by the emulated device's work tally (bench train
// --count) and by the device timing of each launch (bench train --op_times): the kernel as
// the compiler spells the template argument `Kernel` (a template's instance with its
// arguments), without namespaces (compilers spell them differently, see Unqualified), then
// its source file in parentheses, since kernels of different files may share a name in
// their anonymous namespaces (ForwardKernel):
// "FillKernel (elementwise.cu)", "AggregateKernel<0, 0> (screening.cu)". Header-only and
// free of the project's other headers: the emulator (cuda_emulator/device.h) names its
// launches with it too, so the two reports agree name for name (tests/cli/bench_op_times_test.py).
#pragma once

#include <string>
#include <string_view>

namespace multiscreen::kernels::cuda {

// The value of the template argument `Kernel` in a __PRETTY_FUNCTION__ string
// ("... [with auto Kernel = NAME; ...]"); `pretty` itself when it names none.
inline std::string_view KernelArgument(std::string_view pretty) {
  const size_t start = pretty.find("Kernel = ");
  if (start == std::string_view::npos) return pretty;
  std::string_view rest = pretty.substr(start + 9);
  int depth = 0;
  for (size_t i = 0; i < rest.size(); ++i) {
    const char c = rest[i];
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (depth == 0 && (c == ';' || c == ']')) return rest.substr(0, i);
  }
  return rest;
}

// `name` without namespace qualifiers, in template arguments too: GCC qualifies a name in
// __PRETTY_FUNCTION__ relative to the function it is printed in ("{anonymous}::FillKernel"
// inside multiscreen::kernels::cuda, "multiscreen::kernels::cuda::{anonymous}::FillKernel"
// inside msemu), nvcc's front end names an anonymous namespace "_GLOBAL__N__<hash>", and a
// demangler "(anonymous namespace)". With the source file beside it the bare name is unique.
inline std::string Unqualified(std::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name.compare(i, 2, "::") != 0) {
      out += name[i];
      continue;
    }
    ++i;  // drop "::" and the qualifier before it, back to the last delimiter
    constexpr std::string_view kDemangled = "(anonymous namespace)";
    if (out.size() >= kDemangled.size() && out.compare(out.size() - kDemangled.size(), kDemangled.size(), kDemangled) == 0) {
      out.resize(out.size() - kDemangled.size());
      continue;
    }
    const size_t cut = out.find_last_of("<>,( )*&");
    out.resize(cut == std::string::npos ? 0 : cut + 1);
  }
  return out;
}

// "KERNEL (FILE)": the kernel named in `pretty`, unqualified, and the file name of `path`
// (the translation unit's main file, __BASE_FILE__).
inline std::string ReportedKernelName(std::string_view pretty, std::string_view path) {
  const size_t slash = path.rfind('/');
  const std::string_view file = slash == std::string_view::npos ? path : path.substr(slash + 1);
  std::string name = Unqualified(KernelArgument(pretty));
  name += " (";
  name += file;
  name += ')';
  return name;
}

}  // namespace multiscreen::kernels::cuda
