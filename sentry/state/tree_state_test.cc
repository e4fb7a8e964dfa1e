// The tree `sentry run` builds (main.cc's MountDev and MountProc): the
// rootfs overlay (a host directory under a tmpfs), /dev (devfs, with devpts
// at /dev/pts), /dev/shm (tmpfs) and /proc (procfs over the kernel), saved
// with the kernel and loaded into a fresh one whose /dev and /proc are
// built anew, as a restoring Sentry builds them. Open files on /dev and
// /proc are opened again at their paths and offsets.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "sentry/fs/devfs.h"
#include "sentry/fs/epoll.h"
#include "sentry/fs/hostfs.h"
#include "sentry/fs/overlay.h"
#include "sentry/proc/procfs.h"
#include "sentry/socket/unix_socket.h"
#include "sentry/fs/rootfs.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/fs/tty/pty.h"
#include "sentry/fs/vfs.h"
#include "sentry/kernel/ctty.h"
#include "sentry/kernel/kernel.h"
#include "sentry/kernel/testing/fakes.h"
#include "sentry/mm/memory_file.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/kernel_state.h"
#include "sentry/state/mm_state.h"
#include "sentry/state/pages.h"

namespace sandboxd::state {
namespace {

// main.cc's device numbers are its own; any distinct ones do here.
constexpr uint64_t kRootfsDev = 101, kUpperDev = 102, kOverlayDev = 103,
                   kDevfsDev = 104, kDevptsDev = 105, kShmDev = 106,
                   kProcDev = 107;

std::unique_ptr<mm::MemoryFile> NewMemoryFile() {
  auto mf = mm::MemoryFile::Create(1ull << 30);
  EXPECT_TRUE(mf.ok()) << mf.status();
  return std::move(mf).value();
}

std::shared_ptr<fs::Inode> HostRoot(const std::string& dir) {
  auto fd = fs::OpenRootfs(dir);
  EXPECT_TRUE(fd.ok()) << fd.status();
  auto root = fs::hostfs::NewRoot(std::move(fd).value(), kRootfsDev);
  EXPECT_TRUE(root.ok()) << root.status();
  return std::move(root).value();
}

// /dev and /proc as main.cc makes them, for kernel `k`.
struct Pseudo {
  explicit Pseudo(kernel::Kernel* k) {
    jc = kernel::NewJobControl(k);
    devpts = fs::tty::DevPts::Create(kDevptsDev, jc.get());
    fs::DevFsOptions dopts;
    dopts.dev = kDevfsDev;
    dopts.pts = devpts->Root();
    auto pts = devpts;
    dopts.open_ptmx = [pts](std::shared_ptr<fs::Inode> ptmx, int flags,
                            std::shared_ptr<fs::File>* out) {
      return pts->OpenMaster(std::move(ptmx), flags, out);
    };
    devfs = std::make_unique<fs::DevFs>(std::move(dopts));
    fs::proc::ProcFsOptions popts;
    popts.dev = kProcDev;
    procfs = std::make_unique<fs::proc::ProcFs>(k, std::move(popts));
  }
  std::unique_ptr<fs::tty::JobControl> jc;
  std::shared_ptr<fs::tty::DevPts> devpts;
  std::unique_ptr<fs::DevFs> devfs;
  std::unique_ptr<fs::proc::ProcFs> procfs;
};

std::unique_ptr<kernel::Kernel> NewKernel(kernel::SyscallTable* sys) {
  return std::make_unique<kernel::Kernel>(
      NewMemoryFile(), std::make_unique<kernel::testing::FakePlatform>(), sys,
      kernel::KernelOptions{});
}

int Resolve(fs::Vfs& vfs, const std::string& path, fs::Location* out) {
  fs::FsContext ctx(vfs.Root(), vfs.Root());
  return vfs.Resolve(ctx, vfs.Root(), path, true, out);
}

std::shared_ptr<fs::File> Open(fs::Vfs& vfs, const std::string& path,
                               int flags) {
  fs::Location loc;
  EXPECT_EQ(Resolve(vfs, path, &loc), 0) << path;
  if (!loc.valid()) return nullptr;
  std::shared_ptr<fs::File> f;
  EXPECT_EQ(loc.dentry->inode()->Open(flags, &f), 0) << path;
  if (auto* in = dynamic_cast<fs::InodeFile*>(f.get())) {
    in->set_location(loc, &vfs);
  }
  return f;
}

std::string ReadAll(fs::File& f) {
  char buf[256];
  int64_t n = f.Read(buf, sizeof(buf), -1, fs::IoContext{});
  return n > 0 ? std::string(buf, n) : "";
}

// An init (pid 1, no program) in `k`, with a new descriptor table and
// its root and cwd at `vfs`'s root.
struct Init {
  std::shared_ptr<fs::FdTable> fds;
  std::shared_ptr<fs::FsContext> fsctx;
};
Init NewInit(kernel::Kernel& k, fs::Vfs& vfs) {
  Init i{std::make_shared<fs::FdTable>(64),
         std::make_shared<fs::FsContext>(vfs.Root(), vfs.Root())};
  auto mm = std::make_shared<mm::MM>(
      &k.memory_file(), std::make_unique<kernel::testing::FakeAddressSpace>(),
      kernel::testing::kMinUserAddr, kernel::testing::kMaxUserAddr);
  auto init = k.CreateInit(mm, i.fds, i.fsctx, platform::CpuState{});
  EXPECT_TRUE(init.ok()) << init.status();
  return i;
}

// Saves `k` and its Vfs as a checkpoint does (the Vfs, then the kernel),
// into `st` and `pages`; `rootfs`: the overlay's lower layer, if any.
absl::Status SaveTree(kernel::Kernel& k, fs::Vfs& vfs, fs::Inode* rootfs,
                      pb::State* st, MemoryPages* pages) {
  Saver s(st, pages);
  if (rootfs != nullptr) s.set_rootfs(rootfs);
  RETURN_IF_ERROR(FsState::SaveVfs(s, vfs));
  MmState mms;
  return KernelState::SaveKernel(s, k, vfs, mms);
}

// Loads what SaveTree saved into `k`, a new kernel, through `l` (which
// the caller has given its roots); returns the loaded Vfs.
absl::StatusOr<std::shared_ptr<fs::Vfs>> LoadTree(Loader& l,
                                                  kernel::Kernel& k) {
  KernelState::LoadClocks(l, k);
  ASSIGN_OR_RETURN(std::unique_ptr<fs::Vfs> loaded, FsState::LoadVfs(l));
  std::shared_ptr<fs::Vfs> vfs = std::move(loaded);
  k.set_vfs(vfs);
  MmState mms;
  RETURN_IF_ERROR(KernelState::LoadKernel(l, k, *vfs, mms));
  return vfs;
}

TEST(TreeStateTest, MainsTreeRoundTrips) {
  const char* tmpdir = getenv("TEST_TMPDIR");
  std::string tmpl = std::string(tmpdir != nullptr ? tmpdir : "/tmp") +
                     "/tree_state_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::string host = tmpl;
  for (const char* d : {"/dev", "/proc", "/etc"}) {
    ASSERT_EQ(mkdir((host + d).c_str(), 0755), 0);
  }
  std::ofstream(host + "/etc/hello") << "from the host\n";
  std::ofstream(host + "/etc/hidden") << "hidden in the overlay\n";

  kernel::testing::NoSyscalls nosys;
  auto a = NewKernel(&nosys);
  fs::TmpFsOptions upper_opts;
  upper_opts.dev = kUpperDev;
  upper_opts.root_mode = 0755;
  fs::TmpFs upper(&a->memory_file(), upper_opts);
  std::shared_ptr<fs::Inode> lower = HostRoot(host);
  fs::OverlayFs overlay(upper.Root(), lower, kOverlayDev);
  auto vfs = std::make_shared<fs::Vfs>(overlay.Root(), "overlay", "rootfs",
                                       /*read_only=*/false);
  a->set_vfs(vfs);
  Pseudo pa(a.get());
  fs::Location dev, shm, proc;
  ASSERT_EQ(Resolve(*vfs, "/dev", &dev), 0);
  ASSERT_EQ(vfs->MountAt(dev, pa.devfs->Root(), "devtmpfs", "devtmpfs", false), 0);
  ASSERT_EQ(Resolve(*vfs, "/dev/shm", &shm), 0);
  fs::TmpFsOptions shm_opts;
  shm_opts.dev = kShmDev;
  shm_opts.root_mode = 01777;
  fs::TmpFs shmfs(&a->memory_file(), shm_opts);
  ASSERT_EQ(vfs->MountAt(shm, shmfs.Root(), "tmpfs", "shm", false), 0);
  ASSERT_EQ(Resolve(*vfs, "/proc", &proc), 0);
  ASSERT_EQ(vfs->MountAt(proc, pa.procfs->Root(), "proc", "proc", false), 0);

  // init, with /dev/null, its own /proc/1/comm (partly read) and a file
  // in /dev/shm open; its cwd in /proc.
  Init init = NewInit(*a, *vfs);
  std::shared_ptr<fs::FdTable> fds = init.fds;
  std::shared_ptr<fs::FsContext> fsctx = init.fsctx;
  std::shared_ptr<kernel::ThreadGroup> g1 = a->FindGroup(1);
  ASSERT_NE(g1, nullptr);
  a->WithTasklistLock([&] { g1->image.comm = "initprog"; });
  ASSERT_EQ(fds->Install(Open(*vfs, "/dev/null", O_RDWR), false), 0);
  auto comm = Open(*vfs, "/proc/1/comm", O_RDONLY);
  char two[2];
  ASSERT_EQ(comm->Read(two, 2, -1, fs::IoContext{}), 2);
  ASSERT_EQ(fds->Install(comm, false), 1);
  fs::Location shm_dir, made;
  ASSERT_EQ(Resolve(*vfs, "/dev/shm", &shm_dir), 0);
  fs::CreateRequest req;
  req.type = S_IFREG;
  req.mode = 0644;
  ASSERT_EQ(vfs->Create(shm_dir, "data", req, &made), 0);
  auto data = Open(*vfs, "/dev/shm/data", O_RDWR);
  ASSERT_NE(data, nullptr);
  ASSERT_EQ(data->Write("shm data", 8, -1, fs::IoContext{}), 8);
  ASSERT_EQ(data->Seek(4, SEEK_SET), 4);
  ASSERT_EQ(fds->Install(data, false), 2);
  // A pty opened through /dev/ptmx: /dev/pts/0 in the loading devpts.
  auto ptmx = Open(*vfs, "/dev/ptmx", O_RDWR);
  ASSERT_NE(ptmx, nullptr);
  ASSERT_EQ(fds->Install(ptmx, false), 3);
  // Its own /proc/1/fdinfo/2: it names a descriptor of the table being
  // loaded (opened again once every table is).
  auto fdinfo = Open(*vfs, "/proc/1/fdinfo/2", O_RDONLY);
  ASSERT_NE(fdinfo, nullptr);
  ASSERT_EQ(fds->Install(fdinfo, false), 4);
  // A file made in the overlay, removed while open: Linux keeps it, and
  // so does the image.
  fs::Location etc;
  ASSERT_EQ(Resolve(*vfs, "/etc", &etc), 0);
  ASSERT_EQ(vfs->Create(etc, "gone", req, &made), 0);
  auto gone = Open(*vfs, "/etc/gone", O_RDWR);
  ASSERT_NE(gone, nullptr);
  ASSERT_EQ(gone->Write("kept after unlink", 17, -1, fs::IoContext{}), 17);
  ASSERT_EQ(vfs->Unlink(etc, "gone", false), 0);
  ASSERT_EQ(fds->Install(gone, false), 5);
  // A rootfs file read through the overlay, removed while open (a
  // whiteout hides it; the host still has it).
  auto hidden = Open(*vfs, "/etc/hidden", O_RDONLY);
  ASSERT_NE(hidden, nullptr);
  ASSERT_EQ(vfs->Unlink(etc, "hidden", false), 0);
  ASSERT_EQ(fds->Install(hidden, false), 6);
  fs::Location cwd;
  ASSERT_EQ(Resolve(*vfs, "/proc/1", &cwd), 0);
  fsctx->set_cwd(cwd);

  pb::State st;
  MemoryPages pages(a->memory_file().Internal(0));
  absl::Status saved = SaveTree(*a, *vfs, lower.get(), &st, &pages);
  ASSERT_TRUE(saved.ok()) << saved;

  // The restoring side: its own kernel, /dev and /proc, the rootfs
  // reopened.
  auto b = NewKernel(&nosys);
  Pseudo pb_(b.get());
  Loader l(&st, &pages, &b->memory_file());
  l.set_rootfs(HostRoot(host));
  l.set_pseudo_root("devtmpfs", pb_.devfs->Root());
  l.set_pseudo_root("proc", pb_.procfs->Root());
  l.set_devpts(pb_.devpts);
  auto vfs2_or = LoadTree(l, *b);
  ASSERT_TRUE(vfs2_or.ok()) << vfs2_or.status();
  std::shared_ptr<fs::Vfs> vfs2 = std::move(vfs2_or).value();
  auto kept = l.TakeKept();

  // The mounts, as /proc/mounts lists them.
  std::vector<std::string> mounts, mounts2;
  for (const auto& [m, path] : vfs->MountsInOrder(vfs->Root())) {
    mounts.push_back(m->fstype + " " + path);
  }
  for (const auto& [m, path] : vfs2->MountsInOrder(vfs2->Root())) {
    mounts2.push_back(m->fstype + " " + path);
  }
  EXPECT_EQ(mounts2, mounts);
  fs::Location loc;
  ASSERT_EQ(Resolve(*vfs2, "/dev/zero", &loc), 0);
  EXPECT_EQ(loc.inode().Type(), static_cast<uint32_t>(S_IFCHR));
  EXPECT_EQ(Resolve(*vfs2, "/dev/pts", &loc), 0);
  auto hello = Open(*vfs2, "/etc/hello", O_RDONLY);
  ASSERT_NE(hello, nullptr);
  EXPECT_EQ(ReadAll(*hello), "from the host\n");

  auto init2 = b->FindTask(1);
  ASSERT_NE(init2, nullptr);
  fs::FdTable& fds2 = init2->group().fds();
  // /dev/null is the device again: writes vanish, reads end at once.
  auto null2 = fds2.Get(0);
  ASSERT_NE(null2, nullptr);
  EXPECT_EQ(null2->Write("x", 1, -1, fs::IoContext{}), 1);
  EXPECT_EQ(ReadAll(*null2), "");
  // /proc/1/comm is the loaded process's, read on from where it was.
  auto comm2 = fds2.Get(1);
  ASSERT_NE(comm2, nullptr);
  auto fresh = Open(*vfs2, "/proc/1/comm", O_RDONLY);
  EXPECT_EQ(ReadAll(*fresh), "initprog\n");
  EXPECT_EQ(ReadAll(*comm2), "itprog\n");
  auto data2 = fds2.Get(2);
  ASSERT_NE(data2, nullptr);
  EXPECT_EQ(ReadAll(*data2), "data");
  auto* master = dynamic_cast<fs::tty::PtyMasterFile*>(fds2.Get(3).get());
  ASSERT_NE(master, nullptr);
  EXPECT_EQ(vfs2->PathOf(vfs2->Root(), master->location()), "/dev/ptmx");
  EXPECT_EQ(Resolve(*vfs2, "/dev/pts/0", &loc), 0);
  // /proc/1/fdinfo/2, opened again after the table was loaded (its text
  // is generated then, from descriptor 2: offset 4).
  auto fdinfo2 = fds2.Get(4);
  ASSERT_NE(fdinfo2, nullptr);
  EXPECT_NE(ReadAll(*fdinfo2).find("pos:\t4"), std::string::npos);
  // The removed overlay file, with its data, still reached by no name.
  auto gone2 = fds2.Get(5);
  ASSERT_NE(gone2, nullptr);
  ASSERT_EQ(gone2->Seek(0, SEEK_SET), 0);
  EXPECT_EQ(ReadAll(*gone2), "kept after unlink");
  EXPECT_NE(Resolve(*vfs2, "/etc/gone", &loc), 0);
  // The removed rootfs file: its host file again, still hidden.
  auto hidden2 = fds2.Get(6);
  ASSERT_NE(hidden2, nullptr);
  EXPECT_EQ(ReadAll(*hidden2), "hidden in the overlay\n");
  EXPECT_NE(Resolve(*vfs2, "/etc/hidden", &loc), 0);
  // The cwd in /proc resolves in the new procfs.
  EXPECT_EQ(init2->group().fs().cwd().inode().Type(), static_cast<uint32_t>(S_IFDIR));
  EXPECT_EQ(vfs2->PathOf(vfs2->Root(), init2->group().fs().cwd()), "/proc/1");

  // Without a /proc to load into: an error naming it.
  auto c = NewKernel(&nosys);
  Loader l2(&st, &pages, &c->memory_file());
  l2.set_rootfs(HostRoot(host));
  l2.set_pseudo_root("devtmpfs", pb_.devfs->Root());
  auto none = FsState::LoadVfs(l2);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition)
      << none.status();

