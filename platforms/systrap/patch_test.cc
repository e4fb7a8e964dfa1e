#include "platforms/systrap/patch.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <vector>
#include <thread>

#include "gtest/gtest.h"

// A syscall site as a compiler emits it, inside a leaf function that keeps
// data in its red zone across the syscall and checks afterwards everything
// `syscall` promises to leave alone: the red zone, the flags (CF set
// before), other registers (r8 == rdi), rcx == the next instruction and
// r11 == rflags. Returns rax, or -1 if any check failed. It is copied to a
// writable page and patched there.
extern "C" const char patch_test_site[], patch_test_site_mov[],
    patch_test_site_end[];
// The stand-in for the stub's common entry: entered as EncodeEntry says,
// returns rax = sysno + 1000 as `syscall` would return a result.
extern "C" const char patch_test_common[];
__asm__(
    ".text\n"
    ".globl patch_test_site, patch_test_site_mov, patch_test_site_end\n"
    "patch_test_site:\n\t"
    "movabs $0x1122334455667788, %rdx\n\t"
    "mov %rdx, -8(%rsp)\n\t"
    "mov %rdx, -128(%rsp)\n\t"
    "mov %rdi, %r8\n\t"
    "stc\n"
    "patch_test_site_mov:\n\t"
    "mov $39, %eax\n\t"  // getpid
    "syscall\n"
    "2:\n\t"
    "jnc 1f\n\t"
    "test $1, %r11b\n\t"  // r11 = rflags with CF
    "jz 1f\n\t"
    "cmp -8(%rsp), %rdx\n\t"
    "jne 1f\n\t"
    "cmp -128(%rsp), %rdx\n\t"
    "jne 1f\n\t"
    "cmp %rdi, %r8\n\t"
    "jne 1f\n\t"
    "lea 2b(%rip), %r9\n\t"
    "cmp %r9, %rcx\n\t"
    "jne 1f\n\t"
    "ret\n"
    "1:\n\t"
    "mov $-1, %rax\n\t"
    "ret\n"
    "patch_test_site_end:\n"
    ".globl patch_test_common\n"
    "patch_test_common:\n\t"
    "pushfq\n\t"  // below the red zone: rsp is already 128 bytes down
    "pop %r11\n\t"
    "lea 1000(%rax), %eax\n\t"  // lea: the flags stay the application's
    "lea 128(%rsp), %rsp\n\t"
    "jmp *%rcx\n");

namespace sandboxd::systrap {
namespace {

constexpr long kPatchedResult = 39 + 1000;

SiteBytes Bytes(const uint8_t* p) {
  SiteBytes b;
  for (size_t i = 0; i < kSiteSize; i++) {
    b[i] = __atomic_load_n(p + i, __ATOMIC_RELAXED);
  }
  return b;
}

TEST(PatchTest, RecognisesOnlyMovEaxSyscallWithThatNumber) {
  SiteBytes getpid = {0xb8, 39, 0, 0, 0, 0x0f, 0x05};
  EXPECT_TRUE(IsPatchableSite(getpid, 39));
  EXPECT_FALSE(IsPatchableSite(getpid, 40));  // rax was set elsewhere
  SiteBytes mov_edi = {0x89, 0xf8, 0x90, 0x90, 0x90, 0x0f, 0x05};
  EXPECT_FALSE(IsPatchableSite(mov_edi, 39));
  SiteBytes sysenter = {0xb8, 39, 0, 0, 0, 0x0f, 0x34};
  EXPECT_FALSE(IsPatchableSite(sysenter, 39));
}

TEST(PatchTest, PatchedSiteIsJmpThroughAbsoluteAddress) {
  SiteBytes b = PatchedSite(kPatchTableBase + 3 * kPatchEntrySize);
  SiteBytes want = {0xff, 0x24, 0x25, 0xc0, 0x00, 0x06, 0x00};
  EXPECT_EQ(b, want);
  // Every entry puts the fault byte where `syscall` was.
  for (size_t i = 0; i < kPatchEntries; i++) {
    EXPECT_EQ(PatchedSite(kPatchTableBase + i * kPatchEntrySize)[5],
              kPatchFaultByte);
  }
}

TEST(PatchTest, ClassifiesHalfWrittenSites) {
  const SiteBytes old_site = {0xb8, 39, 0, 0, 0, 0x0f, 0x05};
  const SiteBytes patched = PatchedSite(kPatchTableBase + kPatchEntrySize);
  SiteBytes step1 = old_site;
  step1[5] = kPatchFaultByte;
  SiteBytes step2 = patched;
  step2[0] = 0xb8;
  EXPECT_EQ(ClassifyPatchFault(step1, 39), PatchFault::kRestart);
  EXPECT_EQ(ClassifyPatchFault(step2, 12345), PatchFault::kRestart);
  EXPECT_EQ(ClassifyPatchFault(patched, 39), PatchFault::kRestart);
  EXPECT_EQ(ClassifyPatchFault(patched, 219), PatchFault::kRestartSyscall);
  EXPECT_EQ(ClassifyPatchFault(old_site, 39), PatchFault::kNotOurs);
  SiteBytes other = {0x90, 0x90, 0x90, 0x90, 0x90, 0x06, 0x00};
  EXPECT_EQ(ClassifyPatchFault(other, 39), PatchFault::kNotOurs);
}

TEST(PatchTest, SerializesAfterStepsOneAndTwo) {
  // What a CPU may see at each serialization: after step 1 the old site
  // with the fault byte, after step 2 the new bytes behind the old `mov`.
  const SiteBytes old_site = {0xb8, 39, 0, 0, 0, 0x0f, 0x05};
  const SiteBytes patched = PatchedSite(kPatchTableBase + kPatchEntrySize);
  SiteBytes step1 = old_site;
  step1[5] = kPatchFaultByte;
  SiteBytes step2 = patched;
  step2[0] = 0xb8;
  SiteBytes site = old_site;
  std::vector<SiteBytes> seen;
  WritePatch(site.data(), patched, [&] { seen.push_back(site); });
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], step1);
  EXPECT_EQ(seen[1], step2);
  EXPECT_EQ(site, patched);
}

