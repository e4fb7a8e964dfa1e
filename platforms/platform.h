// The Platform interface: how the Sentry runs application code.
//
// A Platform is one per sandbox. It makes AddressSpaces (one per application
// process) and Contexts (one per task). Context::Switch runs application
// code in an address space until something needs the Sentry: a syscall, a
// fault, an exception, or an Interrupt(). Back-ends: platforms/systrap (stub
// processes, seccomp traps, shared-memory hand-over) and platforms/kvm.
#ifndef SANDBOXD_PLATFORMS_PLATFORM_H_
#define SANDBOXD_PLATFORMS_PLATFORM_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sandboxd::control {
class PlatformStats;  // proto/platform_stats.proto
}  // namespace sandboxd::control

namespace sandboxd::platform {

// Memory protection of an application mapping.
struct Prot {
  bool read = false;
  bool write = false;
  bool exec = false;
  int ToHost() const;  // PROT_* bits
  static Prot FromHost(int prot);
  bool operator==(const Prot& o) const {
    return read == o.read && write == o.write && exec == o.exec;
  }
};

// Largest FPU/xsave image the platforms handle (AVX-512 needs ~2.7 KiB).
inline constexpr size_t kMaxFpStateSize = 4096;

// General-purpose registers, in the order of the kernel's user_regs_struct.
struct Regs {
  uint64_t r15, r14, r13, r12, rbp, rbx, r11, r10, r9, r8;
  uint64_t rax, rcx, rdx, rsi, rdi, orig_rax;
  uint64_t rip, cs, eflags, rsp, ss;
  uint64_t fs_base, gs_base;
  uint64_t ds, es, fs, gs;
};

// The complete user-visible CPU state of one task.
struct CpuState {
  Regs regs{};
  // The xsave image as the kernel lays it out in a signal frame (fxsave
  // legacy area, xsave header, extended state). fp_size == 0 means "not yet
  // captured": the platform fills in a default (initial) FPU state.
  uint32_t fp_size = 0;
  // Non-null: the platform context this points to kept the live FPU state
  // (kvm: in its vCPU) and `fp` is stale until Context::SyncFp. Whoever
  // reads or copies `fp` syncs first (Task::SyncFp); whoever replaces it
  // clears this.
  const void* fp_live = nullptr;
  alignas(64) uint8_t fp[kMaxFpStateSize];

  // Resets FPU state to what a fresh execve sees (FCW 0x37f, MXCSR 0x1f80,
  // all vector registers zero), keeping the layout metadata.
  void ResetFp();
};

// What made Switch return.
struct Event {
  enum class Kind {
    kSyscall,      // regs.orig_rax is the number; set regs.rax to the result
    kFault,        // a page fault at `addr` (SIGSEGV/SIGBUS from memory)
    kException,    // a synchronous signal: SIGILL, SIGFPE, SIGTRAP, SIGBUS
    kInterrupted,  // Interrupt() was called, or a spurious wakeup
    kDead,         // the address space's host process is gone (killed,
                   // or a stub-side error); the task cannot run again
  };
  Kind kind = Kind::kInterrupted;
  int signo = 0;         // kFault/kException: host signal number
  int code = 0;          // kFault/kException: si_code
  uint64_t addr = 0;     // kFault: faulting address; kException: si_addr
  bool write = false;    // kFault: the access was a write
  bool exec = false;     // kFault: the access was an instruction fetch
  // With Platform::MeasureAppCpu on: the CPU time (ns) the application used
  // in this Switch when it ran on another host thread (systrap's stub
  // worker), as that thread's CPU clock counts it: never time throttled by
  // a CPU quota or preempted. -1: not measured, or it ran on the calling
  // thread (kvm), whose own CPU clock measures it.
  int64_t app_cpu_ns = -1;
  std::string detail;    // kDead: why
};

// Identifies a feature interface: the address of its `kFeatureTag`, an
// inline variable and so one object in the whole program.
using FeatureTag = const void*;

// Optional interfaces of a back-end's objects (code_patcher.h's
// PatchingAddressSpace, for one), looked up by type so that the Sentry never
// names a back-end's classes:
//
//   if (auto* p = as.Feature<PatchingAddressSpace>()) p->SetCodePatcher(mm);
//
// A feature interface declares `static inline const char kFeatureTag = 0;`;
// a back-end object that implements it answers in FindFeature, with
// OfferFeature.
class HasFeatures {
 public:
  virtual ~HasFeatures() = default;
  // This object's implementation of T, or null when it has none.
  template <typename T>
  T* Feature() {
    return static_cast<T*>(FindFeature(&T::kFeatureTag));
  }

