// Benchmarks of the data pipeline (not a test): tokenizer MB/s on one core over the
// nlp-corpus, and loader tokens/s. Run: build/tests/data_bench (needs data_cache/).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "data/gpt2_tokenizer.h"
#include "data/loader.h"
#include "data/token_file.h"
#include "nlohmann/json.hpp"

namespace multiscreen {
namespace {

std::string DataCache() {
  if (const char* env = std::getenv("MULTISCREEN_DATA_CACHE")) return env;
  return std::string(MS_SOURCE_DIR) + "/data_cache";
}

const Gpt2Tokenizer& Tokenizer() {
  static const auto* tok = [] {
    auto t = Gpt2Tokenizer::Load(DataCache() + "/gpt2");
    if (!t.ok()) {
      std::fprintf(stderr, "%s -- run scripts/setup\n", std::string(t.status().message()).c_str());
      std::exit(1);
    }
    return t->release();
  }();
  return *tok;
}

// The documents of the first `files` nlp-corpus files.
std::vector<std::string> Corpus(int files) {
  std::vector<std::string> docs;
  for (int i = 0; i < files; ++i) {
    std::ifstream in(DataCache() + "/nlp-corpus/doc-" + std::to_string(i) + ".json");
    for (auto& s : nlohmann::json::parse(in)) docs.push_back(s.get<std::string>());
  }
  return docs;
}

// One core, the whole corpus of 20 files per iteration (the piece cache warms up over
// the first iteration, as it does over a long prepare run).
void BM_Gpt2Encode(benchmark::State& state) {
  const Gpt2Tokenizer& tok = Tokenizer();
  const std::vector<std::string> docs = Corpus(20);
  int64_t bytes = 0, tokens = 0;
  std::vector<int32_t> ids;
  for (auto _ : state) {
    for (const std::string& d : docs) {
      ids.clear();
      benchmark::DoNotOptimize(tok.Encode(d, &ids));
      bytes += static_cast<int64_t>(d.size());
      tokens += static_cast<int64_t>(ids.size());
    }
  }
  state.SetBytesProcessed(bytes);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Gpt2Encode)->Unit(benchmark::kMillisecond)->UseRealTime();

// The same with a cold piece cache: a freshly loaded tokenizer for each pass over all
// 100 files (the first pass of a prepare run).
void BM_Gpt2EncodeColdCache(benchmark::State& state) {
  const std::vector<std::string> docs = Corpus(100);
  int64_t bytes = 0;
  std::vector<int32_t> ids;
  for (auto _ : state) {
    state.PauseTiming();
    auto tok = *Gpt2Tokenizer::Load(DataCache() + "/gpt2");
    state.ResumeTiming();
    for (const std::string& d : docs) {
      ids.clear();
      benchmark::DoNotOptimize(tok->Encode(d, &ids));
      bytes += static_cast<int64_t>(d.size());
    }
  }
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_Gpt2EncodeColdCache)->Unit(benchmark::kMillisecond)->UseRealTime();

// Reading the corpus (JSON parse) without tokenizing: the prepare reader thread's share.
void BM_ReadNlpCorpus(benchmark::State& state) {
  int64_t bytes = 0;
  for (auto _ : state) {
    for (const std::string& d : Corpus(100)) bytes += static_cast<int64_t>(d.size());
  }
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_ReadNlpCorpus)->Unit(benchmark::kMillisecond)->UseRealTime();

// Pre-tokenization (PCRE2) alone.
void BM_Gpt2Split(benchmark::State& state) {
  const Gpt2Tokenizer& tok = Tokenizer();
  const std::vector<std::string> docs = Corpus(20);
  int64_t bytes = 0;
  for (auto _ : state) {
    for (const std::string& d : docs) {
      benchmark::DoNotOptimize(tok.Split(d));
      bytes += static_cast<int64_t>(d.size());
    }
  }
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_Gpt2Split)->Unit(benchmark::kMillisecond)->UseRealTime();

// A 64M-token stream in 4 shards of random ids; batches of B = arg0 windows, T = 1024.
std::shared_ptr<TokenStream> Stream() {
  static std::shared_ptr<TokenStream> stream = [] {
    const auto dir = std::filesystem::temp_directory_path() / "ms_data_bench";
    std::filesystem::create_directories(dir);
    std::vector<std::string> paths;
    std::mt19937 rng(1);
    for (int s = 0; s < 4; ++s) {
      paths.push_back((dir / ("train_00000" + std::to_string(s) + ".bin")).string());
      std::vector<int32_t> tokens(16 << 20);
      for (auto& t : tokens) t = static_cast<int32_t>(rng() % 50257);
      if (!WriteTokenFile(paths.back(), tokens).ok()) std::exit(1);
    }
    return std::shared_ptr<TokenStream>(*TokenStream::Open(paths, 1025));
  }();
  return stream;
}

void BM_TrainLoaderNext(benchmark::State& state) {
  LoaderOptions o;
  o.seq_len = 1024;
  o.global_batch = state.range(0);
  o.prefetch = static_cast<int>(state.range(1));
  auto loader = *TrainLoader::Create(Stream(), o);
  int64_t tokens = 0;
  for (auto _ : state) {
    Batch b = *loader->Next();
    benchmark::DoNotOptimize(b.tokens.data());
    tokens += static_cast<int64_t>(b.tokens.size());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TrainLoaderNext)->Args({32, 0})->Args({32, 2})->Args({256, 0})->UseRealTime();

}  // namespace
}  // namespace multiscreen

BENCHMARK_MAIN();
