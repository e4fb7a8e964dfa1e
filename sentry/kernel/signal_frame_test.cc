// Signal delivery to handlers: the rt_sigframe Task::DeliverToHandler
// writes (reached through Task::ForceSignal) and Task::SigReturn reads.
// The frame is parsed with the C library's ucontext_t and siginfo_t, whose
// leading parts have the kernel's layout, so the checks do not share the
// code's own struct definitions.
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ucontext.h>

#include <cstddef>
#include <cstring>
#include <memory>

#include "gtest/gtest.h"
#include "sentry/kernel/kernel.h"
#include "sentry/kernel/testing/fakes.h"

namespace sandboxd::kernel {
namespace {

using testing::EventOf;
using testing::FakeAddressSpace;
using testing::kSaRestorer;
using testing::NoFs;
using testing::FakePlatform;
using testing::IdleContext;
using testing::NoSyscalls;

constexpr uintptr_t kMin = testing::kMinUserAddr;
constexpr uintptr_t kMax = testing::kMaxUserAddr;

constexpr uint64_t kHandler = 0x401000;
constexpr uint64_t kRestorer = 0x401100;
constexpr uint64_t kFixedRip = 0x400abc;
constexpr uint32_t kFpSize = 832;  // legacy area + xsave header + AVX
constexpr size_t kFrameSize = 440;  // sizeof(struct rt_sigframe)
constexpr size_t kUcOffset = 8;     // after pretcode
constexpr size_t kInfoOffset = 8 + 304;

// Every general register gets a distinct value; rsp is deliberately not
// 16-byte aligned.
platform::CpuState InitialCpu(uint64_t stack_top) {
  platform::CpuState cpu;
  auto* words = reinterpret_cast<uint64_t*>(&cpu.regs);
  for (size_t i = 0; i < sizeof(cpu.regs) / 8; i++) {
    words[i] = 0x1111000000000000ull + i * 0x10101;
  }
  cpu.regs.rsp = stack_top - 0x123;
  cpu.regs.rip = 0x400500;
  cpu.regs.cs = 0x33;
  cpu.regs.ss = 0x2b;
  // IF, CF, DF and TF set: the handler must run with DF and TF clear.
  cpu.regs.eflags = 0x200 | 0x2 | 0x1 | 0x400 | 0x100;
  cpu.fp_size = kFpSize;
  for (uint32_t i = 0; i < kFpSize; i++) {
    cpu.fp[i] = static_cast<uint8_t>(i * 13 + 1);
  }
  return cpu;
}

class SignalFrameTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = mm::MemoryFile::Create(1ull << 30);
    ASSERT_TRUE(mf.ok()) << mf.status();
    kernel_ = std::make_unique<Kernel>(std::move(mf).value(),
                                       std::make_unique<FakePlatform>(),
                                       &syscalls_, KernelOptions{});
    mm_ = std::make_shared<mm::MM>(&kernel_->memory_file(),
                                   std::make_unique<FakeAddressSpace>(), kMin,
                                   kMax);
    int64_t stack = mm_->Mmap(0, 0x10000, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS);
    ASSERT_GT(stack, 0);
    stack_lo_ = stack;
    stack_top_ = stack + 0x10000;
    initial_ = std::make_unique<platform::CpuState>(InitialCpu(stack_top_));
    auto t = kernel_->CreateInit(mm_, std::make_shared<fs::FdTable>(64), NoFs(),
                                 *initial_);
    ASSERT_TRUE(t.ok()) << t.status();
    task_ = *t;
    task_->set_signal_mask(SigBit(SIGUSR1));
  }

  void InstallHandler(int signo, uint64_t flags, SigSet mask = 0) {
    SigAction act;
    act.handler = kHandler;
    act.flags = flags;
    act.restorer = kRestorer;
    act.mask = mask;
    task_->group().SetAction(signo, act);
  }

  // Reads the frame the handler sees at rsp.
  void ReadFrame(ucontext_t* uc, siginfo_t* info, uint64_t* pretcode) {
    const uint64_t sp = task_->cpu().regs.rsp;
    std::memset(uc, 0, sizeof(*uc));
    ASSERT_EQ(mm_->CopyIn(sp, pretcode, 8), 8);
    ASSERT_EQ(mm_->CopyIn(sp + kUcOffset, uc, 304), 304);
    ASSERT_EQ(mm_->CopyIn(sp + kInfoOffset, info, 128), 128);
  }

