// prepare: readers (text, JSONL, JSON arrays; plain, .gz, .zst), sharding, the
// validation split, determinism, and one-line errors naming the file and line.
#include "data/loader.h"
#include "data/prepare.h"

#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <thread>

#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/token_file.h"
#include "data_test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace multiscreen {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

#define FFFD "\xef\xbf\xbd"

void WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

void WriteZstd(const std::string& path, const std::string& bytes) {
  std::string out(ZSTD_compressBound(bytes.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), bytes.data(), bytes.size(), 3));
  WriteFile(path, out);
}

// Every token of the prepared shards in order: val first, then train.
std::vector<int32_t> AllTokens(const PrepareSummary& s) {
  std::vector<int32_t> all;
  std::vector<std::string> shards = s.train_shards;
  if (!s.val_shard.empty()) shards.insert(shards.begin(), s.val_shard);
  for (const std::string& path : shards) {
    auto t = ReadTokenFile(path);
    EXPECT_TRUE(t.ok()) << t.status();
    if (t.ok()) all.insert(all.end(), t->begin(), t->end());
  }
  return all;
}

std::string PrepareError(const Gpt2Tokenizer& tok, const std::vector<std::string>& inputs, const std::string& out,
                         const std::string& field = "text", bool strict_utf8 = false) {
  PrepareOptions o;
  o.inputs = inputs;
  o.output_dir = out;
  o.read.text_field = field;
  o.read.strict_utf8 = strict_utf8;
  o.val_tokens = 0;
  auto s = Prepare(tok, o);
  EXPECT_FALSE(s.ok());
  return s.ok() ? "" : std::string(s.status().message());
}

const std::vector<std::string> kDocs = {
    "the first document, plain text\nwith two lines\n",
    "JSONL one: the theory",
    "JSONL two: caf\u00e9 \u4f60\u597d \U0001F44D",
    "",  // an empty document still gets its EOS
    "array string one",
    "array object two, with \"quotes\" and \\backslash",
    "gzip jsonl: thee thou",
    "zstd array: tether",
    "gzip text: the end",
};

// Writes kDocs across every supported format, in an order the inputs list keeps.
std::vector<std::string> WriteAllFormats(const TempDir& dir) {
  WriteFile(dir.path("a.txt"), kDocs[0]);
  WriteFile(dir.path("b.jsonl"), absl::StrCat(nlohmann::json({{"text", kDocs[1]}, {"id", 1}}).dump(), "\n\n",
                                              nlohmann::json({{"text", kDocs[2]}}).dump(), "\r\n",
                                              nlohmann::json({{"text", kDocs[3]}}).dump()));
  WriteFile(dir.path("c.json"), nlohmann::json::array({kDocs[4], {{"text", kDocs[5]}}}).dump());
  WriteGzip(dir.path("d.jsonl.gz"), nlohmann::json({{"text", kDocs[6]}}).dump() + "\n");
  // Suffixes are read in any case (e.JSON.ZST is zstd data holding a JSON array).
  WriteZstd(dir.path("e.JSON.ZST"), nlohmann::json::array({kDocs[7]}).dump());
  WriteGzip(dir.path("f.txt.gz"), kDocs[8]);
  return {dir.path("a.txt"), dir.path("b.jsonl"), dir.path("c.json"), dir.path("d.jsonl.gz"),
          dir.path("e.JSON.ZST"), dir.path("f.txt.gz")};
}

TEST(PrepareTest, ShardsDecodeToTheDocumentsJoinedByEos) {
  auto tok = testing::TinyTokenizer();
  ASSERT_NE(tok, nullptr);
  TempDir dir;
  PrepareOptions o;
  o.inputs = WriteAllFormats(dir);
  o.output_dir = dir.path("out");
  o.shard_tokens = 37;
  o.val_tokens = 40;
  auto s = Prepare(*tok, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->documents, static_cast<int64_t>(kDocs.size()));

  std::string joined;
  for (const std::string& d : kDocs) joined += d + "<|endoftext|>";
  const std::vector<int32_t> all = AllTokens(*s);
  EXPECT_EQ(*tok->Decode(all), joined);
  EXPECT_EQ(static_cast<int64_t>(all.size()), s->tokens);
  EXPECT_EQ(s->tokens, s->val_tokens + s->train_tokens);

  // The validation shard holds whole documents, at least val_tokens of them.
  auto val = ReadTokenFile(s->val_shard);
  ASSERT_TRUE(val.ok());
  EXPECT_GE(static_cast<int64_t>(val->size()), 40);
  EXPECT_EQ(val->back(), tok->eos_id());
  EXPECT_EQ(std::filesystem::path(s->val_shard).filename(), "val_000000.bin");
  // Train shards are exactly shard_tokens long but the last.
  ASSERT_GE(s->train_shards.size(), 2u);
  for (size_t i = 0; i < s->train_shards.size(); ++i) {
    EXPECT_EQ(std::filesystem::path(s->train_shards[i]).filename(), absl::StrCat("train_00000", i, ".bin"));
    const int64_t n = ReadTokenFile(s->train_shards[i])->size();
    if (i + 1 < s->train_shards.size()) EXPECT_EQ(n, 37);
  }
  EXPECT_EQ(ReadFile(s->val_shard).substr(4, 4), std::string("\x01\0\0\0", 4)) << "version 1 (uint16)";
}

