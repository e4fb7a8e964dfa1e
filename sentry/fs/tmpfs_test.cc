#include "sentry/fs/tmpfs.h"

#include <dirent.h>
#include <linux/falloc.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sentry/mm/async_loader.h"

namespace sandboxd::fs {
namespace {

using ::testing::ElementsAre;

constexpr uint64_t kPage = mm::kPageSize;

class TmpFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = mm::MemoryFile::Create(1ull << 30);
    ASSERT_TRUE(mf.ok()) << mf.status();
    mf_ = std::move(mf).value();
    TmpFsOptions opts;
    opts.dev = 42;
    fs_ = NewFs(opts);
    root_ = fs_->Root();
  }

  std::unique_ptr<TmpFs> NewFs(const TmpFsOptions& opts) {
    return std::make_unique<TmpFs>(mf_.get(), opts);
  }
  std::unique_ptr<TmpFs> NewFs(uint64_t size_limit = 0,
                               uint64_t inode_limit = 0) {
    TmpFsOptions opts;
    opts.size_limit = size_limit;
    opts.inode_limit = inode_limit;
    return NewFs(opts);
  }

  static std::shared_ptr<Inode> Make(Inode& dir, const std::string& name,
                                     uint32_t type = S_IFREG,
                                     uint32_t mode = 0644) {
    CreateRequest req;
    req.type = type;
    req.mode = mode;
    req.uid = 1000;
    req.gid = 1000;
    std::shared_ptr<Inode> out;
    EXPECT_EQ(dir.Create(name, req, &out), 0) << name;
    return out;
  }

  static Attr Stat(Inode& inode) {
    Attr a;
    EXPECT_EQ(inode.GetAttr(&a), 0);
    return a;
  }

  static std::vector<std::string> Names(Inode& dir) {
    std::vector<DirEntry> ents;
    EXPECT_EQ(dir.ReadDir(&ents), 0);
    std::vector<std::string> names;
    for (const auto& e : ents) names.push_back(e.name);
    return names;
  }

  static std::string ReadAll(Inode& file, uint64_t n, uint64_t off = 0) {
    std::string buf(n, '\0');
    int64_t got = file.Read(buf.data(), n, off);
    EXPECT_GE(got, 0);
    buf.resize(std::max<int64_t>(got, 0));
    return buf;
  }

  static int64_t WriteStr(Inode& file, const std::string& s, uint64_t off) {
    return file.Write(s.data(), s.size(), off);
  }

  // Sets every time of `inode` to the epoch so that a later update shows.
  static void ResetTimes(Inode& inode) {
    SetAttrRequest req;
    req.set_atime = req.set_mtime = true;
    ASSERT_EQ(inode.SetAttr(req), 0);
  }

  std::unique_ptr<mm::MemoryFile> mf_;
  std::unique_ptr<TmpFs> fs_;
  std::shared_ptr<Inode> root_;
};

TEST_F(TmpFsTest, RootAndStatFs) {
  Attr a = Stat(*root_);
  EXPECT_EQ(a.mode, S_IFDIR | 01777u);
  EXPECT_EQ(a.nlink, 2u);
  EXPECT_EQ(a.ino, 1u);
  EXPECT_EQ(a.dev, 42u);
  EXPECT_EQ(root_->Type(), static_cast<uint32_t>(S_IFDIR));

  struct statfs sf;
  ASSERT_EQ(root_->StatFs(&sf), 0);
  EXPECT_EQ(sf.f_type, 0x01021994);
  EXPECT_EQ(sf.f_bsize, static_cast<long>(kPage));
  EXPECT_EQ(sf.f_blocks, 0u);  // unlimited, as Linux reports it
  EXPECT_EQ(sf.f_files, 0u);

  TmpFsOptions opts;
  opts.size_limit = 10 * kPage + 1;
  opts.inode_limit = 5;
  opts.root_mode = 0755;
  opts.root_uid = 7;
  opts.root_gid = 8;
  auto limited = NewFs(opts);
  auto root = limited->Root();
  a = Stat(*root);
  EXPECT_EQ(a.mode, S_IFDIR | 0755u);
  EXPECT_EQ(a.uid, 7u);
  EXPECT_EQ(a.gid, 8u);
  auto f = Make(*root, "f");
  ASSERT_EQ(WriteStr(*f, "x", 0), 1);
  ASSERT_EQ(f->StatFs(&sf), 0);
  EXPECT_EQ(sf.f_blocks, 11u);  // rounded up to pages
  EXPECT_EQ(sf.f_bfree, 10u);
  EXPECT_EQ(sf.f_bavail, 10u);
  EXPECT_EQ(sf.f_files, 5u);
  EXPECT_EQ(sf.f_ffree, 3u);  // root and f
  EXPECT_EQ(sf.f_namelen, NAME_MAX);
}

