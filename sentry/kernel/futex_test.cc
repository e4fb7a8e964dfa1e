#include "sentry/kernel/futex.h"

#include <errno.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <future>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "sentry/kernel/kernel.h"
#include "sentry/kernel/testing/fakes.h"

namespace sandboxd::kernel {
namespace {

using testing::EventOf;
using testing::FakeAddressSpace;
using testing::kSaRestorer;
using testing::NoFs;
using testing::FakePlatform;
using testing::IdleContext;
using testing::NoSyscalls;

constexpr uintptr_t kMin = testing::kMinUserAddr;
constexpr uintptr_t kMax = testing::kMaxUserAddr;

constexpr auto kBlocked = std::chrono::milliseconds(100);
constexpr auto kPatience = std::chrono::seconds(10);

class FutexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = mm::MemoryFile::Create(1ull << 30);
    ASSERT_TRUE(mf.ok()) << mf.status();
    kernel_ = std::make_unique<Kernel>(std::move(mf).value(),
                                       std::make_unique<FakePlatform>(),
                                       &syscalls_, KernelOptions{});
    mm_ = std::make_shared<mm::MM>(&kernel_->memory_file(),
                                   std::make_unique<FakeAddressSpace>(), kMin,
                                   kMax);
    auto init = kernel_->CreateInit(mm_, std::make_shared<fs::FdTable>(64), NoFs(),
                                    platform::CpuState{});
    ASSERT_TRUE(init.ok()) << init.status();
    tasks_.push_back(*init);
  }

  void TearDown() override {
    // Frees any waiter a failed test left behind, so that it cannot hang.
    for (Task* t : tasks_) t->Interrupt();
    waits_.clear();
  }

  Futexes& fx() { return kernel_->futexes(); }
  Futexes::Key Key(uintptr_t addr) { return Futexes::Key{mm_.get(), addr}; }

  // A task of init's group (each blocked waiter needs its own task).
  Task* NewTask() {
    auto t = kernel_->CreateThread(*tasks_[0], platform::CpuState{});
    EXPECT_TRUE(t.ok()) << t.status();
    tasks_.push_back(*t);
    return *t;
  }

  // Starts Wait on another host thread; returns an index for Ready/Result.
  int StartWait(Task* t, Futexes::Key key, std::atomic<uint32_t>* word,
                uint32_t val, uint32_t bitset = ~0u,
                absl::Time deadline = absl::InfiniteFuture()) {
    waits_.push_back(std::async(std::launch::async, [=, this] {
      return fx().Wait(*t, key, word, val, bitset, deadline);
    }));
    return static_cast<int>(waits_.size() - 1);
  }
  template <typename D>
  bool Ready(int i, D timeout) {
    return waits_[i].wait_for(timeout) == std::future_status::ready;
  }
  int64_t Result(int i) {
    if (!Ready(i, kPatience)) {
      ADD_FAILURE() << "waiter " << i << " did not return";
      return INT64_MIN;
    }
    return waits_[i].get();
  }