TEST(PrepareTest, TheGpt2StreamOfTheNlpCorpusMatchesTheGoldens) {
  auto tok = testing::LoadGpt2OrFail();
  ASSERT_NE(tok, nullptr);
  TempDir dir;
  PrepareOptions o;
  o.inputs = {testing::DataCacheDir() + "/nlp-corpus"};
  o.output_dir = dir.path("out");
  o.shard_tokens = 500'000;
  o.val_tokens = 100'000;
  int64_t progress_calls = 0;
  o.on_progress = [&](const PrepareProgress&) { ++progress_calls; };
  auto s = Prepare(*tok, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GE(progress_calls, 1);
  const nlohmann::json goldens = nlohmann::json::parse(ReadFile(testing::TestDataDir() + "/gpt2_goldens.json"));
  const std::vector<int32_t> all = AllTokens(*s);
  int64_t at = 0, documents = 0;
  for (const auto& f : goldens["corpus"]) {
    uint32_t h = 2166136261u;
    const int64_t n = f["tokens"];
    ASSERT_LE(at + n, static_cast<int64_t>(all.size()));
    for (int64_t i = at; i < at + n; ++i) h = (h ^ static_cast<uint32_t>(all[i])) * 16777619u;
    EXPECT_EQ(h, f["fnv1a"].get<uint32_t>()) << f["file"];
    at += n;
    documents += f["documents"].get<int64_t>();
  }
  EXPECT_EQ(at, static_cast<int64_t>(all.size()));
  EXPECT_EQ(s->documents, documents);
  EXPECT_EQ(s->train_shards.size(), static_cast<size_t>((s->train_tokens + 499'999) / 500'000));
}

TEST(PrepareTest, TheDefaultCorpusIsByteIdenticalAt1_2And3Threads) {
  auto tok = testing::LoadGpt2OrFail();
  ASSERT_NE(tok, nullptr);
  TempDir dir;
  std::vector<std::string> contents[3];
  for (int threads = 1; threads <= 3; ++threads) {
    PrepareOptions o;
    o.inputs = {testing::DataCacheDir() + "/nlp-corpus"};  // 100 files: read by up to `threads` readers at once
    o.output_dir = dir.path(absl::StrCat("out", threads));
    o.shard_tokens = 500'000;
    o.threads = threads;
    auto s = Prepare(*tok, o);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->tokens, 2'050'151);  // docs/data.md: 2.05M tokens with an EOS after each of the 100,000 sentences
    contents[threads - 1].push_back(ReadFile(s->val_shard));
    for (const auto& p : s->train_shards) contents[threads - 1].push_back(ReadFile(p));
  }
  EXPECT_EQ(contents[0].size(), 5u);  // val + 4 train shards
  EXPECT_TRUE(contents[0] == contents[1]);
  EXPECT_TRUE(contents[0] == contents[2]);
}

// A JSONL corpus of the nlp-corpus sentences, one object per line (about 1.7 MB).
std::string NlpCorpusJsonl(int files) {
  std::string out;
  for (int i = 0; i < files; ++i) {
    const auto array = nlohmann::json::parse(ReadFile(absl::StrCat(testing::DataCacheDir(), "/nlp-corpus/doc-", i, ".json")));
    for (const auto& text : array) out += nlohmann::json{{"text", text}}.dump() + "\n";
  }
  return out;
}

TEST(PrepareTest, ALargeJsonlFileIsReadInPiecesWithTheSameOutput) {
  auto tok = testing::LoadGpt2OrFail();
  ASSERT_NE(tok, nullptr);
  TempDir dir;
  const std::string jsonl = NlpCorpusJsonl(20);
  WriteFile(dir.path("corpus.jsonl"), jsonl);
  ReadOptions read;
  auto units = SplitInputs({dir.path("corpus.jsonl")}, read, 64 << 10);
  ASSERT_TRUE(units.ok()) << units.status();
  ASSERT_GT(units->size(), 20u);
  // Pieces tile the file, each cut after a newline, numbered with the line it starts.
  int64_t at = 0, line = 1;
  for (const InputUnit& u : *units) {
    EXPECT_TRUE(u.split);
    EXPECT_EQ(u.begin, at);
    EXPECT_EQ(u.first_line, line);
    EXPECT_EQ(jsonl[u.end - 1], '\n');
    line += std::count(jsonl.begin() + u.begin, jsonl.begin() + u.end, '\n');
    at = u.end;
    EXPECT_EQ(u.last_of_file, at == static_cast<int64_t>(jsonl.size()));
  }
  EXPECT_EQ(at, static_cast<int64_t>(jsonl.size()));
  std::vector<std::string> contents[4];
  for (int run = 0; run < 4; ++run) {
    PrepareOptions o;
    o.inputs = {dir.path("corpus.jsonl")};
    o.output_dir = dir.path(absl::StrCat("out", run));
    o.shard_tokens = 100'000;
    o.val_tokens = 10'000;
    o.threads = run == 0 ? 1 : run;
    o.split_bytes = run == 0 ? 0 : 64 << 10;  // run 0: the whole file by one reader
    auto s = Prepare(*tok, o);
    ASSERT_TRUE(s.ok()) << s.status();
    contents[run].push_back(ReadFile(s->val_shard));
    for (const auto& p : s->train_shards) contents[run].push_back(ReadFile(p));
  }
  EXPECT_GT(contents[0].size(), 3u);
  for (int run = 1; run < 4; ++run) EXPECT_TRUE(contents[0] == contents[run]) << "run " << run;
  // An error in a later piece names the file's own line.
  std::string bad = jsonl;
  const size_t cut = bad.find('\n', bad.size() / 2 + 1000) + 1;  // the start of a line in the second half
  const int64_t bad_line = std::count(bad.begin(), bad.begin() + cut, '\n') + 1;
  bad.insert(cut, "{\"text\": 7}\n");
  WriteFile(dir.path("bad.jsonl"), bad);
  PrepareOptions o;
  o.inputs = {dir.path("bad.jsonl")};
  o.output_dir = dir.path("bad_out");
  o.threads = 3;
  o.split_bytes = 64 << 10;
  EXPECT_EQ(Prepare(*tok, o).status().message(),
            absl::StrCat(dir.path("bad.jsonl"), ":", bad_line, ": field 'text' is a number, not a string"));
  // A large file of blank lines only: no document in any piece.
  WriteFile(dir.path("blank.jsonl"), std::string(200'000, '\n'));
  o.inputs = {dir.path("blank.jsonl")};
  EXPECT_EQ(Prepare(*tok, o).status().message(), dir.path("blank.jsonl") + ": empty input (no documents)");
}

TEST(PrepareTest, AnInterruptedPrepareLeavesNoShard) {
  auto tok = testing::LoadGpt2OrFail();
  ASSERT_NE(tok, nullptr);
  TempDir dir;
  PrepareOptions o;
  o.inputs = {testing::DataCacheDir() + "/nlp-corpus"};
  o.output_dir = dir.path("out");
  o.shard_tokens = 50'000;  // several shards finished (still *.tmp) before the stop
  o.threads = 2;
  int polls = 0;
  o.cancelled = [&] { return ++polls > 30; };
  auto s = Prepare(*tok, o);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsCancelled(s.status())) << s.status();
  EXPECT_NE(std::string(s.status().message()).find("interrupted after"), std::string::npos) << s.status();
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.path("out"))) left.push_back(e.path().filename());
  EXPECT_TRUE(left.empty()) << absl::StrJoin(left, ", ");
}

