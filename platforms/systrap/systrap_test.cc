#include "platforms/systrap/systrap.h"

#include <asm/prctl.h>
#include <errno.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <thread>

#include "gtest/gtest.h"
#include "platforms/systrap/stub/stub.h"
#include "platforms/systrap/stub_test_fixture.h"

namespace sandboxd::systrap {
namespace {

using platform::CpuState;
using platform::Event;
using platform::Prot;

using SystrapTest = StubFixture;

TEST_F(SystrapTest, SyscallsTrapToTheSentry) {
  // mov $39,%eax; syscall; mov %rax,%rdi; mov $60,%eax; syscall
  LoadCode({0xb8, 39, 0, 0, 0, 0x0f, 0x05, 0x48, 0x89, 0xc7, 0xb8, 60, 0, 0, 0,
            0x0f, 0x05},
           0);
  auto as = NewSpace();
  auto ctx = platform_->NewContext();
  ASSERT_TRUE(ctx.ok());
  CpuState cpu = StartAt(kCode);
  Event ev = (*ctx)->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu.regs.orig_rax, 39u);
  EXPECT_EQ(cpu.regs.rip, kCode + 7);
  EXPECT_NE(cpu.fp_size, 0u);
  cpu.regs.rax = 1234;
  ev = (*ctx)->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall);
  EXPECT_EQ(cpu.regs.orig_rax, 60u);
  EXPECT_EQ(cpu.regs.rdi, 1234u);
  (*ctx)->Release();
}

TEST_F(SystrapTest, FsBaseIsLoadedAndSaved) {
  // mov %fs:8,%rdi; mov $60,%eax; syscall
  LoadCode({0x64, 0x48, 0x8b, 0x3c, 0x25, 8, 0, 0, 0, 0xb8, 60, 0, 0, 0, 0x0f,
            0x05},
           0x1122334455667788ull);
  auto as = NewSpace();
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  cpu.regs.fs_base = kData;
  Event ev = (*ctx)->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu.regs.rdi, 0x1122334455667788ull);
  EXPECT_EQ(cpu.regs.fs_base, kData);
}

TEST_F(SystrapTest, MapFilesMapsABatchInOneRequest) {
  // mov %fs:8,%rdi; mov $60,%eax; syscall: reads the data page.
  LoadCode({0x64, 0x48, 0x8b, 0x3c, 0x25, 8, 0, 0, 0, 0xb8, 60, 0, 0, 0, 0x0f,
            0x05},
           0x5566778899aabbccull);
  auto as = platform_->NewAddressSpace();
  ASSERT_TRUE(as.ok()) << as.status();
  // Code, data, and the data page again read-only at a third address.
  ASSERT_TRUE((*as)->MapFiles(memfd_, {{kCode, 0, 4096, Prot{true, false, true}},
                                       {kData, 4096, 4096, Prot{true, true, false}},
                                       {0x30000, 4096, 4096, Prot{true, false, false}}})
                  .ok());
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  cpu.regs.fs_base = 0x30000;
  Event ev = (*ctx)->Switch(**as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu.regs.rdi, 0x5566778899aabbccull);
  (*ctx)->Release();
  // A range the host refuses (unaligned) fails the batch with its errno.
  absl::Status st = (*as)->MapFiles(
      memfd_, {{0x40000, 0, 4096, Prot{true, false, false}},
               {0x50001, 0, 4096, Prot{true, false, false}}});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("Invalid argument"), std::string::npos) << st;
}

TEST_F(SystrapTest, PageFaultsAreReported) {
  // mov %rax,(%rbx) with rbx = unmapped
  LoadCode({0x48, 0x89, 0x03}, 0);
  auto as = NewSpace();
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  cpu.regs.rbx = 0x500000;
  Event ev = (*ctx)->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kFault) << ev.detail;
  EXPECT_EQ(ev.addr, 0x500000u);
  EXPECT_TRUE(ev.write);
  EXPECT_EQ(cpu.regs.rip, kCode);
}

