// The streaming data loader: token shards memory-mapped as one stream, training windows
// chosen by a pure function of (seed, sample index), a background prefetch thread, and a
// deterministic walk over the held-out shard. Knows nothing about models or devices.
//
// Training windows (WindowSampler). Let N be the stream's token count, T the sequence
// length (a window is T + 1 tokens: inputs and shifted targets), and
//   W     = max(1, floor(N / T) - 1)        windows per epoch
//   slack = N - 1 - W * T                   (>= 0, since N >= T + 1)
// Sample i belongs to epoch e = i / W, slot j = i mod W, and its window starts at
//   start(i) = o_e + pi_e(j) * T,
// where o_e in [0, slack] is the epoch's random offset (so successive epochs cut the
// stream at different places, as in the paper's "windows at random offsets") and pi_e is a
// permutation of [0, W): a 6-round balanced Feistel network on the smallest even number
// of bits covering W, cycle-walked into [0, W). o_e and the round keys come from
// splitmix64 of (seed, e). So every epoch visits W non-overlapping windows in a fresh
// order; windows span shard and document boundaries (documents are joined by EOS).
//
// Mixtures (data/mixture.h). A loader may draw from several sources (each a TokenStream
// with a weight): global sample i goes to source k = schedule.Source(i).source, where it is
// that source's sample m = schedule.Source(i).index, and its window is source k's
// WindowSampler at m. Each source has its own sampler over its own stream, seeded with
// splitmix64(splitmix64(seed) + k + 1); a loader of one source uses `seed` itself and
// m = i, so it gives exactly the windows of the single-stream loader.
//
// Batches. Global batch b after `start_sample` holds samples
//   s_b = start_sample + b * global_batch, ..., s_b + global_batch - 1,
// whatever the data-parallel degree; dp rank r takes the contiguous slice of
// global_batch / dp_size samples beginning at s_b + r * global_batch / dp_size. The only
// state to checkpoint is samples_consumed(); a loader created with start_sample = k
// yields exactly what one that consumed k samples yields next.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "data/megatron_index.h"
#include "data/mixture.h"

namespace multiscreen {

// The token file formats a source may hold (DESIGN "Data"; docs/data.md):
//   kLlmc       llm.c's .bin: 1024-byte header (data/token_file.h), uint16 or uint32 tokens
//   kMegatron   Megatron-LM's .bin/.idx pair (data/megatron_index.h), uint16 or int32 tokens,
//               named by either file or their common prefix
//   kRawUint16  nanoGPT's headerless .bin of uint16 tokens
//   kAuto       a Megatron pair when "<path>", "<prefix>.bin" and "<prefix>.idx" say so;
//               else llm.c when the file starts with its magic; else raw uint16 when the
//               name ends in .u16 or .uint16; anything else is refused, naming the file
//               (a headerless .bin needs the format said: --format=raw_uint16)
enum class TokenFormat { kAuto, kLlmc, kMegatron, kRawUint16 };

// Parses "auto" | "llmc" | "megatron" | "raw_uint16" (case-insensitive); errors name the value.
absl::StatusOr<TokenFormat> ParseTokenFormat(const std::string& name);

// The shards of one split: `path` is a file (itself), a Megatron prefix (itself), or a
// directory, whose files named "<split>_*.bin" or "*_<split>_*.bin" (llm.c's naming) are
// returned sorted; with kRawUint16 a directory's "<split>.bin" (nanoGPT's naming) too.
// Errors: no such path, a directory with no such shard, a directory holding
// kPrepareIncompleteMarker (new shards beside stale ones), a directory whose shards are
// numbered with a gap (train_000000.bin, then train_000005.bin: lost shards, named; each
// group of names that differ only in their digits counts up by one from its first, so
// llm.c's numbering from 1 passes).
// The file `prepare` keeps in its output directory while it moves new shards into place
// (data/prepare.cc): present afterwards only when that was interrupted.
inline constexpr char kPrepareIncompleteMarker[] = ".prepare-incomplete";

absl::StatusOr<std::vector<std::string>> ListShards(const std::string& path, const std::string& split,
                                                    TokenFormat format = TokenFormat::kAuto);

// Token files (llm.c .bin of version 1 or 2, Megatron pairs, raw uint16, mixed freely)
// memory-mapped read-only and seen as one stream of size() tokens. Thread-safe for
// concurrent reads.
class TokenStream {
 public:
  // Opens `paths` in order, each in `format` (kAuto: detected per file, see TokenFormat).
  // Every file must hold at least `min_tokens_per_shard` tokens.
  // Errors name the file: missing, unreadable, wrong magic or version, a header count that
  // disagrees with the file size, a Megatron index that is malformed or disagrees with
  // its .bin, a raw file of odd size, too few tokens; also an empty `paths`.
  static absl::StatusOr<std::unique_ptr<TokenStream>> Open(const std::vector<std::string>& paths,
                                                           int64_t min_tokens_per_shard = 1,
                                                           TokenFormat format = TokenFormat::kAuto);
  ~TokenStream();
  TokenStream(const TokenStream&) = delete;
  TokenStream& operator=(const TokenStream&) = delete;