 protected:
  virtual void* FindFeature(FeatureTag tag) {
    (void)tag;
    return nullptr;
  }
};

// For FindFeature: `impl` as a T when `tag` is T's, else null.
template <typename T, typename Impl>
void* OfferFeature(Impl* impl, FeatureTag tag) {
  return tag == &T::kFeatureTag ? static_cast<void*>(static_cast<T*>(impl))
                                : nullptr;
}

class AddressSpace : public HasFeatures {
 public:
  ~AddressSpace() override = default;
  // Maps [off, off+len) of the memory file `fd` at application address
  // `addr` (MAP_SHARED|MAP_FIXED semantics), replacing what was there.
  virtual absl::Status MapFile(uintptr_t addr, int fd, off_t off, size_t len,
                               Prot prot) = 0;
  // One range for MapFiles.
  struct FileRange {
    uintptr_t addr;
    off_t off;
    size_t len;
    Prot prot;
  };
  // MapFile for each range of `fd`, in order, stopping at the first error;
  // a platform that can do them in one request does (systrap: one round
  // trip to the stub's control thread instead of one per range).
  virtual absl::Status MapFiles(int fd, const std::vector<FileRange>& ranges) {
    for (const FileRange& r : ranges) {
      absl::Status s = MapFile(r.addr, fd, r.off, r.len, r.prot);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  // Removes any mapping in [addr, addr+len).
  virtual void Unmap(uintptr_t addr, size_t len) = 0;
};

class Context {
 public:
  virtual ~Context() = default;
  // Runs application code with `cpu` in `as` until something needs the
  // Sentry. On return `cpu` holds the state at that point.
  // Called only by the task's own host thread.
  virtual Event Switch(AddressSpace& as, CpuState& cpu) = 0;
  // Makes a running or future Switch return kInterrupted soon.
  // Safe to call from any thread.
  virtual void Interrupt() = 0;
  // Takes the host resources this context needs to run in `as` (systrap:
  // a context slot, and a stub worker when the host has refused one;
  // kvm: a vCPU) before its task starts, so that a host refusal fails the
  // clone or fork with EAGAIN instead of killing the thread at its first
  // Switch. Called once, by the thread that starts the task; Switch takes
  // whatever is still missing itself.
  virtual absl::Status Prepare(AddressSpace& as) {
    (void)as;
    return absl::OkStatus();
  }
  // Frees the host resources (stub thread) bound to this context.
  virtual void Release() {}
  // Brings cpu.fp up to date when this context left the live FPU state in
  // its own keeping (CpuState::fp_live == this), and clears fp_live.
  virtual void SyncFp(CpuState& cpu) { cpu.fp_live = nullptr; }
};

class Platform : public HasFeatures {
 public:
  ~Platform() override = default;
  virtual std::string Name() const = 0;
  // Application addresses are in [MinUserAddress(), MaxUserAddress()).
  virtual uintptr_t MinUserAddress() const { return 0x10000; }
  virtual uintptr_t MaxUserAddress() const = 0;
  // The most threads one thread group may have (0: no bound of the
  // platform's own); the kernel's clone of one more fails with EAGAIN.
  virtual uint32_t MaxThreadsPerAddressSpace() const { return 0; }
  virtual absl::StatusOr<std::unique_ptr<AddressSpace>> NewAddressSpace() = 0;
  virtual absl::StatusOr<std::unique_ptr<Context>> NewContext() = 0;
  // Makes ahead of time what the next NewAddressSpace needs, for a warm
  // Sentry that has the time while it waits (systrap: one stub process in
  // its pool). True if it made something; a back-end with nothing to make
  // ahead returns false.
  virtual absl::StatusOr<bool> PrepareAddressSpace() { return false; }
  // Called once before the Sentry installs its own seccomp filter and
  // before any application code runs: finishes what the platform set up in
  // the background (kvm: joins the vCPU pool's filler).
  virtual absl::Status FinishSetup() { return absl::OkStatus(); }
  // membarrier(2): returns once every application thread that is running
  // has passed a full memory barrier. The default asks the host for one on
  // every CPU (MEMBARRIER_CMD_GLOBAL, an RCU grace period), which covers
  // any platform's threads.
  virtual absl::Status MemoryBarrier();
  // Fills `out` with the platform's name and counters, for sandboxd's
  // /metrics and `sentry run --stats-json`. Cheap (atomics and a few
  // short locks); safe to call from any thread. The default: the name only.
  virtual void ExportStats(control::PlatformStats* out);
  // Whether Switch fills Event::app_cpu_ns (off by default: systrap's
  // workers read their CPU clock twice per trap for it, ~1 us here). Set
  // before any application code runs.
  virtual void MeasureAppCpu(bool on) { (void)on; }
};

}  // namespace sandboxd::platform

#endif  // SANDBOXD_PLATFORMS_PLATFORM_H_
