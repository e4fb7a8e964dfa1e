#include "sentry/fs/hostfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <cstring>
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sentry/mm/memory_file.h"

namespace sandboxd::fs::hostfs {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::Field;

constexpr uint64_t kDev = 0x1234;

// A throwaway host tree:
//   file       "hello, world\n"
//   empty      ""
//   sub/       dir
//   sub/inner  "inner"
//   abs ->     "/etc/passwd"
//   rel ->     "../x"
//   dirlink -> "sub"
//   fifo       named pipe
class HostFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hostfs_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    WriteHostFile("file", "hello, world\n");
    WriteHostFile("empty", "");
    ASSERT_EQ(mkdir(Host("sub").c_str(), 0755), 0);
    WriteHostFile("sub/inner", "inner");
    ASSERT_EQ(symlink("/etc/passwd", Host("abs").c_str()), 0);
    ASSERT_EQ(symlink("../x", Host("rel").c_str()), 0);
    ASSERT_EQ(symlink("sub", Host("dirlink").c_str()), 0);
    ASSERT_EQ(mkfifo(Host("fifo").c_str(), 0600), 0);

    UniqueFd fd(open(dir_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    auto root = NewRoot(std::move(fd), kDev);
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = *std::move(root);
  }

  void TearDown() override {
    root_.reset();
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(system(cmd.c_str()), 0);
  }

  std::string Host(const std::string& rel) const { return dir_ + "/" + rel; }

  void WriteHostFile(const std::string& rel, const std::string& data) {
    FILE* f = fopen(Host(rel).c_str(), "w");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(fwrite(data.data(), 1, data.size(), f), data.size());
    ASSERT_EQ(fclose(f), 0);
  }

  std::shared_ptr<Inode> MustLookup(Inode& dir, const std::string& name) {
    std::shared_ptr<Inode> out;
    int r = dir.Lookup(name, &out);
    EXPECT_EQ(r, 0) << name;
    return out;
  }

  std::string ReadAll(Inode& inode) {
    std::string out;
    char buf[3];  // small, to exercise offsets
    for (uint64_t off = 0;;) {
      int64_t n = inode.Read(buf, sizeof(buf), off);
      EXPECT_GE(n, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      off += static_cast<uint64_t>(n);
    }
    return out;
  }

  std::string dir_;
  std::shared_ptr<Inode> root_;
};

TEST_F(HostFsTest, RootIsReadOnlyDirectory) {
  EXPECT_EQ(root_->Type(), S_IFDIR);
  EXPECT_TRUE(root_->ReadOnly());
  Attr a;
  ASSERT_EQ(root_->GetAttr(&a), 0);
  struct stat st;
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(a.dev, kDev);
  EXPECT_EQ(a.ino, st.st_ino);
  EXPECT_TRUE(S_ISDIR(a.mode));
}

TEST_F(HostFsTest, NewRootRejectsNonDirectory) {
  UniqueFd fd(open(Host("file").c_str(), O_PATH | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  EXPECT_FALSE(NewRoot(std::move(fd), kDev).ok());
}

TEST_F(HostFsTest, LookupTypes) {
  EXPECT_EQ(MustLookup(*root_, "file")->Type(), S_IFREG);
  EXPECT_EQ(MustLookup(*root_, "empty")->Type(), S_IFREG);
  EXPECT_EQ(MustLookup(*root_, "sub")->Type(), S_IFDIR);
  EXPECT_EQ(MustLookup(*root_, "abs")->Type(), S_IFLNK);
  EXPECT_EQ(MustLookup(*root_, "rel")->Type(), S_IFLNK);
  EXPECT_EQ(MustLookup(*root_, "dirlink")->Type(), S_IFLNK);
  EXPECT_EQ(MustLookup(*root_, "fifo")->Type(), S_IFIFO);
  auto sub = MustLookup(*root_, "sub");
  EXPECT_EQ(MustLookup(*sub, "inner")->Type(), S_IFREG);
}

TEST_F(HostFsTest, GetAttrMatchesHostButDev) {
  for (const char* name : {"file", "sub", "abs", "fifo"}) {
    SCOPED_TRACE(name);
    auto inode = MustLookup(*root_, name);
    Attr a;
    ASSERT_EQ(inode->GetAttr(&a), 0);
    struct stat st;
    ASSERT_EQ(lstat(Host(name).c_str(), &st), 0);
    EXPECT_EQ(a.dev, kDev);
    EXPECT_NE(a.dev, st.st_dev);
    EXPECT_EQ(a.ino, st.st_ino);
    EXPECT_EQ(a.mode, st.st_mode);
    EXPECT_EQ(a.nlink, st.st_nlink);
    EXPECT_EQ(a.uid, st.st_uid);
    EXPECT_EQ(a.gid, st.st_gid);
    EXPECT_EQ(a.size, static_cast<uint64_t>(st.st_size));
    EXPECT_EQ(a.blocks, static_cast<uint64_t>(st.st_blocks));
    EXPECT_EQ(a.mtime.tv_sec, st.st_mtim.tv_sec);
    EXPECT_EQ(a.mtime.tv_nsec, st.st_mtim.tv_nsec);
    EXPECT_EQ(a.ctime.tv_sec, st.st_ctim.tv_sec);
  }
  Attr a;
  ASSERT_EQ(MustLookup(*root_, "file")->GetAttr(&a), 0);
  EXPECT_EQ(a.size, 13u);
}

TEST_F(HostFsTest, GetAttrSeesHostChanges) {
  auto file = MustLookup(*root_, "file");
  ASSERT_EQ(chmod(Host("file").c_str(), 0600), 0);
  Attr a;
  ASSERT_EQ(file->GetAttr(&a), 0);
  EXPECT_EQ(a.mode, S_IFREG | 0600u);
}

TEST_F(HostFsTest, ReadlinkIsRaw) {
  std::string target;
  ASSERT_EQ(MustLookup(*root_, "abs")->Readlink(&target), 0);
  EXPECT_EQ(target, "/etc/passwd");
  ASSERT_EQ(MustLookup(*root_, "rel")->Readlink(&target), 0);
  EXPECT_EQ(target, "../x");
  EXPECT_EQ(MustLookup(*root_, "file")->Readlink(&target), -EINVAL);
  EXPECT_EQ(root_->Readlink(&target), -EINVAL);
}

TEST_F(HostFsTest, SymlinksAreNotFollowed) {
  // A symlink to a directory is not a directory to hostfs.
  std::shared_ptr<Inode> out;
  EXPECT_EQ(MustLookup(*root_, "dirlink")->Lookup("inner", &out), -ENOTDIR);
  char c;
  EXPECT_EQ(MustLookup(*root_, "abs")->Read(&c, 1, 0), -EINVAL);
}

TEST_F(HostFsTest, ReadDirSortedWithoutDots) {
  std::vector<DirEntry> entries;
  ASSERT_EQ(root_->ReadDir(&entries), 0);
  std::vector<std::string> names;
  for (const DirEntry& e : entries) names.push_back(e.name);
  EXPECT_THAT(names, ElementsAre("abs", "dirlink", "empty", "fifo", "file",
                                 "rel", "sub"));
  for (const DirEntry& e : entries) {
    SCOPED_TRACE(e.name);
    struct stat st;
    ASSERT_EQ(lstat(Host(e.name).c_str(), &st), 0);
    EXPECT_EQ(e.ino, st.st_ino);
    EXPECT_EQ(e.type, IFTODT(st.st_mode));
  }
  EXPECT_EQ(entries[3].type, DT_FIFO);
  EXPECT_EQ(entries[6].type, DT_DIR);

  auto sub = MustLookup(*root_, "sub");
  ASSERT_EQ(sub->ReadDir(&entries), 0);
  EXPECT_THAT(entries, ElementsAre(AllOf(Field(&DirEntry::name, "inner"),
                                         Field(&DirEntry::type, DT_REG))));
  EXPECT_EQ(MustLookup(*root_, "file")->ReadDir(&entries), -ENOTDIR);
}

TEST_F(HostFsTest, ReadDirOfLargeDirectory) {
  // More entries than one getdents64 buffer holds.
  auto sub = MustLookup(*root_, "sub");
  std::set<std::string> want = {"inner"};
  for (int i = 0; i < 2000; i++) {
    std::string name = "entry_with_a_longish_name_" + std::to_string(i);
    WriteHostFile("sub/" + name, "");
    want.insert(name);
  }
  std::vector<DirEntry> entries;
  ASSERT_EQ(sub->ReadDir(&entries), 0);
  std::vector<std::string> names;
  for (const DirEntry& e : entries) names.push_back(e.name);
  EXPECT_EQ(names, std::vector<std::string>(want.begin(), want.end()));
}

TEST_F(HostFsTest, Read) {
  auto file = MustLookup(*root_, "file");
  char buf[64];
  EXPECT_EQ(file->Read(buf, sizeof(buf), 0), 13);
  EXPECT_EQ(std::string(buf, 13), "hello, world\n");
  EXPECT_EQ(file->Read(buf, 5, 7), 5);
  EXPECT_EQ(std::string(buf, 5), "world");
  EXPECT_EQ(file->Read(buf, sizeof(buf), 10), 3);  // short at EOF
  EXPECT_EQ(std::string(buf, 3), "ld\n");
  EXPECT_EQ(file->Read(buf, sizeof(buf), 13), 0);  // at EOF
  EXPECT_EQ(file->Read(buf, sizeof(buf), 1000), 0);  // past EOF
  EXPECT_EQ(file->Read(buf, 0, 0), 0);
  EXPECT_EQ(ReadAll(*file), "hello, world\n");
  EXPECT_EQ(ReadAll(*MustLookup(*root_, "empty")), "");
  auto sub = MustLookup(*root_, "sub");
  EXPECT_EQ(ReadAll(*MustLookup(*sub, "inner")), "inner");
}

TEST_F(HostFsTest, ReadOfDirectoryIsEisdir) {
  char buf[8];
  EXPECT_EQ(root_->Read(buf, sizeof(buf), 0), -EISDIR);
  EXPECT_EQ(MustLookup(*root_, "sub")->Read(buf, sizeof(buf), 0), -EISDIR);
}

TEST_F(HostFsTest, SpecialFilesCannotBeOpened) {
  auto fifo = MustLookup(*root_, "fifo");
  std::shared_ptr<File> f;
  EXPECT_EQ(fifo->Open(O_RDONLY, &f), -ENXIO);
  EXPECT_EQ(fifo->Open(O_WRONLY | O_NONBLOCK, &f), -ENXIO);
  char c;
  EXPECT_EQ(fifo->Read(&c, 1, 0), -EINVAL);
}

TEST_F(HostFsTest, MutationsAreErofs) {
  struct stat before;
  ASSERT_EQ(stat(Host("file").c_str(), &before), 0);
  auto file = MustLookup(*root_, "file");
  auto sub = MustLookup(*root_, "sub");
  std::shared_ptr<Inode> out;
  CreateRequest creq;
  EXPECT_EQ(root_->Create("new", creq, &out), -EROFS);
  creq.type = S_IFDIR;
  EXPECT_EQ(sub->Create("newdir", creq, &out), -EROFS);
  EXPECT_EQ(root_->Link("link", file), -EROFS);
  EXPECT_EQ(root_->Unlink("file", false), -EROFS);
  EXPECT_EQ(root_->Unlink("sub", true), -EROFS);
  EXPECT_EQ(root_->Rename("file", *sub, "moved", 0), -EROFS);
  SetAttrRequest sreq;
  sreq.set_mode = true;
  sreq.mode = 0777;
  EXPECT_EQ(file->SetAttr(sreq), -EROFS);
  EXPECT_EQ(root_->SetAttr(sreq), -EROFS);
  EXPECT_EQ(file->Write("x", 1, 0), -EROFS);
  EXPECT_EQ(file->Allocate(0, 0, 100), -EROFS);
  EXPECT_TRUE(file->ReadOnly());
  EXPECT_TRUE(sub->ReadOnly());

  // Directory operations on a non-directory keep the interface's ENOTDIR.
  EXPECT_EQ(file->Create("x", creq, &out), -ENOTDIR);
  EXPECT_EQ(file->Unlink("x", false), -ENOTDIR);

  // Nothing changed on the host.
  struct stat st;
  EXPECT_EQ(stat(Host("file").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode, before.st_mode);
  EXPECT_EQ(st.st_size, 13);
  EXPECT_NE(stat(Host("new").c_str(), &st), 0);
  EXPECT_NE(stat(Host("sub/moved").c_str(), &st), 0);
}

TEST_F(HostFsTest, LookupErrors) {
  std::shared_ptr<Inode> out;
  EXPECT_EQ(root_->Lookup("missing", &out), -ENOENT);
  EXPECT_EQ(MustLookup(*root_, "file")->Lookup("x", &out), -ENOTDIR);
  EXPECT_EQ(MustLookup(*root_, "fifo")->Lookup("x", &out), -ENOTDIR);
}

TEST_F(HostFsTest, LookupRejectsMoreThanOneComponent) {
  // The VFS never passes these; hostfs refuses them anyway, since
  // containment depends on one component per openat.
  std::shared_ptr<Inode> out;
  auto sub = MustLookup(*root_, "sub");
  EXPECT_EQ(sub->Lookup("..", &out), -EINVAL);
  EXPECT_EQ(sub->Lookup(".", &out), -EINVAL);
  EXPECT_EQ(sub->Lookup("", &out), -EINVAL);
  EXPECT_EQ(root_->Lookup("sub/inner", &out), -EINVAL);
  EXPECT_EQ(root_->Lookup("/etc", &out), -EINVAL);
  EXPECT_EQ(root_->Lookup(std::string("sub\0x", 5), &out), -EINVAL);
}

TEST_F(HostFsTest, RepeatedLookupGivesSameInode) {
  auto a = MustLookup(*root_, "file");
  auto b = MustLookup(*root_, "file");
  EXPECT_EQ(a.get(), b.get());
  auto s1 = MustLookup(*root_, "sub");
  auto s2 = MustLookup(*root_, "sub");
  EXPECT_EQ(s1.get(), s2.get());
  EXPECT_EQ(MustLookup(*s1, "inner").get(), MustLookup(*s2, "inner").get());
}

TEST_F(HostFsTest, ConcurrentLookupsAgree) {
  constexpr int kThreads = 8;
  std::vector<std::shared_ptr<Inode>> got(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; i++) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < 200; j++) {
        std::shared_ptr<Inode> out;
        ASSERT_EQ(root_->Lookup("file", &out), 0);
        if (got[i] == nullptr) got[i] = out;
        ASSERT_EQ(got[i].get(), out.get());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 1; i < kThreads; i++) EXPECT_EQ(got[i].get(), got[0].get());
}

TEST_F(HostFsTest, DroppedInodesAreNotKeptAlive) {
  std::weak_ptr<Inode> weak = MustLookup(*root_, "file");
  EXPECT_TRUE(weak.expired());
  // And a fresh lookup still works.
  EXPECT_EQ(ReadAll(*MustLookup(*root_, "file")), "hello, world\n");
}

TEST_F(HostFsTest, ManyDistinctLookupsSweepTheCache) {
  // Exercises the sweep of dead cache entries; must neither crash nor lose
  // live entries.
  auto keep = MustLookup(*root_, "file");
  for (int i = 0; i < 300; i++) {
    WriteHostFile("f" + std::to_string(i), "");
    MustLookup(*root_, "f" + std::to_string(i));
  }
  EXPECT_EQ(MustLookup(*root_, "file").get(), keep.get());
}

TEST_F(HostFsTest, ReplacedFileIsNoticed) {
  auto old_inode = MustLookup(*root_, "file");
  Attr old_attr;
  ASSERT_EQ(old_inode->GetAttr(&old_attr), 0);

  WriteHostFile("replacement", "new contents");
  ASSERT_EQ(rename(Host("replacement").c_str(), Host("file").c_str()), 0);

  auto new_inode = MustLookup(*root_, "file");
  EXPECT_NE(new_inode.get(), old_inode.get());
  Attr new_attr;
  ASSERT_EQ(new_inode->GetAttr(&new_attr), 0);
  EXPECT_NE(new_attr.ino, old_attr.ino);
  EXPECT_EQ(ReadAll(*new_inode), "new contents");

  // The old inode still describes the old (now unlinked) file, but its
  // name leads elsewhere, so it cannot be reopened for reading.
  ASSERT_EQ(old_inode->GetAttr(&old_attr), 0);
  EXPECT_EQ(old_attr.nlink, 0u);
  char buf[8];
  EXPECT_EQ(old_inode->Read(buf, sizeof(buf), 0), -ESTALE);
}

TEST_F(HostFsTest, ReadFdOpenedBeforeReplacementKeepsOldContents) {
  auto old_inode = MustLookup(*root_, "file");
  char buf[5];
  ASSERT_EQ(old_inode->Read(buf, sizeof(buf), 0), 5);
  WriteHostFile("replacement", "new contents");
  ASSERT_EQ(rename(Host("replacement").c_str(), Host("file").c_str()), 0);
  // Like an open file on Linux: the data of the file that was opened.
  EXPECT_EQ(ReadAll(*old_inode), "hello, world\n");
}

TEST_F(HostFsTest, FileReplacedBySymlinkIsStale) {
  auto old_inode = MustLookup(*root_, "file");
  ASSERT_EQ(unlink(Host("file").c_str()), 0);
  ASSERT_EQ(symlink("/etc/passwd", Host("file").c_str()), 0);
  char buf[8];
  // Not the host's /etc/passwd: the symlink is never followed.
  EXPECT_EQ(old_inode->Read(buf, sizeof(buf), 0), -ESTALE);
  EXPECT_EQ(MustLookup(*root_, "file")->Type(), S_IFLNK);
}

TEST_F(HostFsTest, StatFs) {
  struct statfs host;
  ASSERT_EQ(statfs(dir_.c_str(), &host), 0);
  struct statfs st;
  ASSERT_EQ(MustLookup(*root_, "file")->StatFs(&st), 0);
  EXPECT_EQ(st.f_type, host.f_type);
  EXPECT_EQ(st.f_bsize, host.f_bsize);
  EXPECT_EQ(st.f_namelen, host.f_namelen);
  EXPECT_NE(st.f_flags & ST_RDONLY, 0u);
  EXPECT_EQ(st.f_fsid.__val[0], 0);
  EXPECT_EQ(st.f_fsid.__val[1], 0);
}

// A writable bind mount (NewMountRoot, writable) over its own host tree:
//   file       "hello, world\n"
//   sub/       dir
//   sub/inner  "inner"
// and, next to that tree (outside the mount), outside/secret: what an
// escape would reach.
class WritableHostFsTest : public HostFsTest {
 protected:
  void SetUp() override {
    HostFsTest::SetUp();
    ASSERT_EQ(mkdir(Host("mnt").c_str(), 0755), 0);
    ASSERT_EQ(mkdir(Host("mnt/sub").c_str(), 0755), 0);
    WriteHostFile("mnt/file", "hello, world\n");
    WriteHostFile("mnt/sub/inner", "inner");
    ASSERT_EQ(mkdir(Host("outside").c_str(), 0755), 0);
    WriteHostFile("outside/secret", "secret");
    mnt_ = Mount("mnt", /*writable=*/true, "/data");
    ASSERT_NE(mnt_, nullptr);
  }
  void TearDown() override {
    mnt_.reset();
    HostFsTest::TearDown();
  }

  std::shared_ptr<Inode> Mount(const std::string& rel, bool writable,
                               const std::string& label) {
    UniqueFd fd(open(Host(rel).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    EXPECT_TRUE(fd.valid());
    MountOptions o;
    o.writable = writable;
    o.label = label;
    auto root = NewMountRoot(std::move(fd), kDev + 1, o);
    EXPECT_TRUE(root.ok()) << root.status();
    return root.ok() ? *std::move(root) : nullptr;
  }

  std::string HostContents(const std::string& rel) {
    FILE* f = fopen(Host(rel).c_str(), "r");
    if (f == nullptr) return "(missing)";
    std::string out;
    char buf[256];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    fclose(f);
    return out;
  }

  bool HostExists(const std::string& rel) {
    struct stat st;
    return lstat(Host(rel).c_str(), &st) == 0;
  }

  std::shared_ptr<Inode> mnt_;
};

TEST_F(WritableHostFsTest, RootIsWritable) {
  EXPECT_FALSE(mnt_->ReadOnly());
  struct statfs st;
  ASSERT_EQ(mnt_->StatFs(&st), 0);
  EXPECT_EQ(st.f_flags & ST_RDONLY, 0u);
}

TEST_F(WritableHostFsTest, ReadOnlyMountRefusesWrites) {
  auto ro = Mount("mnt", /*writable=*/false, "/ro");
  ASSERT_NE(ro, nullptr);
  EXPECT_TRUE(ro->ReadOnly());
  std::shared_ptr<Inode> out;
  EXPECT_EQ(ro->Create("new", CreateRequest{}, &out), -EROFS);
  EXPECT_EQ(MustLookup(*ro, "file")->Write("x", 1, 0), -EROFS);
  struct statfs st;
  ASSERT_EQ(ro->StatFs(&st), 0);
  EXPECT_NE(st.f_flags & ST_RDONLY, 0u);
  EXPECT_FALSE(HostExists("mnt/new"));
}

TEST_F(WritableHostFsTest, CreateAndWriteReachTheHost) {
  std::shared_ptr<Inode> f;
  CreateRequest req;
  req.mode = 0640;
  ASSERT_EQ(mnt_->Create("new", req, &f), 0);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->Type(), S_IFREG);
  EXPECT_EQ(f->Write("abc", 3, 0), 3);
  EXPECT_EQ(f->Write("de", 2, 3), 2);
  EXPECT_EQ(HostContents("mnt/new"), "abcde");
  EXPECT_EQ(ReadAll(*f), "abcde");
  struct stat st;
  ASSERT_EQ(stat(Host("mnt/new").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  // The Sentry's host uid, not the request's.
  EXPECT_EQ(st.st_uid, getuid());
  Attr a;
  ASSERT_EQ(f->GetAttr(&a), 0);
  EXPECT_EQ(a.size, 5u);
  EXPECT_EQ(a.ino, st.st_ino);
  // The same inode on lookup.
  EXPECT_EQ(MustLookup(*mnt_, "new"), f);
  // An existing name is EEXIST, whatever its type.
  EXPECT_EQ(mnt_->Create("new", req, &f), -EEXIST);
  EXPECT_EQ(mnt_->Create("sub", req, &f), -EEXIST);
}

TEST_F(WritableHostFsTest, CreateOtherTypes) {
  std::shared_ptr<Inode> out;
  CreateRequest req;
  req.type = S_IFDIR;
  req.mode = 0750;
  ASSERT_EQ(mnt_->Create("d", req, &out), 0);
  EXPECT_EQ(out->Type(), S_IFDIR);
  struct stat st;
  ASSERT_EQ(stat(Host("mnt/d").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0750u);

  req = CreateRequest{};
  req.type = S_IFLNK;
  req.target = "../../outside/secret";
  ASSERT_EQ(mnt_->Create("l", req, &out), 0);
  std::string target;
  ASSERT_EQ(out->Readlink(&target), 0);
  EXPECT_EQ(target, "../../outside/secret");  // raw: the VFS resolves it
  char host_target[64] = {};
  ASSERT_GT(readlink(Host("mnt/l").c_str(), host_target, sizeof(host_target) - 1), 0);
  EXPECT_STREQ(host_target, "../../outside/secret");

  req = CreateRequest{};
  req.type = S_IFIFO;
  ASSERT_EQ(mnt_->Create("p", req, &out), 0);
  EXPECT_EQ(out->Type(), S_IFIFO);

  // Host devices would be the host's.
  req = CreateRequest{};
  req.type = S_IFCHR;
  req.rdev = makedev(1, 3);
  EXPECT_EQ(mnt_->Create("null", req, &out), -EPERM);
  req.type = S_IFBLK;
  EXPECT_EQ(mnt_->Create("blk", req, &out), -EPERM);
  EXPECT_FALSE(HostExists("mnt/null"));
  EXPECT_FALSE(HostExists("mnt/blk"));
}

TEST_F(WritableHostFsTest, NoSetIdBitsOnHostFiles) {
  std::shared_ptr<Inode> f;
  CreateRequest req;
  req.mode = 06755;
  ASSERT_EQ(mnt_->Create("suid", req, &f), 0);
  struct stat st;
  ASSERT_EQ(stat(Host("mnt/suid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  SetAttrRequest sreq;
  sreq.set_mode = true;
  sreq.mode = 04711;
  ASSERT_EQ(f->SetAttr(sreq), 0);
  ASSERT_EQ(stat(Host("mnt/suid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0711u);
  // A directory takes set-group-ID from its parent, as mkdir(2) does.
  req.type = S_IFDIR;
  req.mode = 0775;
  ASSERT_EQ(chmod(Host("mnt/sub").c_str(), 02775), 0);
  auto sub = MustLookup(*mnt_, "sub");
  ASSERT_EQ(sub->Create("sgid", req, &f), 0);
  ASSERT_EQ(stat(Host("mnt/sub/sgid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 02775u);
  ASSERT_EQ(mnt_->Create("plain", req, &f), 0);
  ASSERT_EQ(stat(Host("mnt/plain").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0775u);
}

TEST_F(WritableHostFsTest, ModeIsTheRequestsNotTheHostUmask) {
  const mode_t old = umask(077);
  std::shared_ptr<Inode> f;
  CreateRequest req;
  req.mode = 0664;
  EXPECT_EQ(mnt_->Create("f", req, &f), 0);
  req.type = S_IFDIR;
  req.mode = 0775;
  EXPECT_EQ(mnt_->Create("d", req, &f), 0);
  umask(old);
  struct stat st;
  ASSERT_EQ(stat(Host("mnt/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0664u);
  ASSERT_EQ(stat(Host("mnt/d").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0775u);
}

TEST_F(WritableHostFsTest, SetAttrReachesTheHost) {
  auto f = MustLookup(*mnt_, "file");
  SetAttrRequest req;
  req.set_size = true;
  req.size = 5;
  ASSERT_EQ(f->SetAttr(req), 0);
  EXPECT_EQ(HostContents("mnt/file"), "hello");
  req = SetAttrRequest{};
  req.set_mode = true;
  req.mode = 0600;
  req.set_mtime = true;
  req.mtime = {1234567, 0};
  ASSERT_EQ(f->SetAttr(req), 0);
  struct stat st;
  ASSERT_EQ(stat(Host("mnt/file").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_mtim.tv_sec, 1234567);
  // A directory's mode too (through its own "." descriptor).
  auto sub = MustLookup(*mnt_, "sub");
  req = SetAttrRequest{};
  req.set_mode = true;
  req.mode = 0700;
  ASSERT_EQ(sub->SetAttr(req), 0);
  ASSERT_EQ(stat(Host("mnt/sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  req = SetAttrRequest{};
  req.set_size = true;
  EXPECT_EQ(sub->SetAttr(req), -EISDIR);
  EXPECT_EQ(f->Allocate(0, 0, 8192), 0);
  ASSERT_EQ(stat(Host("mnt/file").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 8192);
}

TEST_F(WritableHostFsTest, UnlinkReachesTheHost) {
  EXPECT_EQ(mnt_->Unlink("sub", /*dir=*/true), -ENOTEMPTY);
  EXPECT_EQ(mnt_->Unlink("file", /*dir=*/true), -ENOTDIR);
  EXPECT_EQ(mnt_->Unlink("sub", /*dir=*/false), -EISDIR);
  auto sub = MustLookup(*mnt_, "sub");
  ASSERT_EQ(sub->Unlink("inner", false), 0);
  ASSERT_EQ(mnt_->Unlink("sub", true), 0);
  ASSERT_EQ(mnt_->Unlink("file", false), 0);
  EXPECT_FALSE(HostExists("mnt/sub"));
  EXPECT_FALSE(HostExists("mnt/file"));
  std::shared_ptr<Inode> out;
  EXPECT_EQ(mnt_->Lookup("file", &out), -ENOENT);
  EXPECT_EQ(mnt_->Unlink("file", false), -ENOENT);
  // Single components only: containment rests on it.
  EXPECT_EQ(mnt_->Unlink("../outside/secret", false), -EINVAL);
  EXPECT_EQ(mnt_->Unlink("..", true), -EINVAL);
  EXPECT_TRUE(HostExists("outside/secret"));
}

TEST_F(WritableHostFsTest, UnlinkedWhileOpenStaysUsable) {
  // Made by the sandbox, then unlinked (a temporary file's life).
  std::shared_ptr<Inode> made;
  ASSERT_EQ(mnt_->Create("tmp", CreateRequest{}, &made), 0);
  ASSERT_EQ(mnt_->Unlink("tmp", false), 0);
  EXPECT_FALSE(HostExists("mnt/tmp"));
  EXPECT_EQ(made->Write("abc", 3, 0), 3);
  EXPECT_EQ(ReadAll(*made), "abc");
  // Found on the host, opened, then unlinked.
  auto f = MustLookup(*mnt_, "file");
  std::shared_ptr<File> open_file;
  ASSERT_EQ(f->Open(O_RDWR, &open_file), 0);
  ASSERT_EQ(unlink(Host("mnt/file").c_str()), 0);
  EXPECT_EQ(f->Write("J", 1, 0), 1);
  EXPECT_EQ(ReadAll(*f), "Jello, world\n");
  // Opening a file the host replaced meanwhile is ESTALE at open.
  auto inner = MustLookup(*MustLookup(*mnt_, "sub"), "inner");
  ASSERT_EQ(unlink(Host("mnt/sub/inner").c_str()), 0);
  WriteHostFile("mnt/sub/inner", "new");
  EXPECT_EQ(inner->Open(O_RDONLY, &open_file), -ESTALE);
}

TEST_F(WritableHostFsTest, RenameMovesTheInodeWithItsName) {
  auto f = MustLookup(*mnt_, "file");
  auto sub = MustLookup(*mnt_, "sub");
  ASSERT_EQ(mnt_->Rename("file", *sub, "moved", 0), 0);
  EXPECT_FALSE(HostExists("mnt/file"));
  EXPECT_EQ(HostContents("mnt/sub/moved"), "hello, world\n");
  EXPECT_EQ(MustLookup(*sub, "moved"), f);
  // The inode reopens by its new name for I/O.
  EXPECT_EQ(f->Write("J", 1, 0), 1);
  EXPECT_EQ(HostContents("mnt/sub/moved"), "Jello, world\n");
  std::string label, path;
  ASSERT_TRUE(PathOf(*f, &label, &path));
  EXPECT_EQ(label, "/data");
  EXPECT_EQ(path, "/sub/moved");

  // RENAME_NOREPLACE and RENAME_EXCHANGE as renameat2.
  EXPECT_EQ(sub->Rename("moved", *sub, "inner", RENAME_NOREPLACE), -EEXIST);
  auto inner = MustLookup(*sub, "inner");
  ASSERT_EQ(sub->Rename("moved", *sub, "inner", RENAME_EXCHANGE), 0);
  EXPECT_EQ(HostContents("mnt/sub/inner"), "Jello, world\n");
  EXPECT_EQ(HostContents("mnt/sub/moved"), "inner");
  ASSERT_TRUE(PathOf(*inner, &label, &path));
  EXPECT_EQ(path, "/sub/moved");
  ASSERT_TRUE(PathOf(*f, &label, &path));
  EXPECT_EQ(path, "/sub/inner");
  EXPECT_EQ(ReadAll(*inner), "inner");

  // A directory moves with what is under it.
  std::shared_ptr<Inode> d;
  CreateRequest req;
  req.type = S_IFDIR;
  ASSERT_EQ(mnt_->Create("d", req, &d), 0);
  ASSERT_EQ(sub->Rename("inner", *d, "f", 0), 0);
  ASSERT_EQ(mnt_->Rename("d", *mnt_, "e", 0), 0);
  EXPECT_EQ(f->Write("K", 1, 0), 1);
  EXPECT_EQ(HostContents("mnt/e/f"), "Kello, world\n");
  ASSERT_TRUE(PathOf(*f, &label, &path));
  EXPECT_EQ(path, "/e/f");
}

TEST_F(WritableHostFsTest, LinkReachesTheHost) {
  auto f = MustLookup(*mnt_, "file");
  auto sub = MustLookup(*mnt_, "sub");
  ASSERT_EQ(sub->Link("hard", f), 0);
  struct stat a, b;
  ASSERT_EQ(stat(Host("mnt/file").c_str(), &a), 0);
  ASSERT_EQ(stat(Host("mnt/sub/hard").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_nlink, 2u);
  EXPECT_EQ(sub->Link("hard", f), -EEXIST);
  EXPECT_EQ(sub->Link("../x", f), -EINVAL);
}

TEST_F(WritableHostFsTest, RenameAndLinkAcrossFilesystemsAreExdev) {
  // Another writable hostfs over the same host filesystem (even the same
  // directory): still another filesystem.
  auto other = Mount("outside", /*writable=*/true, "/other");
  ASSERT_NE(other, nullptr);
  auto f = MustLookup(*mnt_, "file");
  EXPECT_EQ(mnt_->Rename("file", *other, "stolen", 0), -EXDEV);
  EXPECT_EQ(other->Link("stolen", f), -EXDEV);
  auto secret = MustLookup(*other, "secret");
  EXPECT_EQ(mnt_->Link("secret", secret), -EXDEV);
  EXPECT_EQ(other->Rename("secret", *mnt_, "secret", 0), -EXDEV);
  auto same = Mount("mnt", /*writable=*/true, "/again");
  ASSERT_NE(same, nullptr);
  EXPECT_EQ(mnt_->Rename("file", *same, "x", 0), -EXDEV);
  // The read-only rootfs hostfs (root_) is neither a source nor a target.
  EXPECT_EQ(mnt_->Link("file2", MustLookup(*root_, "file")), -EXDEV);
  EXPECT_FALSE(HostExists("outside/stolen"));
  EXPECT_FALSE(HostExists("mnt/secret"));
  EXPECT_FALSE(HostExists("mnt/x"));
  EXPECT_FALSE(HostExists("mnt/file2"));
  EXPECT_EQ(HostContents("mnt/file"), "hello, world\n");
}

TEST_F(WritableHostFsTest, CreateNeverFollowsAHostSymlink) {
  // The host (or a previous run) left a symlink pointing out: creating
  // that name fails rather than making the file it points to.
  ASSERT_EQ(symlink(Host("outside/new").c_str(), Host("mnt/trap").c_str()), 0);
  std::shared_ptr<Inode> out;
  EXPECT_EQ(mnt_->Create("trap", CreateRequest{}, &out), -EEXIST);
  EXPECT_FALSE(HostExists("outside/new"));
  // Writing "through" it: the link is an inode of its own, not the target.
  auto trap = MustLookup(*mnt_, "trap");
  EXPECT_EQ(trap->Type(), S_IFLNK);
  EXPECT_EQ(trap->Write("x", 1, 0), -EINVAL);
  EXPECT_FALSE(HostExists("outside/new"));
}

TEST_F(WritableHostFsTest, DirectoryReplacedBySymlinkOnTheHost) {
  // The sandbox holds mnt/sub; the host moves it away and puts a symlink
  // to outside/ in its place. Creations in the held directory land in the
  // directory itself (wherever it now is), never behind the symlink.
  auto sub = MustLookup(*mnt_, "sub");
  ASSERT_EQ(rename(Host("mnt/sub").c_str(), Host("mnt/sub2").c_str()), 0);
  ASSERT_EQ(symlink(Host("outside").c_str(), Host("mnt/sub").c_str()), 0);
  std::shared_ptr<Inode> out;
  ASSERT_EQ(sub->Create("f", CreateRequest{}, &out), 0);
  EXPECT_TRUE(HostExists("mnt/sub2/f"));
  EXPECT_FALSE(HostExists("outside/f"));
  // A fresh lookup sees the symlink, as an inode of its own.
  EXPECT_EQ(MustLookup(*mnt_, "sub")->Type(), S_IFLNK);
}

TEST_F(WritableHostFsTest, FileReplacedBySymlinkIsNotWrittenThrough) {
  auto f = MustLookup(*mnt_, "file");
  ASSERT_EQ(unlink(Host("mnt/file").c_str()), 0);
  ASSERT_EQ(symlink(Host("outside/secret").c_str(), Host("mnt/file").c_str()), 0);
  EXPECT_EQ(f->Write("pwned", 5, 0), -ESTALE);
  SetAttrRequest req;
  req.set_size = true;
  req.size = 0;
  EXPECT_EQ(f->SetAttr(req), -ESTALE);
  EXPECT_EQ(HostContents("outside/secret"), "secret");
  std::string label, path;
  EXPECT_FALSE(PathOf(*f, &label, &path));
}

TEST_F(WritableHostFsTest, PathOf) {
  std::string label, path;
  ASSERT_TRUE(PathOf(*mnt_, &label, &path));
  EXPECT_EQ(label, "/data");
  EXPECT_EQ(path, "/");
  auto inner = MustLookup(*MustLookup(*mnt_, "sub"), "inner");
  ASSERT_TRUE(PathOf(*inner, &label, &path));
  EXPECT_EQ(path, "/sub/inner");
  // The rootfs's hostfs has no label.
  ASSERT_TRUE(PathOf(*MustLookup(*root_, "file"), &label, &path));
  EXPECT_EQ(label, "");
  EXPECT_EQ(path, "/file");
  EXPECT_TRUE(IsHostInode(*inner));
}

TEST_F(WritableHostFsTest, SingleFileMount) {
  MountOptions o;
  o.writable = true;
  o.label = "/etc/f";
  // A writable file mount wants a descriptor open for reading and writing.
  UniqueFd path_fd(open(Host("mnt/file").c_str(), O_PATH | O_CLOEXEC));
  EXPECT_FALSE(NewMountRoot(std::move(path_fd), kDev + 2, o).ok());
  UniqueFd ro_fd(open(Host("mnt/file").c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_FALSE(NewMountRoot(std::move(ro_fd), kDev + 2, o).ok());

  UniqueFd fd(open(Host("mnt/file").c_str(), O_RDWR | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  auto root = NewMountRoot(std::move(fd), kDev + 2, o);
  ASSERT_TRUE(root.ok()) << root.status();
  std::shared_ptr<Inode> f = *root;
  EXPECT_EQ(f->Type(), S_IFREG);
  EXPECT_EQ(ReadAll(*f), "hello, world\n");
  EXPECT_EQ(f->Write("more\n", 5, 13), 5);
  EXPECT_EQ(HostContents("mnt/file"), "hello, world\nmore\n");
  SetAttrRequest req;
  req.set_size = true;
  req.size = 5;
  ASSERT_EQ(f->SetAttr(req), 0);
  EXPECT_EQ(HostContents("mnt/file"), "hello");
  // Not a directory; and it cannot be linked anywhere.
  std::shared_ptr<Inode> out;
  EXPECT_EQ(f->Lookup("x", &out), -ENOTDIR);
  EXPECT_EQ(mnt_->Link("again", f), -EXDEV);
  std::string label, path;
  ASSERT_TRUE(PathOf(*f, &label, &path));
  EXPECT_EQ(label, "/etc/f");
  EXPECT_EQ(path, "/");

  // Read-only: O_RDONLY is enough, and writes are EROFS.
  o.writable = false;
  UniqueFd rfd(open(Host("mnt/file").c_str(), O_RDONLY | O_CLOEXEC));
  auto ro = NewMountRoot(std::move(rfd), kDev + 3, o);
  ASSERT_TRUE(ro.ok()) << ro.status();
  EXPECT_EQ(ReadAll(**ro), "hello");
  EXPECT_EQ((*ro)->Write("x", 1, 0), -EROFS);

  // Neither a directory nor a regular file: refused.
  UniqueFd fifo(open(Host("fifo").c_str(), O_PATH | O_CLOEXEC));
  EXPECT_FALSE(NewMountRoot(std::move(fifo), kDev + 4, o).ok());
}


// The page cache of shared mappings: pages read from the host, seen by
// read() and updated by write(), written back (up to the file's size) by
// Writeback and at a mapping's end, zeroed by truncate; only for regular
// files of a writable mount.
TEST_F(WritableHostFsTest, PageCacheOfSharedMappings) {
  auto mf = mm::MemoryFile::Create(1ull << 26);
  ASSERT_TRUE(mf.ok()) << mf.status();
  EXPECT_EQ(SharedPageCache(*mnt_, mf->get()), nullptr);  // a directory
  auto ro = Mount("mnt", /*writable=*/false, "/ro");
  auto ro_file = MustLookup(*ro, "file");
  EXPECT_EQ(SharedPageCache(*ro_file, mf->get()), nullptr);

  auto file = MustLookup(*mnt_, "file");
  auto cache = SharedPageCache(*file, mf->get());
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(SharedPageCache(*file, mf->get()), cache);  // one per inode
  cache->BeginMapping(/*may_write=*/true);
  uint64_t off = 0;
  ASSERT_EQ(cache->GetPage(0, &off, false), 0);
  uint8_t* page = (*mf)->Internal(off);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(page), 13), "hello, world\n");
  EXPECT_EQ(page[13], 0);  // past EOF: zeros

  // A "mapped" write: read() sees it, the host not yet.
  std::memcpy(page, "HELLO", 5);
  EXPECT_EQ(ReadAll(*file), "HELLO, world\n");
  EXPECT_EQ(HostContents("mnt/file"), "hello, world\n");
  // write() updates the cached page.
  ASSERT_EQ(file->Write("WORLD", 5, 7), 5);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(page) + 7, 5), "WORLD");
  // Written back up to the file's size, never growing it.
  page[20] = 'x';
  EXPECT_EQ(cache->Writeback(), 0);
  EXPECT_EQ(HostContents("mnt/file"), "HELLO, WORLD\n");
  // Truncate zeroes the cut bytes in the cache.
  SetAttrRequest cut;
  cut.set_size = true;
  cut.size = 5;
  ASSERT_EQ(file->SetAttr(cut), 0);
  EXPECT_EQ(page[5], 0);
  EXPECT_EQ(page[20], 0);
  page[1] = 'e';
  {
    std::shared_ptr<File> f;  // closing a description writes back
    ASSERT_EQ(file->Open(O_RDWR, &f), 0);
  }
  EXPECT_EQ(HostContents("mnt/file"), "HeLLO");
  page[2] = 'l';
  cache->EndMapping();  // the last mapping: written back, pages freed
  EXPECT_EQ(HostContents("mnt/file"), "HelLO");
  EXPECT_EQ(ReadAll(*file), "HelLO");
}

// Writeback writes only the pages a mapping changed: a change the host
// made meanwhile to another cached page stays. A write() into a page with
// mapped changes not yet written back keeps them due.
TEST_F(WritableHostFsTest, PageCacheWritesBackOnlyChangedPages) {
  WriteHostFile("mnt/two", std::string(2 * mm::kPageSize, 'a'));
  auto mf = mm::MemoryFile::Create(1ull << 26);
  ASSERT_TRUE(mf.ok()) << mf.status();
  auto file = MustLookup(*mnt_, "two");
  auto cache = SharedPageCache(*file, mf->get());
  ASSERT_NE(cache, nullptr);
  cache->BeginMapping(/*may_write=*/true);
  uint64_t off0 = 0, off1 = 0;
  ASSERT_EQ(cache->GetPage(0, &off0, false), 0);
  ASSERT_EQ(cache->GetPage(1, &off1, false), 0);
  uint8_t* page0 = (*mf)->Internal(off0);

  page0[0] = 'M';  // a mapped write to page 0
  {
    int fd = open(Host("mnt/two").c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, "H", 1, mm::kPageSize), 1);  // the host, page 1
    close(fd);
  }
  ASSERT_EQ(file->Write("W", 1, 100), 1);  // write() into dirty page 0
  EXPECT_EQ(cache->Writeback(), 0);
  std::string host = HostContents("mnt/two");
  ASSERT_EQ(host.size(), 2 * mm::kPageSize);
  EXPECT_EQ(host[0], 'M');
  EXPECT_EQ(host[100], 'W');
  EXPECT_EQ(host[mm::kPageSize], 'H');  // not overwritten by the cache's 'a'

  // Nothing changed since: the host's later change to page 0 stays too.
  {
    int fd = open(Host("mnt/two").c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, "h", 1, 1), 1);
    close(fd);
  }
  EXPECT_EQ(cache->Writeback(), 0);
  EXPECT_EQ(HostContents("mnt/two")[1], 'h');
  cache->EndMapping();
}

// Mapped writes reach the host without msync, fsync, close or munmap: the
// writeback thread writes them within its period (5 s).
TEST_F(WritableHostFsTest, PageCacheIsWrittenBackPeriodically) {
  auto mf = mm::MemoryFile::Create(1ull << 26);
  ASSERT_TRUE(mf.ok()) << mf.status();
  auto file = MustLookup(*mnt_, "file");
  auto cache = SharedPageCache(*file, mf->get());
  ASSERT_NE(cache, nullptr);
  cache->BeginMapping(/*may_write=*/true);
  uint64_t off = 0;
  ASSERT_EQ(cache->GetPage(0, &off, false), 0);
  std::memcpy((*mf)->Internal(off), "HELLO", 5);
  bool seen = false;
  for (int i = 0; i < 300 && !seen; i++) {  // up to 30 s
    seen = HostContents("mnt/file") == "HELLO, world\n";
    if (!seen) usleep(100 * 1000);
  }
  EXPECT_TRUE(seen) << HostContents("mnt/file");
  cache->EndMapping();
}

}  // namespace
}  // namespace sandboxd::fs::hostfs
