#include "sentry/fs/hostfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace sandboxd::fs::hostfs