  // Waits until `n` waiters are queued on `key`, without waking any: moves
  // them to a probe key and back (Requeue returns how many moved).
  bool WaitForWaiters(Futexes::Key key, int n) {
    Futexes::Key probe = Key(0xfffffff0);
    absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (absl::Now() < give_up) {
      int64_t moved = fx().Requeue(key, probe, 0, INT_MAX, nullptr, false, 0);
      fx().Requeue(probe, key, 0, INT_MAX, nullptr, false, 0);
      if (moved >= n) return moved == n;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return false;
  }

  NoSyscalls syscalls_;
  std::unique_ptr<Kernel> kernel_;
  std::shared_ptr<mm::MM> mm_;
  std::vector<Task*> tasks_;
  std::vector<std::future<int64_t>> waits_;
};

TEST_F(FutexTest, MismatchedValueIsEagain) {
  std::atomic<uint32_t> word{5};
  absl::Time start = absl::Now();
  EXPECT_EQ(fx().Wait(*tasks_[0], Key(0x1000), &word, 6, ~0u,
                      absl::InfiniteFuture()),
            -EAGAIN);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  // Nobody was left queued.
  EXPECT_EQ(fx().Wake(Key(0x1000), INT_MAX, ~0u), 0);
}

TEST_F(FutexTest, ZeroBitsetIsEinval) {
  std::atomic<uint32_t> word{0};
  EXPECT_EQ(fx().Wait(*tasks_[0], Key(0x1000), &word, 0, 0,
                      absl::InfiniteFuture()),
            -EINVAL);
  EXPECT_EQ(fx().Wake(Key(0x1000), 1, 0), -EINVAL);
}

TEST_F(FutexTest, WakeWakesOneOfTwo) {
  std::atomic<uint32_t> word{0};
  int a = StartWait(NewTask(), Key(0x1000), &word, 0);
  int b = StartWait(NewTask(), Key(0x1000), &word, 0);
  ASSERT_TRUE(WaitForWaiters(Key(0x1000), 2));
  EXPECT_FALSE(Ready(a, kBlocked));
  EXPECT_FALSE(Ready(b, std::chrono::milliseconds(0)));

  EXPECT_EQ(fx().Wake(Key(0x1000), 1, ~0u), 1);
  // Exactly one returns.
  auto deadline = std::chrono::steady_clock::now() + kPatience;
  while (!Ready(a, std::chrono::milliseconds(1)) &&
         !Ready(b, std::chrono::milliseconds(1)) &&
         std::chrono::steady_clock::now() < deadline) {
  }
  int woken = Ready(a, std::chrono::milliseconds(0)) ? a : b;
  int other = woken == a ? b : a;
  EXPECT_EQ(Result(woken), 0);
  EXPECT_FALSE(Ready(other, kBlocked));
  EXPECT_TRUE(WaitForWaiters(Key(0x1000), 1));

  EXPECT_EQ(fx().Wake(Key(0x1000), INT_MAX, ~0u), 1);
  EXPECT_EQ(Result(other), 0);
  EXPECT_EQ(fx().Wake(Key(0x1000), INT_MAX, ~0u), 0);
}

TEST_F(FutexTest, KeysAreAddressAndMm) {
  std::atomic<uint32_t> word{0};
  int w = StartWait(NewTask(), Key(0x2000), &word, 0);
  ASSERT_TRUE(WaitForWaiters(Key(0x2000), 1));
  EXPECT_EQ(fx().Wake(Key(0x2004), INT_MAX, ~0u), 0);
  // The same address in another address space is another futex.
  mm::MM other(&kernel_->memory_file(), std::make_unique<FakeAddressSpace>(),
               kMin, kMax);
  EXPECT_EQ(fx().Wake(Futexes::Key{&other, 0x2000}, INT_MAX, ~0u), 0);
  EXPECT_FALSE(Ready(w, kBlocked));
  EXPECT_EQ(fx().Wake(Key(0x2000), INT_MAX, ~0u), 1);
  EXPECT_EQ(Result(w), 0);
}

TEST_F(FutexTest, BitsetSelectsWaiters) {
  std::atomic<uint32_t> word{0};
  int one = StartWait(NewTask(), Key(0x1000), &word, 0, 0x1);
  int two = StartWait(NewTask(), Key(0x1000), &word, 0, 0x2);
  ASSERT_TRUE(WaitForWaiters(Key(0x1000), 2));
  EXPECT_EQ(fx().Wake(Key(0x1000), INT_MAX, 0x4), 0);
  EXPECT_EQ(fx().Wake(Key(0x1000), INT_MAX, 0x2), 1);
  EXPECT_EQ(Result(two), 0);
  EXPECT_FALSE(Ready(one, kBlocked));
  // A waiter that does not match is skipped, not counted against n.
  int three = StartWait(NewTask(), Key(0x1000), &word, 0, 0x2);
  ASSERT_TRUE(WaitForWaiters(Key(0x1000), 2));
  EXPECT_EQ(fx().Wake(Key(0x1000), 1, 0x2), 1);
  EXPECT_EQ(Result(three), 0);
  EXPECT_FALSE(Ready(one, std::chrono::milliseconds(0)));
  EXPECT_EQ(fx().Wake(Key(0x1000), 1, 0x3), 1);
  EXPECT_EQ(Result(one), 0);
}

TEST_F(FutexTest, DeadlineGivesEtimedout) {
  std::atomic<uint32_t> word{0};
  Task* t = NewTask();
  absl::Time start = absl::Now();
  int w = StartWait(t, Key(0x1000), &word, 0, ~0u,
                    start + absl::Milliseconds(50));
  EXPECT_EQ(Result(w), -ETIMEDOUT);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  // The timed-out waiter left the queue.
  EXPECT_EQ(fx().Wake(Key(0x1000), INT_MAX, ~0u), 0);
  // A deadline in the past times out at once; the value check still wins.
  EXPECT_EQ(fx().Wait(*t, Key(0x1000), &word, 0, ~0u, absl::InfinitePast()),
            -ETIMEDOUT);
  EXPECT_EQ(fx().Wait(*t, Key(0x1000), &word, 1, ~0u, absl::InfinitePast()),
            -EAGAIN);
}

TEST_F(FutexTest, InterruptGivesEintr) {
  std::atomic<uint32_t> word{0};
  Task* t = NewTask();
  int w = StartWait(t, Key(0x1000), &word, 0);
  ASSERT_TRUE(WaitForWaiters(Key(0x1000), 1));
  EXPECT_FALSE(Ready(w, kBlocked));
  t->Interrupt();
  EXPECT_EQ(Result(w), -EINTR);
  EXPECT_EQ(fx().Wake(Key(0x1000), INT_MAX, ~0u), 0);
}

TEST_F(FutexTest, UnblockedSignalInterruptsBlockedOneDoesNot) {
  std::atomic<uint32_t> word{0};
  Task* t = NewTask();
  int w = StartWait(t, Key(0x1000), &word, 0);
  ASSERT_TRUE(WaitForWaiters(Key(0x1000), 1));
  t->SendSignal(SIGUSR1, 1);
  EXPECT_EQ(Result(w), -EINTR);

  Task* u = NewTask();
  u->set_signal_mask(SigBit(SIGUSR2));
  int v = StartWait(u, Key(0x1000), &word, 0, ~0u,
                    absl::Now() + absl::Milliseconds(300));
  ASSERT_TRUE(WaitForWaiters(Key(0x1000), 1));
  u->SendSignal(SIGUSR2, 1);
  EXPECT_EQ(Result(v), -ETIMEDOUT);
  EXPECT_NE(u->pending_signals() & SigBit(SIGUSR2), 0u);
}

TEST_F(FutexTest, RequeueWakesAndMoves) {
  std::atomic<uint32_t> word{7};
  int w[3];
  for (int& i : w) i = StartWait(NewTask(), Key(0x1000), &word, 7);
  ASSERT_TRUE(WaitForWaiters(Key(0x1000), 3));
  // One woken, one moved to 0x3000, one left on 0x1000.
  EXPECT_EQ(fx().Requeue(Key(0x1000), Key(0x3000), 1, 1, &word, true, 7), 2);
  int done = 0;
  for (int i : w) done += Ready(i, kBlocked) ? 1 : 0;
  EXPECT_EQ(done, 1);
  EXPECT_EQ(fx().Wake(Key(0x3000), INT_MAX, ~0u), 1);
  EXPECT_EQ(fx().Wake(Key(0x1000), INT_MAX, ~0u), 1);
  for (int i : w) EXPECT_EQ(Result(i), 0);
  EXPECT_EQ(fx().Wake(Key(0x3000), INT_MAX, ~0u), 0);
}

TEST_F(FutexTest, CmpRequeueChecksTheValue) {
  std::atomic<uint32_t> word{7};
  int w = StartWait(NewTask(), Key(0x1000), &word, 7);
  ASSERT_TRUE(WaitForWaiters(Key(0x1000), 1));
  word = 8;
  EXPECT_EQ(fx().Requeue(Key(0x1000), Key(0x3000), 1, 1, &word, true, 7),
            -EAGAIN);
  EXPECT_FALSE(Ready(w, kBlocked));
  EXPECT_EQ(fx().Wake(Key(0x3000), INT_MAX, ~0u), 0);
  EXPECT_EQ(fx().Wake(Key(0x1000), INT_MAX, ~0u), 1);
  EXPECT_EQ(Result(w), 0);
}

TEST_F(FutexTest, InterruptAfterRequeueLeavesTheNewQueue) {
  std::atomic<uint32_t> word{0};
  Task* t = NewTask();
  int w = StartWait(t, Key(0x1000), &word, 0);
  ASSERT_TRUE(WaitForWaiters(Key(0x1000), 1));
  ASSERT_EQ(fx().Requeue(Key(0x1000), Key(0x3000), 0, 1, &word, false, 0), 1);
  t->Interrupt();
  EXPECT_EQ(Result(w), -EINTR);
  // A stale entry would point at the returned waiter's stack frame.
  EXPECT_EQ(fx().Wake(Key(0x3000), INT_MAX, ~0u), 0);
  EXPECT_EQ(fx().Wake(Key(0x1000), INT_MAX, ~0u), 0);
}

TEST_F(FutexTest, WakeOpWakesSecondKeyOnlyWhenTheComparisonHolds) {
  std::atomic<uint32_t> word{0};
  int a1 = StartWait(NewTask(), Key(0x1000), &word, 0);
  int b1 = StartWait(NewTask(), Key(0x2000), &word, 0);
  ASSERT_TRUE(WaitForWaiters(Key(0x1000), 1));
  ASSERT_TRUE(WaitForWaiters(Key(0x2000), 1));
  EXPECT_EQ(fx().WakeOp(Key(0x1000), Key(0x2000), 1, 1, [] { return 0; }), 1);
  EXPECT_EQ(Result(a1), 0);
  EXPECT_FALSE(Ready(b1, kBlocked));
  EXPECT_EQ(fx().WakeOp(Key(0x1000), Key(0x2000), 1, 1,
                        [] { return int64_t{-ENOSYS}; }),
            -ENOSYS);
  EXPECT_FALSE(Ready(b1, kBlocked));
  EXPECT_EQ(fx().WakeOp(Key(0x1000), Key(0x2000), 1, 1, [] { return 1; }), 1);
  EXPECT_EQ(Result(b1), 0);
}

}  // namespace
}  // namespace sandboxd::kernel