  // What the handler's `ret` into the restorer leaves: rsp past pretcode.
  void ReturnFromHandler() { task_->cpu().regs.rsp += 8; }

  NoSyscalls syscalls_;
  std::unique_ptr<Kernel> kernel_;
  std::shared_ptr<mm::MM> mm_;
  uint64_t stack_lo_ = 0, stack_top_ = 0;
  std::unique_ptr<platform::CpuState> initial_;
  Task* task_ = nullptr;
};

TEST_F(SignalFrameTest, HandlerEntryState) {
  InstallHandler(SIGSEGV, SA_SIGINFO | kSaRestorer, SigBit(SIGUSR2));
  task_->ForceSignal(SIGSEGV, SEGV_MAPERR, 0xdead000);
  ASSERT_FALSE(task_->group().exiting());

  const platform::Regs& r = task_->cpu().regs;
  const platform::Regs& old = initial_->regs;
  EXPECT_EQ(r.rip, kHandler);
  EXPECT_EQ(r.rdi, static_cast<uint64_t>(SIGSEGV));
  EXPECT_EQ(r.rsi, r.rsp + kInfoOffset);
  EXPECT_EQ(r.rdx, r.rsp + kUcOffset);
  EXPECT_EQ(r.rax, 0u);
  // The ABI's alignment at function entry (as after a call).
  EXPECT_EQ((r.rsp + 8) % 16, 0u);
  // Below the red zone.
  EXPECT_LE(r.rsp + kFrameSize, old.rsp - 128);
  EXPECT_GE(r.rsp, stack_lo_);
  EXPECT_EQ(r.eflags & (0x400 | 0x100), 0u);
  // Callee-saved registers are left alone.
  EXPECT_EQ(r.rbx, old.rbx);
  EXPECT_EQ(r.r12, old.r12);
  EXPECT_EQ(r.fs_base, old.fs_base);

  // The handler starts with a fresh FPU state.
  uint16_t fcw;
  uint32_t mxcsr;
  std::memcpy(&fcw, task_->cpu().fp, 2);
  std::memcpy(&mxcsr, task_->cpu().fp + 24, 4);
  EXPECT_EQ(fcw, 0x37f);
  EXPECT_EQ(mxcsr, 0x1f80u);

  // The mask gains sa_mask and the signal itself.
  EXPECT_EQ(task_->signal_mask(),
            SigBit(SIGUSR1) | SigBit(SIGUSR2) | SigBit(SIGSEGV));

  ucontext_t uc;
  siginfo_t info;
  uint64_t pretcode;
  ReadFrame(&uc, &info, &pretcode);
  EXPECT_EQ(pretcode, kRestorer);
  EXPECT_EQ(info.si_signo, SIGSEGV);
  EXPECT_EQ(info.si_code, SEGV_MAPERR);
  EXPECT_EQ(reinterpret_cast<uint64_t>(info.si_addr), 0xdead000u);

  const greg_t* g = uc.uc_mcontext.gregs;
  EXPECT_EQ(static_cast<uint64_t>(g[REG_R8]), old.r8);
  EXPECT_EQ(static_cast<uint64_t>(g[REG_R15]), old.r15);
  EXPECT_EQ(static_cast<uint64_t>(g[REG_RDI]), old.rdi);
  EXPECT_EQ(static_cast<uint64_t>(g[REG_RSI]), old.rsi);
  EXPECT_EQ(static_cast<uint64_t>(g[REG_RBP]), old.rbp);
  EXPECT_EQ(static_cast<uint64_t>(g[REG_RDX]), old.rdx);
  EXPECT_EQ(static_cast<uint64_t>(g[REG_RAX]), old.rax);
  EXPECT_EQ(static_cast<uint64_t>(g[REG_RCX]), old.rcx);
  EXPECT_EQ(static_cast<uint64_t>(g[REG_RSP]), old.rsp);
  EXPECT_EQ(static_cast<uint64_t>(g[REG_RIP]), old.rip);
  EXPECT_EQ(static_cast<uint64_t>(g[REG_EFL]), old.eflags);
  EXPECT_EQ(static_cast<uint64_t>(g[REG_CSGSFS]) & 0xffff, 0x33u);
  EXPECT_EQ(static_cast<uint64_t>(g[REG_CR2]), 0xdead000u);
  EXPECT_EQ(static_cast<uint64_t>(g[REG_OLDMASK]), SigBit(SIGUSR1));
  uint64_t uc_mask;
  std::memcpy(&uc_mask, &uc.uc_sigmask, 8);
  EXPECT_EQ(uc_mask, SigBit(SIGUSR1));
  EXPECT_EQ(uc.uc_stack.ss_flags, SS_DISABLE);

  // The FPU image the task had, 64-byte aligned, above the frame and below
  // the red zone.
  uint64_t fpstate = reinterpret_cast<uint64_t>(uc.uc_mcontext.fpregs);
  EXPECT_EQ(fpstate % 64, 0u);
  EXPECT_GE(fpstate, r.rsp + kFrameSize);
  EXPECT_LE(fpstate + kFpSize, old.rsp - 128);
  std::vector<uint8_t> fp(kFpSize);
  ASSERT_EQ(mm_->CopyIn(fpstate, fp.data(), kFpSize), kFpSize);
  EXPECT_EQ(std::memcmp(fp.data(), initial_->fp, kFpSize), 0);
}

