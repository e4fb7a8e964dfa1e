// Round trips of the fs objects: build a graph, save it, load it into a
// fresh memory file and check that it behaves as the original did (data,
// further writes, sharing), not only that fields match.
#include "sentry/state/fs_state.h"

#include <fcntl.h>
#include <signal.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "base/status_macros.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "sentry/fs/epoll.h"
#include "sentry/fs/eventfd.h"
#include "sentry/fs/hostfs.h"
#include "sentry/fs/inotify.h"
#include "sentry/fs/lock.h"
#include "sentry/fs/overlay.h"
#include "sentry/fs/timerfd.h"
#include "sentry/fs/pipe.h"
#include "sentry/fs/testing/fake_blocker.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/fs/vfs.h"
#include "sentry/mm/memory_file.h"
#include "sentry/state/image.h"
#include "sentry/state/pages.h"

namespace sandboxd::state {
namespace {

using fs::Attr;
using fs::CreateRequest;
using fs::Inode;

constexpr uint64_t kPage = mm::kPageSize;

std::unique_ptr<mm::MemoryFile> NewMemoryFile() {
  auto mf = mm::MemoryFile::Create(1ull << 30);
  EXPECT_TRUE(mf.ok()) << mf.status();
  return std::move(mf).value();
}

std::shared_ptr<Inode> Make(Inode& dir, const std::string& name,
                            uint32_t type = S_IFREG, uint32_t mode = 0644,
                            const std::string& target = "", uint64_t rdev = 0) {
  CreateRequest req;
  req.type = type;
  req.mode = mode;
  req.uid = 1000;
  req.gid = 100;
  req.target = target;
  req.rdev = rdev;
  std::shared_ptr<Inode> out;
  EXPECT_EQ(dir.Create(name, req, &out), 0) << name;
  return out;
}

std::shared_ptr<Inode> Get(Inode& dir, const std::string& name) {
  std::shared_ptr<Inode> out;
  EXPECT_EQ(dir.Lookup(name, &out), 0) << name;
  return out;
}

Attr Stat(Inode& inode) {
  Attr a;
  EXPECT_EQ(inode.GetAttr(&a), 0);
  return a;
}

std::string Read(Inode& file, uint64_t n, uint64_t off = 0) {
  std::string buf(n, '\0');
  int64_t got = file.Read(buf.data(), n, off);
  EXPECT_GE(got, 0);
  buf.resize(std::max<int64_t>(got, 0));
  return buf;
}

void Write(Inode& file, const std::string& s, uint64_t off) {
  EXPECT_EQ(file.Write(s.data(), s.size(), off),
            static_cast<int64_t>(s.size()));
}

void ExpectSameAttr(const Attr& a, const Attr& b, const std::string& what) {
  EXPECT_EQ(a.dev, b.dev) << what;
  EXPECT_EQ(a.ino, b.ino) << what;
  EXPECT_EQ(a.mode, b.mode) << what;
  EXPECT_EQ(a.nlink, b.nlink) << what;
  EXPECT_EQ(a.uid, b.uid) << what;
  EXPECT_EQ(a.gid, b.gid) << what;
  EXPECT_EQ(a.rdev, b.rdev) << what;
  EXPECT_EQ(a.size, b.size) << what;
  EXPECT_EQ(a.blocks, b.blocks) << what;
  EXPECT_EQ(a.atime.tv_sec, b.atime.tv_sec) << what;
  EXPECT_EQ(a.atime.tv_nsec, b.atime.tv_nsec) << what;
  EXPECT_EQ(a.mtime.tv_nsec, b.mtime.tv_nsec) << what;
  EXPECT_EQ(a.ctime.tv_nsec, b.ctime.tv_nsec) << what;
}

// Saves with `save` (which gets the Saver), loads with `load` into a fresh
// memory file, through state.pb and pages.{img,idx} in a directory, as a
// checkpoint would.
class FsStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mf_ = NewMemoryFile();
    mf2_ = NewMemoryFile();
    char tmpl[] = "/tmp/fs_state_test.XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { system(("rm -rf " + dir_).c_str()); }

  std::shared_ptr<fs::TmpFsDirectory> NewTmpFs(uint64_t dev = 42,
                                               uint64_t size_limit = 0,
                                               uint64_t inode_limit = 0) {
    fs::TmpFsOptions opts;
    opts.dev = dev;
    opts.size_limit = size_limit;
    opts.inode_limit = inode_limit;
    fs::TmpFs t(mf_.get(), opts);
    return std::static_pointer_cast<fs::TmpFsDirectory>(t.Root());
  }

  // Writes the image; returns the error of `save`, if any.
  absl::Status SaveImage(const std::function<absl::Status(Saver&)>& save) {
    auto pages = FilePageWriter::Create(dir_, mf_->Internal(0));
    if (!pages.ok()) return pages.status();
    pb::State st;
    Saver s(&st, pages->get());
    absl::Status r = save(s);
    if (!r.ok()) return r;
    r = (*pages)->Finish();
    if (!r.ok()) return r;
    return WriteStateFile(dir_, st);
  }

  // Reads the image and runs `load` on it.
  void LoadImage(const std::function<void(Loader&)>& load) {
    auto st = ReadStateFile(dir_);
    ASSERT_TRUE(st.ok()) << st.status();
    state_ = std::move(st).value();
    auto pages = FilePageReader::Open(dir_);
    ASSERT_TRUE(pages.ok()) << pages.status();
    reader_ = std::move(pages).value();
    Loader l(&state_, reader_.get(), mf2_.get());
    load(l);
  }