TEST_F(TmpFsTest, CreateLookupReadDir) {
  ResetTimes(*root_);
  auto c = Make(*root_, "c");
  auto a = Make(*root_, "a", S_IFDIR, 0700);
  auto b = Make(*root_, "b", S_IFIFO);
  EXPECT_THAT(Names(*root_), ElementsAre("a", "b", "c"));

  std::vector<DirEntry> ents;
  ASSERT_EQ(root_->ReadDir(&ents), 0);
  EXPECT_EQ(ents[0].type, DT_DIR);
  EXPECT_EQ(ents[1].type, DT_FIFO);
  EXPECT_EQ(ents[2].type, DT_REG);
  EXPECT_EQ(ents[2].ino, Stat(*c).ino);

  Attr ra = Stat(*root_);
  EXPECT_EQ(ra.nlink, 3u);  // one subdirectory
  EXPECT_EQ(ra.size, 20u * 5);
  EXPECT_GT(ra.mtime.tv_sec, 0);
  EXPECT_GT(ra.ctime.tv_sec, 0);
  EXPECT_GT(ra.atime.tv_sec, 0);  // ReadDir

  std::shared_ptr<Inode> out;
  ASSERT_EQ(root_->Lookup("a", &out), 0);
  EXPECT_EQ(out, a);
  EXPECT_EQ(root_->Lookup("zz", &out), -ENOENT);
  EXPECT_EQ(c->Lookup("x", &out), -ENOTDIR);

  CreateRequest req;
  EXPECT_EQ(root_->Create("c", req, &out), -EEXIST);
  req.type = S_IFDIR;
  EXPECT_EQ(root_->Create("a", req, &out), -EEXIST);
  req.type = 0170000;
  EXPECT_EQ(root_->Create("bad", req, &out), -EINVAL);

  Attr aa = Stat(*a);
  EXPECT_EQ(aa.mode, S_IFDIR | 0700u);
  EXPECT_EQ(aa.uid, 1000u);
  EXPECT_EQ(aa.nlink, 2u);
  EXPECT_NE(aa.ino, ra.ino);
}

TEST_F(TmpFsTest, SetgidDirectoryPassesGroupDown) {
  auto d = Make(*root_, "d", S_IFDIR, 02775);
  SetAttrRequest chgrp;
  chgrp.set_gid = true;
  chgrp.gid = 50;
  ASSERT_EQ(d->SetAttr(chgrp), 0);
  auto f = Make(*d, "f");
  auto sub = Make(*d, "sub", S_IFDIR, 0755);
  EXPECT_EQ(Stat(*f).gid, 50u);
  EXPECT_EQ(Stat(*f).mode, S_IFREG | 0644u);
  EXPECT_EQ(Stat(*sub).gid, 50u);
  EXPECT_EQ(Stat(*sub).mode, S_IFDIR | 02755u);
}

TEST_F(TmpFsTest, SymlinksAndSpecialFiles) {
  CreateRequest req;
  req.type = S_IFLNK;
  req.mode = 0600;  // ignored: symlinks are 0777
  req.target = "../some/where";
  std::shared_ptr<Inode> link;
  ASSERT_EQ(root_->Create("l", req, &link), 0);
  std::string target;
  ASSERT_EQ(link->Readlink(&target), 0);
  EXPECT_EQ(target, "../some/where");
  Attr a = Stat(*link);
  EXPECT_EQ(a.mode, S_IFLNK | 0777u);
  EXPECT_EQ(a.size, target.size());

  std::shared_ptr<Inode> out;
  req.target = "";
  EXPECT_EQ(root_->Create("empty", req, &out), -ENOENT);
  req.target = std::string(PATH_MAX, 'x');
  EXPECT_EQ(root_->Create("long", req, &out), -ENAMETOOLONG);

  req = CreateRequest();
  req.type = S_IFCHR;
  req.mode = 0666;
  req.rdev = makedev(1, 3);
  ASSERT_EQ(root_->Create("null", req, &out), 0);
  a = Stat(*out);
  EXPECT_EQ(a.mode, S_IFCHR | 0666u);
  EXPECT_EQ(a.rdev, makedev(1, 3));
  EXPECT_EQ(out->Readlink(&target), -EINVAL);
  char c;
  EXPECT_LT(out->Read(&c, 1, 0), 0);  // no behaviour of its own

  for (uint32_t type : {S_IFBLK, S_IFSOCK, S_IFIFO}) {
    req.type = type;
    ASSERT_EQ(root_->Create("n" + std::to_string(type), req, &out), 0);
    EXPECT_EQ(out->Type(), type);
  }
  SetAttrRequest trunc;
  trunc.set_size = true;
  EXPECT_EQ(out->SetAttr(trunc), -EINVAL);
  EXPECT_EQ(link->SetAttr(trunc), -EINVAL);
  EXPECT_EQ(root_->SetAttr(trunc), -EISDIR);
}