TEST_F(SignalFrameTest, SigReturnRestoresEverything) {
  InstallHandler(SIGSEGV, SA_SIGINFO | kSaRestorer, SigBit(SIGUSR2));
  task_->ForceSignal(SIGSEGV, SEGV_ACCERR, 0x1234);
  ASSERT_EQ(task_->cpu().regs.rip, kHandler);

  // The handler runs and clobbers registers and the FPU.
  ReturnFromHandler();
  platform::Regs& r = task_->cpu().regs;
  uint64_t sp = r.rsp;
  std::memset(&r, 0xee, sizeof(r));
  r.rsp = sp;
  r.eflags = 0x202;
  std::memset(task_->cpu().fp, 0x5a, 464);

  EXPECT_EQ(task_->SigReturn(), kNoReturnValue);
  ASSERT_FALSE(task_->group().exiting());
  const platform::Regs& old = initial_->regs;
  EXPECT_EQ(r.r8, old.r8);
  EXPECT_EQ(r.r9, old.r9);
  EXPECT_EQ(r.r10, old.r10);
  EXPECT_EQ(r.r11, old.r11);
  EXPECT_EQ(r.r12, old.r12);
  EXPECT_EQ(r.r13, old.r13);
  EXPECT_EQ(r.r14, old.r14);
  EXPECT_EQ(r.r15, old.r15);
  EXPECT_EQ(r.rdi, old.rdi);
  EXPECT_EQ(r.rsi, old.rsi);
  EXPECT_EQ(r.rbp, old.rbp);
  EXPECT_EQ(r.rbx, old.rbx);
  EXPECT_EQ(r.rdx, old.rdx);
  EXPECT_EQ(r.rax, old.rax);
  EXPECT_EQ(r.rcx, old.rcx);
  EXPECT_EQ(r.rsp, old.rsp);
  EXPECT_EQ(r.rip, old.rip);
  EXPECT_EQ(r.eflags, old.eflags);
  EXPECT_EQ(std::memcmp(task_->cpu().fp, initial_->fp, kFpSize), 0);
  EXPECT_EQ(task_->signal_mask(), SigBit(SIGUSR1));
}

TEST_F(SignalFrameTest, SigReturnUsesWhatTheHandlerChanged) {
  InstallHandler(SIGSEGV, SA_SIGINFO | kSaRestorer);
  task_->ForceSignal(SIGSEGV, SEGV_MAPERR, 0);
  const uint64_t uc = task_->cpu().regs.rsi - kInfoOffset + kUcOffset;
  // Skip the faulting instruction, unblock everything but try to block
  // SIGKILL, and try to raise IOPL.
  uint64_t rip = kFixedRip;
  ASSERT_EQ(mm_->CopyOut(uc + offsetof(ucontext_t, uc_mcontext.gregs) +
                             REG_RIP * 8,
                         &rip, 8),
            8);
  uint64_t eflags = initial_->regs.eflags | 0x3000;
  ASSERT_EQ(mm_->CopyOut(uc + offsetof(ucontext_t, uc_mcontext.gregs) +
                             REG_EFL * 8,
                         &eflags, 8),
            8);
  uint64_t mask = SigBit(SIGKILL) | SigBit(SIGTERM);
  ASSERT_EQ(mm_->CopyOut(uc + offsetof(ucontext_t, uc_sigmask), &mask, 8), 8);

  ReturnFromHandler();
  task_->SigReturn();
  EXPECT_EQ(task_->cpu().regs.rip, kFixedRip);
  EXPECT_EQ(task_->cpu().regs.eflags & 0x3000, 0u) << "IOPL must not change";
  EXPECT_EQ(task_->signal_mask(), SigBit(SIGTERM));
}