// Maps on the way back (README.md): while one context runs in a process,
// a map the Sentry asks for is made by the worker that takes the context
// next, not by a round trip to the control thread.
class MapsOnTheWayBackTest : public SystrapTest {
 protected:
  // mov (%rbx),%rdi; mov $60,%eax; syscall: reads 0x30008 (rbx).
  void SetUp() override {
    LoadCode({0x48, 0x8b, 0x3b, 0xb8, 60, 0, 0, 0, 0x0f, 0x05},
             0x0123456789abcdefull);
    as_ = NewSpace();
    ctx_ = std::move(*platform_->NewContext());
    cpu_ = StartAt(kCode);
    cpu_.regs.rbx = 0x30008;
  }
  void TearDown() override { ctx_->Release(); }
  StubProcess& stub() { return static_cast<StubProcess&>(*as_); }
  // The data page, read-only, at 0x30000 (or `addr`).
  absl::Status MapData(uintptr_t addr = 0x30000) {
    return as_->MapFile(addr, memfd_, 4096, 4096, Prot{true, false, false});
  }
  std::unique_ptr<platform::AddressSpace> as_;
  std::unique_ptr<platform::Context> ctx_;
  CpuState cpu_;
};

TEST_F(MapsOnTheWayBackTest, AFaultsMapIsMadeByTheWorker) {
  Event ev = ctx_->Switch(*as_, cpu_);
  ASSERT_EQ(ev.kind, Event::Kind::kFault) << ev.detail;
  EXPECT_EQ(ev.addr, 0x30008u);
  const uint64_t before = stub().maps_deferred();
  ASSERT_TRUE(MapData().ok());
  EXPECT_EQ(stub().maps_deferred(), before + 1);  // queued, not made yet
  ev = ctx_->Switch(*as_, cpu_);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu_.regs.rdi, 0x0123456789abcdefull);
}

TEST_F(MapsOnTheWayBackTest, AnUnmapComesAfterTheMapsQueuedBeforeIt) {
  ASSERT_EQ(ctx_->Switch(*as_, cpu_).kind, Event::Kind::kFault);
  ASSERT_TRUE(MapData().ok());
  as_->Unmap(0x30000, 4096);
  // Made after the unmap, the queued map would have brought the page back.
  Event ev = ctx_->Switch(*as_, cpu_);
  ASSERT_EQ(ev.kind, Event::Kind::kFault) << ev.detail;
  EXPECT_EQ(ev.addr, 0x30008u);
}

TEST_F(MapsOnTheWayBackTest, AFailedMapTurnsThemOffAndIsReportedThen) {
  ASSERT_EQ(ctx_->Switch(*as_, cpu_).kind, Event::Kind::kFault);
  // Unaligned: the host refuses it, in the worker, after we were told OK.
  ASSERT_TRUE(MapData(0x30001).ok());
  EXPECT_FALSE(stub().deferral_off());
  // The worker hands the context back unrun; run again, it faults again.
  Event ev = ctx_->Switch(*as_, cpu_);
  ASSERT_EQ(ev.kind, Event::Kind::kFault) << ev.detail;
  EXPECT_EQ(ev.addr, 0x30008u);
  EXPECT_EQ(cpu_.regs.rip, kCode);
  EXPECT_TRUE(stub().deferral_off());
  // Now through the control thread, with the error.
  EXPECT_FALSE(MapData(0x30001).ok());
  ASSERT_TRUE(MapData().ok());
  ev = ctx_->Switch(*as_, cpu_);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu_.regs.rdi, 0x0123456789abcdefull);
}