TEST(PrepareTest, ARerunIntoTheSameDirectoryRemovesStaleShards) {
  auto tok = testing::TinyTokenizer();
  TempDir dir;
  WriteFile(dir.path("in.txt"), std::string(200, 'x'));
  std::filesystem::create_directories(dir.path("out"));
  WriteFile(dir.path("out/notes.txt"), "kept");
  PrepareOptions o;
  o.inputs = {dir.path("in.txt")};
  o.output_dir = dir.path("out");
  o.val_tokens = 0;
  o.shard_tokens = 50;
  ASSERT_EQ(Prepare(*tok, o)->train_shards.size(), 5u);  // 201 tokens
  o.shard_tokens = 100;
  ASSERT_EQ(Prepare(*tok, o)->train_shards.size(), 3u);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path("out"))) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"notes.txt", "train_000000.bin", "train_000001.bin", "train_000002.bin"}));
  // (No .prepare-incomplete marker either: it only outlives a prepare killed while
  // moving shards into place.) A directory left that way is refused by the loader,
  // since its shards may be a mix of two runs.
  ASSERT_TRUE(ListShards(dir.path("out"), "train").ok());
  WriteFile(dir.path("out/.prepare-incomplete"), "");
  auto listed = ListShards(dir.path("out"), "train");
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.status().message().find("was interrupted while moving its shards into place"), std::string::npos)
      << listed.status();
  // Preparing again repairs it.
  ASSERT_TRUE(Prepare(*tok, o).ok());
  EXPECT_TRUE(ListShards(dir.path("out"), "train").ok());
}