TEST_F(TmpFsTest, WriteReadAcrossPageBoundaries) {
  auto f = Make(*root_, "f");
  std::string data(3 * kPage + 100, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  const uint64_t off = kPage - 10;
  ASSERT_EQ(WriteStr(*f, data, off), static_cast<int64_t>(data.size()));

  Attr a = Stat(*f);
  EXPECT_EQ(a.size, off + data.size());
  EXPECT_EQ(a.blocks, 5u * 8);  // pages 0..4
  EXPECT_EQ(mf_->AllocatedBytes(), 5 * kPage);

  EXPECT_EQ(ReadAll(*f, data.size(), off), data);
  EXPECT_EQ(ReadAll(*f, off), std::string(off, '\0'));  // leading hole
  // Short read at EOF, 0 past it.
  EXPECT_EQ(ReadAll(*f, 1000, off + data.size() - 5),
            data.substr(data.size() - 5));
  EXPECT_EQ(ReadAll(*f, 10, a.size), "");
  EXPECT_EQ(ReadAll(*f, 10, a.size + 1000000), "");

  // Overwrite in the middle, straddling a boundary.
  ASSERT_EQ(WriteStr(*f, "HELLO", 2 * kPage - 2), 5);
  data.replace(2 * kPage - 2 - off, 5, "HELLO");
  EXPECT_EQ(ReadAll(*f, data.size(), off), data);
  EXPECT_EQ(Stat(*f).size, a.size);
  EXPECT_EQ(f->Write("x", 0, 0), 0);
}

TEST_F(TmpFsTest, SparseFileWithDataAtTheEnd) {
  auto f = Make(*root_, "sparse");
  const uint64_t size = 10ull << 20;
  ASSERT_EQ(WriteStr(*f, "end", size - 3), 3);
  Attr a = Stat(*f);
  EXPECT_EQ(a.size, size);
  EXPECT_EQ(a.blocks, 8u);
  EXPECT_EQ(mf_->AllocatedBytes(), kPage);

  std::string all = ReadAll(*f, size + 10);
  ASSERT_EQ(all.size(), size);
  EXPECT_EQ(all.substr(size - 3), "end");
  EXPECT_TRUE(std::all_of(all.begin(), all.end() - 3,
                          [](char c) { return c == 0; }));
  EXPECT_EQ(mf_->AllocatedBytes(), kPage);  // reading holes allocates nothing
}

TEST_F(TmpFsTest, TruncateFreesMemoryAndZeroesTail) {
  auto f = Make(*root_, "f");
  const std::string mib(1 << 20, 'a');
  ASSERT_EQ(WriteStr(*f, mib, 0), static_cast<int64_t>(mib.size()));
  EXPECT_EQ(mf_->AllocatedBytes(), mib.size());

  ResetTimes(*f);
  SetAttrRequest req;
  req.set_size = true;
  req.size = kPage + 100;
  ASSERT_EQ(f->SetAttr(req), 0);
  EXPECT_EQ(mf_->AllocatedBytes(), 2 * kPage);
  Attr a = Stat(*f);
  EXPECT_EQ(a.size, kPage + 100);
  EXPECT_EQ(a.blocks, 16u);
  EXPECT_GT(a.mtime.tv_sec, 0);
  EXPECT_GT(a.ctime.tv_sec, 0);

  // Growing again shows zeros where the cut data was.
  req.size = 3 * kPage;
  ASSERT_EQ(f->SetAttr(req), 0);
  EXPECT_EQ(mf_->AllocatedBytes(), 2 * kPage);
  std::string back = ReadAll(*f, 3 * kPage);
  EXPECT_EQ(back, std::string(kPage + 100, 'a') +
                      std::string(2 * kPage - 100, '\0'));

  // Same size: times other than ctime stay.
  ResetTimes(*f);
  ASSERT_EQ(f->SetAttr(req), 0);
  EXPECT_EQ(Stat(*f).mtime.tv_sec, 0);

  req.size = 0;
  ASSERT_EQ(f->SetAttr(req), 0);
  EXPECT_EQ(mf_->AllocatedBytes(), 0u);
  EXPECT_EQ(Stat(*f).blocks, 0u);

  req.size = kTmpfsMaxFileSize + 1;
  EXPECT_EQ(f->SetAttr(req), -EFBIG);
  req.size = kTmpfsMaxFileSize;  // a hole that big is fine
  EXPECT_EQ(f->SetAttr(req), 0);
  EXPECT_EQ(f->Write("x", 1, kTmpfsMaxFileSize), -EFBIG);
  EXPECT_EQ(f->Write("xy", 2, kTmpfsMaxFileSize - 1), 1);  // clipped
}

TEST_F(TmpFsTest, WritePastEofAfterTruncateReadsZerosInGap) {
  auto f = Make(*root_, "f");
  ASSERT_EQ(WriteStr(*f, std::string(100, 'a'), 0), 100);
  SetAttrRequest req;
  req.set_size = true;
  req.size = 10;
  ASSERT_EQ(f->SetAttr(req), 0);
  ASSERT_EQ(WriteStr(*f, "b", 50), 1);
  EXPECT_EQ(ReadAll(*f, 100),
            std::string(10, 'a') + std::string(40, '\0') + "b");
}

TEST_F(TmpFsTest, UnlinkedOpenFileKeepsItsData) {
  auto f = Make(*root_, "f");
  ASSERT_EQ(WriteStr(*f, std::string(3 * kPage, 'z'), 0),
            3 * static_cast<int64_t>(kPage));
  ASSERT_EQ(root_->Unlink("f", false), 0);
  std::shared_ptr<Inode> out;
  EXPECT_EQ(root_->Lookup("f", &out), -ENOENT);
  EXPECT_EQ(Stat(*f).nlink, 0u);
  EXPECT_EQ(ReadAll(*f, 3 * kPage), std::string(3 * kPage, 'z'));
  ASSERT_EQ(WriteStr(*f, "more", 3 * kPage), 4);
  EXPECT_EQ(mf_->AllocatedBytes(), 4 * kPage);
  // No new name for a file whose last one is gone.
  EXPECT_EQ(root_->Link("again", f), -ENOENT);

  f.reset();  // last reference: pages go back to the memory file
  EXPECT_EQ(mf_->AllocatedBytes(), 0u);
}

TEST_F(TmpFsTest, HardLinks) {
  auto d = Make(*root_, "d", S_IFDIR);
  auto f = Make(*root_, "f");
  ASSERT_EQ(WriteStr(*f, "shared", 0), 6);
  ResetTimes(*d);
  ASSERT_EQ(d->Link("g", f), 0);
  EXPECT_EQ(Stat(*f).nlink, 2u);
  EXPECT_GT(Stat(*d).mtime.tv_sec, 0);
  std::shared_ptr<Inode> g;
  ASSERT_EQ(d->Lookup("g", &g), 0);
  EXPECT_EQ(g, f);
  EXPECT_EQ(Stat(*g).ino, Stat(*f).ino);

  EXPECT_EQ(d->Link("g", f), -EEXIST);
  EXPECT_EQ(root_->Link("dd", d), -EPERM);
  auto other = NewFs();
  EXPECT_EQ(other->Root()->Link("f", f), -EXDEV);

  ASSERT_EQ(root_->Unlink("f", false), 0);
  EXPECT_EQ(Stat(*f).nlink, 1u);
  EXPECT_EQ(ReadAll(*g, 6), "shared");
  ASSERT_EQ(d->Unlink("g", false), 0);
  EXPECT_EQ(Stat(*f).nlink, 0u);
}

TEST_F(TmpFsTest, UnlinkAndRmdirErrors) {
  auto d = Make(*root_, "d", S_IFDIR);
  auto f = Make(*root_, "f");
  Make(*d, "inner");
  EXPECT_EQ(root_->Unlink("nope", false), -ENOENT);
  EXPECT_EQ(root_->Unlink("d", false), -EISDIR);
  EXPECT_EQ(root_->Unlink("f", true), -ENOTDIR);
  EXPECT_EQ(root_->Unlink("d", true), -ENOTEMPTY);
  EXPECT_EQ(f->Unlink("x", false), -ENOTDIR);

  EXPECT_EQ(Stat(*root_).nlink, 3u);
  ASSERT_EQ(d->Unlink("inner", false), 0);
  ASSERT_EQ(root_->Unlink("d", true), 0);
  EXPECT_EQ(Stat(*root_).nlink, 2u);
  EXPECT_EQ(Stat(*d).nlink, 0u);
  // A removed directory (still open somewhere) accepts no new entries.
  CreateRequest req;
  std::shared_ptr<Inode> out;
  EXPECT_EQ(d->Create("x", req, &out), -ENOENT);
  EXPECT_EQ(d->Link("x", f), -ENOENT);
  EXPECT_TRUE(Names(*d).empty());
}

TEST_F(TmpFsTest, RenameWithinAndAcrossDirectories) {
  auto a = Make(*root_, "a", S_IFDIR);
  auto b = Make(*root_, "b", S_IFDIR);
  auto f = Make(*a, "f");
  ASSERT_EQ(a->Rename("f", *a, "g", 0), 0);
  EXPECT_THAT(Names(*a), ElementsAre("g"));

  ResetTimes(*a);
  ResetTimes(*b);
  ASSERT_EQ(a->Rename("g", *b, "h", 0), 0);
  EXPECT_TRUE(Names(*a).empty());
  EXPECT_THAT(Names(*b), ElementsAre("h"));
  EXPECT_GT(Stat(*a).mtime.tv_sec, 0);
  EXPECT_GT(Stat(*b).mtime.tv_sec, 0);
  EXPECT_EQ(Stat(*f).nlink, 1u);

  // A directory moving takes its ".." along.
  auto sub = Make(*a, "sub", S_IFDIR);
  EXPECT_EQ(Stat(*a).nlink, 3u);
  ASSERT_EQ(a->Rename("sub", *b, "sub", 0), 0);
  EXPECT_EQ(Stat(*a).nlink, 2u);
  EXPECT_EQ(Stat(*b).nlink, 3u);

  EXPECT_EQ(a->Rename("missing", *b, "x", 0), -ENOENT);
  // Same inode under both names: nothing happens.
  ASSERT_EQ(b->Link("h2", f), 0);
  ASSERT_EQ(b->Rename("h", *b, "h2", 0), 0);
  EXPECT_THAT(Names(*b), ElementsAre("h", "h2", "sub"));
  ASSERT_EQ(b->Rename("h", *b, "h", 0), 0);

  auto other = NewFs();
  EXPECT_EQ(b->Rename("h", *other->Root(), "h", 0), -EXDEV);
  EXPECT_EQ(b->Rename("h", *f, "h", 0), -EXDEV);  // not a directory
}

TEST_F(TmpFsTest, RenameReplaces) {
  auto x = Make(*root_, "x");
  auto y = Make(*root_, "y");
  ASSERT_EQ(WriteStr(*y, "old", 0), 3);
  ASSERT_EQ(root_->Rename("x", *root_, "y", 0), 0);
  std::shared_ptr<Inode> out;
  ASSERT_EQ(root_->Lookup("y", &out), 0);
  EXPECT_EQ(out, x);
  EXPECT_EQ(root_->Lookup("x", &out), -ENOENT);
  EXPECT_EQ(Stat(*y).nlink, 0u);
  EXPECT_EQ(mf_->AllocatedBytes(), kPage);
  y.reset();
  out.reset();
  EXPECT_EQ(mf_->AllocatedBytes(), 0u);  // the replaced file is gone

  auto d1 = Make(*root_, "d1", S_IFDIR);
  auto d2 = Make(*root_, "d2", S_IFDIR);
  auto full = Make(*root_, "full", S_IFDIR);
  Make(*full, "child");
  EXPECT_EQ(Stat(*root_).nlink, 5u);
  EXPECT_EQ(root_->Rename("d1", *root_, "full", 0), -ENOTEMPTY);
  EXPECT_EQ(root_->Rename("d1", *root_, "y", 0), -ENOTDIR);
  EXPECT_EQ(root_->Rename("y", *root_, "d1", 0), -EISDIR);
  ASSERT_EQ(root_->Rename("d1", *root_, "d2", 0), 0);  // over an empty dir
  EXPECT_EQ(Stat(*root_).nlink, 4u);
  EXPECT_EQ(Stat(*d2).nlink, 0u);
  ASSERT_EQ(root_->Lookup("d2", &out), 0);
  EXPECT_EQ(out, d1);
  EXPECT_THAT(Names(*root_), ElementsAre("d2", "full", "y"));
}

TEST_F(TmpFsTest, RenameFlags) {
  auto a = Make(*root_, "a");
  auto b = Make(*root_, "b");
  auto dir = Make(*root_, "dir", S_IFDIR);
  auto sub = Make(*dir, "sub", S_IFDIR);
  std::shared_ptr<Inode> out;

  EXPECT_EQ(root_->Rename("a", *root_, "b", RENAME_NOREPLACE), -EEXIST);
  EXPECT_EQ(root_->Rename("a", *root_, "b", RENAME_NOREPLACE | RENAME_EXCHANGE),
            -EINVAL);
  EXPECT_EQ(root_->Rename("a", *root_, "b", 1u << 7), -EINVAL);
  EXPECT_EQ(root_->Rename("a", *root_, "nope", RENAME_EXCHANGE), -ENOENT);
  ASSERT_EQ(root_->Rename("a", *root_, "c", RENAME_NOREPLACE), 0);

  ASSERT_EQ(root_->Rename("b", *root_, "c", RENAME_EXCHANGE), 0);
  ASSERT_EQ(root_->Lookup("b", &out), 0);
  EXPECT_EQ(out, a);
  ASSERT_EQ(root_->Lookup("c", &out), 0);
  EXPECT_EQ(out, b);

  // Exchanging a file in / with a directory in /dir moves one "..".
  EXPECT_EQ(Stat(*root_).nlink, 3u);
  EXPECT_EQ(Stat(*dir).nlink, 3u);
  ASSERT_EQ(root_->Rename("b", *dir, "sub", RENAME_EXCHANGE), 0);
  EXPECT_EQ(Stat(*root_).nlink, 4u);
  EXPECT_EQ(Stat(*dir).nlink, 2u);
  ASSERT_EQ(root_->Lookup("b", &out), 0);
  EXPECT_EQ(out, sub);
  ASSERT_EQ(dir->Lookup("sub", &out), 0);
  EXPECT_EQ(out, a);
  EXPECT_THAT(Names(*root_), ElementsAre("b", "c", "dir"));
}

TEST_F(TmpFsTest, RenameRefusesToBreakTheTree) {
  auto a = Make(*root_, "a", S_IFDIR);
  auto b = Make(*a, "b", S_IFDIR);
  auto c = Make(*b, "c", S_IFDIR);
  // a into its own descendant.
  EXPECT_EQ(root_->Rename("a", *c, "a", 0), -EINVAL);
  EXPECT_EQ(root_->Rename("a", *a, "x", 0), -EINVAL);
  // Over a directory that contains the source.
  auto d = Make(*c, "d", S_IFDIR);
  EXPECT_EQ(c->Rename("d", *root_, "a", 0), -ENOTEMPTY);
  EXPECT_EQ(c->Rename("d", *root_, "a", RENAME_EXCHANGE), -EINVAL);
  // Upwards and downwards moves work and keep the ancestry right.
  ASSERT_EQ(c->Rename("d", *root_, "d", 0), 0);
  ASSERT_EQ(root_->Rename("d", *b, "d", 0), 0);
  ASSERT_EQ(a->Rename("b", *root_, "b", 0), 0);
  EXPECT_EQ(root_->Rename("a", *c, "a", 0), 0);  // no longer an ancestor
  EXPECT_EQ(c->Rename("a", *a, "x", 0), -EINVAL);
  EXPECT_EQ(root_->Rename("b", *a, "b", 0), -EINVAL);  // a is inside b now
  EXPECT_EQ(Stat(*c).nlink, 3u);
}

TEST_F(TmpFsTest, SetAttrChangesMetadata) {
  auto f = Make(*root_, "f");
  SetAttrRequest req;
  req.set_mode = true;
  req.mode = 04751 | S_IFREG;  // type bits ignored
  req.set_uid = true;
  req.uid = 5;
  req.set_gid = true;
  req.gid = 6;
  req.set_atime = true;
  req.atime = {100, 1};
  req.set_mtime = true;
  req.mtime = {200, 2};
  ASSERT_EQ(f->SetAttr(req), 0);
  Attr a = Stat(*f);
  EXPECT_EQ(a.mode, S_IFREG | 04751u);
  EXPECT_EQ(a.uid, 5u);
  EXPECT_EQ(a.gid, 6u);
  EXPECT_EQ(a.atime.tv_sec, 100);
  EXPECT_EQ(a.atime.tv_nsec, 1);
  EXPECT_EQ(a.mtime.tv_sec, 200);
  EXPECT_GT(a.ctime.tv_sec, 200);  // now

  ASSERT_EQ(root_->SetAttr(req), 0);
  EXPECT_EQ(Stat(*root_).mode, S_IFDIR | 04751u);
}

TEST_F(TmpFsTest, DataTimestamps) {
  auto f = Make(*root_, "f");
  ResetTimes(*f);
  ASSERT_EQ(WriteStr(*f, "abc", 0), 3);
  Attr a = Stat(*f);
  EXPECT_EQ(a.atime.tv_sec, 0);
  EXPECT_GT(a.mtime.tv_sec, 0);

  ResetTimes(*f);
  EXPECT_EQ(ReadAll(*f, 3), "abc");
  a = Stat(*f);
  EXPECT_GT(a.atime.tv_sec, 0);
  EXPECT_EQ(a.mtime.tv_sec, 0);
}

TEST_F(TmpFsTest, SizeLimitGivesShortWritesThenEnospc) {
  auto fs = NewFs(3 * kPage);
  auto root = fs->Root();
  auto f = Make(*root, "f");
  const std::string big(5 * kPage, 'q');
  EXPECT_EQ(WriteStr(*f, big, 100), static_cast<int64_t>(3 * kPage - 100));
  EXPECT_EQ(WriteStr(*f, "x", 3 * kPage), -ENOSPC);
  EXPECT_EQ(Stat(*f).size, 3 * kPage);
  // Rewriting allocated pages needs no space.
  EXPECT_EQ(WriteStr(*f, "rewrite", 0), 7);
  struct statfs sf;
  ASSERT_EQ(root->StatFs(&sf), 0);
  EXPECT_EQ(sf.f_bfree, 0u);

  auto g = Make(*root, "g");
  EXPECT_EQ(WriteStr(*g, "y", 0), -ENOSPC);
  EXPECT_EQ(g->Allocate(0, 0, 1), -ENOSPC);
  ASSERT_EQ(root->Unlink("f", false), 0);
  f.reset();
  EXPECT_EQ(WriteStr(*g, "y", 0), 1);
  // fallocate is all or nothing: 3 pages do not fit next to g's one.
  EXPECT_EQ(g->Allocate(0, kPage, 3 * kPage), -ENOSPC);
  EXPECT_EQ(Stat(*g).blocks, 8u);
  EXPECT_EQ(mf_->AllocatedBytes(), kPage);
  EXPECT_EQ(g->Allocate(0, 0, 100 * kPage), -ENOSPC);  // beyond the limit
}

TEST_F(TmpFsTest, InodeLimit) {
  auto fs = NewFs(0, 3);
  auto root = fs->Root();
  auto a = Make(*root, "a");
  Make(*root, "b");
  CreateRequest req;
  std::shared_ptr<Inode> out;
  EXPECT_EQ(root->Create("c", req, &out), -ENOSPC);
  ASSERT_EQ(root->Unlink("a", false), 0);
  EXPECT_EQ(root->Create("c", req, &out), -ENOSPC);  // a is still open
  a.reset();
  EXPECT_EQ(root->Create("c", req, &out), 0);
}

TEST_F(TmpFsTest, Fallocate) {
  auto f = Make(*root_, "f");
  ASSERT_EQ(f->Allocate(0, 100, 2 * kPage), 0);
  Attr a = Stat(*f);
  EXPECT_EQ(a.size, 100 + 2 * kPage);
  EXPECT_EQ(a.blocks, 3u * 8);
  EXPECT_EQ(ReadAll(*f, a.size), std::string(a.size, '\0'));

  ASSERT_EQ(f->Allocate(FALLOC_FL_KEEP_SIZE, 0, 10 * kPage), 0);
  EXPECT_EQ(Stat(*f).size, a.size);
  EXPECT_EQ(Stat(*f).blocks, 10u * 8);
  EXPECT_EQ(mf_->AllocatedBytes(), 10 * kPage);

  // Punch [kPage/2, 3.5 pages): zeroes half-pages, frees pages 1 and 2.
  ASSERT_EQ(WriteStr(*f, std::string(4 * kPage, 'p'), 0),
            static_cast<int64_t>(4 * kPage));
  ASSERT_EQ(f->Allocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kPage / 2,
                        3 * kPage),
            0);
  EXPECT_EQ(Stat(*f).size, 4 * kPage);
  EXPECT_EQ(Stat(*f).blocks, 8u * 8);
  EXPECT_EQ(mf_->AllocatedBytes(), 8 * kPage);
  EXPECT_EQ(ReadAll(*f, 4 * kPage),
            std::string(kPage / 2, 'p') + std::string(3 * kPage, '\0') +
                std::string(kPage / 2, 'p'));
  // Within one page, and in a hole: nothing allocated.
  ASSERT_EQ(f->Allocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1, 2), 0);
  EXPECT_EQ(ReadAll(*f, 4, 0), std::string("p\0\0p", 4));
  ASSERT_EQ(
      f->Allocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, kPage + 1, 2),
      0);
  EXPECT_EQ(Stat(*f).blocks, 8u * 8);

  // Truncating frees fallocated pages beyond EOF too, as Linux does.
  SetAttrRequest req;
  req.set_size = true;
  req.size = 4 * kPage;
  ASSERT_EQ(f->SetAttr(req), 0);
  EXPECT_EQ(Stat(*f).blocks, 2u * 8);

  EXPECT_EQ(f->Allocate(FALLOC_FL_PUNCH_HOLE, 0, 1), -EOPNOTSUPP);
  EXPECT_EQ(f->Allocate(FALLOC_FL_ZERO_RANGE, 0, 1), -EOPNOTSUPP);
  EXPECT_EQ(f->Allocate(0, 0, 0), -EINVAL);
  EXPECT_EQ(f->Allocate(0, kTmpfsMaxFileSize, 1), -EFBIG);
  EXPECT_EQ(f->Allocate(0, 0, 1ull << 40), -ENOMEM);  // > the memory file
  EXPECT_EQ(root_->Allocate(0, 0, 1), -EOPNOTSUPP);
}

