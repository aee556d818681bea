// `multiscreen eval ppl|abcdigits|passkey|ttft|relevance|choice …`: the paper's evaluations of a trained
// model (spec "Evaluations", issue 16). Each reads --checkpoint=DIR or --weights=FILE.h5,
// applies the inference window rule (expansion past --train_len; --as_learned keeps every
// w), writes JSON (and CSV where a table fits) into --out, prints a summary, and with
// --plot draws PNGs through tools/plot_eval.py (which re-runs on the results alone).
// Grid evaluations write results as each cell finishes; --resume skips the cells (ppl
// the windows, choice the items) already in --out, and without it results there are
// refused, not overwritten. Single-process: refused under a launcher of several.
// --device=cpu|cuda and --precision=fp32|bf16 (default cpu, fp32) place the model
// (eval::ModelRunner): the full forward and the decoding cache; on the CPU the decoding
// cache runs in fp32 only.
// This file is the dispatcher: the usage, the flags each evaluation accepts, what is
// refused before any of them runs; each evaluation is a file of its own (cli/eval_common.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "cli/device_memory.h"
#include "cli/eval_common.h"
#include "cli/flags.h"

ABSL_DECLARE_FLAG(bool, generate_only);

namespace multiscreen::cli {
namespace {

namespace fs = std::filesystem;

// What shrinks evaluation `sub`'s memory on a device (cli/device_memory.h's lines).
std::string DeviceMemoryAdvice(const std::string& sub) {
  const char* flag = sub == "ppl" || sub == "choice"           ? "a shorter --seq_len, "
                     : sub == "abcdigits" || sub == "passkey" ? "smaller --contexts, "
                     : sub == "ttft"                           ? "a shorter --context, "
                                                               : "";
  return absl::StrCat(flag, "a smaller model, or --device=cpu");
}

// The files evaluation `sub` keeps its results in, under --out, which --resume continues:
// ppl's (ppl.json, and ppl_state.json, its windows so far) and the grids' (<task>.json);
// none for the others (abcdigits --generate_only writes only its --dump).
std::vector<std::string> ResumableResults(const std::string& sub) {
  if (sub == "ppl") return {"ppl.json", "ppl_state.json"};
  if ((sub == "abcdigits" && !absl::GetFlag(FLAGS_generate_only)) || sub == "passkey") return {sub + ".json"};
  return {};
}

// An input file (`flag`=`path`) inside --out, where the evaluation writes its results
// files, is refused (a field report: `eval ppl --data=DIR/ppl.csv --out=DIR` replaced its

constexpr char kUsage[] =
    "usage: multiscreen eval ppl (--checkpoint=DIR | --weights=W.h5) --data=FILE --seq_len=N --out=DIR [--documents=K\n"
    "                            --stride=S --stream --method=auto|full|decode --train_len=T --as_learned --plot --resume\n"
    "                            --format=auto|llmc|megatron|raw_uint16] (--data: token ids as train reads them, or text/JSONL)\n"
    "       multiscreen eval abcdigits (--checkpoint=DIR | --weights=W.h5) --out=DIR [--contexts=4096,... --depths=0.1,...\n"
    "                            --instances=K --mode=tokens|lines --dump=F.jsonl --plot --resume]\n"
    "       multiscreen eval abcdigits --generate_only --mode=lines|tokens --length=N --depth=D --instances=K --dump=F.jsonl\n"
    "       multiscreen eval passkey (--checkpoint=DIR | --weights=W.h5) --out=DIR [--contexts= --depths= --instances= --dump=]\n"
    "       multiscreen eval ttft (--checkpoint=DIR | --weights=W.h5) --context=N --out=DIR [--repeats=5 --warmup=2]\n"
    "       multiscreen eval relevance (--checkpoint=DIR | --weights=W.h5) --text=FILE --out=DIR [--layers=0,3 --map_tiles=0,7 --plot]\n"
    "       multiscreen eval choice (--checkpoint=DIR | --weights=W.h5) --task=FILE.jsonl --format=hellaswag|piqa|arc|winogrande\n"
    "                            --out=DIR [--seq_len=N --resume]\n"
    "       every evaluation of a model: [--threads=N] (CPU worker threads; 0: all cores)\n"
    "       ppl, abcdigits, passkey, ttft, choice: [--device=cpu|cuda --precision=fp32|bf16] (where the model runs, the full\n"
    "                            forward and the decoding cache; default cpu, fp32; on the CPU the decoding cache, so\n"
    "                            --method=decode and the grids, is fp32)\n"
    "       a RoPE model (Transformer; Multiscreen position: ROPE), every evaluation: [--yarn_factor=F|auto\n"
    "                            --yarn_ramp=paper|code] (YaRN at inference; auto: length / train_len; the ramp of\n"
    "                            YaRN's paper, or of its authors' code)\n"
    "       a Transformer with attention: SIGMOID, every evaluation: [--sigmoid_bias_length=N|auto]\n"
    "                            (its bias -log n: n = N, or each evaluation's length; default the training length)\n"
    "       choice's --format (required) is the benchmark's: hellaswag|piqa|arc|winogrande (not a token file format)\n";

// kUsage's entries for `sub` alone: its own lines ("multiscreen eval <sub> ...", with their
// continuation lines) and the notes that apply to it (every evaluation's --threads; the
// device flags but for relevance; RoPE's --yarn_factor; choice's --format). `one_line`:
// joined into one line with single blanks, for an error's "; usage: ...".
std::string SubcommandUsage(const std::string& sub, bool one_line) {
  std::vector<std::string> entries;  // each with its continuation lines
  for (absl::string_view line : absl::StrSplit(kUsage, '\n', absl::SkipEmpty())) {
    const absl::string_view text = absl::StripLeadingAsciiWhitespace(line);
    const bool continuation = line.size() - text.size() > 7;  // deeper than "usage: " and "       "
    if (continuation && !entries.empty()) {
      absl::StrAppend(&entries.back(), "\n", line);
    } else {
      entries.emplace_back(absl::StripPrefix(text, "usage: "));
    }
  }
  std::vector<std::string> chosen;
  for (const std::string& e : entries) {
    const bool own = absl::StartsWith(e, absl::StrCat("multiscreen eval ", sub, " "));
    const bool note = absl::StartsWith(e, "every evaluation") || absl::StartsWith(e, "a RoPE model") ||
                      absl::StartsWith(e, "a Transformer with attention: SIGMOID") ||
                      (sub != "relevance" && absl::StartsWith(e, "ppl, abcdigits")) ||
                      (sub == "choice" && absl::StartsWith(e, "choice's --format"));
    if (own || note) chosen.push_back(e);
  }
  std::string text;
  if (!one_line) {
    for (size_t i = 0; i < chosen.size(); ++i) absl::StrAppend(&text, i == 0 ? "usage: " : "\n       ", chosen[i]);
    return text;
  }
  for (const std::string& e : chosen) {
    if (!absl::StartsWith(e, "multiscreen eval ")) continue;  // the notes make no line of an error
    if (!text.empty()) absl::StrAppend(&text, " | ");        // abcdigits' two forms
    const std::vector<absl::string_view> words = absl::StrSplit(e, absl::ByAnyChar(" \n"), absl::SkipEmpty());
    absl::StrAppend(&text, absl::StrJoin(words, " "));
  }
  return text;
}

}  // namespace

int EvalCommand(int argc, char** argv) {
  if (argc < 2) return Fail("eval", absl::InvalidArgumentError("expected a subcommand: ppl, abcdigits, passkey, ttft, relevance or choice"));
  const std::string sub = argv[1];
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::printf("%s", kUsage);
    return 0;
  }
  const std::initializer_list<std::string_view> model = {"checkpoint", "weights", "train_len", "as_learned", "out", "tokenizer",
                                                         "yarn_factor", "yarn_ramp", "sigmoid_bias_length", "threads"};
  std::vector<std::string_view> accepted(model);
  if (sub == "ppl" || sub == "abcdigits" || sub == "passkey" || sub == "ttft" || sub == "choice") {
    accepted.insert(accepted.end(), {"device", "precision"});
  }
  if (sub == "ppl") {
    accepted.insert(accepted.end(), {"data", "format", "seq_len", "documents", "stride", "stream", "method", "plot", "resume"});
  } else if (sub == "abcdigits" || sub == "passkey") {
    accepted.insert(accepted.end(), {"contexts", "depths", "instances", "dump", "generator_seed", "plot", "resume"});
    if (sub == "abcdigits") accepted.insert(accepted.end(), {"generate_only", "mode", "length", "depth"});
  } else if (sub == "ttft") {
    accepted.insert(accepted.end(), {"context", "repeats", "warmup", "generator_seed"});
  } else if (sub == "relevance") {
    accepted.insert(accepted.end(), {"text", "layers", "map_tiles", "plot"});
  } else if (sub == "choice") {
    accepted.insert(accepted.end(), {"task", "format", "seq_len", "resume"});
  } else {
    return Fail("eval", absl::InvalidArgumentError(absl::StrCat("unknown subcommand '", sub,
                                                                "': expected ppl, abcdigits, passkey, ttft, relevance or choice")));
  }
  // From here on the subcommand is known: errors say "multiscreen eval ppl: ...".
  const std::string cmd = absl::StrCat("eval ", sub);
  // ParseFlags takes an initializer_list; check the given flags against `accepted` here.
  const std::vector<std::string> given = GivenFlags(argc - 1, argv + 1);
  for (const std::string& g : given) {
    if (std::find(accepted.begin(), accepted.end(), g) == accepted.end()) {
      return Fail(cmd.c_str(), absl::InvalidArgumentError(absl::StrCat("--", g, " is not a flag of 'eval ", sub,
                                                                       "'; usage: ", SubcommandUsage(sub, true))));
    }
  }
  // --help: this evaluation's usage and flags, not every evaluation's.
  const std::string usage = SubcommandUsage(sub, false);
  std::vector<std::string> args;
  if (auto s = ParseFlagsAndArgs(argc - 1, argv + 1, usage.c_str(), accepted, &args); !s.ok()) {
    return Fail(cmd.c_str(), s);
  }
  if (!args.empty()) return Fail(cmd.c_str(), absl::InvalidArgumentError(absl::StrCat("unexpected argument '", args[0], "'")));
  // One process: under `mpirun -n 2` every rank ran the whole evaluation into the same --out.
  if (int rc = RefuseSeveralProcesses("eval"); rc != 0) return rc;
  // Setup makes --out before each evaluation checks its own flags and data: a refused
  // evaluation takes away the directory it made while it is still empty (one it found is
  // left as it was).
  const std::string out = absl::GetFlag(FLAGS_out);
  std::error_code ec;
  const bool out_existed = out.empty() || fs::exists(out, ec);
  auto remove_unused_out = [out, out_existed] {
    std::error_code ec;
    if (!out_existed && fs::is_directory(out, ec) && fs::is_empty(out, ec)) fs::remove(out, ec);
  };
  OnDeviceOutOfMemory(absl::StrCat("eval ", sub), DeviceMemoryAdvice(sub), remove_unused_out);
  if (auto s = RefuseEarlierResults(ResumableResults(sub), out); !s.ok()) return Fail(absl::StrCat("eval ", sub).c_str(), s);
  int rc;
  if (sub == "ppl") {
    rc = EvalPpl(given);
  } else if (sub == "abcdigits") {
    rc = EvalAbcDigits(given);
  } else if (sub == "passkey") {
    rc = EvalPasskey(given);
  } else if (sub == "relevance") {
    rc = EvalRelevance(given);
  } else if (sub == "choice") {
    rc = EvalChoice(given);
  } else {
    rc = EvalTtft(given);
  }
  if (rc != 0) remove_unused_out();
  return rc;
}

}  // namespace multiscreen::cli
