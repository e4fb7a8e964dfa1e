// CRC-32C (Castagnoli), the checksum of every checkpoint file. The Abseil
// of Debian 12 has no absl/crc, so this is a small table-driven version.
#ifndef SANDBOXD_SENTRY_STATE_CRC32C_H_
#define SANDBOXD_SENTRY_STATE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace sandboxd::state {

// Extends `crc` (0 to start) with `n` bytes at `data`.
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

}  // namespace sandboxd::state

#endif  // SANDBOXD_SENTRY_STATE_CRC32C_H_