TEST(PrepareTest, WideVocabulariesGetVersion2Shards) {
  auto tok = testing::TinyTokenizer(/*eos_id=*/70000);
  TempDir dir;
  WriteFile(dir.path("in.txt"), "the wide one");
  PrepareOptions o;
  o.inputs = {dir.path("in.txt")};
  o.output_dir = dir.path("out");
  o.val_tokens = 0;
  auto s = Prepare(*tok, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(ReadFile(s->train_shards[0]).substr(4, 4), std::string("\x02\0\0\0", 4));
  auto t = ReadTokenFile(s->train_shards[0]);
  EXPECT_EQ(t->back(), 70000);
  EXPECT_EQ(*tok->Decode(*t), "the wide one<|endoftext|>");
}

TEST(PrepareTest, BadInputIsAOneLineErrorNamingTheFileAndLine) {
  auto tok = testing::TinyTokenizer();
  TempDir dir;
  const std::string out = dir.path("out");
  auto p = [&](const std::string& name) { return dir.path(name); };

  WriteFile(p("missing_field.jsonl"), "{\"text\": \"ok\"}\n{\"body\": \"no text\"}\n");
  EXPECT_EQ(PrepareError(*tok, {p("missing_field.jsonl")}, out), p("missing_field.jsonl") + ":2: no field 'text'");
  WriteFile(p("other_field.jsonl"), "{\"body\": \"fine\"}\n");
  EXPECT_EQ(PrepareError(*tok, {p("other_field.jsonl")}, out, "content"),
            p("other_field.jsonl") + ":1: no field 'content'");
  WriteFile(p("number.jsonl"), "\n\n{\"text\": 5}\n");
  EXPECT_EQ(PrepareError(*tok, {p("number.jsonl")}, out), p("number.jsonl") + ":3: field 'text' is a number, not a string");
  WriteFile(p("broken.jsonl"), "{\"text\": \"a\"}\n{\"text\": \"b\n");
  EXPECT_EQ(PrepareError(*tok, {p("broken.jsonl")}, out).rfind(p("broken.jsonl") + ":2: not valid JSON (", 0), 0u);
  WriteFile(p("list.jsonl"), "[\"not an object\"]\n");
  EXPECT_EQ(PrepareError(*tok, {p("list.jsonl")}, out), p("list.jsonl") + ":1: expected a JSON object, got array");
  WriteFile(p("empty.txt"), "");
  EXPECT_EQ(PrepareError(*tok, {p("empty.txt")}, out), p("empty.txt") + ": empty input");
  WriteFile(p("blank.jsonl"), "\n  \n");
  EXPECT_EQ(PrepareError(*tok, {p("blank.jsonl")}, out), p("blank.jsonl") + ": empty input (no documents)");
  WriteFile(p("empty.json"), "[]");
  EXPECT_EQ(PrepareError(*tok, {p("empty.json")}, out), p("empty.json") + ": empty input (no documents)");
  WriteFile(p("nested.json"), "[\"ok\", [1]]");
  EXPECT_EQ(PrepareError(*tok, {p("nested.json")}, out),
            p("nested.json") + "[1]: expected a JSON object or string, got array");
  WriteFile(p("not.gz"), "plain bytes");
  EXPECT_EQ(PrepareError(*tok, {p("not.gz")}, out), p("not.gz") + ": not gzip data (no magic 1f 8b at its start)");
  WriteFile(p("not.zst"), "plain bytes");
  EXPECT_EQ(PrepareError(*tok, {p("not.zst")}, out), p("not.zst") + ": not zstd data (no magic 28 b5 2f fd at its start)");
  WriteGzip(p("cut.txt.gz"), std::string(100000, 'z'));
  WriteFile(p("cut.txt.gz"), ReadFile(p("cut.txt.gz")).substr(0, 60));
  EXPECT_EQ(PrepareError(*tok, {p("cut.txt.gz")}, out).rfind(p("cut.txt.gz") + ": corrupt gzip data", 0), 0u);
  WriteZstd(p("cut.txt.zst"), std::string(100000, 'z') + "tail");
  WriteFile(p("cut.txt.zst"), ReadFile(p("cut.txt.zst")).substr(0, 20));
  EXPECT_EQ(PrepareError(*tok, {p("cut.txt.zst")}, out), p("cut.txt.zst") + ": truncated zstd data");
  EXPECT_EQ(PrepareError(*tok, {p("nowhere.txt")}, out), p("nowhere.txt") + ": no such input file or directory");
  // The first bad file in input order is the one reported, after good ones.
  WriteFile(p("good.jsonl"), "{\"text\": \"fine\"}\n");
  EXPECT_EQ(PrepareError(*tok, {p("good.jsonl"), p("missing_field.jsonl")}, out),
            p("missing_field.jsonl") + ":2: no field 'text'");
  // Nothing was written by any failed run.
  EXPECT_FALSE(std::filesystem::exists(out) && !std::filesystem::is_empty(out));
}

// Issue: `prepare --input=data_cache/shards` tokenized a 3.76M-token shard as one document
// of U+FFFD and exited 0. Token files and binary files are refused before any work, naming
// the file and what it is; a NUL byte past what was looked at first is met while reading.
TEST(PrepareTest, TokenFilesAndBinaryFilesAreRefusedNamingTheFileAndWhatItIs) {
  auto tok = testing::TinyTokenizer();
  ASSERT_NE(tok, nullptr);
  TempDir dir;
  const std::string out = dir.path("out");
  auto p = [&](const std::string& name) { return dir.path(name); };
  const std::string tail = ", not text: prepare tokenizes UTF-8 text, JSONL and JSON";

  ASSERT_TRUE(WriteTokenFile(p("train_000000.bin"), {1, 2, 3, 4}).ok());
  EXPECT_EQ(PrepareError(*tok, {p("train_000000.bin")}, out).rfind(
                p("train_000000.bin") + ": an llm.c token shard (header magic 20240520)" + tail, 0), 0u);
  WriteGzip(p("shard.bin.gz"), ReadFile(p("train_000000.bin")));
  EXPECT_EQ(PrepareError(*tok, {p("shard.bin.gz")}, out).rfind(
                p("shard.bin.gz") + ": an llm.c token shard (header magic 20240520)" + tail, 0), 0u);
  // A Megatron pair: the index by its magic, the .bin by the index beside it.
  WriteFile(p("corpus_text_document.idx"), std::string("MMIDIDX\0\0", 9) + std::string(8, '\x01'));
  WriteFile(p("corpus_text_document.bin"), "tokens without a header, any bytes at all");
  EXPECT_EQ(PrepareError(*tok, {p("corpus_text_document.idx")}, out).rfind(
                p("corpus_text_document.idx") + ": a Megatron-LM index (magic MMIDIDX)" + tail, 0), 0u);
  EXPECT_EQ(PrepareError(*tok, {p("corpus_text_document.bin")}, out).rfind(
                p("corpus_text_document.bin") + ": a Megatron-LM token file (" + p("corpus_text_document.idx") +
                    " beside it)" + tail, 0), 0u);
  // Headerless uint16 tokens (nanoGPT's .bin, a .u16): their NUL bytes.
  WriteFile(p("val.u16"), std::string("\x10\x27\x00\x01\x05\x00", 6));
  EXPECT_EQ(PrepareError(*tok, {p("val.u16")}, out).rfind(p("val.u16") + ": a NUL byte at byte 2: a binary file", 0), 0u);
  // Compressed data under a name that does not say so.
  WriteGzip(p("gzipped.txt"), "text, but gzipped");
  EXPECT_EQ(PrepareError(*tok, {p("gzipped.txt")}, out),
            p("gzipped.txt") + ": gzip data (magic 1f 8b) under a name without .gz: name it " + p("gzipped.txt") +
                ".gz to have it decompressed");
  // One compression under the other's suffix, and compressed data through a pipe (which no
  // rename can mend: it is told to decompress before the pipe).
  WriteGzip(p("swapped.txt.zst"), "gzip under a zstd name");
  EXPECT_EQ(PrepareError(*tok, {p("swapped.txt.zst")}, out),
            p("swapped.txt.zst") + ": gzip data (magic 1f 8b) under a .zst name: name it " + p("swapped.txt") +
                ".gz to have it decompressed");
  WriteZstd(p("swapped.txt.gz"), "zstd under a gzip name");
  EXPECT_EQ(PrepareError(*tok, {p("swapped.txt.gz")}, out),
            p("swapped.txt.gz") + ": zstd data (magic 28 b5 2f fd) under a .gz name: name it " + p("swapped.txt") +
                ".zst to have it decompressed");
  ASSERT_EQ(::mkfifo(p("gzip.fifo").c_str(), 0600), 0);
  WriteGzip(p("for_the_fifo.gz"), "gzipped text through a pipe");
  std::thread writer([&] { WriteFile(p("gzip.fifo"), ReadFile(p("for_the_fifo.gz"))); });
  EXPECT_EQ(PrepareError(*tok, {p("gzip.fifo")}, out),
            p("gzip.fifo") + ": gzip data (magic 1f 8b) read from a pipe: decompress it before the pipe (zcat), or pass "
                             "the compressed file itself");
  writer.join();
  // A NUL byte far into a text file, and in a JSONL line (its line and file byte).
  WriteFile(p("late.txt"), std::string(100000, 'a') + std::string(1, '\0') + "b");
  EXPECT_EQ(PrepareError(*tok, {p("late.txt")}, out).rfind(p("late.txt") + ": a NUL byte at byte 100000: a binary file", 0), 0u);
  const std::string line1 = "{\"text\": \"" + std::string(70000, 'x') + "\"}\n";  // past the first 64 KiB looked at
  WriteFile(p("nul.jsonl"), line1 + std::string("{\"text\": \"a\0b\"}\n", 16));
  EXPECT_EQ(PrepareError(*tok, {p("nul.jsonl")}, out)
                .rfind(absl::StrCat(p("nul.jsonl"), ":2: a NUL byte at file byte ", line1.size() + 11, ": a binary file"), 0),
            0u);
  // A directory holding one: refused naming the first such file, before any is read.
  std::filesystem::create_directories(p("mixed"));
  WriteFile(p("mixed/a.txt"), "good text");
  ASSERT_TRUE(WriteTokenFile(p("mixed/b.bin"), {5, 6}).ok());
  ASSERT_TRUE(WriteTokenFile(p("mixed/c.bin"), {5, 6}).ok());
  EXPECT_EQ(PrepareError(*tok, {p("mixed")}, out).rfind(p("mixed/b.bin") + ": an llm.c token shard", 0), 0u);
  EXPECT_FALSE(std::filesystem::exists(out) && !std::filesystem::is_empty(out));
}

// Issue: --input=ind/a.txt,ind read a.txt twice, once into the validation shard and once
// into training. A file named twice (by itself and through its directory, by two
// spellings, through a link) is read once, at its first place, and the notice says so.
TEST(PrepareTest, AFileGivenTwiceIsReadOnceAtItsFirstPlace) {
  TempDir dir;
  auto p = [&](const std::string& name) { return dir.path(name); };
  std::filesystem::create_directories(p("ind"));
  WriteFile(p("ind/a.txt"), "alpha");
  WriteFile(p("ind/b.txt"), "beta");
  WriteFile(p("small.txt"), "small");
  std::filesystem::create_symlink(p("small.txt"), p("link.txt"));
  std::vector<std::string> notices;
  auto files = ExpandInputs({p("ind/a.txt"), p("ind")}, &notices);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, (std::vector<std::string>{p("ind/a.txt"), p("ind/b.txt")}));
  EXPECT_EQ(notices, std::vector<std::string>{absl::StrCat("--input: ", p("ind/a.txt"), " (in ", p("ind"),
                                                           ") is ", p("ind/a.txt"), " again: read once, at its first place")});
  for (const std::vector<std::string>& twice : {std::vector<std::string>{p("small.txt"), p("small.txt")},
                                                {p("small.txt"), dir.path() + "/./small.txt"},
                                                {p("small.txt"), p("link.txt")}}) {
    notices.clear();
    files = ExpandInputs(twice, &notices);
    ASSERT_TRUE(files.ok()) << files.status();
    EXPECT_EQ(*files, std::vector<std::string>{p("small.txt")});
    ASSERT_EQ(notices.size(), 1u);
    EXPECT_EQ(notices[0], absl::StrCat("--input: ", twice[1], " is ", p("small.txt"), " again: read once, at its first place"));
  }
  // End to end: each document once.
  auto tok = testing::TinyTokenizer();
  ASSERT_NE(tok, nullptr);
  PrepareOptions o;
  o.inputs = {p("ind/a.txt"), p("ind"), p("small.txt"), p("link.txt")};
  o.output_dir = p("out");
  o.val_tokens = 0;
  std::vector<std::string> said;
  o.on_notice = [&](const std::string& line) { said.push_back(line); };
  auto s = Prepare(*tok, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->documents, 3);
  EXPECT_EQ(*tok->Decode(AllTokens(*s)), "alpha<|endoftext|>beta<|endoftext|>small<|endoftext|>");
  EXPECT_EQ(said.size(), 2u);
}

