// CPython's `random.Random`, reproduced exactly: the same Mersenne Twister
// (MT19937, seeded from an integer by init_by_array, as `random.Random(seed)`
// does) and the same algorithms on top of it as CPython 3.6–3.13's Lib/random.py:
// `_randbelow` by rejection on getrandbits(bit_length(n)), `random()` from two
// words (53 bits), `shuffle`, `sample` (the set-based branch for large
// populations, the pool-based one for small), `choices` with weights (bisect on
// the cumulative weights), `randrange`. Equal seeds give the Python module's values
// call for call, so generators written in Python can be re-run here byte for byte
// (eval/abcdigits.h). tests/eval/python_random_test.cc holds values printed by Python.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace multiscreen::eval {

class PythonRandom {
 public:
  // random.Random(seed) for a non-negative integer seed below 2^64 (CPython takes |seed|'s
  // 32-bit words, least significant first, as the init_by_array key).
  explicit PythonRandom(uint64_t seed);

  uint32_t GenRandUint32();              // genrand_uint32: the next 32-bit output
  uint64_t GetRandBits(int k);           // getrandbits(k), 0 <= k <= 64
  uint64_t RandBelow(uint64_t n);        // _randbelow(n), n >= 1: uniform in [0, n)
  double Random();                       // random(): uniform in [0, 1), 53 bits
  int64_t RandRange(int64_t start, int64_t stop);  // randrange(start, stop), start < stop

  // shuffle(x): Fisher–Yates from the back, j = _randbelow(i + 1).
  template <typename T>
  void Shuffle(std::vector<T>& x) {
    for (std::size_t i = x.size(); i-- > 1;) {
      const std::size_t j = static_cast<std::size_t>(RandBelow(i + 1));
      std::swap(x[i], x[j]);
    }
  }

  // sample(range(lo, hi), k): k distinct values in selection order, 0 <= k <= hi − lo.
  std::vector<int64_t> SampleRange(int64_t lo, int64_t hi, int64_t k);

  // choices(range(n), weights=weights, k=k) with n = weights.size() and integer weights
  // (their running sums below 2^53, so exact in a double as in Python's int/float compare).
  std::vector<int64_t> Choices(const std::vector<int64_t>& weights, int64_t k);

 private:
  void InitGenrand(uint32_t s);
  void InitByArray(const std::vector<uint32_t>& key);
  std::array<uint32_t, 624> mt_{};
  int mti_ = 625;
};

}  // namespace multiscreen::eval
