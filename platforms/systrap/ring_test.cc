// The context queue (README.md, "The context queue"): many contexts over
// few stub workers, interrupts that are never lost nor stale, and a
// corrupted ring that ends the stub process, never the Sentry.
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "platforms/systrap/stub_test_fixture.h"
#include "platforms/systrap/systrap.h"

namespace sandboxd::systrap {
namespace {

using platform::CpuState;
using platform::Event;
using platform::Prot;

// getpid; jmp back: a context that traps at every iteration.
const std::vector<uint8_t> kSyscallLoop = {0xb8, 39, 0, 0, 0, 0x0f, 0x05,
                                           0xeb, 0xf7};
// jmp .: a context that never traps by itself.
const std::vector<uint8_t> kSpin = {0xeb, 0xfe};

class RingTest : public StubFixture {
 protected:
  // `code` at kCode, the data page at kData.
  std::unique_ptr<platform::AddressSpace> NewSpace(
      const std::vector<uint8_t>& code) {
    EXPECT_EQ(pwrite(memfd_, code.data(), code.size(), 0),
              static_cast<ssize_t>(code.size()));
    return StubFixture::NewSpace();
  }

  // Waits up to 5 s for the stub process to die.
  static bool WaitDead(StubProcess* stub) {
    for (int i = 0; i < 5000 && !stub->dead(); i++) usleep(1000);
    return stub->dead();
  }

};

// 32 application threads whose contexts mostly wait in the Sentry (as
// threads blocked in a syscall do) share a few workers: a worker is added
// only when every existing one is busy.
TEST_F(RingTest, ManyContextsShareFewWorkers) {
  auto as = NewSpace(kSyscallLoop);
  auto* stub = static_cast<StubProcess*>(as.get());
  constexpr int kContexts = 32, kTraps = 40;
  std::atomic<int> traps{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kContexts; i++) {
    threads.emplace_back([&, i] {
      auto ctx = platform_->NewContext();
      CpuState cpu = StartAt(kCode);
      cpu.regs.rbx = 0x1000 + i;  // must stay this context's
      // Not all at once: a burst of first hand-overs while every worker
      // is busy would rightly add a worker each.
      usleep(500 * i);
      for (int j = 0; j < kTraps; j++) {
        Event ev = (*ctx)->Switch(*as, cpu);
        if (ev.kind != Event::Kind::kSyscall || cpu.regs.rbx != 0x1000u + i ||
            cpu.regs.rip != kCode + 7) {
          ADD_FAILURE() << "context " << i << " trap " << j << ": "
                        << static_cast<int>(ev.kind) << " " << ev.detail;
          break;
        }
        traps++;
        usleep(2000);  // "blocked in the Sentry"
      }
      (*ctx)->Release();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(traps.load(), kContexts * kTraps);
  EXPECT_GE(stub->workers(), 1u);
  EXPECT_LT(stub->workers(), static_cast<uint32_t>(kContexts))
      << "a worker per context: the ring matched no idle worker";
  RecordProperty("workers", static_cast<int>(stub->workers()));
}

// Contexts that never trap each hold a worker; the others still run (a
// worker is added for them).
TEST_F(RingTest, BusyWorkersDoNotStarveOtherContexts) {
  // Two spinning contexts at kCode, and syscall loops at kCode + 16.
  std::vector<uint8_t> code = kSpin;
  code.resize(16, 0x90);
  code.insert(code.end(), {0xb8, 39, 0, 0, 0, 0x0f, 0x05, 0xeb, 0xf7});
  auto as = NewSpace(code);
  std::vector<std::unique_ptr<platform::Context>> spinners;
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; i++) {
    spinners.push_back(std::move(*platform_->NewContext()));
  }
  std::atomic<int> interrupted{0};
  for (int i = 0; i < 2; i++) {
    threads.emplace_back([&, i] {
      CpuState cpu = StartAt(kCode);
      if (spinners[i]->Switch(*as, cpu).kind == Event::Kind::kInterrupted) {
        interrupted++;
      }
    });
  }
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode + 16);
  for (int j = 0; j < 500; j++) {
    ASSERT_EQ((*ctx)->Switch(*as, cpu).kind, Event::Kind::kSyscall);
  }
  for (auto& s : spinners) s->Interrupt();
  for (auto& t : threads) t.join();
  EXPECT_EQ(interrupted.load(), 2);
}

// An interrupt is never lost, wherever it lands: before the context is
// queued, while it is queued, as a worker takes it, or while it runs. The
// delays sweep those windows; a lost one would hang Switch (the watchdog
// then kills the stub and the test fails on kDead).
TEST_F(RingTest, InterruptsAreNeverLost) {
  auto as = NewSpace(kSpin);
  auto* stub = static_cast<StubProcess*>(as.get());
  auto ctx = platform_->NewContext();
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 30000 && !done.load(); i++) usleep(1000);
    if (!done.load()) kill(stub->pid(), SIGKILL);
  });
  std::mt19937 rng(1);
  for (int i = 0; i < 400; i++) {
    CpuState cpu = StartAt(kCode);
    const int delay_us = static_cast<int>(rng() % 60);
    std::thread t([&] {
      if (delay_us > 0) usleep(delay_us);
      (*ctx)->Interrupt();
    });
    Event ev = (*ctx)->Switch(*as, cpu);
    t.join();
    ASSERT_EQ(ev.kind, Event::Kind::kInterrupted) << i << ": " << ev.detail;
    ASSERT_EQ(cpu.regs.rip, kCode) << i;
  }
  done = true;
  watchdog.join();
  (*ctx)->Release();
}

