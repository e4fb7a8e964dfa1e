#include "sentry/fs/lock.h"

#include <errno.h>
#include <fcntl.h>

#include <atomic>
#include <memory>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sentry/fs/file.h"

namespace sandboxd::fs {
namespace {

using ::testing::ElementsAre;

class FakeInode : public Inode {
 public:
  uint32_t Type() const override { return S_IFREG; }
  int GetAttr(Attr* out) override {
    *out = Attr();
    out->mode = S_IFREG | 0644;
    return 0;
  }
};

// A Blocker that sleeps on a CondVar: a stand-in for the task, which lets
// a test see that the waiter is asleep and interrupt it.
class FakeBlocker : public waiter::Blocker {
 public:
  int Wait(waiter::WaitQueue& q, waiter::EventMask mask, const std::function<bool()>& ready,
           absl::Time deadline) override {
    struct Wake : waiter::Waiter {
      FakeBlocker* b;
      void Notify(waiter::EventMask) override {
        absl::MutexLock l(&b->mu_);
        b->notified_ = true;
      }
    } w;
    w.b = this;
    q.Add(&w, mask);
    int r = 0;
    while (!ready()) {
      bool interrupted;
      {
        absl::MutexLock l(&mu_);
        sleeps_++;
        auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return notified_ || interrupted_;
        };
        mu_.Await(absl::Condition(&woken));
        notified_ = false;
        interrupted = std::exchange(interrupted_, false);
      }
      if (interrupted) {
        // As Task::Wait: one last look, the wake-up may have raced.
        r = ready() ? 0 : -EINTR;
        break;
      }
    }
    q.Remove(&w);
    return r;
  }

  void Interrupt() {
    absl::MutexLock l(&mu_);
    interrupted_ = true;
  }

  // Waits until the blocked thread has gone to sleep `n` times.
  void AwaitSleeps(int n) {
    absl::MutexLock l(&mu_);
    auto asleep = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return sleeps_ >= n;
    };
    mu_.Await(absl::Condition(&asleep));
  }

 private:
  absl::Mutex mu_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
  bool interrupted_ ABSL_GUARDED_BY(mu_) = false;
  int sleeps_ ABSL_GUARDED_BY(mu_) = 0;
};

// Distinct addresses standing for descriptor tables and descriptions:
// owners are identities only.
const FdTable* Table(int n) {
  return reinterpret_cast<const FdTable*>(static_cast<uintptr_t>(0x1000 * n));
}
const File* Desc(int n) {
  return reinterpret_cast<const File*>(static_cast<uintptr_t>(0x100000 * n));
}

RecordLock Req(short type, int64_t start, int64_t end, RecordLockOwner o) {
  return RecordLock{type, start, end, o};
}

struct Range {
  short type;
  int64_t start, end;
  bool operator==(const Range& o) const {
    return type == o.type && start == o.start && end == o.end;
  }
};
std::ostream& operator<<(std::ostream& os, const Range& r) {
  return os << (r.type == F_RDLCK ? "R" : "W") << "[" << r.start << ","
            << r.end << "]";
}

class LockTableTest : public ::testing::Test {
 protected:
  std::vector<Range> Ranges() {
    std::vector<Range> out;
    for (const RecordLock& l : table_.RecordLocks(inode_.get())) {
      out.push_back({l.type, l.start, l.end});
    }
    return out;
  }

  LockTable table_;
  std::shared_ptr<Inode> inode_ = std::make_shared<FakeInode>();
  const RecordLockOwner a_ = RecordLockOwner::Posix(Table(1), 100);
  const RecordLockOwner b_ = RecordLockOwner::Posix(Table(2), 200);
};

TEST_F(LockTableTest, WriteConflictsWithEverythingReadWithWrite) {
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 0, 9, a_), nullptr), 0);
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_RDLCK, 5, 5, b_), nullptr), -EAGAIN);
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 9, 20, b_), nullptr),
            -EAGAIN);
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_RDLCK, 10, 19, b_), nullptr), 0);
  // Readers share.
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_RDLCK, 15, 15, a_), nullptr), 0);
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 15, 15, a_), nullptr),
            -EAGAIN);
}