TEST_F(MapsOnTheWayBackTest, NotWithTwoContexts) {
  ASSERT_EQ(ctx_->Switch(*as_, cpu_).kind, Event::Kind::kFault);
  // A second context in the process: another thread could run before the
  // worker that takes ours, so maps are made at once.
  auto other = platform_->NewContext();
  CpuState cpu2 = StartAt(kCode + 3);  // mov $60,%eax; syscall
  ASSERT_EQ((*other)->Switch(*as_, cpu2).kind, Event::Kind::kSyscall);
  const uint64_t before = stub().maps_deferred();
  ASSERT_TRUE(MapData().ok());
  EXPECT_EQ(stub().maps_deferred(), before);
  Event ev = ctx_->Switch(*as_, cpu_);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu_.regs.rdi, 0x0123456789abcdefull);
  (*other)->Release();
}

TEST_F(SystrapTest, FpuStateRoundTrips) {
  // movq %rax,%xmm3; movq %xmm3,%rdi; mov $60,%eax; syscall  -- then
  // after the first trap the Sentry changes xmm3 and we read it back.
  LoadCode({0x66, 0x48, 0x0f, 0x6e, 0xd8,   // movq %rax,%xmm3
            0xb8, 39, 0, 0, 0, 0x0f, 0x05,  // getpid (trap)
            0x66, 0x48, 0x0f, 0x7e, 0xdf,   // movq %xmm3,%rdi
            0xb8, 60, 0, 0, 0, 0x0f, 0x05},
           0);
  auto as = NewSpace();
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  cpu.regs.rax = 0xabcdef;
  Event ev = (*ctx)->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall);
  uint64_t xmm3;
  std::memcpy(&xmm3, cpu.fp + 160 + 3 * 16, 8);  // fxsave XMM3
  EXPECT_EQ(xmm3, 0xabcdefu);
  xmm3 = 0x5555;
  std::memcpy(cpu.fp + 160 + 3 * 16, &xmm3, 8);
  ev = (*ctx)->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall);
  EXPECT_EQ(cpu.regs.rdi, 0x5555u);
}

TEST_F(SystrapTest, InterruptStopsARunningLoop) {
  LoadCode({0xeb, 0xfe}, 0);  // jmp .
  auto as = NewSpace();
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  std::thread t([&] {
    usleep(20000);
    (*ctx)->Interrupt();
  });
  Event ev = (*ctx)->Switch(*as, cpu);
  t.join();
  EXPECT_EQ(ev.kind, Event::Kind::kInterrupted);
  EXPECT_EQ(cpu.regs.rip, kCode);
}

TEST_F(SystrapTest, StubDeathIsReported) {
  LoadCode({0xeb, 0xfe}, 0);
  auto as = NewSpace();
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  pid_t pid = static_cast<StubProcess*>(as.get())->pid();
  std::thread t([&] {
    usleep(20000);
    kill(pid, SIGKILL);
  });
  Event ev = (*ctx)->Switch(*as, cpu);
  t.join();
  EXPECT_EQ(ev.kind, Event::Kind::kDead);
}

TEST_F(SystrapTest, StubCodeCannotMakeOtherHostSyscalls) {
  // A syscall from application code, whatever its number, comes to the
  // Sentry; ptrace(PTRACE_TRACEME) is just another trap.
  LoadCode({0xb8, 101, 0, 0, 0, 0x0f, 0x05}, 0);  // ptrace
  auto as = NewSpace();
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  Event ev = (*ctx)->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall);
  EXPECT_EQ(cpu.regs.orig_rax, 101u);
}

