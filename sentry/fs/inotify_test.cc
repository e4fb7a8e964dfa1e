#include "sentry/fs/inotify.h"

#include <errno.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sentry/fs/testing/fake_blocker.h"
#include "sentry/fs/tmpfs.h"

namespace sandboxd::fs {
namespace {

struct Ev {
  int wd;
  uint32_t mask;
  uint32_t cookie;
  std::string name;
  bool operator==(const Ev& o) const {
    return wd == o.wd && mask == o.mask && cookie == o.cookie && name == o.name;
  }
};

std::ostream& operator<<(std::ostream& os, const Ev& e) {
  return os << "{" << e.wd << ", 0x" << std::hex << e.mask << std::dec << ", "
            << e.cookie << ", \"" << e.name << "\"}";
}

class InotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = mm::MemoryFile::Create(1ull << 28);
    ASSERT_TRUE(mf.ok()) << mf.status();
    mf_ = std::move(mf).value();
    tmpfs_ = std::make_unique<TmpFs>(mf_.get(), TmpFsOptions{});
    vfs_ = std::make_unique<Vfs>(tmpfs_->Root(), "tmpfs", "none", false);
    in_ = std::make_shared<InotifyFile>(/*nonblock=*/true);
  }
  void TearDown() override { in_.reset(); }

  // Every queued event.
  std::vector<Ev> Drain() {
    std::vector<Ev> out;
    std::vector<uint8_t> buf(1 << 16);
    int64_t n = in_->Read(buf.data(), buf.size(), -1, b_.io());
    for (int64_t off = 0; off < n;) {
      inotify_event h;
      memcpy(&h, buf.data() + off, sizeof(h));
      std::string name(reinterpret_cast<char*>(buf.data() + off + sizeof(h)),
                       h.len);
      name = name.c_str();  // the padding
      out.push_back(Ev{h.wd, h.mask, h.cookie, name});
      off += sizeof(h) + h.len;
    }
    return out;
  }
  Location Create(const std::string& name, uint32_t type = S_IFREG) {
    CreateRequest req;
    req.type = type;
    Location loc;
    EXPECT_EQ(vfs_->Create(vfs_->Root(), name, req, &loc), 0);
    return loc;
  }

  std::unique_ptr<mm::MemoryFile> mf_;
  std::unique_ptr<TmpFs> tmpfs_;
  std::unique_ptr<Vfs> vfs_;
  FakeBlocker b_;
  std::shared_ptr<InotifyFile> in_;
};

TEST_F(InotifyTest, NoWatchesNoWork) {
  EXPECT_FALSE(inotify::Active());
  int wd = in_->AddWatch(tmpfs_->Root(), IN_CREATE);
  EXPECT_EQ(wd, 1);
  EXPECT_TRUE(inotify::Active());
  EXPECT_EQ(in_->RemoveWatch(wd), 0);
  EXPECT_FALSE(inotify::Active());
  EXPECT_EQ(in_->RemoveWatch(wd), -EINVAL);
  EXPECT_EQ(Drain(), (std::vector<Ev>{{1, IN_IGNORED, 0, ""}}));
}

TEST_F(InotifyTest, DirectoryEventsCarryNames) {
  EXPECT_EQ(in_->AddWatch(tmpfs_->Root(), IN_ALL_EVENTS), 1);
  Location f = Create("file");
  Create("dir", S_IFDIR);
  inotify::NotifyFile(vfs_.get(), f, IN_MODIFY);
  EXPECT_EQ(vfs_->Unlink(vfs_->Root(), "file", false), 0);
  EXPECT_EQ(Drain(), (std::vector<Ev>{{1, IN_CREATE, 0, "file"},
                                      {1, IN_CREATE | IN_ISDIR, 0, "dir"},
                                      {1, IN_MODIFY, 0, "file"},
                                      {1, IN_DELETE, 0, "file"}}));
}

TEST_F(InotifyTest, UnlinkOfAWatchedFile) {
  Location f = Create("f");
  EXPECT_EQ(in_->AddWatch(tmpfs_->Root(), IN_DELETE), 1);
  EXPECT_EQ(in_->AddWatch(f.dentry->inode(), IN_ALL_EVENTS), 2);
  EXPECT_EQ(vfs_->Unlink(vfs_->Root(), "f", false), 0);
  EXPECT_EQ(Drain(), (std::vector<Ev>{{2, IN_ATTRIB, 0, ""},
                                      {2, IN_DELETE_SELF, 0, ""},
                                      {2, IN_IGNORED, 0, ""},
                                      {1, IN_DELETE, 0, "f"}}));
}