  int64_t size() const { return size_; }
  const std::vector<std::string>& paths() const { return paths_; }
  // Token count of shard i (paths()[i]).
  int64_t shard_size(size_t i) const { return shards_[i].count; }
  // Error naming the first shard with fewer than `min_tokens` tokens, else OK.
  absl::Status CheckShardSizes(int64_t min_tokens) const;
  // The format file i was read in (never kAuto).
  TokenFormat shard_format(size_t i) const { return shards_[i].format; }
  // "PATH: token K": the file holding stream position `pos` (0 <= pos < size()) and the
  // token's index inside it, for messages.
  std::string Locate(int64_t pos) const;
  // Where documents start in the stream, when every file is a Megatron pair (their
  // indices say): each document's first token, then size(). Errors name the first file
  // without a document index (llm.c and raw files only separate documents by EOS).
  absl::StatusOr<std::vector<int64_t>> DocumentBoundaries() const;

  // A sampled fingerprint of the stream's content, for telling whether a resumed run
  // reads the data its checkpoint was trained on (DESIGN "Checkpoints": per-dataset
  // checksums): CRC-32C (hex) of size() and of 256 blocks of up to 1,024 tokens (as
  // int32) spread evenly over the stream, the first and the last included. Independent
  // of how the tokens are split into files and of their file format; cheap (1 MiB read)
  // at any corpus size, so it is a sample, not a checksum of every token: re-prepared data
  // (another tokenizer, order or corpus) changes it, a change confined to unsampled
  // tokens may not.
  std::string Fingerprint() const;

  // Copies tokens [start, start + n) of the stream into out[0, n) as int32, crossing
  // shard boundaries as needed. Requires 0 <= start and start + n <= size().
  void Read(int64_t start, int64_t n, int32_t* out) const;

 private:
  struct Shard {
    const uint8_t* tokens = nullptr;  // first token (after llm.c's 1024-byte header)
    int64_t count = 0;
    int64_t width = 2;
    int64_t first = 0;                // stream index of the shard's first token
    void* map = nullptr;
    size_t map_bytes = 0;
    TokenFormat format = TokenFormat::kLlmc;
    std::shared_ptr<const MegatronIndex> megatron;  // kMegatron only
  };
  TokenStream() = default;
  std::vector<std::string> paths_;
  std::vector<Shard> shards_;
  int64_t size_ = 0;
};

// The first `n` tokens of the token file `path` (`format` as TokenStream::Open takes it:
// an llm.c shard, a Megatron pair, raw uint16), each checked below `vocab` (when > 0).
// Errors name the file: TokenStream::Open's, fewer than n tokens ("holds 20 tokens, 27
// needed"), an id out of range with its index and its value as the file holds it (a
// version-2 id past 2^31 - 1 unsigned, never a negative int32).
absl::StatusOr<std::vector<int32_t>> ReadTokens(const std::string& path, TokenFormat format, int64_t n,
                                                int64_t vocab = 0);

// A sampled fingerprint of a regular file's bytes, for telling whether a file read again
// (eval ppl --resume's text --data) is the one read before, as TokenStream::Fingerprint
// is for tokens: CRC-32C (hex) of the size and of 256 blocks of up to 4 KiB spread evenly
// over the file, the first and the last included (1 MiB read at any size). Errors name
// the file (and `what` kind of file it should be: "text file") when it cannot be opened
// as a regular file or read.
absl::StatusOr<std::string> SampledFileFingerprint(const std::string& path, const char* what);

// The window definition above, as a pure function.
class WindowSampler {
 public:
  // Errors: seq_len < 1, num_tokens < seq_len + 1.
  static absl::StatusOr<WindowSampler> Create(int64_t num_tokens, int64_t seq_len, uint64_t seed);