TEST_F(TmpFsTest, GetPageExposesMemoryFilePages) {
  auto inode = Make(*root_, "f");
  auto* f = dynamic_cast<TmpFsRegularFile*>(inode.get());
  ASSERT_NE(f, nullptr);
  uint64_t off = 0;
  EXPECT_EQ(f->GetPage(2, false, &off), -ENOENT);
  ASSERT_EQ(f->GetPage(2, true, &off), 0);
  EXPECT_TRUE(mm::IsPageAligned(off));
  EXPECT_EQ(mf_->AllocatedBytes(), kPage);
  uint64_t again = 1;
  ASSERT_EQ(f->GetPage(2, false, &again), 0);
  EXPECT_EQ(again, off);

  // What a shared mapping writes is what read(2) sees.
  SetAttrRequest req;
  req.set_size = true;
  req.size = 3 * kPage;
  ASSERT_EQ(f->SetAttr(req), 0);
  std::memcpy(mf_->Internal(off + 10), "mapped", 6);
  EXPECT_EQ(ReadAll(*f, 6, 2 * kPage + 10), "mapped");
  ASSERT_EQ(WriteStr(*f, "written", 2 * kPage + 100), 7);
  EXPECT_EQ(std::memcmp(mf_->Internal(off + 100), "written", 7), 0);
  EXPECT_EQ(f->GetPage(kTmpfsMaxFileSize / kPage + 1, true, &off), -EFBIG);

  auto limited = NewFs(kPage);
  auto g = Make(*limited->Root(), "g");
  auto* gf = static_cast<TmpFsRegularFile*>(g.get());
  ASSERT_EQ(gf->GetPage(0, true, &off), 0);
  EXPECT_EQ(gf->GetPage(1, true, &off), -ENOSPC);
}