  std::unique_ptr<mm::MemoryFile> mf_, mf2_;
  std::string dir_;
  pb::State state_;
  std::unique_ptr<FilePageReader> reader_;
};

TEST_F(FsStateTest, TmpFsTree) {
  auto root = NewTmpFs(42, 1 << 20, 100);
  auto dir = Make(*root, "dir", S_IFDIR, 0750);
  auto file = Make(*dir, "file", S_IFREG, 0640);
  Write(*file, "hello", 0);
  // A hole, then data two pages in, then fallocated-but-zero pages.
  Write(*file, "world", 2 * kPage + 10);
  ASSERT_EQ(file->Allocate(FALLOC_FL_KEEP_SIZE, 4 * kPage, 2 * kPage), 0);
  ASSERT_EQ(root->Link("hardlink", file), 0);
  Make(*root, "link", S_IFLNK, 0777, "dir/file");
  Make(*dir, "fifo", S_IFIFO, 0600);
  Make(*dir, "null", S_IFCHR, 0666, "", makedev(1, 3));
  Make(*dir, "sub", S_IFDIR, 0700);
  auto empty = Make(*root, "empty");
  fs::SetAttrRequest set;
  set.set_atime = true;
  set.atime = {1000, 5};
  set.set_mtime = true;
  set.mtime = {2000, 7};
  set.set_uid = true;
  set.uid = 4;
  ASSERT_EQ(empty->SetAttr(set), 0);
  auto sealed = std::static_pointer_cast<fs::TmpFsRegularFile>(
      Make(*root, "sealed"));
  sealed->set_initial_seals(0);
  ASSERT_EQ(sealed->AddSeals(fs::kSealGrow | fs::kSealShrink), 0);

  uint64_t root_id = 0;
  ASSERT_TRUE(SaveImage([&](Saver& s) {
                auto id = FsState::SaveInode(s, root);
                if (id.ok()) root_id = *id;
                return id.status();
              }).ok());

  LoadImage([&](Loader& l) {
    auto loaded = FsState::LoadInode(l, root_id);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    std::shared_ptr<Inode> r2 = *loaded;
    ExpectSameAttr(Stat(*root), Stat(*r2), "/");
    for (const char* path : {"dir", "hardlink", "link", "empty", "sealed"}) {
      ExpectSameAttr(Stat(*Get(*root, path)), Stat(*Get(*r2, path)), path);
    }
    auto dir2 = Get(*r2, "dir");
    for (const char* path : {"file", "fifo", "null", "sub"}) {
      ExpectSameAttr(Stat(*Get(*dir, path)), Stat(*Get(*dir2, path)), path);
    }
    // Hard links are one inode again.
    auto file2 = Get(*dir2, "file");
    EXPECT_EQ(file2, Get(*r2, "hardlink"));
    EXPECT_EQ(Stat(*file2).nlink, 2u);
    // Data, the hole and the size.
    EXPECT_EQ(Read(*file2, 5), "hello");
    EXPECT_EQ(Read(*file2, 10, 100), std::string(10, '\0'));
    EXPECT_EQ(Read(*file2, 5, 2 * kPage + 10), "world");
    EXPECT_EQ(Stat(*file2).size, 2 * kPage + 15);
    std::string target;
    EXPECT_EQ(Get(*r2, "link")->Readlink(&target), 0);
    EXPECT_EQ(target, "dir/file");
    // The loaded file is independent of the original and writable.
    Write(*file2, "HELLO", 0);
    EXPECT_EQ(Read(*Get(*r2, "hardlink"), 5), "HELLO");
    EXPECT_EQ(Read(*file, 5), "hello");
    // Seals.
    auto sealed2 = std::static_pointer_cast<fs::TmpFsRegularFile>(
        Get(*r2, "sealed"));
    EXPECT_EQ(sealed2->Seals(), fs::kSealGrow | fs::kSealShrink);
    EXPECT_EQ(sealed2->Write("x", 1, 0), -EPERM);
    // ".." of a loaded subdirectory, and the superblock's sequence and
    // limits: the next inode gets the number the original would have.
    auto sub2 = Get(*dir2, "sub");
    auto next = Make(*r2, "next");
    auto next_orig = Make(*root, "next");
    EXPECT_EQ(Stat(*next).ino, Stat(*next_orig).ino);
    struct statfs a, b;
    ASSERT_EQ(root->StatFs(&a), 0);
    ASSERT_EQ(r2->StatFs(&b), 0);
    EXPECT_EQ(a.f_blocks, b.f_blocks);
    EXPECT_EQ(a.f_bfree, b.f_bfree);
    EXPECT_EQ(a.f_files, b.f_files);
    EXPECT_EQ(a.f_ffree, b.f_ffree);
    // Renaming into the loaded tree works (parent links are right): a
    // directory cannot move below itself.
    EXPECT_EQ(r2->Rename("dir", *sub2, "moved", 0), -EINVAL);
    EXPECT_EQ(dir2->Unlink("sub", true), 0);
    EXPECT_EQ(Stat(*dir2).nlink, 2u);
  });
}

TEST_F(FsStateTest, MountsLocationsAndFsContext) {
  auto root = NewTmpFs(1);
  Make(*Make(*root, "mnt", S_IFDIR, 0755), "under", S_IFDIR);
  auto other = NewTmpFs(2);
  Make(*Make(*other, "work", S_IFDIR, 0755), "f");
  fs::Vfs vfs(root, "tmpfs", "rootfs", false);
  fs::Location mnt;
  auto ctx = std::make_shared<fs::FsContext>(vfs.Root(), vfs.Root());
  ASSERT_EQ(vfs.Resolve(*ctx, vfs.Root(), "/mnt", true, &mnt), 0);
  ASSERT_EQ(vfs.MountAt(mnt, other, "tmpfs", "data", true), 0);
  fs::Location work;
  ASSERT_EQ(vfs.Resolve(*ctx, vfs.Root(), "/mnt/work", true, &work), 0);
  ctx->set_cwd(work);
  ctx->exchange_umask(027);

  uint64_t ctx_id = 0;
  ASSERT_TRUE(SaveImage([&](Saver& s) {
                RETURN_IF_ERROR(FsState::SaveVfs(s, vfs));
                auto id = FsState::SaveFsContext(s, vfs, ctx);
                if (id.ok()) ctx_id = *id;
                return id.status();
              }).ok());

  LoadImage([&](Loader& l) {
    auto vfs2 = FsState::LoadVfs(l);
    ASSERT_TRUE(vfs2.ok()) << vfs2.status();
    auto ctx2 = FsState::LoadFsContext(l, **vfs2, ctx_id);
    ASSERT_TRUE(ctx2.ok()) << ctx2.status();
    EXPECT_EQ((*vfs2)->MountInfoText((*vfs2)->Root()),
              vfs.MountInfoText(vfs.Root()));
    EXPECT_EQ((*ctx2)->umask(), 027u);
    EXPECT_EQ((*vfs2)->PathOf((*ctx2)->root(), (*ctx2)->cwd()), "/mnt/work");
    // Relative lookups from the loaded cwd reach the mounted tmpfs, which
    // is read-only again, and ".." crosses back into the root mount.
    fs::Location f;
    ASSERT_EQ((*vfs2)->Resolve(**ctx2, (*ctx2)->cwd(), "f", true, &f), 0);
    EXPECT_EQ(Stat(f.inode()).dev, 2u);
    EXPECT_TRUE(f.mount->read_only);
    fs::Location under;
    ASSERT_EQ((*vfs2)->Resolve(**ctx2, (*ctx2)->cwd(), "../..", true, &under),
              0);
    EXPECT_EQ(under, (*vfs2)->Root());
  });
}

TEST_F(FsStateTest, FilesAndDescriptorTables) {
  auto root = NewTmpFs();
  auto data = Make(*root, "data");
  Write(*data, "0123456789", 0);
  auto gone = Make(*root, "gone");
  Write(*gone, "still here", 0);
  fs::Vfs vfs(root, "tmpfs", "rootfs", false);
  auto ctx = std::make_shared<fs::FsContext>(vfs.Root(), vfs.Root());

  auto open = [&](const std::string& path, int flags) {
    fs::Location loc;
    EXPECT_EQ(vfs.Resolve(*ctx, vfs.Root(), path, true, &loc), 0);
    std::shared_ptr<fs::File> f;
    EXPECT_EQ(loc.inode().Open(flags, &f), 0);
    static_cast<fs::InodeFile*>(f.get())->set_location(loc, &vfs);
    return f;
  };
  auto fds = std::make_shared<fs::FdTable>(1024);
  auto f = open("/data", O_RDWR);
  char buf[16];
  ASSERT_EQ(f->Read(buf, 3, -1, {}), 3);
  fds->InstallAt(3, f, false);
  fds->InstallAt(5, f, true);  // dup, close-on-exec
  auto g = open("/gone", O_RDONLY);
  fds->InstallAt(4, g, false);
  ASSERT_EQ(vfs.Unlink(vfs.Root(), "gone", false), 0);
  auto [rd, wr] = fs::PipeEnd::Create(O_NONBLOCK);
  ASSERT_EQ(wr->Write("pipe data", 9, -1, {}), 9);
  fds->InstallAt(6, rd, false);
  fds->InstallAt(7, wr, false);
  // Signal-driven I/O on the read end: O_ASYNC through fd 6, a process
  // group owner, F_SETSIG.
  rd->async().set_owner(fs::AsyncOwner{F_OWNER_PGRP, 7, 1000, 1001});
  rd->async().set_sig(SIGRTMIN + 2);
  rd->async().SetEnabled(*rd, true, 6);
  auto ev = std::make_shared<fs::EventFd>(7, EFD_SEMAPHORE | EFD_NONBLOCK);
  fds->InstallAt(8, ev, false);
  // A second table (fork) sharing the write end and the data file.
  auto child = fds->Fork();
  child->Close(6);

  uint64_t t1 = 0, t2 = 0;
  ASSERT_TRUE(SaveImage([&](Saver& s) {
                RETURN_IF_ERROR(FsState::SaveVfs(s, vfs));
                auto a = FsState::SaveFdTable(s, vfs, fds);
                auto b = FsState::SaveFdTable(s, vfs, child);
                if (!a.ok()) return a.status();
                if (!b.ok()) return b.status();
                t1 = *a;
                t2 = *b;
                return absl::OkStatus();
              }).ok());
  rd.reset();
  wr.reset();

  // The Loader holds what it loaded until it goes: check after it did.
  absl::StatusOr<std::unique_ptr<fs::Vfs>> vfs2;
  absl::StatusOr<std::shared_ptr<fs::FdTable>> fds2, child2;
  LoadImage([&](Loader& l) {
    EXPECT_EQ(l.state().files_size(), 5);
    EXPECT_EQ(l.state().pipes_size(), 1);
    vfs2 = FsState::LoadVfs(l);
    ASSERT_TRUE(vfs2.ok()) << vfs2.status();
    fds2 = FsState::LoadFdTable(l, **vfs2, t1);
    child2 = FsState::LoadFdTable(l, **vfs2, t2);
  });
  {
    ASSERT_TRUE(fds2.ok()) << fds2.status();
    ASSERT_TRUE(child2.ok()) << child2.status();
    auto& t = **fds2;
    EXPECT_EQ(t.Fds(), fds->Fds());
    EXPECT_EQ(t.GetCloexec(3), 0);
    EXPECT_EQ(t.GetCloexec(5), 1);
    // One description behind fds 3 and 5 and the child's 3, at offset 3.
    EXPECT_EQ(t.Get(3), t.Get(5));
    EXPECT_EQ(t.Get(3), (*child2)->Get(3));
    EXPECT_NE(t.Get(3), t.Get(4));
    char b2[16] = {};
    ASSERT_EQ(t.Get(5)->Read(b2, 2, -1, {}), 2);
    EXPECT_EQ(std::string(b2, 2), "34");
    EXPECT_EQ(t.Get(3)->Seek(0, SEEK_CUR), 5);
    EXPECT_EQ(t.Get(3)->StatusFlags() & O_ACCMODE, O_RDWR);
    EXPECT_EQ((*vfs2)->PathOf((*vfs2)->Root(), t.Get(3)->location()), "/data");
    // The unlinked file: still readable, shown deleted, not in the tree.
    ASSERT_EQ(t.Get(4)->Read(b2, 10, 0, {}), 10);
    EXPECT_EQ(std::string(b2, 10), "still here");
    bool reachable = true;
    (*vfs2)->PathOf((*vfs2)->Root(), t.Get(4)->location(), &reachable);
    EXPECT_FALSE(reachable);
    fs::Location none;
    EXPECT_EQ((*vfs2)->Resolve(*ctx, (*vfs2)->Root(), "/gone", true, &none),
              -ENOENT);
    // The pipe: its data, its flags, and both ends shared.
    auto rd2 = t.Get(6), wr2 = t.Get(7);
    EXPECT_EQ(wr2, (*child2)->Get(7));
    EXPECT_EQ(rd2->StatusFlags() & O_NONBLOCK, O_NONBLOCK);
    ASSERT_NE(rd2->async_if_any(), nullptr);
    const fs::FileAsync::Saved as = rd2->async_if_any()->Get();
    EXPECT_TRUE(as.enabled);
    EXPECT_EQ(as.fd, 6);
    EXPECT_EQ(as.owner.type, F_OWNER_PGRP);
    EXPECT_EQ(as.owner.pid, 7);
    EXPECT_EQ(as.owner.uid, 1000u);
    EXPECT_EQ(as.owner.euid, 1001u);
    EXPECT_EQ(as.sig, SIGRTMIN + 2);
    // The write end never had any.
    EXPECT_EQ(wr2->async_if_any(), nullptr);
    ASSERT_EQ(rd2->Read(b2, 16, -1, {}), 9);
    EXPECT_EQ(std::string(b2, 9), "pipe data");
    EXPECT_EQ(rd2->Read(b2, 16, -1, {}), -EAGAIN);
    ASSERT_EQ(wr2->Write("more", 4, -1, {}), 4);
    ASSERT_EQ(rd2->Read(b2, 16, -1, {}), 4);
    // Writers were counted again from the loaded ends: closing every
    // descriptor of the write end gives EOF.
    wr2.reset();
    t.Close(7);
    (*child2)->Close(7);
    EXPECT_EQ(rd2->Read(b2, 16, -1, {}), 0);
    // The eventfd: semaphore mode and the counter.
    uint64_t v = 0;
    ASSERT_EQ(t.Get(8)->Read(&v, 8, -1, {}), 8);
    EXPECT_EQ(v, 1u);
    EXPECT_EQ(static_cast<fs::EventFd*>(t.Get(8).get())->value(), 6u);
  }
}

// A FIFO opened by name: after the load its inode gives later openers the
// loaded pipe, data and all, and each description keeps the name it was
// opened by (/proc/PID/fd's link, inotify).
TEST_F(FsStateTest, FifoEndsKeepTheirInodesPipe) {
  auto root = NewTmpFs();
  auto node = Make(*root, "f", S_IFIFO, 0600);
  fs::Vfs vfs(root, "tmpfs", "rootfs", false);
  auto ctx = std::make_shared<fs::FsContext>(vfs.Root(), vfs.Root());
  fs::Location at;
  ASSERT_EQ(vfs.Resolve(*ctx, vfs.Root(), "/f", true, &at), 0);
  ASSERT_NE(node->GetFifo(), nullptr);
  fs::FakeBlocker b;
  std::shared_ptr<fs::File> rd;
  ASSERT_EQ(node->GetFifo()->Open(O_RDONLY | O_NONBLOCK, b.io(), node, &rd),
            0);
  fs::SetFifoLocation(*rd, at, &vfs);
  std::shared_ptr<fs::File> wr;
  ASSERT_EQ(node->GetFifo()->Open(O_WRONLY, b.io(), node, &wr), 0);
  ASSERT_EQ(wr->Write("fifo", 4, -1, {}), 4);
  std::shared_ptr<fs::File> both;
  ASSERT_EQ(node->GetFifo()->Open(O_RDWR, b.io(), node, &both), 0);
  ASSERT_NE(dynamic_cast<fs::PipeReadWrite*>(both.get()), nullptr);
  fs::SetFifoLocation(*both, at, &vfs);
  auto fds = std::make_shared<fs::FdTable>(1024);
  fds->InstallAt(3, rd, false);
  fds->InstallAt(4, both, false);
  uint64_t t1 = 0;
  ASSERT_TRUE(SaveImage([&](Saver& s) {
                RETURN_IF_ERROR(FsState::SaveVfs(s, vfs));
                auto a = FsState::SaveFdTable(s, vfs, fds);
                if (!a.ok()) return a.status();
                t1 = *a;
                return absl::OkStatus();
              }).ok());
  rd.reset();
  wr.reset();
  both.reset();
  fds.reset();

  LoadImage([&](Loader& l) {
    auto vfs2 = FsState::LoadVfs(l);
    ASSERT_TRUE(vfs2.ok()) << vfs2.status();
    auto fds2 = FsState::LoadFdTable(l, **vfs2, t1);
    ASSERT_TRUE(fds2.ok()) << fds2.status();
    std::shared_ptr<fs::File> r2 = (*fds2)->Get(3);
    ASSERT_NE(r2, nullptr);
    ASSERT_TRUE(r2->location().valid());
    EXPECT_EQ((*vfs2)->PathOf((*vfs2)->Root(), r2->location()), "/f");
    std::shared_ptr<fs::File> both2 = (*fds2)->Get(4);
    ASSERT_NE(dynamic_cast<fs::PipeReadWrite*>(both2.get()), nullptr);
    ASSERT_TRUE(both2->location().valid());
    EXPECT_EQ((*vfs2)->PathOf((*vfs2)->Root(), both2->location()), "/f");
    struct stat st = {};
    ASSERT_EQ(r2->Stat(&st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode));
    std::shared_ptr<Inode> f = Get((*vfs2)->Root().inode(), "f");
    EXPECT_EQ(st.st_ino, Stat(*f).ino);
    // A writer opening now joins the loaded reader: no ENXIO, same data.
    std::shared_ptr<fs::File> w2;
    ASSERT_EQ(f->GetFifo()->Open(O_WRONLY | O_NONBLOCK, b.io(), f, &w2), 0);
    char buf[8];
    ASSERT_EQ(r2->Read(buf, 8, -1, {}), 4);
    EXPECT_EQ(std::string(buf, 4), "fifo");
  });
}

TEST_F(FsStateTest, TimerFds) {
  auto root = NewTmpFs();
  fs::Vfs vfs(root, "tmpfs", "rootfs", false);
  auto fds = std::make_shared<fs::FdTable>(1024);
  // Armed for 100 s, every 3 s after.
  std::shared_ptr<fs::TimerFd> armed, fired, idle;
  ASSERT_EQ(fs::TimerFd::Create(CLOCK_MONOTONIC, TFD_NONBLOCK, &armed), 0);
  struct itimerspec spec = {};
  spec.it_value.tv_sec = 100;
  spec.it_interval.tv_sec = 3;
  ASSERT_EQ(armed->SetTime(0, spec, nullptr), 0);
  // Fired once (an absolute time in the past), not read: one expiration.
  ASSERT_EQ(fs::TimerFd::Create(CLOCK_REALTIME, TFD_NONBLOCK, &fired), 0);
  struct itimerspec past = {};
  past.it_value.tv_nsec = 1;
  ASSERT_EQ(fired->SetTime(TFD_TIMER_ABSTIME, past, nullptr), 0);
  for (int i = 0; i < 1000 && fired->Readiness(POLLIN) == 0; i++) usleep(1000);
  ASSERT_NE(fired->Readiness(POLLIN), 0);
  ASSERT_EQ(fs::TimerFd::Create(CLOCK_BOOTTIME, 0, &idle), 0);
  fds->InstallAt(0, armed, false);
  fds->InstallAt(1, fired, false);
  fds->InstallAt(2, idle, false);

  uint64_t id = 0;
  ASSERT_TRUE(SaveImage([&](Saver& s) {
                RETURN_IF_ERROR(FsState::SaveVfs(s, vfs));
                auto t = FsState::SaveFdTable(s, vfs, fds);
                if (t.ok()) id = *t;
                return t.status();
              }).ok());
  LoadImage([&](Loader& l) {
    auto vfs2 = FsState::LoadVfs(l);
    ASSERT_TRUE(vfs2.ok());
    auto t = FsState::LoadFdTable(l, **vfs2, id);
    ASSERT_TRUE(t.ok()) << t.status();
    auto* a = static_cast<fs::TimerFd*>((*t)->Get(0).get());
    struct itimerspec cur;
    a->GetTime(&cur);
    EXPECT_GE(cur.it_value.tv_sec, 98);
    EXPECT_LE(cur.it_value.tv_sec, 99);
    EXPECT_EQ(cur.it_interval.tv_sec, 3);
    EXPECT_EQ(a->StatusFlags() & O_NONBLOCK, O_NONBLOCK);
    uint64_t v = 0;
    EXPECT_EQ(a->Read(&v, 8, -1, {}), -EAGAIN);
    auto* f = static_cast<fs::TimerFd*>((*t)->Get(1).get());
    ASSERT_EQ(f->Read(&v, 8, -1, {}), 8);
    EXPECT_EQ(v, 1u);
    auto* i = static_cast<fs::TimerFd*>((*t)->Get(2).get());
    i->GetTime(&cur);
    EXPECT_EQ(cur.it_value.tv_sec, 0);
    EXPECT_EQ(cur.it_value.tv_nsec, 0);
    EXPECT_EQ(i->StatusFlags() & O_NONBLOCK, 0);
    // The loaded timer still fires.
    struct itimerspec soon = {};
    soon.it_value.tv_nsec = 1000;
    ASSERT_EQ(a->SetTime(0, soon, nullptr), 0);
    for (int k = 0; k < 1000 && a->Readiness(POLLIN) == 0; k++) usleep(1000);
    EXPECT_EQ(a->Read(&v, 8, -1, {}), 8);
  });
}

TEST_F(FsStateTest, Epoll) {
  auto root = NewTmpFs();
  fs::Vfs vfs(root, "tmpfs", "rootfs", false);
  auto fds = std::make_shared<fs::FdTable>(1024);
  auto ev = std::make_shared<fs::EventFd>(1, 0);
  auto once = std::make_shared<fs::EventFd>(1, 0);
  auto [rd, wr] = fs::PipeEnd::Create(0);
  auto ep = std::make_shared<fs::EpollFile>();
  fds->InstallAt(3, ev, false);
  fds->InstallAt(4, rd, false);
  fds->InstallAt(5, wr, false);
  fds->InstallAt(6, once, false);
  fds->InstallAt(7, ep, false);
  auto add = [&](int fd, uint32_t events, uint64_t data) {
    struct epoll_event e = {};
    e.events = events;
    e.data.u64 = data;
    return ep->Ctl(EPOLL_CTL_ADD, fd, fds->Get(fd), e);
  };
  ASSERT_EQ(add(3, EPOLLIN, 33), 0);
  ASSERT_EQ(add(4, EPOLLIN, 44), 0);
  ASSERT_EQ(add(6, EPOLLIN | EPOLLONESHOT, 66), 0);
  struct epoll_event out[8];
  // Report both once: the one-shot interest is now disabled.
  ASSERT_EQ(ep->Wait(out, 8, absl::InfinitePast(), {}), 2);

  uint64_t id = 0;
  ASSERT_TRUE(SaveImage([&](Saver& s) {
                RETURN_IF_ERROR(FsState::SaveVfs(s, vfs));
                auto t = FsState::SaveFdTable(s, vfs, fds);
                if (t.ok()) id = *t;
                return t.status();
              }).ok());
  absl::StatusOr<std::shared_ptr<fs::FdTable>> t;
  std::unique_ptr<fs::Vfs> vfs2;
  LoadImage([&](Loader& l) {
    auto v = FsState::LoadVfs(l);
    ASSERT_TRUE(v.ok());
    vfs2 = std::move(v).value();
    t = FsState::LoadFdTable(l, *vfs2, id);
  });
  ASSERT_TRUE(t.ok()) << t.status();
  auto* ep2 = static_cast<fs::EpollFile*>((*t)->Get(7).get());
  // The ready list was rebuilt from readiness: the eventfd, with its data.
  ASSERT_EQ(ep2->Wait(out, 8, absl::InfinitePast(), {}), 1);
  EXPECT_EQ(out[0].data.u64, 33u);
  EXPECT_EQ(out[0].events, static_cast<uint32_t>(EPOLLIN));
  // The interests watch the loaded files themselves.
  uint64_t v = 0;
  ASSERT_EQ((*t)->Get(3)->Read(&v, 8, -1, {}), 8);
  EXPECT_EQ(ep2->Wait(out, 8, absl::InfinitePast(), {}), 0);
  ASSERT_EQ((*t)->Get(5)->Write("x", 1, -1, {}), 1);
  ASSERT_EQ(ep2->Wait(out, 8, absl::InfinitePast(), {}), 1);
  EXPECT_EQ(out[0].data.u64, 44u);
  char x;
  ASSERT_EQ((*t)->Get(4)->Read(&x, 1, -1, {}), 1);
  // The one-shot interest stays disabled until EPOLL_CTL_MOD, whatever
  // happens to its file.
  const uint64_t one = 1;
  ASSERT_EQ((*t)->Get(6)->Write(&one, 8, -1, {}), 8);
  EXPECT_EQ(ep2->Wait(out, 8, absl::InfinitePast(), {}), 0);
  struct epoll_event e = {};
  e.events = EPOLLIN;
  e.data.u64 = 67;
  ASSERT_EQ(ep2->Ctl(EPOLL_CTL_MOD, 6, (*t)->Get(6), e), 0);
  bool saw = false;
  int n = ep2->Wait(out, 8, absl::InfinitePast(), {});
  for (int k = 0; k < n; k++) saw |= out[k].data.u64 == 67;
  EXPECT_TRUE(saw);
}

// Writes `data` to the host file `path`.
void HostWrite(const std::string& path, const std::string& data) {
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  fwrite(data.data(), 1, data.size(), f);
  fclose(f);
}

std::shared_ptr<Inode> HostRoot(const std::string& dir) {
  auto r = fs::hostfs::NewRoot(UniqueFd(open(dir.c_str(), O_PATH | O_DIRECTORY)),
                               7);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : nullptr;
}

std::vector<std::string> Names(Inode& dir) {
  std::vector<fs::DirEntry> ents;
  EXPECT_EQ(dir.ReadDir(&ents), 0);
  std::vector<std::string> out;
  for (const auto& e : ents) out.push_back(e.name);
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(FsStateTest, OverlayOverTheRootfs) {
  // The host rootfs: /etc/conf, /etc/gone, /opt/old, /bin/tool.
  const std::string host = dir_ + "/rootfs";
  ASSERT_EQ(mkdir(host.c_str(), 0755), 0);
  for (const char* d : {"/etc", "/opt", "/bin"}) {
    ASSERT_EQ(mkdir((host + d).c_str(), 0755), 0);
  }
  HostWrite(host + "/etc/conf", "lower conf");
  HostWrite(host + "/etc/gone", "deleted in the sandbox");
  HostWrite(host + "/opt/old", "hidden by an opaque dir");
  HostWrite(host + "/bin/tool", "0123456789");
  // Image files go elsewhere: the test's directory is the rootfs's parent.
  dir_ += "/image";
  ASSERT_EQ(mkdir(dir_.c_str(), 0755), 0);

  auto lower = HostRoot(host);
  ASSERT_NE(lower, nullptr);
  auto upper = NewTmpFs(5);
  auto overlay = std::make_unique<fs::OverlayFs>(upper, lower, 0x803);
  fs::Vfs vfs(overlay->Root(), "overlay", "rootfs", false);
  auto ctx = std::make_shared<fs::FsContext>(vfs.Root(), vfs.Root());
  auto resolve = [&](fs::Vfs& v, fs::FsContext& c, const std::string& path) {
    fs::Location loc;
    EXPECT_EQ(v.Resolve(c, c.root(), path, true, &loc), 0) << path;
    return loc;
  };
  // Copy-up with a change, a whiteout, an opaque directory, a new file.
  auto conf = resolve(vfs, *ctx, "/etc/conf");
  Write(conf.inode(), "UPPER", 0);
  fs::Location etc = resolve(vfs, *ctx, "/etc");
  ASSERT_EQ(vfs.Unlink(etc, "gone", false), 0);
  ASSERT_EQ(vfs.Unlink(resolve(vfs, *ctx, "/opt"), "old", false), 0);
  ASSERT_EQ(vfs.Unlink(vfs.Root(), "opt", true), 0);
  CreateRequest mk;
  mk.type = S_IFDIR;
  mk.mode = 0700;
  fs::Location opt;
  ASSERT_EQ(vfs.Create(vfs.Root(), "opt", mk, &opt), 0);
  CreateRequest reg;
  fs::Location made;
  ASSERT_EQ(vfs.Create(opt, "new", reg, &made), 0);
  Write(made.inode(), "new file", 0);
  // A descriptor on a file only in the lower layer, and a cwd in it.
  auto tool = resolve(vfs, *ctx, "/bin/tool");
  std::shared_ptr<fs::File> f;
  ASSERT_EQ(tool.inode().Open(O_RDONLY, &f), 0);
  static_cast<fs::InodeFile*>(f.get())->set_location(tool, &vfs);
  char b[16];
  ASSERT_EQ(f->Read(b, 4, -1, {}), 4);
  auto fds = std::make_shared<fs::FdTable>(64);
  fds->InstallAt(0, f, false);
  ctx->set_cwd(resolve(vfs, *ctx, "/bin"));

  uint64_t t_id = 0, c_id = 0;
  // Without the rootfs at save, the overlay cannot be saved.
  absl::Status no_rootfs =
      SaveImage([&](Saver& s) { return FsState::SaveVfs(s, vfs); });
  EXPECT_EQ(no_rootfs.code(), absl::StatusCode::kUnimplemented) << no_rootfs;
  ASSERT_TRUE(SaveImage([&](Saver& s) {
                s.set_rootfs(lower.get());
                RETURN_IF_ERROR(FsState::SaveVfs(s, vfs));
                ASSIGN_OR_RETURN(t_id, FsState::SaveFdTable(s, vfs, fds));
                ASSIGN_OR_RETURN(c_id, FsState::SaveFsContext(s, vfs, ctx));
                return absl::OkStatus();
              }).ok());

  std::unique_ptr<fs::Vfs> vfs2;
  std::shared_ptr<fs::FdTable> fds2;
  std::shared_ptr<fs::FsContext> ctx2;
  std::vector<std::shared_ptr<void>> kept;
  LoadImage([&](Loader& l) {
    l.set_rootfs(HostRoot(host));
    auto v = FsState::LoadVfs(l);
    ASSERT_TRUE(v.ok()) << v.status();
    vfs2 = std::move(v).value();
    auto t = FsState::LoadFdTable(l, *vfs2, t_id);
    ASSERT_TRUE(t.ok()) << t.status();
    fds2 = *t;
    auto c = FsState::LoadFsContext(l, *vfs2, c_id);
    ASSERT_TRUE(c.ok()) << c.status();
    ctx2 = *c;
    kept = l.TakeKept();
  });
  ASSERT_NE(vfs2, nullptr);
  // Read before the reset: the original tree's inodes point into it.
  const std::vector<std::string> saved_names =
      Names(*vfs.Root().dentry->inode());
  overlay.reset();  // nothing loaded may depend on the original
  EXPECT_EQ(Names(*vfs2->Root().dentry->inode()), saved_names);
  EXPECT_EQ(Read(resolve(*vfs2, *ctx2, "/etc/conf").inode(), 32),
            "UPPER conf");
  fs::Location none;
  EXPECT_EQ(vfs2->Resolve(*ctx2, ctx2->root(), "/etc/gone", true, &none),
            -ENOENT);
  EXPECT_EQ(Names(resolve(*vfs2, *ctx2, "/opt").inode()),
            std::vector<std::string>{"new"});
  EXPECT_EQ(Read(resolve(*vfs2, *ctx2, "/opt/new").inode(), 32), "new file");
  EXPECT_EQ(Stat(resolve(*vfs2, *ctx2, "/opt").inode()).mode & 07777, 0700u);
  EXPECT_EQ(vfs2->PathOf(ctx2->root(), ctx2->cwd()), "/bin");
  ASSERT_EQ(fds2->Get(0)->Read(b, 6, -1, {}), 6);
  EXPECT_EQ(std::string(b, 6), "456789");
  // The loaded overlay still copies up, and the host is never written.
  Write(resolve(*vfs2, *ctx2, "/bin/tool").inode(), "X", 0);
  EXPECT_EQ(Read(resolve(*vfs2, *ctx2, "/bin/tool").inode(), 3), "X12");
  auto host_tool = HostRoot(host + "/bin");
  EXPECT_EQ(Read(*Get(*host_tool, "tool"), 3), "012");
}

TEST_F(FsStateTest, RecordLocksAndFlocks) {
  auto root = NewTmpFs();
  Make(*root, "f");
  fs::Vfs vfs(root, "tmpfs", "rootfs", false);
  auto ctx = std::make_shared<fs::FsContext>(vfs.Root(), vfs.Root());
  fs::Location loc;
  ASSERT_EQ(vfs.Resolve(*ctx, vfs.Root(), "/f", true, &loc), 0);
  auto open = [&] {
    std::shared_ptr<fs::File> f;
    EXPECT_EQ(loc.inode().Open(O_RDWR, &f), 0);
    static_cast<fs::InodeFile*>(f.get())->set_location(loc, &vfs);
    return f;
  };
  auto fds = std::make_shared<fs::FdTable>(64);
  auto f1 = open(), f2 = open(), f3 = open();
  fds->InstallAt(3, f1, false);
  fds->InstallAt(4, f2, false);
  fds->InstallAt(5, f3, false);
  fs::LockTable locks;
  auto inode = loc.dentry->inode();
  fs::RecordLock posix;
  posix.type = F_WRLCK;
  posix.start = 0;
  posix.end = 9;
  posix.owner = fs::RecordLockOwner::Posix(fds.get(), 100);
  ASSERT_EQ(locks.SetRecord(inode, posix, nullptr), 0);
  fs::RecordLock ofd;
  ofd.type = F_RDLCK;
  ofd.start = 20;
  ofd.owner = fs::RecordLockOwner::Ofd(f1.get());
  ASSERT_EQ(locks.SetRecord(inode, ofd, nullptr), 0);
  ASSERT_EQ(locks.Flock(inode, f2.get(), F_RDLCK, nullptr), 0);
  ASSERT_EQ(locks.Flock(inode, f3.get(), F_RDLCK, nullptr), 0);

  // Locks before their owners: refused.
  absl::Status early = SaveImage([&](Saver& s) {
    return FsState::SaveLocks(s, locks);
  });
  EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition) << early;
  uint64_t t_id = 0;
  ASSERT_TRUE(SaveImage([&](Saver& s) {
                RETURN_IF_ERROR(FsState::SaveVfs(s, vfs));
                ASSIGN_OR_RETURN(t_id, FsState::SaveFdTable(s, vfs, fds));
                return FsState::SaveLocks(s, locks);
              }).ok());

  fs::LockTable locks2;
  std::unique_ptr<fs::Vfs> vfs2;
  std::shared_ptr<fs::FdTable> fds2;
  LoadImage([&](Loader& l) {
    auto v = FsState::LoadVfs(l);
    ASSERT_TRUE(v.ok()) << v.status();
    vfs2 = std::move(v).value();
    auto t = FsState::LoadFdTable(l, *vfs2, t_id);
    ASSERT_TRUE(t.ok()) << t.status();
    fds2 = *t;
    absl::Status ls = FsState::LoadLocks(l, *vfs2, locks2);
    ASSERT_TRUE(ls.ok()) << ls;
  });
  ASSERT_NE(fds2, nullptr);
  auto inode2 = fds2->Get(3)->inode();
  auto recs = locks2.RecordLocks(inode2.get());
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].type, F_WRLCK);
  EXPECT_EQ(recs[0].end, 9);
  EXPECT_EQ(recs[0].owner.pid, 100);
  EXPECT_EQ(recs[0].owner.id, reinterpret_cast<uintptr_t>(fds2.get()));
  EXPECT_EQ(recs[1].type, F_RDLCK);
  EXPECT_EQ(recs[1].start, 20);
  EXPECT_EQ(recs[1].end, fs::kLockOffsetMax);
  EXPECT_EQ(recs[1].owner.id,
            reinterpret_cast<uintptr_t>(fds2->Get(3).get()));
  // Another process conflicts with the POSIX lock and sees its tgid.
  auto other = std::make_shared<fs::FdTable>(64);
  fs::RecordLock want;
  want.type = F_WRLCK;
  want.start = 5;
  want.end = 5;
  want.owner = fs::RecordLockOwner::Posix(other.get(), 200);
  fs::RecordLock conflict;
  ASSERT_TRUE(locks2.TestRecord(inode2, want, &conflict));
  EXPECT_EQ(conflict.owner.pid, 100);
  // The shared flocks hold against a new exclusive one, and go with their
  // loaded descriptions.
  std::shared_ptr<fs::File> f4;
  ASSERT_EQ(inode2->Open(O_RDWR, &f4), 0);
  EXPECT_EQ(locks2.Flock(inode2, f4.get(), F_WRLCK, nullptr), -EWOULDBLOCK);
  locks2.ReleaseDescription(inode2.get(), fds2->Get(4).get());
  EXPECT_EQ(locks2.Flock(inode2, f4.get(), F_WRLCK, nullptr), -EWOULDBLOCK);
  locks2.ReleaseDescription(inode2.get(), fds2->Get(5).get());
  EXPECT_EQ(locks2.Flock(inode2, f4.get(), F_WRLCK, nullptr), 0);
  // The loaded table is the POSIX owner: it can unlock.
  locks2.ReleasePosix(inode2.get(), fds2.get());
  EXPECT_FALSE(locks2.TestRecord(inode2, want, &conflict));
}