  std::string rm = "rm -rf " + host;
  ASSERT_EQ(system(rm.c_str()), 0);
}

// The tree of the tests of procfs files that other holders keep: kernel
// `a` with a tmpfs root, procfs at /proc, a file /data ("abc", at offset 3)
// at descriptor 5 of an init whose descriptors 0 and 1 are a connected
// pair of stream sockets; and the loading side, kernel `b` with its own
// /proc.
class ProcHoldersTest : public ::testing::Test {
 protected:
  ProcHoldersTest() : a_(NewKernel(&nosys_)), pa_(a_.get()) {
    fs::TmpFsOptions opts;
    opts.dev = kUpperDev;
    opts.root_mode = 0755;
    root_ = std::make_unique<fs::TmpFs>(&a_->memory_file(), opts);
    vfs_ = std::make_shared<fs::Vfs>(root_->Root(), "tmpfs", "rootfs", false);
    a_->set_vfs(vfs_);
    fs::Location root_loc = vfs_->Root(), proc;
    fs::CreateRequest dir;
    dir.type = S_IFDIR;
    dir.mode = 0555;
    EXPECT_EQ(vfs_->Create(root_loc, "proc", dir, &proc), 0);
    EXPECT_EQ(vfs_->MountAt(proc, pa_.procfs->Root(), "proc", "proc", false), 0);
    fs::CreateRequest reg;
    reg.type = S_IFREG;
    reg.mode = 0644;
    fs::Location made;
    EXPECT_EQ(vfs_->Create(root_loc, "data", reg, &made), 0);
    init_ = NewInit(*a_, *vfs_);
    std::shared_ptr<socket::UnixSocket> s0, s1;
    EXPECT_EQ(socket::UnixSocket::NewPair(&ns_, SOCK_STREAM, 0, true, kCreds,
                                          &s0, &s1),
              0);
    EXPECT_EQ(init_.fds->InstallAt(0, s0, false), 0);
    EXPECT_EQ(init_.fds->InstallAt(1, s1, false), 1);
    auto data = Open(*vfs_, "/data", O_RDWR);
    EXPECT_NE(data, nullptr);
    EXPECT_EQ(data->Write("abc", 3, -1, fs::IoContext{}), 3);
    EXPECT_EQ(init_.fds->InstallAt(5, data, false), 5);
  }