// A page a mapping holds (GetPage with `ref`) outlives the file's
// truncate: it is not handed out again, so the mapping can never see
// another file's data, and it is freed when the mapping lets it go.
TEST_F(TmpFsTest, TruncateLeavesMappedPagesToTheirMappings) {
  auto inode = Make(*root_, "f");
  auto* f = dynamic_cast<TmpFsRegularFile*>(inode.get());
  ASSERT_NE(f, nullptr);
  uint64_t mapped = 0;
  ASSERT_EQ(f->GetPage(0, true, &mapped, /*ref=*/true), 0);
  std::memcpy(mf_->Internal(mapped), "mine", 4);
  SetAttrRequest cut;
  cut.set_size = true;
  cut.size = 0;
  ASSERT_EQ(f->SetAttr(cut), 0);
  EXPECT_EQ(mf_->AllocatedBytes(), kPage);  // still held by the mapping

  auto other = Make(*root_, "g");
  auto* g = dynamic_cast<TmpFsRegularFile*>(other.get());
  uint64_t fresh = 0;
  ASSERT_EQ(g->GetPage(0, true, &fresh), 0);
  EXPECT_NE(fresh, mapped);
  std::memcpy(mf_->Internal(fresh), "THEIRS", 6);
  EXPECT_EQ(std::memcmp(mf_->Internal(mapped), "mine", 4), 0);

  mf_->DecRef(mapped, kPage);  // the mapping goes
  EXPECT_EQ(mf_->AllocatedBytes(), kPage);  // g's page alone
}

