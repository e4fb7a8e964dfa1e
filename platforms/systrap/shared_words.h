// The Sentry side's access to the memory it shares with stub processes:
// the control words (atomics and futex waits on them) and the stub-side
// addresses of thread slots and worker records. Stub code has its own
// freestanding copies (stub/stub_inline.h) and does not include this.
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_SHARED_WORDS_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_SHARED_WORDS_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "platforms/systrap/layout.h"

namespace sandboxd::systrap {

inline long Futex(uint32_t* addr, int op, uint32_t val) {
  return syscall(SYS_futex, addr, op, val, nullptr, nullptr, 0);
}

inline uint32_t LoadAcquire(const uint32_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
inline uint32_t LoadSeqCst(const uint32_t* p) {
  return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}
inline void StoreSeqCst(uint32_t* p, uint32_t v) {
  __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}

// The address of slot i in the stub process.
inline uint64_t SlotInStub(int i) {
  return kStubShared + offsetof(StubShared, slots) +
         static_cast<uint64_t>(i) * sizeof(ThreadSlot);
}

// The address of worker i's record in the stub process.
inline uint64_t WorkerInStub(uint32_t i) {
  return kStubShared + offsetof(StubShared, workers) +
         static_cast<uint64_t>(i) * sizeof(StubWorker);
}

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_SHARED_WORDS_H_