  // Sends one byte with `right` in SCM_RIGHTS from descriptor 0 to 1.
  void Send(std::shared_ptr<fs::File> right) {
    socket::SocketContext ctx = Context(vfs_.get(), init_.fsctx.get(), &ns_);
    socket::BufferSource src("x", 1);
    socket::SendRequest req;
    req.data = &src;
    req.rights = {std::move(right)};
    bool sigpipe = false;
    ASSERT_EQ(dynamic_cast<socket::UnixSocket&>(*init_.fds->Get(0))
                  .SendMsg(ctx, req, &sigpipe),
              1);
  }

  // Saves `a` and loads it into `b`; the loaded Vfs in vfs2_.
  void SaveAndLoad() {
    MemoryPages pages(a_->memory_file().Internal(0));
    absl::Status saved = SaveTree(*a_, *vfs_, nullptr, &st_, &pages);
    ASSERT_TRUE(saved.ok()) << saved;
    b_ = NewKernel(&nosys_);
    pb_ = std::make_unique<Pseudo>(b_.get());
    Loader l(&st_, &pages, &b_->memory_file());
    l.set_pseudo_root("proc", pb_->procfs->Root());
    l.set_unix_namespace(&ns2_);
    auto vfs2 = LoadTree(l, *b_);
    ASSERT_TRUE(vfs2.ok()) << vfs2.status();
    vfs2_ = std::move(vfs2).value();
    kept_ = l.TakeKept();
    init2_ = b_->FindTask(1);
    ASSERT_NE(init2_, nullptr);
  }