TEST_F(TmpFsTest, ConcurrentWritersToDifferentFiles) {
  constexpr int kThreads = 4;
  constexpr uint64_t kFileSize = 256 * kPage;
  std::vector<std::shared_ptr<Inode>> files;
  for (int t = 0; t < kThreads; ++t) {
    files.push_back(Make(*root_, "f" + std::to_string(t)));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Odd-sized chunks so that writes straddle pages.
      std::string chunk(3001, static_cast<char>('A' + t));
      for (uint64_t off = 0; off < kFileSize; off += chunk.size()) {
        uint64_t n = std::min<uint64_t>(chunk.size(), kFileSize - off);
        ASSERT_EQ(files[t]->Write(chunk.data(), n, off),
                  static_cast<int64_t>(n));
        Attr a;
        ASSERT_EQ(files[t]->GetAttr(&a), 0);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(ReadAll(*files[t], kFileSize + 1),
              std::string(kFileSize, static_cast<char>('A' + t)));
  }
  EXPECT_EQ(mf_->AllocatedBytes(), kThreads * kFileSize);
}

// Cross-directory renames between an ancestor and its descendant race with
// rmdir (which locks parent, then child) and create/unlink under both; a
// lock-order mistake deadlocks (the test times out) and a bookkeeping mistake
// shows in the final link counts.
TEST_F(TmpFsTest, ConcurrentRenamesAndRemovalsKeepTheTreeConsistent) {
  auto top = Make(*root_, "top", S_IFDIR);
  auto low = Make(*top, "low", S_IFDIR);
  Make(*low, "keep");  // so that rmdir of low always fails, after locking it
  constexpr int kThreads = 4;
  constexpr int kIters = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string name = "m" + std::to_string(t);
      const std::string next = "m" + std::to_string((t + 1) % kThreads);
      const std::string scratch = "x" + std::to_string(t);
      CreateRequest dir_req;
      dir_req.type = S_IFDIR;
      std::shared_ptr<Inode> out;
      ASSERT_EQ(top->Create(name, dir_req, &out), 0);
      for (int i = 0; i < kIters; ++i) {
        // Down, up, and an exchange with a sibling that may be in either
        // directory; failures are fine, hangs and corruption are not.
        low->Rename(name, *top, name, 0);
        top->Rename(name, *low, name, 0);
        low->Rename(name, *top, next, RENAME_EXCHANGE);
        top->Rename(next, *low, name, RENAME_NOREPLACE);
        std::shared_ptr<Inode> tmp;
        if (low->Create(scratch, dir_req, &tmp) == 0) {
          EXPECT_EQ(low->Unlink(scratch, true), 0);
        }
        EXPECT_EQ(top->Unlink("low", true), -ENOTEMPTY);
      }
    });
  }
  for (auto& th : threads) th.join();
  auto count_dirs = [](Inode& d) {
    std::vector<DirEntry> ents;
    EXPECT_EQ(d.ReadDir(&ents), 0);
    return static_cast<uint32_t>(
        std::count_if(ents.begin(), ents.end(),
                      [](const DirEntry& e) { return e.type == DT_DIR; }));
  };
  // Every m* directory is in exactly one of the two; link counts agree.
  EXPECT_EQ(count_dirs(*top) + count_dirs(*low), kThreads + 1u);
  EXPECT_EQ(Stat(*top).nlink, 2u + count_dirs(*top));
  EXPECT_EQ(Stat(*low).nlink, 2u + count_dirs(*low));
}

