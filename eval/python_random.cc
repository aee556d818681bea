#include "eval/python_random.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <unordered_set>

namespace multiscreen::eval {
namespace {
constexpr int kN = 624, kM = 397;
constexpr uint32_t kMatrixA = 0x9908b0dfu, kUpperMask = 0x80000000u, kLowerMask = 0x7fffffffu;
int BitLength(uint64_t n) { return n == 0 ? 0 : 64 - std::countl_zero(n); }
}  // namespace

PythonRandom::PythonRandom(uint64_t seed) {
  // random_seed(): the key is |seed| in 32-bit words, least significant first; 0 → [0].
  std::vector<uint32_t> key;
  do {
    key.push_back(static_cast<uint32_t>(seed & 0xffffffffu));
    seed >>= 32;
  } while (seed != 0);
  InitByArray(key);
}

void PythonRandom::InitGenrand(uint32_t s) {
  mt_[0] = s;
  for (mti_ = 1; mti_ < kN; ++mti_) {
    mt_[mti_] = 1812433253u * (mt_[mti_ - 1] ^ (mt_[mti_ - 1] >> 30)) + static_cast<uint32_t>(mti_);
  }
}

void PythonRandom::InitByArray(const std::vector<uint32_t>& key) {
  InitGenrand(19650218u);
  size_t i = 1, j = 0;
  const size_t key_length = key.size();
  for (size_t k = std::max<size_t>(kN, key_length); k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= static_cast<size_t>(kN)) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= key_length) j = 0;
  }
  for (size_t k = kN - 1; k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= static_cast<size_t>(kN)) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;
  mti_ = kN;
}

uint32_t PythonRandom::GenRandUint32() {
  if (mti_ >= kN) {
    int kk = 0;
    for (; kk < kN - kM; ++kk) {
      const uint32_t y = (mt_[kk] & kUpperMask) | (mt_[kk + 1] & kLowerMask);
      mt_[kk] = mt_[kk + kM] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
    }
    for (; kk < kN - 1; ++kk) {
      const uint32_t y = (mt_[kk] & kUpperMask) | (mt_[kk + 1] & kLowerMask);
      mt_[kk] = mt_[kk + (kM - kN)] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
    }
    const uint32_t y = (mt_[kN - 1] & kUpperMask) | (mt_[0] & kLowerMask);
    mt_[kN - 1] = mt_[kM - 1] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
    mti_ = 0;
  }
  uint32_t y = mt_[mti_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

uint64_t PythonRandom::GetRandBits(int k) {
  if (k <= 0) return 0;
  if (k <= 32) return GenRandUint32() >> (32 - k);
  // Longer: 32-bit words least significant first, the last one shifted down (as CPython).
  uint64_t low = GenRandUint32();
  uint64_t high = GenRandUint32() >> (64 - k);
  return low | (high << 32);
}

uint64_t PythonRandom::RandBelow(uint64_t n) {
  const int k = BitLength(n);
  uint64_t r = GetRandBits(k);
  while (r >= n) r = GetRandBits(k);
  return r;
}

double PythonRandom::Random() {
  const uint32_t a = GenRandUint32() >> 5, b = GenRandUint32() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

int64_t PythonRandom::RandRange(int64_t start, int64_t stop) {
  return start + static_cast<int64_t>(RandBelow(static_cast<uint64_t>(stop - start)));
}

std::vector<int64_t> PythonRandom::SampleRange(int64_t lo, int64_t hi, int64_t k) {
  const int64_t n = hi - lo;
  std::vector<int64_t> result(k);
  int64_t setsize = 21;  // Lib/random.py: a small set's size less an empty list's
  if (k > 5) setsize += static_cast<int64_t>(std::pow(4.0, std::ceil(std::log(k * 3.0) / std::log(4.0))));
  if (n <= setsize) {
    std::vector<int64_t> pool(n);
    for (int64_t i = 0; i < n; ++i) pool[i] = lo + i;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t j = static_cast<int64_t>(RandBelow(n - i));
      result[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
  } else {
    std::unordered_set<int64_t> selected;
    for (int64_t i = 0; i < k; ++i) {
      int64_t j = static_cast<int64_t>(RandBelow(n));
      while (selected.count(j)) j = static_cast<int64_t>(RandBelow(n));
      selected.insert(j);
      result[i] = lo + j;
    }
  }
  return result;
}

std::vector<int64_t> PythonRandom::Choices(const std::vector<int64_t>& weights, int64_t k) {
  std::vector<double> cum(weights.size());
  int64_t running = 0;
  for (size_t i = 0; i < weights.size(); ++i) cum[i] = static_cast<double>(running += weights[i]);
  const double total = cum.back();
  const auto hi = cum.begin() + (cum.size() - 1);  // bisect(cum_weights, x, 0, n − 1)
  std::vector<int64_t> out(k);
  for (int64_t i = 0; i < k; ++i) out[i] = std::upper_bound(cum.begin(), hi, Random() * total) - cum.begin();
  return out;
}

}  // namespace multiscreen::eval
