#include "sentry/state/crc32c.h"

#include <array>

namespace sandboxd::state {
namespace {

constexpr uint32_t kPolyReversed = 0x82f63b78;

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ kPolyReversed : c >> 1;
    t[i] = c;
  }
  return t;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

// SSE4.2's crc32 instruction computes CRC-32C (the same polynomial):
// 8 bytes a cycle instead of one table lookup a byte, which matters for
// pages.img (a manifest check reads all of it).
__attribute__((target("sse4.2"))) uint32_t Crc32cHw(uint32_t crc,
                                                   const uint8_t* p,
                                                   size_t n) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    __builtin_memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; n--, p++) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}

const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");

}  // namespace

uint32_t Crc32c(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  if (kHaveSse42) return ~Crc32cHw(crc, p, n);
  for (size_t i = 0; i < n; i++) crc = kTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

}  // namespace sandboxd::state