TEST_F(LockTableTest, TestReportsConflictNotOwnLocks) {
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 10, 19, a_), nullptr), 0);
  RecordLock c;
  EXPECT_FALSE(table_.TestRecord(inode_, Req(F_WRLCK, 0, 100, a_), &c));
  EXPECT_FALSE(table_.TestRecord(inode_, Req(F_WRLCK, 20, 100, b_), &c));
  ASSERT_TRUE(table_.TestRecord(inode_, Req(F_RDLCK, 0, 100, b_), &c));
  EXPECT_EQ(c.type, F_WRLCK);
  EXPECT_EQ(c.start, 10);
  EXPECT_EQ(c.end, 19);
  EXPECT_EQ(c.owner.pid, 100);
  EXPECT_TRUE(c.owner.SameAs(a_));
}

TEST_F(LockTableTest, UnlockInTheMiddleSplits) {
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 0, 99, a_), nullptr), 0);
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_UNLCK, 10, 19, a_), nullptr), 0);
  EXPECT_THAT(Ranges(), ElementsAre(Range{F_WRLCK, 0, 9},
                                    Range{F_WRLCK, 20, 99}));
  // The freed hole is free for others, the rest is not.
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 10, 19, b_), nullptr), 0);
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 9, 9, b_), nullptr),
            -EAGAIN);
}

TEST_F(LockTableTest, UnlockOfEndsAndOfNothing) {
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_RDLCK, 0, 9, a_), nullptr), 0);
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_UNLCK, 0, 2, a_), nullptr), 0);
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_UNLCK, 8, kLockOffsetMax, a_),
                             nullptr),
            0);
  EXPECT_THAT(Ranges(), ElementsAre(Range{F_RDLCK, 3, 7}));
  // Unlocking what is not locked, or what is someone else's, is no error.
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_UNLCK, 100, 200, a_), nullptr), 0);
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_UNLCK, 0, 200, b_), nullptr), 0);
  EXPECT_THAT(Ranges(), ElementsAre(Range{F_RDLCK, 3, 7}));
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_UNLCK, 0, kLockOffsetMax, a_),
                             nullptr),
            0);
  EXPECT_THAT(Ranges(), ElementsAre());
  EXPECT_EQ(table_.TrackedInodes(), 0u);
}

TEST_F(LockTableTest, SameTypeMergesAdjacentAndOverlapping) {
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_RDLCK, 0, 9, a_), nullptr), 0);
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_RDLCK, 10, 19, a_), nullptr), 0);
  EXPECT_THAT(Ranges(), ElementsAre(Range{F_RDLCK, 0, 19}));
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_RDLCK, 30, 39, a_), nullptr), 0);
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_RDLCK, 15, 35, a_), nullptr), 0);
  EXPECT_THAT(Ranges(), ElementsAre(Range{F_RDLCK, 0, 39}));
  // Another owner's adjacent lock stays separate.
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_RDLCK, 40, 49, b_), nullptr), 0);
  EXPECT_THAT(Ranges(), ElementsAre(Range{F_RDLCK, 0, 39},
                                    Range{F_RDLCK, 40, 49}));
}

TEST_F(LockTableTest, TypeChangeInTheMiddleSplitsThreeWays) {
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_RDLCK, 0, 99, a_), nullptr), 0);
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 40, 59, a_), nullptr), 0);
  EXPECT_THAT(Ranges(), ElementsAre(Range{F_RDLCK, 0, 39},
                                    Range{F_WRLCK, 40, 59},
                                    Range{F_RDLCK, 60, 99}));
  // Downgrading it again merges all three.
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_RDLCK, 40, 59, a_), nullptr), 0);
  EXPECT_THAT(Ranges(), ElementsAre(Range{F_RDLCK, 0, 99}));
}

TEST_F(LockTableTest, ToInfinity) {
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 100, kLockOffsetMax, a_),
                             nullptr),
            0);
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_RDLCK, INT64_MAX - 1, INT64_MAX - 1,
                                         b_),
                             nullptr),
            -EAGAIN);
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_UNLCK, 200, kLockOffsetMax, a_),
                             nullptr),
            0);
  EXPECT_THAT(Ranges(), ElementsAre(Range{F_WRLCK, 100, 199}));
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 200, kLockOffsetMax, b_),
                             nullptr),
            0);
}

TEST_F(LockTableTest, BadRangesAreRejected) {
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, -1, 5, a_), nullptr),
            -EINVAL);
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 5, 4, a_), nullptr),
            -EINVAL);
  EXPECT_EQ(table_.TrackedInodes(), 0u);
}