// Interrupts aimed at a context that keeps handing itself back (syscalls)
// reach it or are dropped as stale, and once no more are sent none shows
// up: a worker ignores a signal meant for a context it has handed back.
TEST_F(RingTest, StaleInterruptsAreIgnored) {
  auto as = NewSpace(kSyscallLoop);
  auto a = platform_->NewContext();
  auto b = platform_->NewContext();
  CpuState ca = StartAt(kCode), cb = StartAt(kCode);
  std::atomic<bool> stop{false};
  std::thread interrupter([&] {
    while (!stop.load()) {
      (*a)->Interrupt();
      usleep(50);
    }
  });
  std::thread other([&] {
    for (int j = 0; j < 3000; j++) {
      Event ev = (*b)->Switch(*as, cb);
      if (ev.kind != Event::Kind::kSyscall) {
        ADD_FAILURE() << "b got " << static_cast<int>(ev.kind);
        return;
      }
    }
  });
  int syscalls = 0, interrupts = 0;
  for (int j = 0; j < 3000; j++) {
    Event ev = (*a)->Switch(*as, ca);
    ASSERT_TRUE(ev.kind == Event::Kind::kSyscall ||
                ev.kind == Event::Kind::kInterrupted)
        << static_cast<int>(ev.kind) << " " << ev.detail;
    (ev.kind == Event::Kind::kSyscall ? syscalls : interrupts)++;
    // After the syscall, or anywhere in the loop for an interrupt.
    ASSERT_TRUE(ca.regs.rip >= kCode && ca.regs.rip < kCode + 9) << j;
  }
  stop = true;
  interrupter.join();
  EXPECT_GT(syscalls, 0);
  EXPECT_GT(interrupts, 0);
  // At most one interrupt still pending in the Sentry's flag; then none.
  (*a)->Switch(*as, ca);
  for (int j = 0; j < 2000; j++) {
    Event ev = (*a)->Switch(*as, ca);
    ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << j << ": a stale interrupt";
  }
  other.join();
}

// The application can write the ring. A cell at the Sentry's tail that is
// not free: the Sentry kills the stub process and says why.
TEST_F(RingTest, ACorruptedCellAtTheTailKillsTheStub) {
  auto as = NewSpace(kSyscallLoop);
  auto* stub = static_cast<StubProcess*>(as.get());
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  ASSERT_EQ((*ctx)->Switch(*as, cpu).kind, Event::Kind::kSyscall);
  ContextRing* ring = &stub->shared()->ring;
  const uint32_t tail = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
  ring->cells[tail & (kRingSize - 1)].seq = tail + 7;
  Event ev = (*ctx)->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kDead);
  EXPECT_NE(ev.detail.find("context ring was inconsistent"), std::string::npos)
      << ev.detail;
  (*ctx)->Release();
}

// A worker that took the previous lap's entry of the cell at the tail
// (head is past it) but has not freed the cell yet, e.g. preempted by the
// host between its CAS and the release, while other contexts went round
// the ring: the Sentry waits for the cell instead of killing the stub.
TEST_F(RingTest, ACellStillHeldFromThePreviousLapIsWaitedFor) {
  auto as = NewSpace(kSyscallLoop);
  auto* stub = static_cast<StubProcess*>(as.get());
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  ASSERT_EQ((*ctx)->Switch(*as, cpu).kind, Event::Kind::kSyscall);
  ContextRing* ring = &stub->shared()->ring;
  const uint32_t tail = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
  ASSERT_EQ(__atomic_load_n(&ring->head, __ATOMIC_ACQUIRE), tail);
  RingCell* c = &ring->cells[tail & (kRingSize - 1)];
  // Written a lap ago (seq = pos + 1 for pos = tail - kRingSize) and not
  // freed; head (== tail) is past it.
  __atomic_store_n(&c->seq, tail - kRingSize + 1, __ATOMIC_RELEASE);
  std::thread worker([c, tail] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    __atomic_store_n(&c->seq, tail, __ATOMIC_RELEASE);  // freed at last
  });
  Event ev = (*ctx)->Switch(*as, cpu);
  worker.join();
  EXPECT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  (*ctx)->Release();
}