// Reads one inotify event: (wd, mask, name).
std::tuple<int, uint32_t, std::string> NextEvent(fs::File& f) {
  alignas(struct inotify_event) char buf[4096];
  int64_t n = f.Read(buf, sizeof(buf), -1, {});
  if (n <= 0) return {static_cast<int>(n), 0, ""};
  auto* e = reinterpret_cast<struct inotify_event*>(buf);
  return {e->wd, e->mask, e->len ? std::string(e->name) : ""};
}

TEST_F(FsStateTest, Inotify) {
  auto root = NewTmpFs();
  auto file = Make(*root, "watched");
  fs::Vfs vfs(root, "tmpfs", "rootfs", false);
  auto in = std::make_shared<fs::InotifyFile>(/*nonblock=*/true);
  ASSERT_EQ(in->AddWatch(root, IN_CREATE), 1);
  ASSERT_EQ(in->AddWatch(file, IN_ATTRIB), 2);
  CreateRequest reg;
  fs::Location made;
  ASSERT_EQ(vfs.Create(vfs.Root(), "before", reg, &made), 0);
  auto fds = std::make_shared<fs::FdTable>(64);
  fds->InstallAt(3, in, false);
  // The rename cookies go on from the saved counter.
  fs::inotify::SetNextCookie(41);
  uint64_t t_id = 0;
  ASSERT_TRUE(SaveImage([&](Saver& s) {
                RETURN_IF_ERROR(FsState::SaveVfs(s, vfs));
                ASSIGN_OR_RETURN(t_id, FsState::SaveFdTable(s, vfs, fds));
                return absl::OkStatus();
              }).ok());
  fds.reset();
  in.reset();  // the original's watches go
  fs::inotify::SetNextCookie(1);  // as in a fresh Sentry

  std::unique_ptr<fs::Vfs> vfs2;
  std::shared_ptr<fs::FdTable> fds2;
  LoadImage([&](Loader& l) {
    auto v = FsState::LoadVfs(l);
    ASSERT_TRUE(v.ok()) << v.status();
    vfs2 = std::move(v).value();
    auto t = FsState::LoadFdTable(l, *vfs2, t_id);
    ASSERT_TRUE(t.ok()) << t.status();
    fds2 = *t;
  });
  ASSERT_NE(fds2, nullptr);
  EXPECT_EQ(fs::inotify::NewCookie(), 41u);
  auto in2 = std::static_pointer_cast<fs::InotifyFile>(fds2->Get(3));
  // The event queued before the save.
  EXPECT_EQ(NextEvent(*in2), std::make_tuple(1, uint32_t{IN_CREATE},
                                             std::string("before")));
  EXPECT_EQ(std::get<0>(NextEvent(*in2)), -EAGAIN);
  // The watches live on the loaded inodes.
  ASSERT_EQ(vfs2->Create(vfs2->Root(), "after", reg, &made), 0);
  EXPECT_EQ(NextEvent(*in2), std::make_tuple(1, uint32_t{IN_CREATE},
                                             std::string("after")));
  fs::Location w;
  fs::FsContext ctx(vfs2->Root(), vfs2->Root());
  ASSERT_EQ(vfs2->Resolve(ctx, ctx.root(), "/watched", true, &w), 0);
  fs::SetAttrRequest chmod;
  chmod.set_mode = true;
  chmod.mode = 0600;
  ASSERT_EQ(w.inode().SetAttr(chmod), 0);
  fs::inotify::NotifyInode(w.inode(), IN_ATTRIB);
  EXPECT_EQ(NextEvent(*in2), std::make_tuple(2, uint32_t{IN_ATTRIB},
                                             std::string()));
  // Watch descriptors continue the saved sequence.
  EXPECT_EQ(in2->AddWatch(made.dentry->inode(), IN_MODIFY), 3);
}