TEST(PatchTest, EntryLayout) {
  const uint64_t entry = kPatchTableBase + 2 * kPatchEntrySize;
  EntryBytes e = EncodeEntry(entry, 0x5555deadbeefull, 39, 0x7e0000001234ull);
  uint64_t ptr, ret, common;
  uint32_t nr;
  std::memcpy(&ptr, &e[0], 8);
  std::memcpy(&ret, &e[15], 8);
  std::memcpy(&nr, &e[24], 4);
  std::memcpy(&common, &e[40], 8);
  EXPECT_EQ(ptr, entry + 8);
  EXPECT_EQ(ret, 0x5555deadbeefull);
  EXPECT_EQ(nr, 39u);
  EXPECT_EQ(common, 0x7e0000001234ull);
}

TEST(PatchTest, SiteCounterReportsOnceAtThreshold) {
  SiteCounter c(3);
  EXPECT_FALSE(c.Count(0x1000));
  EXPECT_FALSE(c.Count(0x1000));
  EXPECT_FALSE(c.Count(0x2000));
  EXPECT_TRUE(c.Count(0x1000));
  for (int i = 0; i < 10; i++) EXPECT_FALSE(c.Count(0x1000));
  EXPECT_FALSE(c.Count(0x2000));
  EXPECT_TRUE(c.Count(0x2000));
}

TEST(PatchTest, SiteCounterIsBounded) {
  SiteCounter c(1);
  for (uint64_t i = 0; i < SiteCounter::kMaxSites; i++) {
    EXPECT_TRUE(c.Count(i));
  }
  EXPECT_FALSE(c.Count(SiteCounter::kMaxSites));  // not counted
}

// Runs the real thing in this process: a copy of patch_test_site on its
// own page, a patch table at kPatchTableBase with one entry that enters
// patch_test_common, and a SIGILL handler that restarts a thread caught at
// a half-written site, as the Sentry would.
class PatchRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    table_ = mmap(reinterpret_cast<void*>(kPatchTableBase),
                  kPatchTableEnd - kPatchTableBase,
                  PROT_READ | PROT_WRITE | PROT_EXEC,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (table_ == MAP_FAILED ||
        table_ != reinterpret_cast<void*>(kPatchTableBase)) {
      if (table_ != MAP_FAILED) munmap(table_, kPatchTableEnd - kPatchTableBase);
      table_ = nullptr;
      GTEST_SKIP() << "cannot map the patch table here: " << strerror(errno);
    }
    code_ = static_cast<uint8_t*>(mmap(nullptr, 4096,
                                       PROT_READ | PROT_WRITE | PROT_EXEC,
                                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(code_, MAP_FAILED);
    const size_t n = patch_test_site_end - patch_test_site;
    std::memcpy(code_, patch_test_site, n);
    site_ = code_ + (patch_test_site_mov - patch_test_site);
    ASSERT_TRUE(IsPatchableSite(Bytes(site_), 39));
    fn_ = reinterpret_cast<long (*)(long)>(code_);

    entry_ = kPatchTableBase + kPatchEntrySize;
    EntryBytes e =
        EncodeEntry(entry_, reinterpret_cast<uint64_t>(site_ + kSiteSize), 39,
                    reinterpret_cast<uint64_t>(patch_test_common));
    std::memcpy(reinterpret_cast<void*>(entry_), e.data(), e.size());

    g_site = reinterpret_cast<uint64_t>(site_);
    g_restarts.store(0);
    struct sigaction sa = {};
    sa.sa_sigaction = &OnSigill;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGILL, &sa, &old_sigill_);
  }

  void TearDown() override {
    if (table_ == nullptr) return;
    sigaction(SIGILL, &old_sigill_, nullptr);
    munmap(code_, 4096);
    munmap(table_, kPatchTableEnd - kPatchTableBase);
  }

  // The Sentry's part of the protocol: a SIGILL at the fault byte of a
  // site we patched reruns the site. Optionally finishes the patch after
  // the first restart (the patcher thread going on).
  static void OnSigill(int, siginfo_t*, void* ucv) {
    auto* uc = static_cast<ucontext_t*>(ucv);
    uint64_t rip = uc->uc_mcontext.gregs[REG_RIP];
    uint64_t site = rip - kSyscallOffset;
    if (site != g_site) {
      signal(SIGILL, SIG_DFL);  // not ours: die of it
      return;
    }
    PatchFault f = ClassifyPatchFault(Bytes(reinterpret_cast<uint8_t*>(site)),
                                      uc->uc_mcontext.gregs[REG_RAX]);
    if (f != PatchFault::kRestart) {
      signal(SIGILL, SIG_DFL);
      return;
    }
    uc->uc_mcontext.gregs[REG_RIP] = site;
    if (g_restarts.fetch_add(1) + 1 == g_finish_after) {
      WritePatch(reinterpret_cast<uint8_t*>(site), g_patched);
    }
  }

  static inline uint64_t g_site = 0;
  static inline std::atomic<int> g_restarts{0};
  static inline int g_finish_after = 0;
  static inline SiteBytes g_patched{};

  void* table_ = nullptr;
  uint8_t* code_ = nullptr;
  uint8_t* site_ = nullptr;
  uint64_t entry_ = 0;
  long (*fn_)(long) = nullptr;
  struct sigaction old_sigill_ = {};
};