TEST_F(TmpFsTest, SealsRefuseWritesAndResizes) {
  auto sb = fs_->superblock();
  ASSERT_TRUE(sb->ReserveInode());
  auto f = std::make_shared<TmpFsRegularFile>(sb, 0777, 0, 0);
  // Every tmpfs file starts sealed against sealing; a memfd does not.
  EXPECT_EQ(f->Seals(), kSealSeal);
  EXPECT_EQ(f->AddSeals(kSealWrite), -EPERM);
  f->set_initial_seals(0);
  EXPECT_EQ(f->Write("hello", 5, 0), 5);
  EXPECT_EQ(f->AddSeals(0x100), -EINVAL);
  EXPECT_EQ(f->AddSeals(kSealShrink | kSealGrow), 0);
  SetAttrRequest req;
  req.set_size = true;
  req.size = 2;
  EXPECT_EQ(f->SetAttr(req), -EPERM);
  req.size = 10;
  EXPECT_EQ(f->SetAttr(req), -EPERM);
  req.size = 5;
  EXPECT_EQ(f->SetAttr(req), 0);
  EXPECT_EQ(f->Write("x", 1, 5), -EPERM);  // would grow
  EXPECT_EQ(f->Write("J", 1, 0), 1);
  EXPECT_EQ(f->Allocate(FALLOC_FL_KEEP_SIZE, 0, 100), -EPERM);

  // F_SEAL_WRITE waits for writable shared mappings to go.
  bool maywrite = true;
  EXPECT_EQ(f->BeginSharedMapping(true, &maywrite), 0);
  EXPECT_TRUE(maywrite);
  EXPECT_EQ(f->AddSeals(kSealWrite), -EBUSY);
  f->EndSharedMapping();
  EXPECT_EQ(f->AddSeals(kSealWrite), 0);
  EXPECT_EQ(f->Write("y", 1, 0), -EPERM);
  EXPECT_EQ(f->Allocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 1),
            -EPERM);
  EXPECT_EQ(f->BeginSharedMapping(true, &maywrite), -EPERM);
  maywrite = true;
  EXPECT_EQ(f->BeginSharedMapping(false, &maywrite), 0);
  EXPECT_FALSE(maywrite);  // no later mprotect(PROT_WRITE)
  char buf[5];
  EXPECT_EQ(f->Read(buf, 5, 0), 5);
  EXPECT_EQ(std::string(buf, 5), "Jello");
  EXPECT_EQ(f->AddSeals(kSealSeal), 0);
  EXPECT_EQ(f->AddSeals(kSealFutureWrite), -EPERM);
  EXPECT_EQ(f->Seals(), kSealSeal | kSealShrink | kSealGrow | kSealWrite);
}

