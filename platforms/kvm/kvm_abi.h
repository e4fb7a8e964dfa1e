// Kernel ABI structs that <linux/kvm.h> cannot express in C++.
//
// The uapi headers declare flexible arrays with __DECLARE_FLEX_ARRAY, an
// anonymous struct that starts with an empty struct: 0 bytes in C, 1 byte
// in C++. In C++ `kvm_msrs::entries` therefore lands at offset 16 instead
// of the kernel's 8, and KVM_GET_MSRS/KVM_SET_MSRS read garbage. These
// spell the layout out, and so do the ioctl numbers, which encode the
// struct size (_IOWR(KVMIO, 0x88, struct kvm_msrs) differs between C and
// C++, and the kernel answers the C++ number with EINVAL).
#ifndef SANDBOXD_PLATFORMS_KVM_KVM_ABI_H_
#define SANDBOXD_PLATFORMS_KVM_KVM_ABI_H_

#include <linux/kvm.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sandboxd::kvm {

// The fixed part of struct kvm_msrs and struct kvm_cpuid2, as C sees it.
struct KvmFlexHeader {
  uint32_t count;
  uint32_t pad;
};
static_assert(sizeof(KvmFlexHeader) == 8);

inline constexpr unsigned long kKvmGetMsrs = _IOWR(KVMIO, 0x88, KvmFlexHeader);
inline constexpr unsigned long kKvmSetMsrs = _IOW(KVMIO, 0x89, KvmFlexHeader);
inline constexpr unsigned long kKvmGetSupportedCpuid =
    _IOWR(KVMIO, 0x05, KvmFlexHeader);
inline constexpr unsigned long kKvmSetCpuid2 = _IOW(KVMIO, 0x90, KvmFlexHeader);

// struct kvm_msrs with exactly one entry.
struct KvmMsrsOne {
  uint32_t nmsrs = 1;
  uint32_t pad = 0;
  kvm_msr_entry entry = {};
};
static_assert(offsetof(KvmMsrsOne, entry) == 8);
static_assert(sizeof(KvmMsrsOne) == 24);

// struct kvm_xsave without its (empty in C) flexible tail: the 4 KiB
// region in the standard (non-compacted) XSAVE format.
struct KvmXsave {
  uint32_t region[1024];
};
static_assert(sizeof(KvmXsave) == 4096);
inline constexpr unsigned long kKvmGetXsave = _IOR(KVMIO, 0xa4, KvmXsave);
inline constexpr unsigned long kKvmSetXsave = _IOW(KVMIO, 0xa5, KvmXsave);

// struct kvm_cpuid2 with room for `n` entries: the 8-byte header (nent,
// padding) and the entries right after it.
class KvmCpuid2Buffer {
 public:
  explicit KvmCpuid2Buffer(size_t n)
      : words_((8 + n * sizeof(kvm_cpuid_entry2)) / 8, 0) {
    *nent() = static_cast<uint32_t>(n);
  }
  uint32_t* nent() { return reinterpret_cast<uint32_t*>(words_.data()); }
  kvm_cpuid_entry2* entries() {
    return reinterpret_cast<kvm_cpuid_entry2*>(words_.data() + 1);
  }
  void* get() { return words_.data(); }

 private:
  static_assert(sizeof(kvm_cpuid_entry2) % 8 == 0);
  std::vector<uint64_t> words_;
};

}  // namespace sandboxd::kvm

#endif  // SANDBOXD_PLATFORMS_KVM_KVM_ABI_H_
