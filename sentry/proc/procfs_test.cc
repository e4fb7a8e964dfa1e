#include "sentry/proc/procfs.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sentry/fs/file.h"
#include "sentry/fs/pipe.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/fs/vfs.h"
#include "sentry/kernel/kernel.h"
#include "sentry/kernel/testing/fakes.h"
#include "sentry/mm/memory_file.h"
#include "sentry/mm/mm.h"

namespace sandboxd::fs::proc {
namespace {

using kernel::testing::FakeAddressSpace;
using kernel::testing::FakePlatform;
using kernel::testing::kMaxUserAddr;
using kernel::testing::kMinUserAddr;
using kernel::testing::NoSyscalls;

// A kernel whose tasks are created but never run: procfs reads their
// state as another task would.
class ProcFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = mm::MemoryFile::Create(1ull << 30);
    ASSERT_TRUE(mf.ok()) << mf.status();
    kernel_ = std::make_unique<kernel::Kernel>(
        std::move(mf).value(), std::make_unique<FakePlatform>(), &syscalls_,
        kernel::KernelOptions{});
    TmpFsOptions topts;
    tmpfs_ = std::make_unique<TmpFs>(&kernel_->memory_file(), topts);
    auto vfs = std::make_shared<Vfs>(tmpfs_->Root(), "tmpfs", "root", false);
    kernel_->set_vfs(vfs);
    auto ctx = std::make_shared<FsContext>(vfs->Root(), vfs->Root());
    mm_ = std::make_shared<mm::MM>(&kernel_->memory_file(),
                                   std::make_unique<FakeAddressSpace>(),
                                   kMinUserAddr, kMaxUserAddr);
    map_ = mm_->Mmap(0, 0x10000, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS);
    ASSERT_GT(map_, 0);
    fds_ = std::make_shared<FdTable>(64);
    auto init = kernel_->CreateInit(mm_, fds_, ctx, platform::CpuState{});
    ASSERT_TRUE(init.ok()) << init.status();
    init_ = *init;
    init_->group().image.comm = "init";
    ProcFsOptions opts;
    opts.dev = 0x99;
    opts.host.mem_total = 1ull << 30;
    procfs_ = std::make_unique<ProcFs>(kernel_.get(), opts);
  }

  // Looks up a path below /proc, component by component.
  int Walk(const std::string& path, std::shared_ptr<Inode>* out) {
    std::shared_ptr<Inode> cur = procfs_->Root();
    size_t i = 0;
    while (i < path.size()) {
      size_t j = path.find('/', i);
      if (j == std::string::npos) j = path.size();
      int r = cur->Lookup(path.substr(i, j - i), &cur);
      if (r < 0) return r;
      i = j + 1;
    }
    *out = cur;
    return 0;
  }