  // The rights of the one-byte message waiting at the loaded descriptor 1.
  std::vector<std::shared_ptr<fs::File>> Receive() {
    auto* r1 =
        dynamic_cast<socket::UnixSocket*>(init2_->group().fds().Get(1).get());
    EXPECT_NE(r1, nullptr);
    if (r1 == nullptr) return {};
    socket::SocketContext ctx =
        Context(vfs2_.get(), &init2_->group().fs(), &ns2_);
    char byte = 0;
    socket::BufferSink sink(&byte, 1);
    socket::RecvRequest rr;
    rr.data = &sink;
    EXPECT_EQ(r1->RecvMsg(ctx, rr), 1);
    return rr.rights;
  }

  static constexpr socket::Credentials kCreds{1, 0, 0};
  struct NoWait : waiter::Blocker {
    int Wait(waiter::WaitQueue&, waiter::EventMask,
             const std::function<bool()>& ready, absl::Time) override {
      return ready() ? 0 : -EAGAIN;
    }
  };
  socket::SocketContext Context(fs::Vfs* vfs, fs::FsContext* fsctx,
                                socket::UnixNamespace* ns) {
    socket::SocketContext ctx;
    ctx.io.blocker = &no_wait_;
    ctx.creds = kCreds;
    ctx.vfs = vfs;
    ctx.fs = fsctx;
    ctx.unix_ns = ns;
    return ctx;
  }