TEST_F(SystrapTest, ManyThreadsInOneAddressSpace) {
  // getpid; jmp back: each context traps on every iteration.
  LoadCode({0xb8, 39, 0, 0, 0, 0x0f, 0x05, 0xeb, 0xf7}, 0);
  auto as = NewSpace();
  std::vector<std::thread> threads;
  std::atomic<int> traps{0};
  for (int i = 0; i < 8; i++) {
    threads.emplace_back([&] {
      auto ctx = platform_->NewContext();
      CpuState cpu = StartAt(kCode);
      for (int j = 0; j < 200; j++) {
        Event ev = (*ctx)->Switch(*as, cpu);
        if (ev.kind == Event::Kind::kSyscall) traps++;
      }
      (*ctx)->Release();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(traps.load(), 8 * 200);
}

uint64_t Total(const std::atomic<uint64_t> (&h)[kLatencyBuckets]) {
  uint64_t n = 0;
  for (const auto& b : h) n += b.load();
  return n;
}

TEST_F(SystrapTest, HandOversAreTimedAndCounted) {
  // getpid; jmp back.
  LoadCode({0xb8, 39, 0, 0, 0, 0x0f, 0x05, 0xeb, 0xf7}, 0);
  auto as = NewSpace();
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  const Stats& before = platform_->stats();
  const uint64_t to_sentry = Total(before.latency[0]);
  const uint64_t to_stub = Total(before.latency[1]);
  const uint64_t evaluations = before.evaluations.load();
  constexpr int kTraps = 3000;
  for (int i = 0; i < kTraps; i++) {
    ASSERT_EQ((*ctx)->Switch(*as, cpu).kind, Event::Kind::kSyscall);
  }
  const Stats& after = platform_->stats();
  // Every round trip is two timed hand-overs; a few may be dropped (a TSC
  // read across CPUs that is out of order), not many.
  EXPECT_GE(Total(after.latency[0]) - to_sentry, uint64_t{kTraps} * 9 / 10);
  EXPECT_GE(Total(after.latency[1]) - to_stub, uint64_t{kTraps} * 9 / 10);
  // 3000 round trips take well over one 400 us period: evaluated inline.
  EXPECT_GT(after.evaluations.load(), evaluations);
  (*ctx)->Release();
}

TEST_F(SystrapTest, GaugesSeeARunningThread) {
  LoadCode({0xeb, 0xfe}, 0);  // jmp .
  auto as = NewSpace();
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  std::atomic<int64_t> awake{0};
  std::thread t([&] {
    for (int i = 0; i < 2000 && awake.load() == 0; i++) {
      awake.store(platform_->stats().stub_threads_awake.load());
      usleep(1000);
    }
    (*ctx)->Interrupt();
  });
  Event ev = (*ctx)->Switch(*as, cpu);
  t.join();
  EXPECT_EQ(ev.kind, Event::Kind::kInterrupted);
  EXPECT_GE(awake.load(), 1);
  (*ctx)->Release();
}

// The application can write the shared area. A hand-over word holding
// neither owner value would make FUTEX_WAIT fail at once, forever: whichever
// side waits on it must end the stub process (and the Sentry learn of it
// from the reaper), not spin.
TEST_F(SystrapTest, OverwrittenWordSeenByTheStub) {
  // The control thread waits on its word, which now says 7: the stub exits
  // with its own code. We wait on another word (a released slot's, which
  // the reaper also hands back) so that only the stub can notice.
  LoadCode({0xb8, 39, 0, 0, 0, 0x0f, 0x05}, 0);  // getpid
  auto as = NewSpace();
  auto* stub = static_cast<StubProcess*>(as.get());
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  ASSERT_EQ((*ctx)->Switch(*as, cpu).kind, Event::Kind::kSyscall);
  (*ctx)->Release();
  ThreadSlot* s = &stub->shared()->slots[1];
  __atomic_store_n(&s->owner, uint32_t{kOwnerStub}, __ATOMIC_SEQ_CST);
  // The control thread sleeps on its word by now: write it and wake it, as
  // a spurious wakeup would (spinning, it would see the value at once).
  uint32_t* word = &stub->shared()->control.owner;
  __atomic_store_n(word, 7u, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, word, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  EXPECT_FALSE(stub->WaitForSentry(&s->owner, &s->sentry_sleeping, 0));
  EXPECT_TRUE(stub->dead());
  EXPECT_NE(stub->DeathReason().find("found a hand-over word"),
            std::string::npos)
      << stub->DeathReason();
}

TEST_F(SystrapTest, OverwrittenWordSeenByTheSentry) {
  // A slot whose thread has exited: nobody in the stub watches its word, so
  // the Sentry's wait must notice (and kill the stub).
  LoadCode({0xb8, 39, 0, 0, 0, 0x0f, 0x05}, 0);  // getpid
  auto as = NewSpace();
  auto* stub = static_cast<StubProcess*>(as.get());
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  ASSERT_EQ((*ctx)->Switch(*as, cpu).kind, Event::Kind::kSyscall);
  (*ctx)->Release();
  ThreadSlot* s = &stub->shared()->slots[1];
  __atomic_store_n(&s->owner, 7u, __ATOMIC_SEQ_CST);
  EXPECT_FALSE(stub->WaitForSentry(&s->owner, &s->sentry_sleeping, 0));
  EXPECT_TRUE(stub->dead());
  EXPECT_NE(stub->DeathReason().find("killed: a hand-over word"),
            std::string::npos)
      << stub->DeathReason();
}


// Stub processes are clones of the template: many of them, made and torn
// down, each get a working stub, and their shared areas are reused rather
// than the pool growing with every process made.
TEST_F(SystrapTest, ManyStubsMadeAndDestroyed) {
  LoadCode({0xb8, 39, 0, 0, 0, 0x0f, 0x05}, 0);  // getpid
  auto trap_once = [&](platform::AddressSpace& as) {
    auto ctx = platform_->NewContext();
    CpuState cpu = StartAt(kCode);
    Event ev = (*ctx)->Switch(as, cpu);
    EXPECT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
    EXPECT_EQ(cpu.regs.orig_rax, 39u);
    (*ctx)->Release();
  };
  for (int i = 0; i < 100; i++) {
    auto as = NewSpace();
    trap_once(*as);
  }
  // One at a time (and the pool of two made ahead): a handful of areas.
  EXPECT_LE(platform_->areas_made(), 8u);
  for (int round = 0; round < 2; round++) {
    std::vector<std::unique_ptr<platform::AddressSpace>> spaces;
    for (int i = 0; i < 30; i++) spaces.push_back(NewSpace());
    for (auto& as : spaces) trap_once(*as);
    std::vector<pid_t> pids;
    for (auto& as : spaces) pids.push_back(static_cast<StubProcess*>(as.get())->pid());
    std::sort(pids.begin(), pids.end());
    EXPECT_EQ(std::unique(pids.begin(), pids.end()), pids.end());
  }
  // The second round of 30 reused the first round's areas.
  EXPECT_LE(platform_->areas_made(), 30u + 8u);
}

// If the template dies, no new address space can be made, and the error
// says why.
TEST(SystrapTemplateTest, TemplateDeathIsAnHonestError) {
  int memfd = memfd_create("systrap-template-test", 0);
  ASSERT_GE(memfd, 0);
  ASSERT_EQ(ftruncate(memfd, 4096), 0);
  auto p = Systrap::Create(memfd);
  ASSERT_TRUE(p.ok()) << p.status();
  (*p)->set_pool_size(0);
  {
    auto as = (*p)->NewAddressSpace();
    ASSERT_TRUE(as.ok()) << as.status();
  }
  ASSERT_EQ(kill((*p)->template_pid(), SIGKILL), 0);
  auto as = (*p)->NewAddressSpace();
  ASSERT_FALSE(as.ok());
  EXPECT_EQ(as.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(as.status().message().find("the stub template (pid"),
            std::string::npos)
      << as.status();
  EXPECT_NE(as.status().message().find("killed by signal 9"),
            std::string::npos)
      << as.status();
  p->reset();
  close(memfd);
}

// Application code can jump to any syscall instruction of the stub's code
// with registers of its choice; the filter is what it can reach at worst.
// Code that does that: rdi, rsi, eax as given, then jmp to the `syscall`
// of sbx_stub_restorer (after its 5-byte mov), which is followed by ud2.
std::vector<uint8_t> StubSyscallCode(uint32_t nr, uint64_t rdi, uint64_t rsi) {
  std::vector<uint8_t> c;
  auto imm = [&](uint64_t v, int n) {
    for (int i = 0; i < n; i++) c.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  c.insert(c.end(), {0x48, 0xbf});  // movabs $rdi,%rdi
  imm(rdi, 8);
  c.insert(c.end(), {0x48, 0xbe});  // movabs $rsi,%rsi
  imm(rsi, 8);
  c.push_back(0xb8);  // mov $nr,%eax
  imm(nr, 4);
  c.insert(c.end(), {0x48, 0xb9});  // movabs $target,%rcx
  imm(StubAddress(reinterpret_cast<const void*>(&sbx_stub_restorer), kStubBase) + 5, 8);
  c.insert(c.end(), {0xff, 0xe1});  // jmp *%rcx
  return c;
}

class StubFilterTest : public SystrapTest {
 protected:
  // Runs StubSyscallCode in a fresh stub.
  Event RunFromStubCode(uint32_t nr, uint64_t rdi, uint64_t rsi,
                        CpuState* cpu) {
    LoadCode(StubSyscallCode(nr, rdi, rsi), 0);
    as_ = NewSpace();
    ctx_ = std::move(*platform_->NewContext());
    *cpu = StartAt(kCode);
    return ctx_->Switch(*as_, *cpu);
  }
  void ExpectKilled(uint32_t nr, uint64_t rdi, uint64_t rsi) {
    CpuState cpu;
    Event ev = RunFromStubCode(nr, rdi, rsi, &cpu);
    EXPECT_EQ(ev.kind, Event::Kind::kDead)
        << "syscall " << nr << " (0x" << std::hex << rdi << ", 0x" << rsi
        << ") from stub code was not refused";
    EXPECT_NE(ev.detail.find("killed by signal 31"), std::string::npos)
        << ev.detail;
    ctx_->Release();
  }
  std::unique_ptr<platform::AddressSpace> as_;
  std::unique_ptr<platform::Context> ctx_;
};

TEST_F(StubFilterTest, CloneOnlyWithTheExactFlags) {
  constexpr uint64_t kVm = 0x100, kFiles = 0x400, kThread = 0x10000;
  ExpectKilled(SYS_clone, kNewStubCloneFlags | kVm, 0);
  ExpectKilled(SYS_clone, kNewStubCloneFlags | kFiles, 0);
  ExpectKilled(SYS_clone, kNewStubCloneFlags | (1ull << 32), 0);
  ExpectKilled(SYS_clone, 17 /* SIGCHLD: a plain fork */, 0);
  ExpectKilled(SYS_clone, kStubCloneFlags & ~kThread, 0);
  ExpectKilled(SYS_clone3, 0, 0);
  ExpectKilled(SYS_fork, 0, 0);
}

TEST_F(StubFilterTest, NewStubCallsOnlyWithTheirArguments) {
  ExpectKilled(SYS_close, kStubMemFileFd, 0);
  ExpectKilled(SYS_close, kStubPoolFd | (1ull << 32), 0);
  ExpectKilled(SYS_prctl, PR_SET_PDEATHSIG, SIGTERM);
  ExpectKilled(SYS_prctl, PR_SET_DUMPABLE, 1);
  ExpectKilled(SYS_getpid, 0, 0);
  ExpectKilled(SYS_kill, 1, SIGKILL);
}

TEST_F(StubFilterTest, MembarrierOnlySyncCoreOnItsOwnMmWithFlagsZero) {
  ExpectKilled(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0);
  ExpectKilled(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0);
  ExpectKilled(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0);
  ExpectKilled(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0);
  ExpectKilled(SYS_membarrier,
               MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE | (1ull << 32), 0);
  ExpectKilled(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE,
               MEMBARRIER_CMD_FLAG_CPU);
  ExpectKilled(SYS_membarrier,
               MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 1ull << 32);
  // The two it allows reach the host (which may not offer them: EINVAL);
  // a barrier before registering is EPERM.
  CpuState cpu;
  Event ev = RunFromStubCode(SYS_membarrier,
                             MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, &cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kException) << ev.detail;  // the ud2
  EXPECT_TRUE(static_cast<int64_t>(cpu.regs.rax) == -EPERM ||
              static_cast<int64_t>(cpu.regs.rax) == -EINVAL)
      << static_cast<int64_t>(cpu.regs.rax);
  ctx_->Release();
  ev = RunFromStubCode(SYS_membarrier,
                       MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0,
                       &cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kException) << ev.detail;
  EXPECT_TRUE(cpu.regs.rax == 0 ||
              static_cast<int64_t>(cpu.regs.rax) == -EINVAL)
      << static_cast<int64_t>(cpu.regs.rax);
  ctx_->Release();
}

TEST_F(StubFilterTest, AStubMakesNoProcessAndKeepsNoSetupCall) {
  // Allowed to the template and a new stub's first steps only: killed in
  // a stub process, where application code runs (the stub-process filter).
  ExpectKilled(SYS_clone, kNewStubCloneFlags, 0);
  ExpectKilled(SYS_close, kStubPoolFd, 0);
  ExpectKilled(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL);
  ExpectKilled(SYS_getppid, 0, 0);
  ExpectKilled(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0);
}

TEST_F(StubFilterTest, FutexAndArchPrctlOnlyWithTheStubsArguments) {
  ExpectKilled(SYS_futex, kStubShared, FUTEX_LOCK_PI);
  ExpectKilled(SYS_futex, kStubShared, FUTEX_WAIT | FUTEX_PRIVATE_FLAG);
  ExpectKilled(SYS_futex, kStubShared, FUTEX_CMP_REQUEUE);
  ExpectKilled(SYS_arch_prctl, ARCH_SET_CPUID, 0);
  ExpectKilled(SYS_arch_prctl, ARCH_SET_FS | (1ull << 32), 0);
  // What the stub uses reaches the host.
  CpuState cpu;
  Event ev = RunFromStubCode(SYS_futex, kStubShared, FUTEX_WAKE, &cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kException) << ev.detail;  // the ud2
  EXPECT_GE(static_cast<int64_t>(cpu.regs.rax), 0);
  ctx_->Release();
}

constexpr uint64_t kPageSize = 4096;

TEST_F(StubFilterTest, MapsOnlyOfTheMemoryFileBelowTheStub) {
  // StubSyscallCode sets rdi and rsi only: rdx, r10, r8 are what the test
  // code left there (0): flags 0 is not MAP_SHARED|MAP_FIXED.
  ExpectKilled(SYS_mmap, kData, kPageSize);
  // A range that reaches kStubBase, or wraps.
  ExpectKilled(SYS_munmap, kStubBase, kPageSize);
  ExpectKilled(SYS_munmap, kStubBase - kPageSize, 2 * kPageSize);
  ExpectKilled(SYS_munmap, kStubShared, kPageSize);
  ExpectKilled(SYS_munmap, ~0ull - kPageSize + 1, 2 * kPageSize);
  ExpectKilled(SYS_munmap, kPageSize, ~0ull - kPageSize);
  // Below it, allowed (its own application range).
  CpuState cpu;
  Event ev =
      RunFromStubCode(SYS_munmap, kStubBase - kPageSize, kPageSize, &cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kException) << ev.detail;
  EXPECT_EQ(static_cast<int64_t>(cpu.regs.rax), 0);
  ctx_->Release();
}

}  // namespace
}  // namespace sandboxd::systrap
