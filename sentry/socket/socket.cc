#include "sentry/socket/socket.h"

#include <algorithm>
#include <cstring>

namespace sandboxd::socket {

int64_t BufferSource::Read(uint8_t* dst, size_t n) {
  n = std::min(n, n_);
  std::memcpy(dst, p_, n);
  p_ += n;
  n_ -= n;
  return n;
}

int64_t BufferSink::Write(const uint8_t* src, size_t n) {
  n = std::min(n, n_);
  std::memcpy(p_, src, n);
  p_ += n;
  n_ -= n;
  written_ += n;
  return n;
}

}  // namespace sandboxd::socket
