#include "sentry/proc/checkpoint.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "sentry/fs/file.h"
#include "sentry/proc/inodes.h"

namespace sandboxd::fs::proc {
namespace {

class CheckpointFileTest : public ::testing::Test {
 protected:
  void SetUp() override { Make(false); }
  void Make(bool restored) {
    control_ = std::make_shared<CheckpointControl>(restored);
    dir_ = SandboxDir(std::make_shared<Shared>(), control_);
  }
  std::shared_ptr<File> Open(int flags = O_RDWR | O_NONBLOCK) {
    std::shared_ptr<Inode> inode;
    EXPECT_EQ(dir_->Lookup("checkpoint", &inode), 0);
    std::shared_ptr<File> f;
    EXPECT_EQ(inode->Open(flags, &f), 0);
    return f;
  }
  static int64_t Write(File& f, const std::string& s) {
    return f.Write(s.data(), s.size(), -1, IoContext{});
  }
  static std::string Read(File& f) {
    char buf[64];
    int64_t n = f.Read(buf, sizeof(buf), -1, IoContext{});
    if (n < 0) return "errno " + std::to_string(-n);
    return std::string(buf, n);
  }
  static std::string Saved(File& f) {
    return dynamic_cast<InodeFile&>(f).SavedState();
  }
  void Allow() {
    control_->set_requester([this] {
      requests_++;
      return 0;
    });
  }

  std::shared_ptr<CheckpointControl> control_;
  std::shared_ptr<Inode> dir_;
  int requests_ = 0;
};

TEST_F(CheckpointFileTest, WithoutRequesterWritesFailWithEperm) {
  auto f = Open();
  EXPECT_EQ(Write(*f, "1"), -EPERM);
  Attr a;
  std::shared_ptr<Inode> inode;
  ASSERT_EQ(dir_->Lookup("checkpoint", &inode), 0);
  ASSERT_EQ(inode->GetAttr(&a), 0);
  EXPECT_EQ(a.mode, S_IFCHR | 0444u);
  Allow();
  ASSERT_EQ(inode->GetAttr(&a), 0);
  EXPECT_EQ(a.mode, S_IFCHR | 0666u);
}

TEST_F(CheckpointFileTest, WriteAsksOnceAndReadSaysResume) {
  Allow();
  auto f = Open();
  EXPECT_EQ(Write(*f, "2"), -EINVAL);
  EXPECT_EQ(Write(*f, "1\n"), 2);
  EXPECT_EQ(Write(*f, "1"), 1);
  EXPECT_EQ(requests_, 1);  // one checkpoint per description
  EXPECT_EQ(Read(*f), "errno " + std::to_string(EAGAIN));
  EXPECT_EQ(f->Readiness(POLLIN), 0u);
  EXPECT_EQ(Saved(*f), "waiting");
  control_->Ended(true);
  EXPECT_NE(f->Readiness(POLLIN) & POLLIN, 0u);
  EXPECT_EQ(Read(*f), "resume\n");
  EXPECT_EQ(Read(*f), "");
  EXPECT_EQ(Saved(*f), "done:resume\n");
  // A later description waits for the next checkpoint.
  auto g = Open();
  EXPECT_EQ(Saved(*g), "idle");
  EXPECT_EQ(Read(*g), "errno " + std::to_string(EAGAIN));
  control_->Ended(false);
  EXPECT_EQ(Read(*g), "error\n");
  EXPECT_EQ(Write(*g, "1"), -EIO);
}

TEST_F(CheckpointFileTest, AWaitingDescriptionLoadsAsRestore) {
  Make(/*restored=*/true);
  auto f = Open();
  auto* in = dynamic_cast<InodeFile*>(f.get());
  ASSERT_NE(in, nullptr);
  EXPECT_EQ(in->LoadSavedState("bogus"), -EINVAL);
  ASSERT_EQ(in->LoadSavedState("waiting"), 0);
  // The write that was waiting runs again: no new checkpoint, no EPERM.
  EXPECT_EQ(Write(*f, "1"), 1);
  EXPECT_EQ(Read(*f), "restore\n");
  auto g = Open();
  ASSERT_EQ(dynamic_cast<InodeFile&>(*g).LoadSavedState("done:resume\n"), 0);
  EXPECT_EQ(Read(*g), "resume\n");
  std::shared_ptr<Inode> restored;
  ASSERT_EQ(dir_->Lookup("restored", &restored), 0);
  std::shared_ptr<File> r;
  ASSERT_EQ(restored->Open(O_RDONLY, &r), 0);
  EXPECT_EQ(Read(*r), "1\n");
}

}  // namespace
}  // namespace sandboxd::fs::proc