TEST_F(TmpFsTest, SealExecOnExecutableFileImpliesWriteSeals) {
  auto sb = fs_->superblock();
  ASSERT_TRUE(sb->ReserveInode());
  auto f = std::make_shared<TmpFsRegularFile>(sb, 0755, 0, 0);
  f->set_initial_seals(0);
  EXPECT_EQ(f->AddSeals(kSealExec), 0);
  EXPECT_EQ(f->Seals(), kSealExec | kSealShrink | kSealGrow | kSealWrite |
                            kSealFutureWrite);
}

// Restored tmpfs pages that are still loading (mm/async_loader.h): reads and
// writes wait for the page, and a failed load is -EIO, never zeros.
class RestoredSource : public mm::PageSource {
 public:
  absl::Status ReadPages(uint64_t, uint64_t len, uint8_t* dst) override {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(&released_));
    if (fail_) return absl::DataLossError("injected");
    memset(dst, 'b', len);
    return absl::OkStatus();
  }
  std::string Name() const override { return "pages.img"; }
  void Release() {
    absl::MutexLock l(&mu_);
    released_ = true;
  }
  bool fail_ = false;

 private:
  absl::Mutex mu_;
  bool released_ ABSL_GUARDED_BY(mu_) = false;
};

TEST_F(TmpFsTest, RestoredPagesAreReadOnlyOnceLoaded) {
  auto f = Make(*root_, "restored");
  const std::string a(4 * mm::kPageSize, 'a');
  ASSERT_EQ(f->Write(a.data(), a.size(), 0), static_cast<int64_t>(a.size()));
  ASSERT_EQ(mf_->AllocatedBytes(), 4 * mm::kPageSize);  // at offset 0
  auto src = std::make_shared<RestoredSource>();
  mf_->SetAsyncLoader(
      std::make_unique<mm::AsyncLoader>(mf_.get(), src, mm::AsyncLoadOptions{}));
  ASSERT_TRUE(mf_->async_loader()->Add(0, 4 * mm::kPageSize, 0).ok());
  mf_->async_loader()->Start();
  std::atomic<bool> done{false};
  std::string got;
  std::thread reader([&] {
    got = ReadAll(*f, 10, mm::kPageSize + 5);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load());
  src->Release();
  reader.join();
  EXPECT_EQ(got, std::string(10, 'b'));
  // A write into a loaded page keeps the rest of it.
  ASSERT_EQ(f->Write("x", 1, 2 * mm::kPageSize), 1);
  EXPECT_EQ(ReadAll(*f, 3, 2 * mm::kPageSize), "xbb");
}

TEST_F(TmpFsTest, RestoredPagesThatFailToLoadAreEio) {
  auto f = Make(*root_, "restored");
  const std::string a(2 * mm::kPageSize, 'a');
  ASSERT_EQ(f->Write(a.data(), a.size(), 0), static_cast<int64_t>(a.size()));
  auto src = std::make_shared<RestoredSource>();
  src->fail_ = true;
  src->Release();
  mf_->SetAsyncLoader(
      std::make_unique<mm::AsyncLoader>(mf_.get(), src, mm::AsyncLoadOptions{}));
  ASSERT_TRUE(mf_->async_loader()->Add(0, 2 * mm::kPageSize, 0).ok());
  mf_->async_loader()->Start();
  char c;
  EXPECT_EQ(f->Read(&c, 1, 10), -EIO);
  EXPECT_EQ(f->Write("x", 1, 10), -EIO);
  EXPECT_EQ(f->Read(&c, 1, mm::kPageSize + 10), -EIO);
}

}  // namespace
}  // namespace sandboxd::fs
