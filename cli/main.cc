// build/multiscreen: one binary with subcommands (like git). See README.md and
// shared/DESIGN.md ("Command-line contract").
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "build_version.h"  // generated at build time (cmake/build_version.cmake)
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/build_info.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

constexpr Command kCommands[] = {
    {"params", multiscreen::cli::ParamsCommand, "parameter counts: --model=psi8 [--json]"},
    {"tokenize", multiscreen::cli::TokenizeCommand, "GPT-2 ids of stdin: --tokenizer=DIR [--decode]"},
    {"prepare", multiscreen::cli::PrepareCommand,
     "corpora to token shards: --tokenizer=DIR --input=FILES... --output=DIR [--val_tokens= --shard_tokens=]"},
    {"init", multiscreen::cli::InitCommand, "initialize a model: --model=psi8 --seed=S --out=FILE.h5"},
    {"train", multiscreen::cli::TrainCommand,
     "train a model: --config=FILE [--run_dir=DIR --data=DIR --steps=N --lr=X ...]; resumes from run_dir"},
    {"ckpt", multiscreen::cli::CkptCommand,
     "checkpoints: plan --model=psi64 --tp=8 --pp=8 | init --model=M --tp=8 --pp=8 --out=RUN | reshard --checkpoint=DIR --tp --pp --out=RUN | export --checkpoint=DIR --out=W.h5 | inspect --checkpoint=DIR"},
    {"generate", multiscreen::cli::GenerateCommand,
     "greedy decoding: --checkpoint=DIR --prompt=TEXT [--max_tokens=N --threads=N --train_len=T --as_learned --yarn_factor=F|auto "
     "--yarn_ramp=paper|code --sigmoid_bias_length=N|auto --device=cpu|cuda --precision=fp32|bf16]"},
    {"forward", multiscreen::cli::ForwardCommand,
     "loss and gradients: --weights=FILE.h5 --tokens=FILE.bin --micro_batch=B --seq_len=T --out=OUT.h5"},
    {"eval", multiscreen::cli::EvalCommand,
     "evaluations: ppl --data=F --seq_len=N | abcdigits | passkey | ttft --context=N | relevance --text=F | choice --task=F --format=B (--checkpoint=DIR | --weights=W.h5) --out=DIR"},
    {"bench", multiscreen::cli::BenchCommand,
     "speed: train --model=psi8 --seq_len=T --micro_batch=B [--precision= --json] | screening --T=N --w=W"},
    {"sweep", multiscreen::cli::SweepCommand,
     "scaling-law sweeps: plan | run (--local [--jobs=K] | --slurm) | status | fit | report --sweep=FILE; fit --results=F.csv [--json]"},
    {"plan", multiscreen::cli::PlanCommand,
     "layouts on N GPUs, modelled: --model=M --gpus=N [--seq_len=4096 --gpu=h100|h200|a100 --global_batch=TOKENS --json]"},
};

void Usage(FILE* out) {
  std::fprintf(out, "usage: multiscreen <command> [--flags]\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.help);
  std::fprintf(out, "\n'multiscreen <command> --help' lists a command's flags; 'multiscreen --version' the build.\n");
}

// libgomp's idle threads spin (actively wait) between parallel regions by default; on a
// machine whose cores are busy with other work they take the time slices the working
// thread needs: `bench decode --model=psi8 --threads=2` beside two busy loops on a 2-vCPU
// AMD EPYC decoded 44.9 tokens/s spinning against 263.6 passive (5.9x), and fed a prompt
// token by token 3.4x slower (docs/commands.md, docs/evaluation.md). libgomp reads
// OMP_WAIT_POLICY once, when it is loaded, before main(), so setting it here takes a
// second start: when it is unset (or empty), it is set to passive and the program
// executes itself again (the file /proc/self/exe names, so the process keeps its name;
// the same arguments and environment, the same process id, so a launcher such as mpirun
// or srun sees the same process; nothing has been read or written yet). The second start
// finds it set and goes on: it runs at most once, at the cost of one more start (~0.1 s).
// A value the user set (`OMP_WAIT_POLICY=active` for a dedicated machine,
// `mpirun -x OMP_WAIT_POLICY=...`) is kept. Nothing is executed where the kernel did not
// start this program itself: under valgrind (its preloads; executing again would leave
// it) or through the dynamic loader (`ld.so build/multiscreen`: /proc/self/exe is the
// loader, not the file named to execve); nor where /proc is missing. There the threads spin as before.
void PreferPassiveOpenMpWaits(char** argv) {
  if (const char* policy = std::getenv("OMP_WAIT_POLICY"); policy != nullptr && *policy != '\0') return;
  if (const char* preload = std::getenv("LD_PRELOAD"); preload != nullptr && std::strstr(preload, "vgpreload")) return;
  // The file the kernel executed (/proc/self/exe) is the one named to execve (AT_EXECFN)
  // unless a loader or an emulator started this program.
  const char* execfn = reinterpret_cast<const char*>(::getauxval(AT_EXECFN));
  struct stat named {}, running {};
  if (execfn == nullptr || ::stat(execfn, &named) != 0 || ::stat("/proc/self/exe", &running) != 0 ||
      named.st_dev != running.st_dev || named.st_ino != running.st_ino) {
    return;
  }
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return;
  self[n] = '\0';
  if (::setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  ::execv(self, argv);
  ::unsetenv("OMP_WAIT_POLICY");  // execv failed: this process's libgomp spins, say so truly
}

}  // namespace

int main(int argc, char** argv) {
  multiscreen::SetBuildInfo({MULTISCREEN_VERSION, MULTISCREEN_COMMIT});
  PreferPassiveOpenMpWaits(argv);
  if (argc < 2) {
    Usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    Usage(stdout);
    return multiscreen::cli::WithStdoutFlushed("--help", 0);
  }
  if (name == "--version" || name == "version") {
    std::printf("%s\n", multiscreen::BuildDescription().c_str());
    return multiscreen::cli::WithStdoutFlushed("--version", 0);
  }
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    // Library code reports errors as Status; what still escapes as an
    // exception (allocation failure, a thread that cannot start) is reported
    // in one line too, never as an abort.
    try {
      return multiscreen::cli::WithStdoutFlushed(c.name, c.run(argc - 1, argv + 1));
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "multiscreen %s: out of memory (reduce the batch, the sequence length or the model)\n", c.name);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "multiscreen %s: %s\n", c.name, multiscreen::cli::OneLine(e.what()).c_str());
    }
    return 1;
  }
  std::fprintf(stderr, "multiscreen: unknown command '%s' (try 'multiscreen --help')\n", name.c_str());
  return 2;
}
