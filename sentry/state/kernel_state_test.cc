// Round trips of the kernel objects: build tasks and thread groups in one
// Kernel, save them, load them into a fresh Kernel and check that the
// loaded ones behave as the originals would (signals taken with their
// siginfo, timers still running, the tree that wait and getppid use, tids
// allocated where they left off, a blocked futex waiter that restarts).
#include "sentry/state/kernel_state.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/signalfd.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <atomic>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "gtest/gtest.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/fs/vfs.h"
#include "sentry/fs/tty/host_tty.h"
#include "sentry/fs/tty/pty.h"
#include "sentry/kernel/ctty.h"
#include "sentry/kernel/signalfd.h"
#include "sentry/kernel/testing/fakes.h"
#include "sentry/mm/memory_file.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/pages.h"

namespace sandboxd::state {
namespace {

using kernel::Kernel;
using kernel::Task;
using kernel::testing::EventOf;
using kernel::testing::FakeAddressSpace;
using platform::CpuState;
using platform::Event;

constexpr uintptr_t kMin = kernel::testing::kMinUserAddr;
constexpr uintptr_t kMax = kernel::testing::kMaxUserAddr;

// These tests are about the kernel objects: the fake records how many MMs
// it saw and gives each loaded group a new, empty MM in the loading kernel.
class FakeMms : public MmCheckpointer {
 public:
  absl::Status SaveMm(Saver&, mm::MM&, pb::Mm*) override {
    saved++;
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<mm::MM>> LoadMm(Loader&, Kernel& k,
                                                 const pb::Mm&) override {
    loaded++;
    return std::make_shared<mm::MM>(&k.memory_file(),
                                    std::make_unique<FakeAddressSpace>(), kMin,
                                    kMax);
  }
  int saved = 0;
  int loaded = 0;
};

// One step of a context's script: sees the registers as Switch would.
using Step = std::function<Event(CpuState&)>;

// Runs its steps in order, then reports the task dead.
class ScriptedContext : public platform::Context {
 public:
  explicit ScriptedContext(std::deque<Step> steps) : steps_(std::move(steps)) {}
  Event Switch(platform::AddressSpace&, CpuState& cpu) override {
    Step step;
    {
      absl::MutexLock l(&mu_);
      if (steps_.empty()) return EventOf(Event::Kind::kDead);
      step = std::move(steps_.front());
      steps_.pop_front();
    }
    return step(cpu);
  }
  void Interrupt() override {}

 private:
  absl::Mutex mu_;
  std::deque<Step> steps_ ABSL_GUARDED_BY(mu_);
};

// Hands out the queued scripts, one per NewContext (none: never runs).
class ScriptedPlatform : public kernel::testing::FakePlatform {
 public:
  absl::StatusOr<std::unique_ptr<platform::Context>> NewContext() override {
    absl::MutexLock l(&mu_);
    if (scripts_.empty()) return std::make_unique<kernel::testing::IdleContext>();
    auto ctx = std::make_unique<ScriptedContext>(std::move(scripts_.front()));
    scripts_.pop_front();
    return ctx;
  }
  void AddScript(std::deque<Step> s) {
    absl::MutexLock l(&mu_);
    scripts_.push_back(std::move(s));
  }

 private:
  absl::Mutex mu_;
  std::deque<std::deque<Step>> scripts_ ABSL_GUARDED_BY(mu_);
};

// The futex word of the waiter tests lives here (the fake MM has no
// memory); FUTEX_WAIT and FUTEX_WAKE on any address use it.
std::atomic<uint32_t> g_word{0};

class FutexSyscalls : public kernel::SyscallTable {
 public:
  int64_t Invoke(Task& t, const kernel::SyscallArgs& a) override {
    switch (a.nr) {
      case SYS_futex:
        if ((a.a[1] & FUTEX_CMD_MASK) == FUTEX_WAIT) {
          return t.kernel().futexes().Wait(
              t, kernel::Futexes::Key{&t.mm(), a.a[0]}, &g_word,
              static_cast<uint32_t>(a.a[2]), ~0u, absl::InfiniteFuture());
        }
        return -ENOSYS;
      case SYS_rt_sigsuspend:
        // As sys_signal.cc's: the temporary mask until a signal comes.
        t.SetTemporaryMask(a.a[0], t.signal_mask());
        while (t.Block(absl::InfiniteFuture()) != Task::WakeReason::kInterrupted) {
        }
        return -EINTR;
      case SYS_exit_group:
        t.group().Exit(kernel::ExitStatus{static_cast<int>(a.a[0]), 0, false});
        return kernel::kNoReturnValue;
      default:
        return -ENOSYS;
    }
  }
};

std::unique_ptr<Kernel> NewKernel(kernel::SyscallTable* sys,
                                  std::unique_ptr<platform::Platform> p =
                                      std::make_unique<ScriptedPlatform>()) {
  auto mf = mm::MemoryFile::Create(1ull << 30);
  EXPECT_TRUE(mf.ok()) << mf.status();
  return std::make_unique<Kernel>(std::move(mf).value(), std::move(p), sys,
                                  kernel::KernelOptions{});
}

std::shared_ptr<mm::MM> NewMm(Kernel& k) {
  return std::make_shared<mm::MM>(&k.memory_file(),
                                  std::make_unique<FakeAddressSpace>(), kMin,
                                  kMax);
}

class KernelStateTest : public ::testing::Test {
 protected:
  // The descriptor tables and FsContexts are saved in a Vfs (an empty
  // tmpfs: these tasks resolve no paths).
  void SetUp() override {
    auto mf = mm::MemoryFile::Create(1ull << 20);
    ASSERT_TRUE(mf.ok()) << mf.status();
    vfs_mf_ = std::move(mf).value();
    fs::TmpFs tmp(vfs_mf_.get(), fs::TmpFsOptions{});
    vfs_ = std::make_shared<fs::Vfs>(tmp.Root(), "tmpfs", "rootfs", false);
  }