TEST_F(FsStateTest, UnsupportedObjectsFailByName) {
  // A file kind the image cannot hold yet.
  class Strange : public fs::File {
   public:
    int64_t Read(void*, uint64_t, int64_t, const fs::IoContext&) override {
      return 0;
    }
    int64_t Write(const void*, uint64_t, int64_t,
                  const fs::IoContext&) override {
      return 0;
    }
    int64_t Seek(int64_t, int) override { return 0; }
    int64_t Stat(struct stat*) override { return 0; }
    int64_t Ioctl(uint64_t, void*) override { return -ENOTTY; }
    int StatusFlags() const override { return 0; }
    int64_t SetStatusFlags(int) override { return 0; }
  };
  auto root = NewTmpFs();
  fs::Vfs vfs(root, "tmpfs", "rootfs", false);
  auto fds = std::make_shared<fs::FdTable>(1024);
  fds->InstallAt(0, std::make_shared<Strange>(), false);
  absl::Status s = SaveImage([&](Saver& s) {
    return FsState::SaveFdTable(s, vfs, fds).status();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("Strange"), std::string::npos) << s;

  // An inode of another filesystem (here, a bare Inode).
  class Other : public Inode {
   public:
    uint32_t Type() const override { return S_IFDIR; }
    int GetAttr(Attr* out) override { return 0; }
  };
  fs::Vfs other(std::make_shared<Other>(), "other", "none", false);
  s = SaveImage([&](Saver& s) { return FsState::SaveVfs(s, other); });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("Other"), std::string::npos) << s;

  // A host file that is not inherited stdio.
  auto host = std::make_shared<fs::HostFile>(UniqueFd(dup(1)));
  fds->InstallAt(0, host, false);
  s = SaveImage([&](Saver& s) {
    return FsState::SaveFdTable(s, vfs, fds).status();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
}

TEST_F(FsStateTest, HostFilesComeFromTheCaller) {
  auto root = NewTmpFs();
  fs::Vfs vfs(root, "tmpfs", "rootfs", false);
  auto fds = std::make_shared<fs::FdTable>(1024);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  UniqueFd prd(p[0]), pwr(p[1]);
  auto host = std::make_shared<fs::HostFile>(UniqueFd(dup(pwr.get())));
  host->set_inherited_fd(1);
  fds->InstallAt(1, host, false);
  uint64_t id = 0;
  ASSERT_TRUE(SaveImage([&](Saver& s) {
                RETURN_IF_ERROR(FsState::SaveVfs(s, vfs));
                auto t = FsState::SaveFdTable(s, vfs, fds);
                if (t.ok()) id = *t;
                return t.status();
              }).ok());
  LoadImage([&](Loader& l) {
    auto vfs2 = FsState::LoadVfs(l);
    ASSERT_TRUE(vfs2.ok());
    // Without the descriptor: a clear error.
    auto missing = FsState::LoadFdTable(l, **vfs2, id);
    EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition)
        << missing.status();
    l.set_host_fd(1, pwr.get());
    auto t = FsState::LoadFdTable(l, **vfs2, id);
    ASSERT_TRUE(t.ok()) << t.status();
    ASSERT_EQ((*t)->Get(1)->Write("out", 3, -1, {}), 3);
    char b[4] = {};
    ASSERT_EQ(read(prd.get(), b, 3), 3);
    EXPECT_EQ(std::string(b), "out");
  });
}

TEST_F(FsStateTest, DamagedReferencesAreErrors) {
  pb::State st;
  pb::TmpFsInode* dir = st.add_inodes()->mutable_tmpfs();
  dir->set_superblock(1);
  dir->set_type(S_IFDIR);
  dir->set_ino(1);
  st.add_tmpfs_superblocks()->set_next_ino(2);
  // A directory that contains itself, and an entry beyond the table.
  pb::TmpFsDirEntry* e = dir->add_entries();
  e->set_name("self");
  e->set_inode(1);
  MemoryPages pages(nullptr);
  {
    Loader l(&st, &pages, mf2_.get());
    auto r = FsState::LoadInode(l, 1);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }
  e->set_inode(9);
  {
    Loader l(&st, &pages, mf2_.get());
    auto r = FsState::LoadInode(l, 1);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }
  e->set_name("../x");
  e->set_inode(0);
  {
    Loader l(&st, &pages, mf2_.get());
    auto r = FsState::LoadInode(l, 1);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }
}

}  // namespace
}  // namespace sandboxd::state
