// The subcommands of build/multiscreen. Each takes the arguments after its
// name (argv[0] is the subcommand) and returns the process exit code; errors
// are printed as one line on stderr.
#pragma once

namespace multiscreen::cli {

int ParamsCommand(int argc, char** argv);   // parameter counts of a model
int InitCommand(int argc, char** argv);     // write an initialized weights file
int ForwardCommand(int argc, char** argv);  // loss and gradients of a batch (parity hook)
int TokenizeCommand(int argc, char** argv);  // GPT-2 ids of stdin, or text of ids
int PrepareCommand(int argc, char** argv);   // corpora -> token shards
int TrainCommand(int argc, char** argv);    // the training loop
int CkptCommand(int argc, char** argv);     // checkpoint plan / export / inspect
int GenerateCommand(int argc, char** argv); // greedy decoding with the cache
int EvalCommand(int argc, char** argv);     // eval ppl | abcdigits | passkey | ttft: the paper's evaluations
int BenchCommand(int argc, char** argv);    // bench train | bench screening: measured speed
int SweepCommand(int argc, char** argv);    // sweep plan | run | status | fit | report: scaling-law sweeps
int PlanCommand(int argc, char** argv);     // layouts on N GPUs: modelled memory per rank and step time

}  // namespace multiscreen::cli