TEST_F(SignalFrameTest, NoDeferAndResetHand) {
  InstallHandler(SIGSEGV, SA_SIGINFO | kSaRestorer | SA_NODEFER | SA_RESETHAND);
  task_->ForceSignal(SIGSEGV, SEGV_MAPERR, 0);
  EXPECT_EQ(task_->cpu().regs.rip, kHandler);
  EXPECT_EQ(task_->signal_mask(), SigBit(SIGUSR1));
  EXPECT_EQ(task_->group().GetAction(SIGSEGV).handler, kSigDfl);
  // A second fault now takes the default action.
  task_->ForceSignal(SIGSEGV, SEGV_MAPERR, 0);
  ASSERT_TRUE(task_->group().exiting());
  EXPECT_EQ(task_->group().exit_status().signo, SIGSEGV);
}

TEST_F(SignalFrameTest, AlternateStack) {
  int64_t alt = mm_->Mmap(0, 0x4000, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS);
  ASSERT_GT(alt, 0);
  SignalStack& ss = task_->signal_stack();
  ss.sp = alt;
  ss.size = 0x4000;
  ss.flags = 0;
  InstallHandler(SIGSEGV, SA_SIGINFO | kSaRestorer | SA_ONSTACK);
  task_->ForceSignal(SIGSEGV, SEGV_MAPERR, 0);
  const uint64_t sp = task_->cpu().regs.rsp;
  EXPECT_GE(sp, static_cast<uint64_t>(alt));
  EXPECT_LT(sp, static_cast<uint64_t>(alt) + 0x4000 - kFrameSize);
  ucontext_t uc;
  siginfo_t info;
  uint64_t pretcode;
  ReadFrame(&uc, &info, &pretcode);
  EXPECT_EQ(reinterpret_cast<uint64_t>(uc.uc_stack.ss_sp),
            static_cast<uint64_t>(alt));
  EXPECT_EQ(uc.uc_stack.ss_size, 0x4000u);
  EXPECT_EQ(uc.uc_stack.ss_flags, 0);  // the task was not on it

  ReturnFromHandler();
  task_->SigReturn();
  EXPECT_EQ(task_->cpu().regs.rsp, initial_->regs.rsp);
  EXPECT_EQ(task_->signal_stack().sp, static_cast<uint64_t>(alt));
  EXPECT_EQ(task_->signal_stack().flags, 0);
}

TEST_F(SignalFrameTest, WithoutRestorerTheTaskDies) {
  // x86-64 Linux cannot return from a handler without sa_restorer: the
  // frame setup fails and the task gets SIGSEGV.
  InstallHandler(SIGUSR2, SA_SIGINFO);
  task_->ForceSignal(SIGUSR2, SI_KERNEL, 0);
  ASSERT_TRUE(task_->group().exiting());
  EXPECT_EQ(task_->group().exit_status().signo, SIGSEGV);
  EXPECT_TRUE(task_->group().exit_status().core);
}

TEST_F(SignalFrameTest, UnwritableStackKillsWithSegv) {
  InstallHandler(SIGFPE, SA_SIGINFO | kSaRestorer);
  task_->cpu().regs.rsp = 0x20000000;  // nothing mapped there
  task_->ForceSignal(SIGFPE, FPE_INTDIV, 0x400500);
  ASSERT_TRUE(task_->group().exiting());
  EXPECT_EQ(task_->group().exit_status().signo, SIGSEGV);
  EXPECT_TRUE(task_->group().exit_status().core);
}