// A slot's generation that is not the entry's (a recycled slot taken for a
// fresh one, or memory overwritten): the worker ends the stub with its own
// code.
TEST_F(RingTest, AWrongGenerationKillsTheStub) {
  auto as = NewSpace(kSyscallLoop);
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  ASSERT_EQ((*ctx)->Switch(*as, cpu).kind, Event::Kind::kSyscall);
  auto* stub = static_cast<StubProcess*>(as.get());
  ThreadSlot* s = &stub->shared()->slots[1];
  __atomic_fetch_add(&s->generation, 5, __ATOMIC_SEQ_CST);
  Event ev = (*ctx)->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kDead);
  EXPECT_NE(ev.detail.find("found its context ring inconsistent"),
            std::string::npos)
      << ev.detail;
  (*ctx)->Release();
}

// An entry naming no slot, published as a Sentry would: the worker that
// takes it ends the stub process.
TEST_F(RingTest, AnEntryNamingNoSlotKillsTheStub) {
  auto as = NewSpace(kSyscallLoop);
  auto ctx = platform_->NewContext();
  CpuState cpu = StartAt(kCode);
  ASSERT_EQ((*ctx)->Switch(*as, cpu).kind, Event::Kind::kSyscall);
  auto* stub = static_cast<StubProcess*>(as.get());
  ContextRing* ring = &stub->shared()->ring;
  const uint32_t pos = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
  RingCell* c = &ring->cells[pos & (kRingSize - 1)];
  c->ctx_index = kMaxThreads + 7;
  c->generation = 0;
  __atomic_store_n(&c->seq, pos + 1, __ATOMIC_RELEASE);
  __atomic_fetch_add(&ring->futex, 1, __ATOMIC_SEQ_CST);
  syscall(SYS_futex, &ring->futex, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
  ASSERT_TRUE(WaitDead(stub));
  EXPECT_NE(stub->DeathReason().find("found its context ring inconsistent"),
            std::string::npos)
      << stub->DeathReason();
  // And the context's next Switch says so, the Sentry alive.
  Event ev = (*ctx)->Switch(*as, cpu);
  EXPECT_EQ(ev.kind, Event::Kind::kDead);
  (*ctx)->Release();
}

// A worker the host refuses (README.md, "A worker the host refuses"):
// with every worker busy in a context that never traps, a third context
// gets no worker made for it; it runs anyway (the busy ones are preempted
// in turn), the stub lives, and a fourth context cannot be prepared
// (clone's EAGAIN) until the host gives workers again.
TEST_F(RingTest, ARefusedWorkerMakesNoDeadProcess) {
  std::vector<uint8_t> code = kSpin;
  code.resize(16, 0x90);
  code.insert(code.end(), {0xb8, 39, 0, 0, 0, 0x0f, 0x05, 0xeb, 0xf7});
  auto as = NewSpace(code);
  auto* stub = static_cast<StubProcess*>(as.get());
  std::atomic<bool> stop{false};
  std::atomic<int> spins_dead{0};
  std::vector<std::unique_ptr<platform::Context>> spinners;
  for (int i = 0; i < 2; i++) {
    spinners.push_back(std::move(*platform_->NewContext()));
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; i++) {
    threads.emplace_back([&, i] {
      CpuState cpu = StartAt(kCode);
      while (!stop.load()) {
        Event ev = spinners[i]->Switch(*as, cpu);
        if (ev.kind == Event::Kind::kDead) {
          spins_dead++;
          return;
        }
      }
    });
  }
  // Both spinners hold a worker.
  for (int i = 0; i < 5000 && stub->workers() < 2; i++) usleep(1000);
  usleep(20000);
  const uint32_t before = stub->workers();
  stub->RefuseWorkersForTesting(1 << 20);
  auto ctx = platform_->NewContext();
  ASSERT_TRUE((*ctx)->Prepare(*as).ok());
  CpuState cpu = StartAt(kCode + 16);
  for (int j = 0; j < 20; j++) {
    Event ev = (*ctx)->Switch(*as, cpu);
    ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << j << ": " << ev.detail;
  }
  EXPECT_FALSE(stub->dead()) << stub->DeathReason();
  EXPECT_GE(stub->workers_refused(), 1u);
  EXPECT_LE(stub->workers(), before + 1);
  // Refused: a new thread's clone would fail with EAGAIN.
  auto another = platform_->NewContext();
  absl::Status st = (*another)->Prepare(*as);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  // The host gives workers again: so does Prepare.
  stub->RefuseWorkersForTesting(0);
  EXPECT_TRUE((*another)->Prepare(*as).ok());
  (*another)->Release();
  stop = true;
  for (auto& s : spinners) s->Interrupt();
  for (auto& t : threads) t.join();
  EXPECT_EQ(spins_dead.load(), 0);
  EXPECT_FALSE(stub->dead()) << stub->DeathReason();
  (*ctx)->Release();
  for (auto& s : spinners) s->Release();
}

}  // namespace
}  // namespace sandboxd::systrap