  // As a checkpoint does: the mount tree first, then the kernel.
  absl::Status Save(Kernel& k) {
    state_.Clear();
    Saver s(&state_, &pages_);
    RETURN_IF_ERROR(FsState::SaveVfs(s, *vfs_));
    return KernelState::SaveKernel(s, k, *vfs_, mms_);
  }
  absl::Status Load(Kernel& k) {
    Loader l(&state_, &pages_, &k.memory_file());
    l.set_devpts(loader_devpts_);
    l.set_console(loader_console_);
    ASSIGN_OR_RETURN(std::unique_ptr<fs::Vfs> vfs, FsState::LoadVfs(l));
    loaded_vfs_.push_back(std::move(vfs));
    return KernelState::LoadKernel(l, k, *loaded_vfs_.back(), mms_);
  }

  std::shared_ptr<fs::FsContext> Fs() {
    return std::make_shared<fs::FsContext>(vfs_->Root(), vfs_->Root());
  }

  kernel::testing::NoSyscalls nosys_;
  std::unique_ptr<mm::MemoryFile> vfs_mf_;
  std::shared_ptr<fs::Vfs> vfs_;
  std::vector<std::unique_ptr<fs::Vfs>> loaded_vfs_;
  FakeMms mms_;
  std::shared_ptr<fs::tty::DevPts> loader_devpts_;  // where loaded ptys go
  std::shared_ptr<fs::tty::HostTerminal> loader_console_;  // the console now
  MemoryPages pages_{nullptr};
  pb::State state_;
};

TEST_F(KernelStateTest, TasksGroupsSignalsTimersRoundTrip) {
  auto a = NewKernel(&nosys_);
  auto fds = std::make_shared<fs::FdTable>(64);
  CpuState cpu{};
  cpu.regs.rip = 0x401234;
  cpu.regs.rsp = 0x7fff0000;
  cpu.regs.fs_base = 0x7f0000001000;
  cpu.fp_size = 512;
  cpu.fp[24] = 0x80;  // MXCSR's low byte
  auto init_or = a->CreateInit(NewMm(*a), fds, Fs(), cpu);
  ASSERT_TRUE(init_or.ok()) << init_or.status();
  Task* init = *init_or;
  auto thread_or = a->CreateThread(*init, cpu);
  ASSERT_TRUE(thread_or.ok());
  Task* thread = *thread_or;
  // A child process sharing the descriptor table (CLONE_FILES).
  auto child_or = a->CreateProcess(*init, NewMm(*a), fds, Fs(), SIGCHLD, cpu);
  ASSERT_TRUE(child_or.ok());
  Task* child = *child_or;

  kernel::ThreadGroup& g = init->group();
  a->WithTasklistLock([&] {
    g.image.comm = "initprog";
    g.image.exe = "/bin/initprog";
    g.image.auxv = {6, 4096, 0, 0};
    g.child_subreaper = true;
    thread->thread_comm = "worker";
  });
  thread->mempolicy = {2, 1 << 15, 3};  // MPOL_BIND|MPOL_F_STATIC_NODES, {0,1}
  g.no_new_privs.store(true);
  {
    // A thread that dropped to www-data keeping some capabilities.
    auto c = std::make_shared<fs::Credentials>();
    c->ruid = 33, c->euid = 34, c->suid = 35, c->fsuid = 36;
    c->rgid = 43, c->egid = 44, c->sgid = 45, c->fsgid = 46;
    c->groups = {4, 24, 33};
    c->cap_inheritable = 0x2000, c->cap_permitted = 0x3000;
    c->cap_effective = 0x1000, c->cap_bounding = 0x1234, c->cap_ambient = 0x2000;
    c->securebits = fs::kSecbitKeepCaps;
    thread->SetCredentials(std::move(c));
  }
  a->WithTasklistLock([&] {
    thread->sched.nice = 7;
    thread->sched.ioprio = (2 << 13) | 3;
    thread->sched.policy = 3;  // SCHED_BATCH
    thread->sched.reset_on_fork = true;
  });
  kernel::SigAction act{0x401000, SA_RESTART | 0x04000000, 0x401100,
                        kernel::SigBit(SIGINT)};
  g.SetAction(SIGUSR1, act);
  g.SetLimit(RLIMIT_NOFILE, rlimit{100, 200});
  thread->set_signal_mask(kernel::SigBit(SIGUSR2));
  thread->signal_stack().sp = 0x500000;
  thread->signal_stack().flags = 0;
  thread->signal_stack().size = 8192;
  thread->set_clear_child_tid(0x601000);
  thread->set_robust_list(0x602000, 24);
  siginfo_t info{};
  info.si_signo = SIGUSR2;
  info.si_code = SI_QUEUE;
  info.si_pid = 77;
  info.si_value.sival_int = 4242;
  ASSERT_TRUE(thread->SendSignalInfo(info));
  a->CountUnimplemented(999);
  a->CountUnimplemented(999);
  // A POSIX timer with 100 s to go and a 1 s interval.
  int timer_id = -1;
  ASSERT_EQ(g.timers().Create(*init, CLOCK_MONOTONIC, nullptr, &timer_id), 0);
  itimerspec its{{1, 0}, {100, 0}};
  ASSERT_EQ(g.timers().SetTime(timer_id, 0, its, nullptr), 0);

  ASSERT_TRUE(Save(*a).ok());
  EXPECT_EQ(mms_.saved, 2);  // init's (shared by its thread) and the child's

  auto b = NewKernel(&nosys_);
  absl::Status st = Load(*b);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(mms_.loaded, 2);

  auto init2 = b->FindTask(init->tid());
  auto thread2 = b->FindTask(thread->tid());
  auto child2 = b->FindTask(child->tid());
  ASSERT_NE(init2, nullptr);
  ASSERT_NE(thread2, nullptr);
  ASSERT_NE(child2, nullptr);
  // Threads share their group; processes share what they shared.
  EXPECT_EQ(&init2->group(), &thread2->group());
  EXPECT_EQ(init2->group().fds_ptr(), child2->group().fds_ptr());
  EXPECT_NE(&init2->group().mm(), &child2->group().mm());
  EXPECT_EQ(init2->group().Tasks().size(), 2u);
  EXPECT_EQ(init2->group().Tasks()[0].get(), init2.get());  // leader first
  // CPU state.
  EXPECT_EQ(thread2->cpu().regs.rip, 0x401234u);
  EXPECT_EQ(thread2->cpu().regs.fs_base, 0x7f0000001000u);
  EXPECT_EQ(thread2->cpu().fp_size, 512u);
  EXPECT_EQ(thread2->cpu().fp[24], 0x80);
  // The process tree, as getppid and wait see it.
  EXPECT_EQ(b->ParentOf(child2->group()), init->tid());
  ASSERT_EQ(init2->group().children.size(), 1u);
  EXPECT_EQ(init2->group().children[0].get(), &child2->group());
  // Group state.
  kernel::ThreadGroup& g2 = init2->group();
  EXPECT_EQ(g2.image.comm, "initprog");
  EXPECT_EQ(g2.image.exe, "/bin/initprog");
  EXPECT_EQ(g2.image.auxv, (std::vector<uint64_t>{6, 4096, 0, 0}));
  EXPECT_TRUE(g2.child_subreaper);
  EXPECT_TRUE(g2.no_new_privs.load());
  EXPECT_EQ(g2.pgid, init->tid());
  EXPECT_EQ(g2.sid, init->tid());
  kernel::SigAction act2 = g2.GetAction(SIGUSR1);
  EXPECT_EQ(act2.handler, act.handler);
  EXPECT_EQ(act2.flags, act.flags);
  EXPECT_EQ(act2.mask, act.mask);
  EXPECT_EQ(g2.GetLimit(RLIMIT_NOFILE).rlim_cur, 100u);
  EXPECT_EQ(g2.GetLimit(RLIMIT_NOFILE).rlim_max, 200u);
  // Thread state.
  EXPECT_EQ(thread2->thread_comm, "worker");
  EXPECT_EQ(thread2->mempolicy.mode, 2);
  EXPECT_EQ(thread2->mempolicy.flags, 1 << 15);
  EXPECT_EQ(thread2->mempolicy.nodes, 3u);
  {
    std::shared_ptr<const fs::Credentials> c = thread2->creds();
    EXPECT_EQ(c->ruid, 33u);
    EXPECT_EQ(c->euid, 34u);
    EXPECT_EQ(c->suid, 35u);
    EXPECT_EQ(c->fsuid, 36u);
    EXPECT_EQ(c->rgid, 43u);
    EXPECT_EQ(c->egid, 44u);
    EXPECT_EQ(c->sgid, 45u);
    EXPECT_EQ(c->fsgid, 46u);
    EXPECT_EQ(c->groups, (std::vector<uint32_t>{4, 24, 33}));
    EXPECT_EQ(c->cap_inheritable, 0x2000u);
    EXPECT_EQ(c->cap_permitted, 0x3000u);
    EXPECT_EQ(c->cap_effective, 0x1000u);
    EXPECT_EQ(c->cap_bounding, 0x1234u);
    EXPECT_EQ(c->cap_ambient, 0x2000u);
    EXPECT_EQ(c->securebits, fs::kSecbitKeepCaps);
    // The other threads stayed root.
    EXPECT_EQ(init2->creds()->euid, 0u);
    EXPECT_EQ(init2->creds()->cap_effective, fs::kAllCaps);
  }
  b->WithTasklistLock([&] {
    EXPECT_EQ(thread2->sched.nice, 7);
    EXPECT_EQ(thread2->sched.ioprio, (2 << 13) | 3);
    EXPECT_EQ(thread2->sched.policy, 3);
    EXPECT_TRUE(thread2->sched.reset_on_fork);
  });
  EXPECT_EQ(thread2->signal_mask(), kernel::SigBit(SIGUSR2));
  EXPECT_EQ(thread2->signal_stack().sp, 0x500000u);
  EXPECT_EQ(thread2->signal_stack().size, 8192u);
  EXPECT_EQ(thread2->signal_stack().flags, 0);
  EXPECT_EQ(thread2->robust_list(), 0x602000u);
  // The pending signal comes out with its siginfo.
  EXPECT_EQ(thread2->pending_signals(), kernel::SigBit(SIGUSR2));
  siginfo_t got{};
  EXPECT_EQ(thread2->TakePendingSignal(~0ull, &got), SIGUSR2);
  EXPECT_EQ(got.si_code, SI_QUEUE);
  EXPECT_EQ(got.si_pid, 77);
  EXPECT_EQ(got.si_value.sival_int, 4242);
  // The timer runs on, with the time it had left.
  itimerspec cur{};
  ASSERT_EQ(g2.timers().GetTime(timer_id, &cur), 0);
  EXPECT_GT(cur.it_value.tv_sec, 90);
  EXPECT_LE(cur.it_value.tv_sec, 100);
  EXPECT_EQ(cur.it_interval.tv_sec, 1);
  // A new timer gets the next id, as it would have.
  int next_id = -1;
  ASSERT_EQ(g2.timers().Create(*init2, CLOCK_MONOTONIC, nullptr, &next_id), 0);
  EXPECT_EQ(next_id, timer_id + 1);
  // Counters, and pid allocation goes on where it was.
  EXPECT_EQ(b->UnimplementedCounts()[999], 2u);
  auto t_a = a->CreateThread(*init, cpu);
  auto t_b = b->CreateThread(*init2, cpu);
  ASSERT_TRUE(t_a.ok() && t_b.ok());
  EXPECT_EQ((*t_a)->tid(), (*t_b)->tid());
  g.timers().DeleteAll();
  g2.timers().DeleteAll();
}

TEST_F(KernelStateTest, PendingTimerSignalKeepsItsTimer) {
  auto a = NewKernel(&nosys_);
  auto init_or = a->CreateInit(NewMm(*a), std::make_shared<fs::FdTable>(64),
                               Fs(), CpuState{});
  ASSERT_TRUE(init_or.ok());
  Task* init = *init_or;
  init->set_signal_mask(kernel::SigBit(SIGALRM));
  int id = -1;
  ASSERT_EQ(init->group().timers().Create(*init, CLOCK_MONOTONIC, nullptr, &id),
            0);
  // Every 1 ms: the signal is queued and, blocked, counts overruns.
  itimerspec its{{0, 1000000}, {0, 1000000}};
  ASSERT_EQ(init->group().timers().SetTime(id, 0, its, nullptr), 0);
  absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (init->pending_signals() == 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_NE(init->pending_signals(), 0u);
  absl::SleepFor(absl::Milliseconds(20));
  ASSERT_TRUE(Save(*a).ok());
  init->group().timers().DeleteAll();

  auto b = NewKernel(&nosys_);
  ASSERT_TRUE(Load(*b).ok());
  auto init2 = b->FindTask(init->tid());
  ASSERT_NE(init2, nullptr);
  absl::SleepFor(absl::Milliseconds(20));
  // Still one signal, from the live timer: its overruns were counted on
  // both sides of the checkpoint (a stale source would drop it).
  siginfo_t got{};
  EXPECT_EQ(init2->TakePendingSignal(~0ull, &got), SIGALRM);
  EXPECT_EQ(got.si_timerid, id);
  EXPECT_GE(got.si_overrun, 30);
  init2->group().timers().DeleteAll();
}

// A terminal that is neither a pty nor the host terminal: not saveable.
class OtherTerminal : public fs::tty::Terminal {
 public:
  OtherTerminal() : Terminal(nullptr) {}
  dev_t Device() const override { return 0; }
  int64_t GetTermios(fs::tty::KernelTermios*) override { return -ENOTTY; }
  int64_t SetTermios(const fs::tty::KernelTermios&, bool) override {
    return -ENOTTY;
  }
  int64_t GetWinsize(struct winsize*) override { return -ENOTTY; }
  int64_t SetWinsize(const struct winsize&) override { return -ENOTTY; }
  int64_t InputQueued(int*) override { return -ENOTTY; }
  int64_t OutputQueued(int*) override { return -ENOTTY; }
  int64_t Flush(int) override { return -ENOTTY; }
  bool hung_up() const override { return false; }
  int64_t OpenProgramSide(int, std::shared_ptr<fs::Inode>,
                          std::shared_ptr<fs::File>*) override {
    return -ENXIO;
  }
};

TEST_F(KernelStateTest, ControllingTerminalOfUnknownKindIsUnimplemented) {
  auto a = NewKernel(&nosys_);
  auto init_or = a->CreateInit(NewMm(*a), std::make_shared<fs::FdTable>(64),
                               Fs(), CpuState{});
  ASSERT_TRUE(init_or.ok());
  a->SetInitTerminal(std::make_shared<OtherTerminal>());
  absl::Status st = Save(*a);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_NE(st.message().find("controlling terminal"), std::string::npos);
  a->WithTasklistLock([&] { (*init_or)->group().ctty.reset(); });
}

// A pty pair, both sides open in init, which has the replica as its
// controlling terminal: settings, buffered input and output, packet mode
// and the session links come back, in the loading Sentry's devpts.
TEST_F(KernelStateTest, PtyWithBuffersAndControllingTerminal) {
  auto a = NewKernel(&nosys_);
  auto jc = kernel::NewJobControl(a.get());
  auto devpts = fs::tty::DevPts::Create(/*dev=*/77, jc.get());
  auto fds = std::make_shared<fs::FdTable>(64);
  auto init_or = a->CreateInit(NewMm(*a), fds, Fs(), CpuState{});
  ASSERT_TRUE(init_or.ok());
  std::shared_ptr<fs::Inode> ptmx;
  ASSERT_EQ(devpts->Root()->Lookup("ptmx", &ptmx), 0);
  std::shared_ptr<fs::File> master;
  ASSERT_EQ(devpts->OpenMaster(ptmx, O_RDWR | O_NONBLOCK, &master), 0);
  auto& mf = dynamic_cast<fs::tty::PtyMasterFile&>(*master);
  fs::tty::Pty& pty = mf.pty();
  ASSERT_EQ(pty.SetLocked(false), 0);
  std::shared_ptr<fs::Inode> node;
  ASSERT_EQ(devpts->Root()->Lookup("0", &node), 0);
  std::shared_ptr<fs::File> replica;
  ASSERT_EQ(node->Open(O_RDWR | O_NONBLOCK, &replica), 0);
  ASSERT_EQ(fds->Install(master, false), 0);
  ASSERT_EQ(fds->Install(replica, false), 1);
  a->SetInitTerminal(mf.terminal());
  fs::tty::KernelTermios t;
  ASSERT_EQ(pty.GetTermios(&t), 0);
  t.c_lflag &= ~ECHO;  // no echo: the master reads only what the program writes
  ASSERT_EQ(pty.SetTermios(t, false), 0);
  struct winsize ws = {40, 120, 0, 0};
  ASSERT_EQ(pty.SetWinsize(ws), 0);
  fs::IoContext io;
  ASSERT_EQ(master->Write("line one\npart", 13, -1, io), 13);
  ASSERT_EQ(replica->Write("out\n", 4, -1, io), 4);
  ASSERT_EQ(pty.SetPacketMode(true), 0);

  ASSERT_TRUE(Save(*a).ok());
  // The loading Sentry's devpts, over its own kernel.
  auto b = NewKernel(&nosys_);
  auto jc2 = kernel::NewJobControl(b.get());
  auto devpts2 = fs::tty::DevPts::Create(/*dev=*/78, jc2.get());
  loader_devpts_ = devpts2;
  absl::Status st = Load(*b);
  ASSERT_TRUE(st.ok()) << st;
  auto init2 = b->FindTask(1);
  ASSERT_NE(init2, nullptr);
  fs::FdTable& fds2 = init2->group().fds();
  auto* m2 = dynamic_cast<fs::tty::PtyMasterFile*>(fds2.Get(0).get());
  ASSERT_NE(m2, nullptr);
  std::shared_ptr<fs::File> r2 = fds2.Get(1);
  ASSERT_NE(dynamic_cast<fs::tty::PtyReplicaFile*>(r2.get()), nullptr);
  fs::tty::Pty& pty2 = m2->pty();
  EXPECT_EQ(b->ControllingTerminal(*init2).get(), &pty2);
  EXPECT_EQ(pty2.session(), 1);
  EXPECT_EQ(pty2.foreground(), 1);
  EXPECT_EQ(pty2.index(), 0u);
  struct winsize ws2 = {};
  ASSERT_EQ(pty2.GetWinsize(&ws2), 0);
  EXPECT_EQ(ws2.ws_row, 40);
  EXPECT_EQ(ws2.ws_col, 120);
  fs::tty::KernelTermios t2;
  ASSERT_EQ(pty2.GetTermios(&t2), 0);
  EXPECT_EQ(t2.c_lflag & ECHO, 0u);
  std::shared_ptr<fs::Inode> node2;
  EXPECT_EQ(devpts2->Root()->Lookup("0", &node2), 0);  // /dev/pts/0 again
  // The program reads the complete line; the partial one waits for its end.
  char buf[64];
  ASSERT_EQ(r2->Read(buf, sizeof(buf), -1, io), 9);
  EXPECT_EQ(std::string(buf, 9), "line one\n");
  EXPECT_EQ(r2->Read(buf, sizeof(buf), -1, io), -EAGAIN);
  ASSERT_EQ(m2->Write("ial\n", 4, -1, io), 4);
  ASSERT_EQ(r2->Read(buf, sizeof(buf), -1, io), 8);
  EXPECT_EQ(std::string(buf, 8), "partial\n");
  // Packet mode: a status byte, then what the program wrote (ONLCR'd).
  ASSERT_EQ(m2->Read(buf, sizeof(buf), -1, io), 6);
  EXPECT_EQ(std::string(buf, 6), std::string("\0out\r\n", 6));
  // The replica count was rebuilt: closing the last one, the master reads EIO.
  ASSERT_EQ(fds2.Close(1), 0);
  r2.reset();
  EXPECT_EQ(m2->Read(buf, sizeof(buf), -1, io), -EIO);
  // Closed while the job controls that hang-ups go through still exist.
  ASSERT_EQ(fds2.Close(0), 0);
  master.reset();
  replica.reset();
  ASSERT_EQ(fds->Close(0), 0);
  ASSERT_EQ(fds->Close(1), 0);
}

TEST_F(KernelStateTest, SignalFdKeepsMaskAndWakesWithItsProcess) {
  auto a = NewKernel(&nosys_);
  auto fds = std::make_shared<fs::FdTable>(64);
  auto init_or = a->CreateInit(NewMm(*a), fds, Fs(), CpuState{});
  ASSERT_TRUE(init_or.ok());
  // Its process's group (it is in that group's own descriptor table).
  auto owner = a->FindGroup((*init_or)->tid());
  auto sfd = std::make_shared<kernel::SignalFd>(
      owner, kernel::SigBit(SIGUSR1) | kernel::SigBit(SIGKILL), SFD_NONBLOCK);
  ASSERT_EQ(fds->Install(sfd, false), 0);
  ASSERT_TRUE(Save(*a).ok());

  auto b = NewKernel(&nosys_);
  absl::Status st = Load(*b);
  ASSERT_TRUE(st.ok()) << st;
  auto init2 = b->FindTask((*init_or)->tid());
  ASSERT_NE(init2, nullptr);
  auto* loaded = dynamic_cast<kernel::SignalFd*>(init2->group().fds().Get(0).get());
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->mask(), kernel::SigBit(SIGUSR1));  // never SIGKILL
  EXPECT_TRUE(loaded->StatusFlags() & O_NONBLOCK);
  // Its pollers wait on the loaded process's signal queue.
  EXPECT_EQ(loaded->event_queue(), init2->group().signal_queue);
  // Polled from no task, it looks at its process's signals.
  init2->set_signal_mask(kernel::SigBit(SIGUSR1));
  EXPECT_EQ(loaded->Readiness(POLLIN), 0u);
  siginfo_t info{};
  info.si_signo = SIGUSR1;
  info.si_code = SI_USER;
  ASSERT_TRUE(init2->SendSignalInfo(info));
  EXPECT_EQ(loaded->Readiness(POLLIN), static_cast<waiter::EventMask>(POLLIN));
}

// A host pty's replica as a "host terminal": the terminal the Sentry ran
// on before the checkpoint, and another after it. -1 without host ptys.
int HostPty(int* master) {
  *master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (*master < 0 || grantpt(*master) != 0 || unlockpt(*master) != 0) return -1;
  return open(ptsname(*master), O_RDWR | O_NOCTTY | O_CLOEXEC);
}

// The host terminal is saved as "the console": the load takes the one its
// caller hands in, with the sandbox's job control on it.
TEST_F(KernelStateTest, ConsoleIsTheCallersAfterLoad) {
  int m1, m2;
  int s1 = HostPty(&m1);
  int s2 = HostPty(&m2);
  if (s1 < 0 || s2 < 0) GTEST_SKIP() << "no host ptys";
  auto a = NewKernel(&nosys_);
  auto jc = kernel::NewJobControl(a.get());
  auto console = std::make_shared<fs::tty::HostTerminal>(
      UniqueFd(fcntl(s1, F_DUPFD_CLOEXEC, 3)), jc.get());
  auto fds = std::make_shared<fs::FdTable>(64);
  ASSERT_EQ(fds->Install(console->OpenHostFd(s1), false), 0);
  auto init_or = a->CreateInit(NewMm(*a), fds, Fs(), CpuState{});
  ASSERT_TRUE(init_or.ok());
  a->SetInitTerminal(console);
  ASSERT_TRUE(Save(*a).ok());

  auto b = NewKernel(&nosys_);
  auto jc2 = kernel::NewJobControl(b.get());
  auto console2 = std::make_shared<fs::tty::HostTerminal>(
      UniqueFd(fcntl(s2, F_DUPFD_CLOEXEC, 3)), jc2.get());
  loader_console_ = console2;
  absl::Status st = Load(*b);
  ASSERT_TRUE(st.ok()) << st;
  auto init2 = b->FindTask(1);
  ASSERT_NE(init2, nullptr);
  EXPECT_EQ(b->ControllingTerminal(*init2), console2);
  EXPECT_EQ(console2->session(), 1);
  EXPECT_EQ(console2->foreground(), 1);
  auto* f = dynamic_cast<fs::tty::HostTtyFile*>(init2->group().fds().Get(0).get());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->terminal(), console2);
  // Its writes reach the terminal the caller handed in.
  ASSERT_EQ(f->Write("hi\n", 3, -1, fs::IoContext{}), 3);
  char buf[16];
  ASSERT_EQ(read(m2, buf, sizeof(buf)), 4);
  EXPECT_EQ(std::string(buf, 4), "hi\r\n");