TEST_F(LockTableTest, OfdAndPosixOfOneProcessConflict) {
  const RecordLockOwner ofd = RecordLockOwner::Ofd(Desc(1));
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 0, 9, a_), nullptr), 0);
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_RDLCK, 0, 0, ofd), nullptr),
            -EAGAIN);
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 10, 19, ofd), nullptr), 0);
  RecordLock c;
  ASSERT_TRUE(table_.TestRecord(inode_, Req(F_RDLCK, 15, 15, a_), &c));
  EXPECT_EQ(c.owner.kind, RecordLockOwner::Kind::kOfd);
  EXPECT_EQ(c.owner.pid, -1);
  // Two descriptions are two owners, whichever process holds them.
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_RDLCK, 15, 15,
                                         RecordLockOwner::Ofd(Desc(2))),
                             nullptr),
            -EAGAIN);
}

TEST_F(LockTableTest, ReleasesGoByOwnerKind) {
  const RecordLockOwner ofd = RecordLockOwner::Ofd(Desc(1));
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 0, 9, a_), nullptr), 0);
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 10, 19, b_), nullptr), 0);
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 20, 29, ofd), nullptr), 0);
  ASSERT_EQ(table_.Flock(inode_, Desc(1), F_WRLCK, nullptr), 0);

  table_.ReleasePosix(inode_.get(), Table(1));
  EXPECT_THAT(Ranges(), ElementsAre(Range{F_WRLCK, 10, 19},
                                    Range{F_WRLCK, 20, 29}));
  // A description's release takes its OFD locks and its flock, never the
  // POSIX locks of a table.
  table_.ReleaseDescription(inode_.get(), Desc(1));
  EXPECT_THAT(Ranges(), ElementsAre(Range{F_WRLCK, 10, 19}));
  EXPECT_EQ(table_.Flock(inode_, Desc(2), F_WRLCK, nullptr), 0);
  table_.ReleaseDescription(inode_.get(), Desc(2));
  table_.ReleasePosix(inode_.get(), Table(2));
  EXPECT_EQ(table_.TrackedInodes(), 0u);
}

TEST_F(LockTableTest, BlockedWaiterWokenByUnlockFromAnotherThread) {
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 0, 9, a_), nullptr), 0);
  FakeBlocker blocker;
  std::atomic<int> result{1};
  std::thread waiter([&] {
    result = table_.SetRecord(inode_, Req(F_WRLCK, 5, 14, b_), &blocker);
  });
  blocker.AwaitSleeps(1);
  EXPECT_EQ(result.load(), 1);
  // A change that does not free the range wakes it, and it sleeps again.
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_UNLCK, 0, 3, a_), nullptr), 0);
  blocker.AwaitSleeps(2);
  EXPECT_EQ(result.load(), 1);
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_UNLCK, 0, kLockOffsetMax, a_),
                             nullptr),
            0);
  waiter.join();
  EXPECT_EQ(result.load(), 0);
  EXPECT_THAT(Ranges(), ElementsAre(Range{F_WRLCK, 5, 14}));
}

TEST_F(LockTableTest, BlockedWaiterInterrupted) {
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 0, 9, a_), nullptr), 0);
  FakeBlocker blocker;
  std::atomic<int> result{1};
  std::thread waiter([&] {
    result = table_.SetRecord(inode_, Req(F_RDLCK, 0, 0, b_), &blocker);
  });
  blocker.AwaitSleeps(1);
  blocker.Interrupt();
  waiter.join();
  EXPECT_EQ(result.load(), -EINTR);
  EXPECT_THAT(Ranges(), ElementsAre(Range{F_WRLCK, 0, 9}));
  table_.ReleasePosix(inode_.get(), Table(1));
  EXPECT_EQ(table_.TrackedInodes(), 0u);
}

TEST_F(LockTableTest, TwoOwnerDeadlockIsRefused) {
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 0, 0, a_), nullptr), 0);
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 1, 1, b_), nullptr), 0);
  FakeBlocker blocker;
  std::atomic<int> result{1};
  std::thread b_waits([&] {
    result = table_.SetRecord(inode_, Req(F_WRLCK, 0, 0, b_), &blocker);
  });
  blocker.AwaitSleeps(1);
  // a now waiting for b would wait for itself.
  FakeBlocker never;
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 1, 1, a_), &never),
            -EDEADLK);
  // OFD owners are not followed: an OFD request just gets EAGAIN here.
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 1, 1,
                                         RecordLockOwner::Ofd(Desc(1))),
                             nullptr),
            -EAGAIN);
  ASSERT_EQ(table_.SetRecord(inode_, Req(F_UNLCK, 0, 0, a_), nullptr), 0);
  b_waits.join();
  EXPECT_EQ(result.load(), 0);
  EXPECT_THAT(Ranges(), ElementsAre(Range{F_WRLCK, 0, 1}));
}