TEST_F(InotifyTest, RenameSharesACookie) {
  Create("a");
  EXPECT_EQ(in_->AddWatch(tmpfs_->Root(), IN_MOVE), 1);
  EXPECT_EQ(vfs_->Rename(vfs_->Root(), "a", vfs_->Root(), "b", 0), 0);
  auto ev = Drain();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].mask, IN_MOVED_FROM);
  EXPECT_EQ(ev[1].mask, IN_MOVED_TO);
  EXPECT_NE(ev[0].cookie, 0u);
  EXPECT_EQ(ev[0].cookie, ev[1].cookie);
  EXPECT_EQ(ev[1].name, "b");
}

TEST_F(InotifyTest, MasksFlagsAndOneshot) {
  Location f = Create("f");
  auto inode = f.dentry->inode();
  EXPECT_EQ(in_->AddWatch(inode, 0), -EINVAL);
  EXPECT_EQ(in_->AddWatch(inode, IN_OPEN), 1);
  EXPECT_EQ(in_->AddWatch(inode, IN_OPEN | IN_MASK_CREATE), -EEXIST);
  EXPECT_EQ(in_->AddWatch(inode, IN_ACCESS | IN_MASK_ADD), 1);
  inotify::NotifyFile(nullptr, f, IN_ACCESS);
  inotify::NotifyFile(nullptr, f, IN_MODIFY);  // not watched
  EXPECT_EQ(in_->AddWatch(inode, IN_MODIFY | IN_ONESHOT), 1);
  inotify::NotifyFile(nullptr, f, IN_ACCESS);  // no longer watched
  inotify::NotifyFile(nullptr, f, IN_MODIFY);
  inotify::NotifyFile(nullptr, f, IN_MODIFY);
  EXPECT_EQ(Drain(), (std::vector<Ev>{{1, IN_ACCESS, 0, ""},
                                      {1, IN_MODIFY, 0, ""},
                                      {1, IN_IGNORED, 0, ""}}));
  EXPECT_FALSE(inotify::Active());
}

TEST_F(InotifyTest, ReadMergesPadsAndRefusesSmallBuffers) {
  EXPECT_TRUE(in_->Enqueue(1, IN_MODIFY, 0, "name"));
  EXPECT_FALSE(in_->Enqueue(1, IN_MODIFY, 0, "name"));  // merged
  EXPECT_TRUE(in_->Enqueue(1, IN_ACCESS, 0, ""));
  int avail = 0;
  EXPECT_EQ(in_->Ioctl(FIONREAD, &avail), 0);
  EXPECT_EQ(avail, 32 + 16);
  uint8_t buf[64];
  EXPECT_EQ(in_->Read(buf, 31, -1, b_.io()), -EINVAL);
  EXPECT_EQ(in_->Read(buf, 40, -1, b_.io()), 32);
  EXPECT_EQ(in_->Readiness(POLLIN), static_cast<waiter::EventMask>(POLLIN));
  EXPECT_EQ(in_->Read(buf, 64, -1, b_.io()), 16);
  EXPECT_EQ(in_->Readiness(POLLIN), 0u);
  EXPECT_EQ(in_->Read(buf, 64, -1, b_.io()), -EAGAIN);
}

TEST_F(InotifyTest, OverflowIsReportedOnce) {
  for (size_t i = 0; i < InotifyFile::kMaxQueuedEvents + 10; i++) {
    in_->Enqueue(1, i % 2 ? IN_OPEN : IN_CLOSE_NOWRITE, 0, "");
  }
  auto ev = Drain();
  size_t total = ev.size();
  while (true) {
    auto more = Drain();
    if (more.empty()) break;
    total += more.size();
    ev = more;
  }
  EXPECT_EQ(total, InotifyFile::kMaxQueuedEvents + 1);
  EXPECT_EQ(ev.back(), (Ev{-1, IN_Q_OVERFLOW, 0, ""}));
}

}  // namespace
}  // namespace sandboxd::fs