TEST_F(PatchRunTest, PatchedSiteReturnsThroughTheTrampolineAndKeepsState) {
  EXPECT_EQ(fn_(77), getpid());  // unpatched: the real syscall
  WritePatch(site_, PatchedSite(entry_));
  EXPECT_EQ(Bytes(site_), PatchedSite(entry_));
  EXPECT_EQ(fn_(77), kPatchedResult);
  EXPECT_EQ(fn_(-5), kPatchedResult);
  EXPECT_EQ(g_restarts.load(), 0);
}

// A thread that finds the site after step 1 or step 2 of WritePatch
// faults at the fault byte and is restarted until the patch is whole.
TEST_F(PatchRunTest, HalfWrittenSiteFaultsAndRestarts) {
  const SiteBytes patched = PatchedSite(entry_);
  g_patched = patched;
  g_finish_after = 3;
  // After step 1.
  site_[kSyscallOffset] = kPatchFaultByte;
  EXPECT_EQ(fn_(1), kPatchedResult);
  EXPECT_EQ(g_restarts.load(), 3);

  // After step 2 (byte 0 still the old mov).
  std::memcpy(code_, patch_test_site, patch_test_site_end - patch_test_site);
  g_restarts.store(0);
  std::memcpy(site_ + 1, &patched[1], kSiteSize - 1);
  EXPECT_EQ(fn_(2), kPatchedResult);
  EXPECT_EQ(g_restarts.load(), 3);
}

// A thread runs the site in a loop while another patches it: every call
// returns either the real syscall's result or the trampoline's, never a
// broken state.
TEST_F(PatchRunTest, PatchingUnderAConcurrentCaller) {
  const long pid = getpid();
  g_patched = PatchedSite(entry_);
  g_finish_after = 1 << 30;  // the patcher finishes, not the handler
  for (int round = 0; round < 20; round++) {
    std::memcpy(code_, patch_test_site, patch_test_site_end - patch_test_site);
    std::atomic<bool> stop{false};
    std::atomic<long> calls{0}, patched_calls{0}, bad{0};
    std::thread runner([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        long r = fn_(round);
        if (r == kPatchedResult) {
          patched_calls.fetch_add(1, std::memory_order_relaxed);
        } else if (r != pid) {
          bad.fetch_add(1, std::memory_order_relaxed);
        }
        calls.fetch_add(1, std::memory_order_relaxed);
      }
    });
    while (calls.load() < 100) std::this_thread::yield();
    WritePatch(site_, g_patched);
    const long base = calls.load();
    while (calls.load() < base + 100) std::this_thread::yield();
    stop.store(true);
    runner.join();
    EXPECT_EQ(bad.load(), 0) << "round " << round;
    EXPECT_GT(patched_calls.load(), 0) << "round " << round;
  }
}

TEST(PatchTest, PatchedSitesRemembersSites) {
  PatchedSites s;
  EXPECT_FALSE(s.Contains(0x401000));
  s.Add(0x401000);
  EXPECT_TRUE(s.Contains(0x401000));
  EXPECT_FALSE(s.Contains(0x401001));
}

}  // namespace
}  // namespace sandboxd::systrap