// A directory stands for the regular files directly in it: what it also holds is named
// (subdirectories, not read: prepare does not recurse; FIFOs and sockets), a broken link is
// an error (its file is missing), and a directory of folders only says so.
TEST(PrepareTest, ADirectoryNamesWhatItSkipsAndRefusesABrokenLink) {
  TempDir dir;
  auto p = [&](const std::string& name) { return dir.path(name); };
  std::filesystem::create_directories(p("corpus/sub"));
  std::filesystem::create_directories(p("corpus/more"));
  WriteFile(p("corpus/a.txt"), "alpha");
  WriteFile(p("corpus/sub/c.txt"), "nested");
  WriteFile(p("corpus/.hidden"), "not read, not named");
  ASSERT_EQ(::mkfifo(p("corpus/pipe").c_str(), 0600), 0);
  std::vector<std::string> notices;
  auto files = ExpandInputs({p("corpus")}, &notices);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, std::vector<std::string>{p("corpus/a.txt")});
  EXPECT_EQ(notices, std::vector<std::string>{absl::StrCat(
                         "--input=", p("corpus"), ": skipped 2 subdirectories (more/, sub/; not read: prepare does not "
                         "recurse, so give one as an --input of its own) and 1 entry that is not a regular file (pipe)")});

  std::filesystem::create_directories(p("nested/x"));
  std::filesystem::create_directories(p("nested/y"));
  EXPECT_EQ(ExpandInputs({p("nested")}).status().message(),
            p("nested") + ": no files directly in it, only 2 subdirectories (x/, y/): prepare does not recurse; give "
                          "each as an input of its own (--input=" + p("nested/x") + ",...)");
  std::filesystem::create_directories(p("none"));
  EXPECT_EQ(ExpandInputs({p("none")}).status().message(), p("none") + ": empty input (no files)");

  std::filesystem::create_symlink(p("gone.txt"), p("corpus/broken.txt"));
  EXPECT_EQ(ExpandInputs({p("corpus")}).status().message(),
            p("corpus/broken.txt") + ": a broken symbolic link (to " + p("gone.txt") + "): the file it names is missing");
  EXPECT_EQ(ExpandInputs({p("corpus/broken.txt")}).status().message(),
            p("corpus/broken.txt") + ": a broken symbolic link (to " + p("gone.txt") + "): the file it names is missing");
}

