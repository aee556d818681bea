// `multiscreen bench decode [--model=psi8 | --weights=W.h5 | --checkpoint=DIR]
//   [--prompt_tokens=N --new_tokens=M --feed_rows=R --device=cpu|cuda
//   --precision=fp32|bf16 --threads=N --seed=S --json]`: the decoders of model/decoder.h
// on a prompt of N random tokens (seeded), on the CPU or a CUDA device (the emulated one
// in an emulated build). Times, each the median of 3 runs on a fresh decoder (the caches
// empty), the session's first greedy token after
//   - the prompt fed token by token (Decoder::Feed of one token N − 1 times: a GEMV per
//     weight, layer and token, as every prompt was fed before chunks), and
//   - the prompt fed in chunks of R tokens (default Decoder::kFeedRows = 256: one Feed,
//     as generate, abcdigits and passkey feed it),
// each followed by the last prompt token's Step and its Argmax (which waits for a device);
// their ratio; and then M greedy tokens (Step + Argmax each) after the chunked prompt.
// Weights: --weights or --checkpoint, else --model's initialization with --seed (windows
// and acceptance widths as initialized: the caches' work depends on them); --model with
// either is refused. Windows longer than the training length are expanded to w = ∞, as
// generate expands them (a --checkpoint run's recorded length, else 4096). fp32 on the
// CPU (bf16 decodes on a device), as generate.
#pragma once

namespace multiscreen::cli {

// argv[0] is "decode". Returns the exit code (0, or 1 after a one-line error).
int BenchDecode(int argc, char** argv);

}  // namespace multiscreen::cli