  // The text of a procfs file, or "errno N".
  std::string Read(const std::string& path) {
    std::shared_ptr<Inode> inode;
    int r = Walk(path, &inode);
    if (r < 0) return "errno " + std::to_string(-r);
    std::shared_ptr<File> f;
    r = inode->Open(O_RDONLY, &f);
    if (r < 0) return "errno " + std::to_string(-r);
    std::string text;
    char buf[5];  // small reads: the snapshot must stay consistent
    for (;;) {
      int64_t n = f->Read(buf, sizeof(buf), -1, IoContext{});
      if (n <= 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    return text;
  }

  std::vector<std::string> List(const std::string& path) {
    std::shared_ptr<Inode> inode;
    std::vector<std::string> names;
    if (Walk(path, &inode) < 0) return names;
    std::vector<DirEntry> entries;
    if (inode->ReadDir(&entries) < 0) return names;
    for (const DirEntry& e : entries) names.push_back(e.name);
    return names;
  }

  kernel::Task* Fork() {
    auto c = kernel_->CreateProcess(*init_, mm_, fds_, init_->group().fs_ptr(),
                                    SIGCHLD, platform::CpuState{});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : nullptr;
  }

  NoSyscalls syscalls_;
  std::unique_ptr<kernel::Kernel> kernel_;
  std::unique_ptr<TmpFs> tmpfs_;
  std::shared_ptr<mm::MM> mm_;
  std::shared_ptr<FdTable> fds_;
  int64_t map_ = 0;
  kernel::Task* init_ = nullptr;
  std::unique_ptr<ProcFs> procfs_;
};

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST_F(ProcFsTest, RootListsLiveProcessesAndFixedFiles) {
  std::vector<std::string> names = List("");
  EXPECT_TRUE(Contains(names, "1"));
  EXPECT_FALSE(Contains(names, "2"));
  for (const char* f : {"self", "thread-self", "meminfo", "cpuinfo", "stat",
                        "uptime", "loadavg", "version", "mounts", "sys"}) {
    EXPECT_TRUE(Contains(names, f)) << f;
  }
  kernel::Task* child = Fork();
  ASSERT_NE(child, nullptr);
  EXPECT_TRUE(Contains(List(""), std::to_string(child->tid())));
  std::shared_ptr<Inode> none;
  EXPECT_EQ(procfs_->Root()->Lookup("77", &none), -ENOENT);
  EXPECT_EQ(procfs_->Root()->Lookup("01", &none), -ENOENT);
}

TEST_F(ProcFsTest, StatAndStatusOfAProcess) {
  kernel::Task* child = Fork();
  ASSERT_NE(child, nullptr);
  const std::string pid = std::to_string(child->tid());
  std::string stat = Read(pid + "/stat");
  EXPECT_EQ(stat.substr(0, stat.find(')') + 5), pid + " (init) R 1") << stat;
  std::string status = Read(pid + "/status");
  EXPECT_NE(status.find("Name:\tinit\n"), std::string::npos) << status;
  EXPECT_NE(status.find("\nPPid:\t1\n"), std::string::npos) << status;
  EXPECT_NE(status.find("\nThreads:\t1\n"), std::string::npos) << status;
  EXPECT_EQ(Read("1/comm"), "init\n");
  // The task directory names the one thread.
  EXPECT_EQ(List(pid + "/task"), std::vector<std::string>{pid});
  EXPECT_EQ(Read(pid + "/task/" + pid + "/stat"), stat);
}

TEST_F(ProcFsTest, ZombieThenReapedAndGone) {
  kernel::Task* child = Fork();
  ASSERT_NE(child, nullptr);
  const pid_t pid = child->tid();
  std::shared_ptr<Inode> dir;
  ASSERT_EQ(procfs_->Root()->Lookup(std::to_string(pid), &dir), 0);
  // What the child's host thread does as it exits (Task::Cleanup).
  child->group().Exit(kernel::ExitStatus{3, 0, false});
  child->group().RemoveTask(child);
  kernel_->TaskExited(child);
  std::string stat = Read(std::to_string(pid) + "/stat");
  EXPECT_EQ(stat.substr(stat.find(')') + 2, 1), "Z") << stat;
  // A zombie has no memory: cmdline is empty, maps too.
  EXPECT_EQ(Read(std::to_string(pid) + "/cmdline"), "");
  EXPECT_EQ(Read(std::to_string(pid) + "/maps"), "");

  kernel::Kernel::WaitResult w;
  ASSERT_EQ(kernel_->WaitChild(*init_, pid, false, WEXITED | WNOHANG, &w), pid);
  EXPECT_FALSE(Contains(List(""), std::to_string(pid)));
  EXPECT_EQ(Read(std::to_string(pid) + "/stat"), "errno 2");
  // A directory looked up before the reap no longer has a process.
  std::shared_ptr<Inode> stat_inode;
  EXPECT_EQ(dir->Lookup("stat", &stat_inode), -ENOENT);
}

TEST_F(ProcFsTest, CmdlineAndEnvironFromMemory) {
  const char args[] = "prog\0-x\0K=V\0";
  ASSERT_EQ(mm_->CopyOut(map_, args, sizeof(args) - 1), sizeof(args) - 1);
  kernel::ThreadGroup& g = init_->group();
  g.image.arg_start = map_;
  g.image.arg_end = map_ + 8;
  g.image.env_start = map_ + 8;
  g.image.env_end = map_ + 12;
  EXPECT_EQ(Read("1/cmdline"), std::string("prog\0-x\0", 8));
  EXPECT_EQ(Read("1/environ"), std::string("K=V\0", 4));
  std::string maps = Read("1/maps");
  EXPECT_NE(maps.find(" rw-p 00000000 00:00 0 \n"), std::string::npos) << maps;
}

TEST_F(ProcFsTest, FdDirectoryAndPipeMagicLink) {
  auto [r, w] = PipeEnd::Create(0);
  ASSERT_EQ(fds_->InstallAt(0, r, false), 0);
  ASSERT_EQ(fds_->InstallAt(5, w, true), 5);
  EXPECT_EQ(List("1/fd"), (std::vector<std::string>{"0", "5"}));
  std::shared_ptr<Inode> link;
  ASSERT_EQ(Walk("1/fd/5", &link), 0);
  std::string target;
  ASSERT_EQ(link->Readlink(&target), 0);
  EXPECT_EQ(target, "pipe:[" + std::to_string(r->pipe().ino()) + "]");
  Attr a;
  ASSERT_EQ(link->GetAttr(&a), 0);
  EXPECT_EQ(a.mode, S_IFLNK | 0300u);  // open for writing only

  // Following the link of the write end and opening it for writing gives
  // a new write end of the same pipe.
  Location to;
  ASSERT_EQ(link->FollowMagicLink(&to), 0);
  EXPECT_EQ(to.inode().Type(), static_cast<uint32_t>(S_IFIFO));
  std::shared_ptr<File> w2;
  ASSERT_EQ(to.inode().Open(O_WRONLY, &w2), 0);
  ASSERT_EQ(w2->Write("hi", 2, -1, IoContext{}), 2);
  char buf[2];
  EXPECT_EQ(r->Read(buf, 2, -1, IoContext{}), 2);
  EXPECT_EQ(std::string(buf, 2), "hi");

  // O_RDWR: one description that reads and writes the pipe.
  std::shared_ptr<File> rw;
  ASSERT_EQ(to.inode().Open(O_RDWR, &rw), 0);
  EXPECT_EQ(rw->StatusFlags() & O_ACCMODE, O_RDWR);
  ASSERT_EQ(rw->Write("yo", 2, -1, IoContext{}), 2);
  EXPECT_EQ(rw->Read(buf, 2, -1, IoContext{}), 2);
  EXPECT_EQ(std::string(buf, 2), "yo");

  std::string info = Read("1/fdinfo/5");
  EXPECT_EQ(info.substr(0, info.find("mnt_id")), "pos:\t0\nflags:\t02000001\n");
  fds_->Close(5);
  EXPECT_EQ(List("1/fd"), std::vector<std::string>{"0"});
  EXPECT_EQ(link->Readlink(&target), -ENOENT);
}

TEST_F(ProcFsTest, SelfNeedsACallingTask) {
  std::shared_ptr<Inode> self;
  ASSERT_EQ(procfs_->Root()->Lookup("self", &self), 0);
  std::string target;
  // The test thread is no task of the sandbox.
  EXPECT_EQ(self->Readlink(&target), -ENOENT);
}

TEST_F(ProcFsTest, SystemFiles) {
  std::string meminfo = Read("meminfo");
  EXPECT_EQ(meminfo.substr(0, meminfo.find('\n')),
            "MemTotal:        1048576 kB");
  EXPECT_EQ(Read("sys/kernel/ostype"), "Linux\n");
  EXPECT_EQ(Read("sys/kernel/pid_max"), "4194304\n");
  EXPECT_EQ(Read("sys/vm/overcommit_memory"), "0\n");
  std::string loadavg = Read("loadavg");
  EXPECT_EQ(loadavg.substr(0, 20), "0.00 0.00 0.00 1/1 1") << loadavg;
  std::shared_ptr<Inode> f;
  ASSERT_EQ(Walk("version", &f), 0);
  std::shared_ptr<File> file;
  EXPECT_EQ(f->Open(O_WRONLY, &file), -EACCES);
}

TEST_F(ProcFsTest, OomScoreAdjIsWritableAndInherited) {
  std::shared_ptr<Inode> f;
  ASSERT_EQ(Walk("1/oom_score_adj", &f), 0);
  std::shared_ptr<File> file;
  ASSERT_EQ(f->Open(O_WRONLY, &file), 0);
  EXPECT_EQ(file->Write("250\n", 4, -1, IoContext{}), 4);
  EXPECT_EQ(file->Write("2000", 4, -1, IoContext{}), -EINVAL);
  EXPECT_EQ(Read("1/oom_score_adj"), "250\n");
  kernel::Task* child = Fork();
  ASSERT_NE(child, nullptr);
  EXPECT_EQ(Read(std::to_string(child->tid()) + "/oom_score_adj"), "250\n");
}

}  // namespace
}  // namespace sandboxd::fs::proc