// The inputs of the UTF-8 tests: invalid bytes in a text file, a JSONL file and a JSON
// array, and a lone surrogate escape in JSONL; one clean file.
std::vector<std::string> WriteBadUtf8(const TempDir& dir) {
  WriteFile(dir.path("a.txt"), "line one\nok \xe6\xad end\n\xff");
  WriteFile(dir.path("b.jsonl"), "{\"text\": \"fine\"}\n{\"text\": \"a \\udbc0 b\"}\n{\"text\": \"\xc0\"}\n");
  WriteFile(dir.path("c.json"), "[\"clean\"]");
  WriteFile(dir.path("d.json"), "[\n\"x\",\n\"y\\ud800\\ud83d\\ude00\xf0\x9f\"]");
  return {dir.path("a.txt"), dir.path("b.jsonl"), dir.path("c.json"), dir.path("d.json")};
}

TEST(PrepareTest, InvalidUtf8AndLoneSurrogatesBecomeReplacementCharactersCountedPerFile) {
  auto tok = testing::TinyTokenizer();
  ASSERT_NE(tok, nullptr);
  TempDir dir;
  PrepareOptions o;
  o.inputs = WriteBadUtf8(dir);
  o.output_dir = dir.path("out");
  o.val_tokens = 0;
  auto s = Prepare(*tok, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*tok->Decode(AllTokens(*s)),
            "line one\nok " FFFD " end\n" FFFD "<|endoftext|>"
            "fine<|endoftext|>a " FFFD " b<|endoftext|>" FFFD "<|endoftext|>"
            "clean<|endoftext|>"
            "x<|endoftext|>y" FFFD "\xf0\x9f\x98\x80" FFFD "<|endoftext|>");
  EXPECT_EQ(s->replacements, 6);
  const std::vector<std::pair<std::string, int64_t>> per_file = {
      {dir.path("a.txt"), 2}, {dir.path("b.jsonl"), 2}, {dir.path("d.json"), 2}};
  EXPECT_EQ(s->replaced_files, per_file);
}