  kernel::testing::NoSyscalls nosys_;
  NoWait no_wait_;
  std::unique_ptr<kernel::Kernel> a_;
  Pseudo pa_;
  std::unique_ptr<fs::TmpFs> root_;
  std::shared_ptr<fs::Vfs> vfs_;
  Init init_;
  socket::UnixNamespace ns_, ns2_;
  pb::State st_;
  std::unique_ptr<kernel::Kernel> b_;
  std::unique_ptr<Pseudo> pb_;
  std::shared_ptr<fs::Vfs> vfs2_;
  std::shared_ptr<kernel::Task> init2_;
  std::vector<std::shared_ptr<void>> kept_;
};

// A procfs file that only an SCM_RIGHTS message in flight holds (sent, the
// sender's descriptor closed) is opened again once every process is
// loaded, as a descriptor's is: /proc/1/fdinfo/5 looks up descriptor 5 of
// a table that is not loaded yet when the socket's message is.
TEST_F(ProcHoldersTest, ProcFileInFlightWaitsForTheTasks) {
  auto fdinfo = Open(*vfs_, "/proc/1/fdinfo/5", O_RDONLY);
  ASSERT_NE(fdinfo, nullptr);
  Send(std::move(fdinfo));
  SaveAndLoad();
  std::vector<std::shared_ptr<fs::File>> rights = Receive();
  ASSERT_EQ(rights.size(), 1u);
  ASSERT_NE(rights[0], nullptr);
  // Its text, generated from the loaded descriptor 5.
  EXPECT_NE(ReadAll(*rights[0]).find("pos:\t3"), std::string::npos);
}

// procfs files in an epoll set, as Linux takes them (/proc/PID/mountinfo,
// the files of /proc itself; /proc/PID/status has no poll: EPERM): one also
// at a descriptor, one held only by the epoll interest and a message in
// flight. Both interests are added again once the tasks are loaded
// (Loader::DeferredUse), on the very files the descriptor and the message
// hold.
TEST_F(ProcHoldersTest, ProcFilesInEpollWaitForTheTasks) {
  fs::FdTable& fds = *init_.fds;
  auto ep = std::make_shared<fs::EpollFile>();
  ASSERT_EQ(fds.InstallAt(3, ep, false), 3);
  auto mountinfo = Open(*vfs_, "/proc/1/mountinfo", O_RDONLY);
  auto uptime = Open(*vfs_, "/proc/uptime", O_RDONLY);
  auto status = Open(*vfs_, "/proc/1/status", O_RDONLY);
  ASSERT_NE(mountinfo, nullptr);
  ASSERT_NE(uptime, nullptr);
  ASSERT_NE(status, nullptr);
  ASSERT_EQ(fds.InstallAt(4, mountinfo, false), 4);
  ASSERT_EQ(fds.InstallAt(6, uptime, false), 6);
  struct epoll_event e = {};
  e.events = EPOLLIN | EPOLLOUT;
  e.data.u64 = 44;
  ASSERT_EQ(ep->Ctl(EPOLL_CTL_ADD, 4, mountinfo, e), 0);
  e.data.u64 = 66;
  ASSERT_EQ(ep->Ctl(EPOLL_CTL_ADD, 6, uptime, e), 0);
  EXPECT_EQ(ep->Ctl(EPOLL_CTL_ADD, 7, status, e), -EPERM);
  // /proc/uptime from now on held by the interest and a message only.
  Send(uptime);
  ASSERT_EQ(fds.Close(6), 0);
  uptime.reset();
  mountinfo.reset();
  ep.reset();

  SaveAndLoad();
  auto* ep2 = dynamic_cast<fs::EpollFile*>(init2_->group().fds().Get(3).get());
  ASSERT_NE(ep2, nullptr);
  struct epoll_event out[4];
  ASSERT_EQ(ep2->Wait(out, 4, absl::InfinitePast(), {}), 2);
  std::map<uint64_t, uint32_t> got;
  for (int i = 0; i < 2; i++) got[out[i].data.u64] = out[i].events;
  // mountinfo is ready to read only (mounts_poll); /proc/uptime both ways.
  EXPECT_EQ(got[44], static_cast<uint32_t>(EPOLLIN));
  EXPECT_EQ(got[66], static_cast<uint32_t>(EPOLLIN | EPOLLOUT));
  // The message's file is the one the interest watches: once received and
  // dropped, the interest goes with it.
  std::vector<std::shared_ptr<fs::File>> rights = Receive();
  ASSERT_EQ(rights.size(), 1u);
  ASSERT_NE(rights[0], nullptr);
  EXPECT_NE(ReadAll(*rights[0]).find('.'), std::string::npos);
  rights.clear();
  EXPECT_EQ(ep2->Wait(out, 4, absl::InfinitePast(), {}), 1);
  EXPECT_EQ(out[0].data.u64, 44u);
}

}  // namespace
}  // namespace sandboxd::state