  int64_t windows_per_epoch() const { return windows_; }
  int64_t seq_len() const { return seq_len_; }
  // o_e: the epoch's offset, in [0, slack].
  int64_t EpochOffset(int64_t epoch) const;
  // pi_e(j) for 0 <= j < windows_per_epoch().
  int64_t Permute(int64_t epoch, int64_t j) const;
  // First token of sample i's window (i >= 0); the window is [start, start + T + 1).
  int64_t Start(int64_t sample) const;

 private:
  int64_t num_tokens_ = 0, seq_len_ = 0, windows_ = 0, slack_ = 0;
  uint64_t seed_ = 0;
  int half_bits_ = 1;
};

// One rank's rows of a batch.
struct Batch {
  int64_t first_sample = 0;     // sample index (train) or window index (validation) of row 0
  int64_t rows = 0;             // global_batch / dp_size (train); micro_batch or fewer (validation)
  int64_t seq_len = 0;          // T
  std::vector<int32_t> tokens;  // [rows, T + 1]: row r is the window of sample first_sample + r
};

struct LoaderOptions {
  int64_t seq_len = 0;       // T
  int64_t global_batch = 0;  // windows per global batch, all dp ranks together
  int dp_rank = 0;
  int dp_size = 1;           // must divide global_batch
  uint64_t seed = 0;
  int64_t start_sample = 0;  // samples already consumed (restored from a checkpoint)
  int prefetch = 2;          // batches prepared ahead by a background thread (0: none)
};

// One source of a training mixture.
struct LoaderSource {
  std::string name;    // for messages and metrics; may be empty with one source
  double weight = 1;   // any non-negative scale; the schedule normalizes
  std::shared_ptr<const TokenStream> stream;
};

// The seed of source k's WindowSampler in a mixture of `num_sources` (see above).
uint64_t SourceSeed(uint64_t seed, int k, int num_sources);

// Training batches, endlessly (epochs follow each other).
class TrainLoader {
 public:
  // Errors: bad options (seq_len, batch, dp layout), a shard shorter than T + 1 tokens
  // (named).
  static absl::StatusOr<std::unique_ptr<TrainLoader>> Create(std::shared_ptr<const TokenStream> stream,
                                                             const LoaderOptions& options);
  // A mixture. Errors as above, each prefixed with "data source NAME: " when there are
  // several; and the schedule's (MixtureSchedule::Create: weights negative, not finite,
  // zero in sum).
  static absl::StatusOr<std::unique_ptr<TrainLoader>> Create(std::vector<LoaderSource> sources,
                                                             const LoaderOptions& options);
  ~TrainLoader();

  const MixtureSchedule& schedule() const { return schedule_; }
  const std::vector<LoaderSource>& sources() const { return sources_; }
  // Source k's sampler (k < sources().size()).
  const WindowSampler& source_sampler(int k) const { return samplers_[k]; }
  // "PATH: token K" for token `offset` (0 <= offset <= T) of sample `sample`'s window.
  std::string Locate(int64_t sample, int64_t offset) const;