TEST(PrepareTest, StrictUtf8RefusesWithTheFileLineAndByte) {
  auto tok = testing::TinyTokenizer();
  TempDir dir;
  const std::vector<std::string> in = WriteBadUtf8(dir);
  const std::string out = dir.path("out");
  auto strict = [&](const std::string& file) { return PrepareError(*tok, {file}, out, "text", /*strict_utf8=*/true); };
  EXPECT_EQ(strict(in[0]), in[0] + ":2: invalid UTF-8 at file byte 12 (--strict_utf8)");
  EXPECT_EQ(strict(in[1]), in[1] + ":2: lone surrogate escape \\udbc0 at file byte 29 (--strict_utf8)");
  EXPECT_EQ(strict(in[3]), in[3] + ":3: lone surrogate escape \\ud800 at file byte 9 (--strict_utf8)");
  WriteFile(dir.path("e.jsonl"), "{\"text\": \"ok\"}\n{\"text\": \"\xff\"}\n");
  EXPECT_EQ(strict(dir.path("e.jsonl")), dir.path("e.jsonl") + ":2: invalid UTF-8 at file byte 25 (--strict_utf8)");
  // Lines and bytes count the decompressed file, across the reader's 1 MiB buffers.
  const std::string line = "{\"text\": \"one of many lines\"}\n";
  std::string big;
  for (int i = 0; i < 50000; ++i) big += line;
  WriteGzip(dir.path("f.jsonl.gz"), big + "{\"text\": \"\xff\"}\n");
  EXPECT_EQ(strict(dir.path("f.jsonl.gz")), absl::StrCat(dir.path("f.jsonl.gz"), ":50001: invalid UTF-8 at file byte ",
                                                         big.size() + 10, " (--strict_utf8)"));
  EXPECT_FALSE(std::filesystem::exists(out) && !std::filesystem::is_empty(out));
}