TEST_F(LockTableTest, FlockSharedExclusiveAndSameDescription) {
  ASSERT_EQ(table_.Flock(inode_, Desc(1), F_RDLCK, nullptr), 0);
  ASSERT_EQ(table_.Flock(inode_, Desc(2), F_RDLCK, nullptr), 0);
  EXPECT_EQ(table_.Flock(inode_, Desc(3), F_WRLCK, nullptr), -EWOULDBLOCK);
  // Locking again what one holds succeeds.
  EXPECT_EQ(table_.Flock(inode_, Desc(1), F_RDLCK, nullptr), 0);
  // A failed conversion drops the old lock, as on Linux.
  EXPECT_EQ(table_.Flock(inode_, Desc(1), F_WRLCK, nullptr), -EWOULDBLOCK);
  ASSERT_EQ(table_.Flock(inode_, Desc(2), F_WRLCK, nullptr), 0);
  EXPECT_EQ(table_.Flock(inode_, Desc(1), F_RDLCK, nullptr), -EWOULDBLOCK);
  ASSERT_EQ(table_.Flock(inode_, Desc(2), F_UNLCK, nullptr), 0);
  EXPECT_EQ(table_.Flock(inode_, Desc(2), F_UNLCK, nullptr), 0);
  EXPECT_EQ(table_.TrackedInodes(), 0u);
}

TEST_F(LockTableTest, FlockAndRecordLocksAreIndependent) {
  ASSERT_EQ(table_.Flock(inode_, Desc(1), F_WRLCK, nullptr), 0);
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 0, kLockOffsetMax, a_),
                             nullptr),
            0);
  EXPECT_EQ(table_.SetRecord(inode_, Req(F_WRLCK, 0, kLockOffsetMax,
                                         RecordLockOwner::Ofd(Desc(2))),
                             nullptr),
            -EAGAIN);
}

TEST_F(LockTableTest, FlockWaiterWokenByUnlock) {
  ASSERT_EQ(table_.Flock(inode_, Desc(1), F_WRLCK, nullptr), 0);
  FakeBlocker blocker;
  std::atomic<int> result{1};
  std::thread waiter(
      [&] { result = table_.Flock(inode_, Desc(2), F_RDLCK, &blocker); });
  blocker.AwaitSleeps(1);
  EXPECT_EQ(result.load(), 1);
  table_.ReleaseDescription(inode_.get(), Desc(1));
  waiter.join();
  EXPECT_EQ(result.load(), 0);
  EXPECT_EQ(table_.Flock(inode_, Desc(3), F_WRLCK, nullptr), -EWOULDBLOCK);
}

TEST_F(LockTableTest, LocksOfADeadInodeAreNotInherited) {
  // Two inodes at one address, as when the first is freed with locks left
  // behind (a missed release) and the allocator reuses its memory.
  alignas(FakeInode) unsigned char storage[sizeof(FakeInode)];
  auto destroy = [](Inode* i) { i->~Inode(); };
  std::shared_ptr<Inode> first(new (storage) FakeInode, destroy);
  ASSERT_EQ(table_.SetRecord(first, Req(F_WRLCK, 0, 9, a_), nullptr), 0);
  first.reset();
  std::shared_ptr<Inode> second(new (storage) FakeInode, destroy);
  RecordLock c;
  EXPECT_FALSE(table_.TestRecord(second, Req(F_WRLCK, 0, 9, b_), &c));
  EXPECT_EQ(table_.SetRecord(second, Req(F_WRLCK, 0, 9, b_), nullptr), 0);
  table_.ReleasePosix(second.get(), Table(2));
  EXPECT_EQ(table_.TrackedInodes(), 0u);
}

TEST(LockHooksTest, NullInodesAndEmptyTableAreNoOps) {
  ReleasePosixLocks(nullptr, Table(1));
  ReleaseDescriptionLocks(nullptr, Desc(1));
  FakeInode i;
  ReleasePosixLocks(&i, Table(1));
  ReleaseDescriptionLocks(&i, Desc(1));
}

}  // namespace
}  // namespace sandboxd::fs