  loader_console_.reset();
  ASSERT_EQ(init2->group().fds().Close(0), 0);
  ASSERT_EQ(fds->Close(0), 0);
  b->WithTasklistLock([&] { init2->group().ctty.reset(); });
  a->WithTasklistLock([&] { (*init_or)->group().ctty.reset(); });
  for (int fd : {s1, s2, m1, m2}) close(fd);
}

// Start times go on from the load: /proc's starttime and uptime show the
// same ages as before the checkpoint, not a new boot.
TEST_F(KernelStateTest, AgesGoOnFromTheLoad) {
  auto a = NewKernel(&nosys_);
  auto init_or = a->CreateInit(NewMm(*a), std::make_shared<fs::FdTable>(64),
                               Fs(), CpuState{});
  ASSERT_TRUE(init_or.ok());
  Task* init = *init_or;
  init->group().start_ns -= 5000000000;  // as if it had run for 5 s
  absl::SleepFor(absl::Milliseconds(50));
  const int64_t since_boot = init->group().start_ns - a->boot_ns();
  ASSERT_TRUE(Save(*a).ok());

  auto b = NewKernel(&nosys_);  // booted just now
  ASSERT_TRUE(Load(*b).ok());
  const int64_t now = kernel::MonotonicNanos();
  auto init2 = b->FindTask(init->tid());
  ASSERT_NE(init2, nullptr);
  const int64_t age = now - init2->group().start_ns;
  EXPECT_GE(age, 5050000000);
  EXPECT_LT(age, 6000000000);
  EXPECT_GE(now - init2->start_ns(), 50000000);
  EXPECT_GE(now - b->boot_ns(), 50000000);
  EXPECT_NEAR(init2->group().start_ns - b->boot_ns(), since_boot, 10000000);
}

// An interrupted sleep's restart block: a host-clock deadline keeps the
// time that was left (measured from the load), a CPU-clock one its
// deadline; the "restart as restart_syscall" decision comes along.
TEST_F(KernelStateTest, RestartBlockKeepsTheTimeLeft) {
  auto a = NewKernel(&nosys_);
  auto init_or = a->CreateInit(NewMm(*a), std::make_shared<fs::FdTable>(64),
                               Fs(), CpuState{});
  ASSERT_TRUE(init_or.ok());
  Task* init = *init_or;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const int64_t now_ns = now.tv_sec * 1000000000LL + now.tv_nsec;
  init->restart_block() = kernel::RestartBlock{
      kernel::RestartBlock::Kind::kSleep, CLOCK_MONOTONIC,
      now_ns + 3000000000LL, 0x7000};
  ASSERT_TRUE(Save(*a).ok());

  absl::SleepFor(absl::Milliseconds(100));  // time passes between save and load
  auto b = NewKernel(&nosys_);
  ASSERT_TRUE(Load(*b).ok());
  auto t = b->FindTask(init->tid());
  ASSERT_NE(t, nullptr);
  const kernel::RestartBlock& rb = t->restart_block();
  EXPECT_EQ(rb.kind, kernel::RestartBlock::Kind::kSleep);
  EXPECT_EQ(rb.clock, CLOCK_MONOTONIC);
  EXPECT_EQ(rb.rem_addr, 0x7000u);
  clock_gettime(CLOCK_MONOTONIC, &now);
  const int64_t left = rb.deadline_ns - (now.tv_sec * 1000000000LL + now.tv_nsec);
  EXPECT_GT(left, 2900000000LL);  // not shortened by the 100 ms between
  EXPECT_LE(left, 3000000000LL);

  // A CPU clock's deadline is kept as it is.
  init->restart_block() = kernel::RestartBlock{
      kernel::RestartBlock::Kind::kSleep, -6 /* a process CPU clock */,
      123456789, 0};
  ASSERT_TRUE(Save(*a).ok());
  auto c = NewKernel(&nosys_);
  ASSERT_TRUE(Load(*c).ok());
  auto t2 = c->FindTask(init->tid());
  ASSERT_NE(t2, nullptr);
  EXPECT_EQ(t2->restart_block().clock, -6);
  EXPECT_EQ(t2->restart_block().deadline_ns, 123456789);

  // No block: none after the load.
  init->restart_block() = kernel::RestartBlock{};
  ASSERT_TRUE(Save(*a).ok());
  auto d = NewKernel(&nosys_);
  ASSERT_TRUE(Load(*d).ok());
  EXPECT_EQ(d->FindTask(init->tid())->restart_block().kind,
            kernel::RestartBlock::Kind::kNone);
}

TEST_F(KernelStateTest, LoadIntoAKernelWithTasksFails) {
  auto a = NewKernel(&nosys_);
  ASSERT_TRUE(a->CreateInit(NewMm(*a), std::make_shared<fs::FdTable>(64),
                            Fs(), CpuState{})
                  .ok());
  ASSERT_TRUE(Save(*a).ok());
  EXPECT_EQ(Load(*a).code(), absl::StatusCode::kFailedPrecondition);
}

// A task blocked in FUTEX_WAIT at checkpoint time re-executes the syscall
// after the load, queues again, and a FUTEX_WAKE then wakes it.
TEST_F(KernelStateTest, FutexWaiterRestartsAfterLoad) {
  constexpr uint64_t kRip = 0x400502;  // after the syscall instruction
  constexpr uint64_t kAddr = 0x600000;
  g_word.store(0);
  FutexSyscalls sys;
  auto pa = std::make_unique<ScriptedPlatform>();
  pa->AddScript({[&](CpuState& c) {
    c.regs.rip = kRip;
    c.regs.rax = c.regs.orig_rax = SYS_futex;
    c.regs.rdi = kAddr;
    c.regs.rsi = FUTEX_WAIT;
    c.regs.rdx = 0;
    return EventOf(Event::Kind::kSyscall);
  }});
  auto a = NewKernel(&sys, std::move(pa));
  auto init_or = a->CreateInit(NewMm(*a), std::make_shared<fs::FdTable>(64),
                               Fs(), CpuState{});
  ASSERT_TRUE(init_or.ok());
  Task* init = *init_or;
  pid_t tid = init->tid();
  auto run_a = std::async(std::launch::async,
                          [&] { return a->RunUntilInitExits(init); });
  absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!init->sleeping() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(init->sleeping());
  ASSERT_TRUE(Save(*a).ok());
  EXPECT_TRUE(state_.tasks(0).in_syscall());
  // The original ends (its wait is interrupted).
  {
    // Held so that Exit's wakeup cannot outlive the task (it exits as soon
    // as it is woken, and RunUntilInitExits frees it).
    std::shared_ptr<Task> keep = a->FindTask(init->tid());
    init->group().Exit(kernel::ExitStatus{0, SIGKILL, false});
    run_a.get();
  }

  std::atomic<bool> reentered{false};
  auto pb_platform = std::make_unique<ScriptedPlatform>();
  pb_platform->AddScript({
      [&](CpuState& c) {
        // Back on the syscall instruction with its number in rax; the
        // arguments intact. The CPU executes it again.
        EXPECT_EQ(c.regs.rip, kRip - 2);
        EXPECT_EQ(c.regs.rax, static_cast<uint64_t>(SYS_futex));
        EXPECT_EQ(c.regs.rdi, kAddr);
        reentered = c.regs.rip == kRip - 2 && c.regs.rax == SYS_futex;
        c.regs.rip = kRip;
        c.regs.orig_rax = c.regs.rax;
        return EventOf(Event::Kind::kSyscall);
      },
      [&](CpuState& c) {
        // The wait returned 0 (woken), then the program exits with 7.
        EXPECT_EQ(c.regs.rax, 0u);
        c.regs.orig_rax = SYS_exit_group;
        c.regs.rdi = c.regs.rax == 0 ? 7 : 1;
        return EventOf(Event::Kind::kSyscall);
      },
  });
  auto b = NewKernel(&sys, std::move(pb_platform));
  absl::Status st = Load(*b);
  ASSERT_TRUE(st.ok()) << st;
  auto run_b = std::async(std::launch::async, [&] { return b->RunRestored(); });
  auto t2 = b->FindTask(tid);
  ASSERT_NE(t2, nullptr);
  // Wake it once it waits again.
  int64_t woken = 0;
  give_up = absl::Now() + absl::Seconds(10);
  while (woken == 0 && absl::Now() < give_up) {
    woken = b->futexes().Wake(kernel::Futexes::Key{&t2->mm(), kAddr}, 1, ~0u);
    if (woken == 0) absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(woken, 1);
  t2.reset();
  kernel::ExitStatus es = run_b.get();
  EXPECT_TRUE(reentered.load());
  EXPECT_EQ(es.code, 7);
}

// A zombie child keeps its exit status for wait; a parent blocked in
// rt_sigsuspend gets its own mask back and suspends again after the load;
// CPU time goes on from the saved totals.
TEST_F(KernelStateTest, ZombieSigsuspendAndCpuTime) {
  constexpr uint64_t kRip = 0x400502;
  constexpr kernel::SigSet kMask = kernel::SigBit(SIGUSR1);
  // SIGCHLD blocked too: the child's exit must not end the suspend.
  constexpr kernel::SigSet kTemporary =
      kernel::SigBit(SIGUSR2) | kernel::SigBit(SIGCHLD);
  FutexSyscalls sys;
  auto pa = std::make_unique<ScriptedPlatform>();
  pa->AddScript({[&](CpuState& c) {
    c.regs.rip = kRip;
    c.regs.rax = c.regs.orig_rax = SYS_rt_sigsuspend;
    c.regs.rdi = kTemporary;
    return EventOf(Event::Kind::kSyscall);
  }});
  pa->AddScript({[&](CpuState& c) {
    c.regs.orig_rax = SYS_exit_group;
    c.regs.rdi = 3;
    return EventOf(Event::Kind::kSyscall);
  }});
  auto a = NewKernel(&sys, std::move(pa));
  auto init_or = a->CreateInit(NewMm(*a), std::make_shared<fs::FdTable>(64),
                               Fs(), CpuState{});
  ASSERT_TRUE(init_or.ok());
  Task* init = *init_or;
  // Kept: init is freed once kernel a has run it to its exit.
  const pid_t init_tid = init->tid();
  init->set_signal_mask(kMask);
  auto child_or = a->CreateProcess(*init, NewMm(*a),
                                   std::make_shared<fs::FdTable>(64), Fs(),
                                   SIGCHLD, CpuState{});
  ASSERT_TRUE(child_or.ok());
  pid_t child_pid = (*child_or)->tid();
  std::shared_ptr<kernel::ThreadGroup> child_group = (*child_or)->group_ptr();
  auto run_a = std::async(std::launch::async,
                          [&] { return a->RunUntilInitExits(init); });
  (*child_or)->Start();
  absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (absl::Now() < give_up) {
    bool zombie = false;
    a->WithTasklistLock([&] { zombie = child_group->zombie; });
    if (zombie && init->sleeping()) break;
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(init->sleeping());
  EXPECT_EQ(init->signal_mask(), kTemporary);
  ASSERT_TRUE(Save(*a).ok());
  int64_t saved_cpu_ns = state_.tasks(0).cpu().sys_ns() +
                         state_.tasks(0).cpu().user_ns();
  EXPECT_GT(saved_cpu_ns, 0);
  {
    // Held so that Exit's wakeup cannot outlive the task (it exits as soon
    // as it is woken, and RunUntilInitExits frees it).
    std::shared_ptr<Task> keep = a->FindTask(init_tid);
    init->group().Exit(kernel::ExitStatus{0, SIGKILL, false});
    run_a.get();
  }

  auto pb_platform = std::make_unique<ScriptedPlatform>();
  std::atomic<bool> resuspended{false};
  pb_platform->AddScript({[&](CpuState& c) {
    resuspended = c.regs.rip == kRip - 2 && c.regs.rax == SYS_rt_sigsuspend &&
                  c.regs.rdi == kTemporary;
    c.regs.rip = kRip;
    c.regs.orig_rax = c.regs.rax;
    return EventOf(Event::Kind::kSyscall);
  }});
  auto b = NewKernel(&sys, std::move(pb_platform));
  ASSERT_TRUE(Load(*b).ok());
  auto init2 = b->FindTask(init_tid);
  ASSERT_NE(init2, nullptr);
  // Its own mask, not sigsuspend's temporary one.
  EXPECT_EQ(init2->signal_mask(), kMask);
  kernel::Usage u = init2->cputime().Read(kernel::MonotonicNowNs());
  EXPECT_EQ(u.user_ns + u.sys_ns, saved_cpu_ns);
  // wait reaps the zombie with its status.
  Kernel::WaitResult wr;
  EXPECT_EQ(b->WaitChild(*init2, -1, false, WEXITED | WNOHANG, &wr), child_pid);
  EXPECT_EQ(wr.pid, child_pid);
  EXPECT_EQ(wr.status.code, 3);
  EXPECT_EQ(b->FindGroup(child_pid), nullptr);
  // Started, it suspends again; SIGTERM (not blocked) ends it.
  auto run_b = std::async(std::launch::async, [&] { return b->RunRestored(); });
  give_up = absl::Now() + absl::Seconds(10);
  while (!resuspended && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  while (!init2->sleeping() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_TRUE(resuspended.load());
  b->SignalGroup(init2->group(), SIGTERM, 0);
  init2.reset();
  EXPECT_EQ(run_b.get().signo, SIGTERM);
}

}  // namespace
}  // namespace sandboxd::state