TEST(PrepareTest, AValidationSplitThatLeavesNoTrainingDataIsAnError) {
  auto tok = testing::TinyTokenizer();
  TempDir dir;
  WriteFile(dir.path("in.txt"), "short");
  PrepareOptions o;
  o.inputs = {dir.path("in.txt")};
  o.output_dir = dir.path("out");
  o.val_tokens = 1000;
  auto s = Prepare(*tok, o);
  // One document: any --val_tokens above 0 takes it (the advice was "lower --val_tokens").
  EXPECT_EQ(s.status().message(),
            "all 1 document (6 tokens) went to the validation shard (whole documents until it holds --val_tokens=1000); "
            "only --val_tokens=0 (no validation shard) leaves the document for training; or add input");
}

TEST(PrepareTest, AValidationSplitThatTakesEveryDocumentSaysWhichValTokensLeavesOne) {
  auto tok = testing::TinyTokenizer();
  TempDir dir;
  WriteFile(dir.path("in.jsonl"), "{\"text\": \"short\"}\n{\"text\": \"short too\"}\n");
  PrepareOptions o;
  o.inputs = {dir.path("in.jsonl")};
  o.output_dir = dir.path("out");
  o.val_tokens = 1000;
  auto s = Prepare(*tok, o);
  ASSERT_FALSE(s.ok());
  // The first document's tokens: at that --val_tokens the second goes to training.
  const std::string message(s.status().message());
  const std::string head = "all 2 documents (";
  ASSERT_EQ(message.substr(0, head.size()), head) << message;
  const size_t at = message.find("); --val_tokens=");
  ASSERT_NE(at, std::string::npos) << message;
  const int64_t first = std::stoll(message.substr(at + 16));
  EXPECT_NE(message.find(" or less leaves the last document for training, --val_tokens=0 all of them; or add input"),
            std::string::npos) << message;
  o.val_tokens = first;
  auto ok = Prepare(*tok, o);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->val_documents, 1);
  EXPECT_GT(ok->train_tokens, 0);
  o.output_dir = dir.path("out2");
  o.val_tokens = first + 1;
  EXPECT_FALSE(Prepare(*tok, o).ok());
}

}  // namespace
}  // namespace multiscreen
