// Move-only owner of a host memory mapping; unmaps on destruction.
#ifndef SANDBOXD_BASE_MAPPING_H_
#define SANDBOXD_BASE_MAPPING_H_

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace sandboxd {

class Mapping {
 public:
  Mapping() = default;
  Mapping(void* addr, size_t len) : addr_(addr), len_(len) {}
  Mapping(Mapping&& o) noexcept
      : addr_(std::exchange(o.addr_, nullptr)), len_(std::exchange(o.len_, 0)) {}
  Mapping& operator=(Mapping&& o) noexcept {
    if (this != &o) {
      reset();
      addr_ = std::exchange(o.addr_, nullptr);
      len_ = std::exchange(o.len_, 0);
    }
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { reset(); }

  void* addr() const { return addr_; }
  uint8_t* bytes() const { return static_cast<uint8_t*>(addr_); }
  size_t size() const { return len_; }
  bool valid() const { return addr_ != nullptr; }
  void reset() {
    if (addr_ != nullptr) ::munmap(addr_, len_);
    addr_ = nullptr;
    len_ = 0;
  }

 private:
  void* addr_ = nullptr;
  size_t len_ = 0;
};

}  // namespace sandboxd

#endif  // SANDBOXD_BASE_MAPPING_H_