TEST_F(SignalFrameTest, SigReturnWithABadFrameKills) {
  task_->cpu().regs.rsp = 0x20000008;
  EXPECT_EQ(task_->SigReturn(), kNoReturnValue);
  ASSERT_TRUE(task_->group().exiting());
  EXPECT_EQ(task_->group().exit_status().signo, SIGSEGV);
}

TEST_F(SignalFrameTest, BlockedForcedSignalTakesTheDefaultAction) {
  InstallHandler(SIGUSR1, SA_SIGINFO | kSaRestorer);  // SIGUSR1 is blocked
  task_->ForceSignal(SIGUSR1, SI_KERNEL, 0);
  EXPECT_NE(task_->cpu().regs.rip, kHandler);
  ASSERT_TRUE(task_->group().exiting());
  EXPECT_EQ(task_->group().exit_status().signo, SIGUSR1);
  EXPECT_FALSE(task_->group().exit_status().core);
}

// --- default actions ---------------------------------------------------------

TEST_F(SignalFrameTest, DefaultSegvKillsWithCore) {
  task_->ForceSignal(SIGSEGV, SEGV_MAPERR, 0x10);
  ASSERT_TRUE(task_->group().exiting());
  ExitStatus st = task_->group().exit_status();
  EXPECT_EQ(st.signo, SIGSEGV);
  EXPECT_TRUE(st.core);
  EXPECT_EQ(st.WaitStatus(), SIGSEGV | 0x80);
  EXPECT_EQ(st.ShellStatus(), 128 + SIGSEGV);
  EXPECT_EQ(task_->cpu().regs.rip, initial_->regs.rip);
}

TEST_F(SignalFrameTest, IgnoredForcedSegvStillKills) {
  SigAction ign;
  ign.handler = kSigIgn;
  task_->group().SetAction(SIGSEGV, ign);
  task_->ForceSignal(SIGSEGV, SEGV_MAPERR, 0x10);
  ASSERT_TRUE(task_->group().exiting());
  EXPECT_EQ(task_->group().exit_status().signo, SIGSEGV);
}

TEST_F(SignalFrameTest, DefaultTermKillsWithoutCore) {
  task_->ForceSignal(SIGTERM, SI_KERNEL, 0);
  ASSERT_TRUE(task_->group().exiting());
  ExitStatus st = task_->group().exit_status();
  EXPECT_EQ(st.signo, SIGTERM);
  EXPECT_FALSE(st.core);
  EXPECT_EQ(st.WaitStatus(), SIGTERM);
  // The first exit status wins.
  task_->ForceSignal(SIGSEGV, SEGV_MAPERR, 0);
  EXPECT_EQ(task_->group().exit_status().signo, SIGTERM);
}

TEST_F(SignalFrameTest, DefaultIgnoreAndStop) {
  task_->ForceSignal(SIGCHLD, SI_KERNEL, 0);
  task_->ForceSignal(SIGWINCH, SI_KERNEL, 0);
  task_->ForceSignal(SIGCONT, SI_KERNEL, 0);
  EXPECT_FALSE(task_->group().exiting());
  // init's process group has no parent outside it: orphaned, so the
  // terminal stop signals are discarded; SIGSTOP stops it all the same.
  task_->ForceSignal(SIGTSTP, SI_KERNEL, 0);
  EXPECT_FALSE(task_->group().exiting());
  EXPECT_FALSE(task_->group().stop_requested());
  task_->ForceSignal(SIGSTOP, SI_KERNEL, 0);
  EXPECT_FALSE(task_->group().exiting());
  EXPECT_TRUE(task_->group().stop_requested());
}

TEST(ExitStatusTest, Encodings) {
  ExitStatus code{3, 0, false};
  EXPECT_EQ(code.WaitStatus(), 3 << 8);
  EXPECT_EQ(code.ShellStatus(), 3);
  ExitStatus big{0x1ff, 0, false};
  EXPECT_EQ(big.WaitStatus(), 0xff00);
  EXPECT_EQ(big.ShellStatus(), 0xff);
  ExitStatus kill{0, SIGKILL, false};
  EXPECT_EQ(kill.WaitStatus(), SIGKILL);
  EXPECT_EQ(kill.ShellStatus(), 137);
}

}  // namespace
}  // namespace sandboxd::kernel