  // This rank's slice of the next global batch; samples_consumed() grows by global_batch.
  // Errors: what went wrong making it, on whichever thread (an allocation that failed
  // in the prefetch thread), as one line naming the shards; the loader stays failed.
  absl::StatusOr<Batch> Next();
  // Samples of all ranks handed out so far, start_sample included: the checkpoint state.
  int64_t samples_consumed() const { return consumed_; }
  // Source 0's sampler: the sampler of a single-source loader.
  const WindowSampler& sampler() const { return samplers_[0]; }

  // Fills this rank's slice of the global batch that starts at sample `batch_start`.
  Batch Make(int64_t batch_start) const;

 private:
  TrainLoader(std::vector<LoaderSource> sources, const LoaderOptions& options, MixtureSchedule schedule,
              std::vector<WindowSampler> samplers);
  void Prefetch();
  // What a failed Make reports: the first source's first file.
  const TokenStream& first_stream() const { return *sources_.front().stream; }

  const std::vector<LoaderSource> sources_;
  const LoaderOptions options_;
  const MixtureSchedule schedule_;
  const std::vector<WindowSampler> samplers_;
  int64_t consumed_ = 0;
  // Prefetch state.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  int64_t next_to_make_ = 0;  // batch_start of the next batch the thread makes
  bool stop_ = false;
  absl::Status error_;  // the prefetch thread's failure, handed to Next()
  std::thread thread_;
};

struct ValidationOptions {
  int64_t seq_len = 0;      // T
  int64_t micro_batch = 0;  // rows per micro-batch (the last one of a replica may have fewer)
  int dp_rank = 0;
  int dp_size = 1;
  int64_t windows = 0;      // windows per pass, all replicas together; 0: every window there is
  // Whether `windows` is a promise (eval.windows): fewer windows in the stream, or a
  // count dp does not divide, is an error. Otherwise (eval.batches) the pass takes the
  // largest multiple of dp that is at most `windows` and held by the stream.
  bool exact = false;
};

// The held-out stream walked in order: window k covers tokens [k * T, k * T + T + 1),
// k < floor((N - 1) / T). A pass covers windows [0, W), W = windows(): replica r owns the
// block [r * W / dp, (r + 1) * W / dp) and walks it in micro-batches of micro_batch rows,
// its last one with what is left. So the windows of a pass depend on `windows` alone,
// not on dp or micro_batch, and their mean loss is comparable across every layout.
class ValidationLoader {
 public:
  // Errors: bad options, a shard shorter than T + 1 tokens, fewer than dp windows, and
  // with `exact` a count dp does not divide or the stream cannot hold (names the shards).
  static absl::StatusOr<std::unique_ptr<ValidationLoader>> Create(std::shared_ptr<const TokenStream> stream,
                                                                  const ValidationOptions& options);
  int64_t num_batches() const { return num_batches_; }
  // Windows of one pass, all replicas together (a multiple of dp).
  int64_t windows() const { return windows_; }
  const TokenStream& stream() const { return *stream_; }
  // Micro-batch b (0 <= b < num_batches()) of this replica: micro_batch rows, or fewer
  // for the last one. Every replica has the same number of rows in its micro-batch b.
  Batch Get(int64_t b) const;
  // Walks batches 0, 1, ...; false after the last one. Reset() starts over.
  bool Next(Batch* batch);
  void Reset() { next_ = 0; }

 private:
  ValidationLoader(std::shared_ptr<const TokenStream> stream, const ValidationOptions& options, int64_t windows)
      : stream_(std::move(stream)),
        options_(options),
        windows_(windows),
        per_replica_(windows / options.dp_size),
        num_batches_((per_replica_ + options.micro_batch - 1) / options.micro_batch) {}
  std::shared_ptr<const TokenStream> stream_;
  const ValidationOptions options_;
  const int64_t windows_, per_replica_, num_batches_;
  int64_t next_ = 0;
};

}  // namespace multiscreen
