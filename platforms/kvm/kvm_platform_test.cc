#include "platforms/kvm/kvm_platform.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <linux/kvm.h>
#include <sys/ioctl.h>

#include <algorithm>
#include <map>
#include <string>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sandboxd::kvm {
namespace {

using platform::CpuState;
using platform::Event;
using platform::Prot;

constexpr uintptr_t kCode = 0x10000;
constexpr uintptr_t kData = 0x20000;
// Memory-file offsets: code, then data pages A and B.
constexpr off_t kCodeOff = 0, kPageA = 4096, kPageB = 8192;

class KvmPlatformTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    memfd_ = memfd_create("kvm-platform-test", 0);
    ASSERT_GE(memfd_, 0);
    ASSERT_EQ(ftruncate(memfd_, 3 * 4096), 0);
    auto p = KvmPlatform::Create(memfd_, 1ull << 30);
    if (!p.ok()) {
      skip_ = std::string(p.status().message());
      return;
    }
    platform_ = p->release();
  }

  void SetUp() override {
    if (platform_ == nullptr) GTEST_SKIP() << skip_;
  }

  void Load(const std::vector<uint8_t>& code, uint64_t a, uint64_t b) {
    ASSERT_EQ(pwrite(memfd_, code.data(), code.size(), kCodeOff),
              static_cast<ssize_t>(code.size()));
    ASSERT_EQ(pwrite(memfd_, &a, 8, kPageA), 8);
    ASSERT_EQ(pwrite(memfd_, &b, 8, kPageB), 8);
  }

  std::unique_ptr<platform::AddressSpace> NewSpace() {
    auto as = platform_->NewAddressSpace();
    EXPECT_TRUE(as.ok()) << as.status();
    EXPECT_TRUE((*as)->MapFile(kCode, memfd_, kCodeOff, 4096,
                               Prot{true, false, true}).ok());
    return std::move(*as);
  }

  std::unique_ptr<platform::Context> NewContext() {
    auto c = platform_->NewContext();
    EXPECT_TRUE(c.ok()) << c.status();
    return std::move(*c);
  }

  static CpuState StartAt(uintptr_t rip) {
    CpuState cpu;
    cpu.regs.rip = rip;
    cpu.regs.eflags = 0x202;
    return cpu;
  }

  static int memfd_;
  static KvmPlatform* platform_;
  static std::string skip_;
};

int KvmPlatformTest::memfd_ = -1;
KvmPlatform* KvmPlatformTest::platform_ = nullptr;
std::string KvmPlatformTest::skip_;

TEST_F(KvmPlatformTest, SyscallThenIllegalInstruction) {
  // mov $39,%eax; syscall; ud2
  Load({0xb8, 39, 0, 0, 0, 0x0f, 0x05, 0x0f, 0x0b}, 0, 0);
  auto as = NewSpace();
  auto ctx = NewContext();
  CpuState cpu = StartAt(kCode);
  cpu.regs.rdi = 0x1111;
  Event ev = ctx->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu.regs.orig_rax, 39u);
  EXPECT_EQ(cpu.regs.rip, kCode + 7);
  EXPECT_EQ(cpu.regs.rcx, kCode + 7);
  EXPECT_EQ(cpu.regs.rdi, 0x1111u);
  EXPECT_GT(cpu.fp_size, 512u);
  cpu.regs.rax = 1234;
  ev = ctx->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kException) << ev.detail;
  EXPECT_EQ(ev.signo, SIGILL);
  EXPECT_EQ(cpu.regs.rip, kCode + 7);
  EXPECT_EQ(cpu.regs.rax, 1234u);
}

TEST_F(KvmPlatformTest, FaultThenMapThenRemapThenUnmap) {
  // 1: mov kData,%rax; syscall; jmp 1b
  Load({0x48, 0x8b, 0x04, 0x25, 0x00, 0x00, 0x02, 0x00, 0x0f, 0x05, 0xeb,
        0xf4},
       0xaaaa, 0xbbbb);
  auto as = NewSpace();
  auto ctx = NewContext();
  CpuState cpu = StartAt(kCode);
  Event ev = ctx->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kFault) << ev.detail;
  EXPECT_EQ(ev.addr, kData);
  EXPECT_FALSE(ev.write);
  EXPECT_EQ(cpu.regs.rip, kCode);
  const uint64_t flushes = platform_->shadow_flushes();
  const uint64_t zaps = platform_->shadow_zaps();

  ASSERT_TRUE(as->MapFile(kData, memfd_, kPageA, 4096, Prot{true, true, false}).ok());
  ev = ctx->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu.regs.rax, 0xaaaau);

  // The same address now maps another page: the guest must see it.
  ASSERT_TRUE(as->MapFile(kData, memfd_, kPageB, 4096, Prot{true, true, false}).ok());
  ev = ctx->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu.regs.rax, 0xbbbbu);

  // And read-only, then gone: each change of a present 4 KiB entry drops
  // KVM's shadow entries for the old page at once (a zap), with no flush
  // of the whole shadow MMU.
  ASSERT_TRUE(as->MapFile(kData, memfd_, kPageB, 4096, Prot{true, false, false}).ok());
  ev = ctx->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu.regs.rax, 0xbbbbu);
  as->Unmap(kData, 4096);
  ev = ctx->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kFault) << ev.detail;
  EXPECT_EQ(ev.addr, kData);
  EXPECT_EQ(platform_->shadow_flushes(), flushes);
  EXPECT_EQ(platform_->shadow_zaps(), zaps + 3);
  std::printf("shadow zaps so far: %lu, %.1f us each\n",
              static_cast<unsigned long>(platform_->shadow_zaps()),
              platform_->shadow_zap_ns() / 1e3 / platform_->shadow_zaps());
}

// Address spaces come and go (exec, exit) without a flush: their table
// pages wait in the quarantine, and a new space's tables are other pages.
TEST_F(KvmPlatformTest, SpacesComeAndGoWithoutAFlush) {
  // 1: mov kData,%rax; syscall; jmp 1b
  Load({0x48, 0x8b, 0x04, 0x25, 0x00, 0x00, 0x02, 0x00, 0x0f, 0x05, 0xeb,
        0xf4},
       0xaaaa, 0xbbbb);
  auto ctx = NewContext();
  const uint64_t flushes = platform_->shadow_flushes();
  for (int i = 0; i < 20; ++i) {
    auto as = NewSpace();
    const off_t page = i % 2 == 0 ? kPageA : kPageB;
    ASSERT_TRUE(as->MapFile(kData, memfd_, page, 4096, Prot{true, true, false}).ok());
    CpuState cpu = StartAt(kCode);
    Event ev = ctx->Switch(*as, cpu);
    ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
    EXPECT_EQ(cpu.regs.rax, i % 2 == 0 ? 0xaaaau : 0xbbbbu) << i;
    ctx->Release();
  }
  EXPECT_EQ(platform_->shadow_flushes(), flushes);
}

// Round trips through the whole Switch path (registers, segment state,
// the FPU state), for the README: the FPU state left in the vCPU (lazy,
// the default) against KVM_SET_XSAVE + KVM_GET_XSAVE every Switch (eager),
// in interleaved rounds of 100.
TEST_F(KvmPlatformTest, SwitchRoundTripTime) {
  Load({0x0f, 0x05, 0xeb, 0xfc}, 0, 0);  // 1: syscall; jmp 1b
  KvmOptions eager_opts;
  eager_opts.lazy_fp = false;
  auto eager = KvmPlatform::Create(memfd_, 1ull << 30, eager_opts);
  ASSERT_TRUE(eager.ok()) << eager.status();
  struct Side {
    KvmPlatform* p;
    std::unique_ptr<platform::AddressSpace> as;
    std::unique_ptr<platform::Context> ctx;
    CpuState cpu;
    std::vector<uint64_t> t;
  } sides[2];
  sides[0].p = platform_;
  sides[1].p = eager->get();
  for (Side& s : sides) {
    auto as = s.p->NewAddressSpace();
    ASSERT_TRUE(as.ok());
    s.as = std::move(*as);
    ASSERT_TRUE(s.as->MapFile(kCode, memfd_, kCodeOff, 4096,
                              Prot{true, false, true}).ok());
    s.ctx = std::move(*s.p->NewContext());
    s.cpu = StartAt(kCode);
  }
  for (int round = 0; round < 6; ++round) {
    for (Side& s : sides) {
      for (int i = 0; i < 100; ++i) {
        const uint64_t t0 = MonotonicNs();
        Event ev = s.ctx->Switch(*s.as, s.cpu);
        s.t.push_back(MonotonicNs() - t0);
        ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
      }
    }
  }
  for (int i = 0; i < 2; ++i) {
    std::vector<uint64_t>& t = sides[i].t;
    std::sort(t.begin(), t.end());
    std::printf("Switch syscall round trip, FPU %s: median %.1f us, min %.1f us\n",
                i == 0 ? "lazy " : "eager", t[t.size() / 2] / 1e3, t[0] / 1e3);
  }
  sides[1].ctx.reset();
  sides[1].as.reset();
}

// KVM's binary statistics of one vCPU (KVM_GET_STATS_FD): name -> value.
std::map<std::string, uint64_t> VcpuStats(int vcpu_fd) {
  std::map<std::string, uint64_t> out;
  const int fd = ioctl(vcpu_fd, KVM_GET_STATS_FD, nullptr);
  if (fd < 0) return out;
  kvm_stats_header h;
  if (pread(fd, &h, sizeof(h), 0) != sizeof(h)) return out;
  // The descriptor's fixed part is 16 bytes, then the name; the uapi
  // struct's flexible array has another size in C++ (as kvm_abi.h notes).
  constexpr size_t kDescFixed = 16;
  const size_t desc_size = kDescFixed + h.name_size;
  std::vector<uint8_t> descs(desc_size * h.num_desc);
  if (pread(fd, descs.data(), descs.size(), h.desc_offset) !=
      static_cast<ssize_t>(descs.size())) {
    close(fd);
    return out;
  }
  for (uint32_t i = 0; i < h.num_desc; ++i) {
    const uint8_t* d = &descs[i * desc_size];
    uint32_t offset;
    std::memcpy(&offset, d + 8, 4);
    const std::string name(reinterpret_cast<const char*>(d + kDescFixed),
                           strnlen(reinterpret_cast<const char*>(d + kDescFixed),
                                   h.name_size));
    uint64_t v = 0;
    if (pread(fd, &v, 8, h.data_offset + offset) == 8) out[name] = v;
  }
  close(fd);
  return out;
}

// Where a syscall's time goes on this host: the KVM_RUN ioctl alone (an
// immediate exit, no guest entry), the whole round trip, and what KVM
// counted per round trip (exits, emulated instructions, faults...).
TEST_F(KvmPlatformTest, WhereASyscallsTimeGoes) {
  Load({0x0f, 0x05, 0xeb, 0xfc}, 0, 0);  // 1: syscall; jmp 1b
  auto as = NewSpace();
  auto ctx = NewContext();
  auto* kctx = static_cast<KvmContext*>(ctx.get());
  CpuState cpu = StartAt(kCode);
  ASSERT_EQ(ctx->Switch(*as, cpu).kind, Event::Kind::kSyscall);
  const Vcpu* v = kctx->vcpu();
  ASSERT_NE(v, nullptr);
  std::vector<uint64_t> ioctl_only;
  for (int i = 0; i < 300; ++i) {
    v->run()->immediate_exit = 1;
    v->run()->kvm_dirty_regs = 0;
    const uint64_t t0 = MonotonicNs();
    ioctl(v->fd(), KVM_RUN, 0);
    ioctl_only.push_back(MonotonicNs() - t0);
    v->run()->immediate_exit = 0;
  }
  const auto before = VcpuStats(v->fd());
  std::vector<uint64_t> trip;
  constexpr int kTrips = 300;
  for (int i = 0; i < kTrips; ++i) {
    const uint64_t t0 = MonotonicNs();
    ASSERT_EQ(ctx->Switch(*as, cpu).kind, Event::Kind::kSyscall);
    trip.push_back(MonotonicNs() - t0);
  }
  const auto after = VcpuStats(v->fd());
  std::sort(ioctl_only.begin(), ioctl_only.end());
  std::sort(trip.begin(), trip.end());
  std::printf("KVM_RUN with immediate_exit (no guest entry): median %.1f us\n",
              ioctl_only[ioctl_only.size() / 2] / 1e3);
  std::printf("Switch syscall round trip: median %.1f us\n",
              trip[trip.size() / 2] / 1e3);
  for (const auto& [name, value] : after) {
    auto it = before.find(name);
    const uint64_t d = value - (it == before.end() ? 0 : it->second);
    if (d == 0 || name.find("halt") != std::string::npos) continue;
    std::printf("  per round trip: %s %.2f\n", name.c_str(),
                static_cast<double>(d) / kTrips);
  }
}

TEST_F(KvmPlatformTest, WriteFaultOnReadOnlyPage) {
  // movq $7,kData
  Load({0x48, 0xc7, 0x04, 0x25, 0x00, 0x00, 0x02, 0x00, 0x07, 0, 0, 0}, 0, 0);
  auto as = NewSpace();
  ASSERT_TRUE(as->MapFile(kData, memfd_, kPageA, 4096, Prot{true, false, false}).ok());
  auto ctx = NewContext();
  CpuState cpu = StartAt(kCode);
  Event ev = ctx->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kFault) << ev.detail;
  EXPECT_EQ(ev.addr, kData);
  EXPECT_TRUE(ev.write);
}

TEST_F(KvmPlatformTest, FsBaseAndXmmState) {
  // mov %fs:8,%rax; movq %xmm0,%rdx; syscall; ud2
  Load({0x64, 0x48, 0x8b, 0x04, 0x25, 0x08, 0, 0, 0, 0x66, 0x48, 0x0f,
        0x7e, 0xc2, 0x0f, 0x05, 0x0f, 0x0b},
       0, 0);
  const uint64_t tls = 0x5151;
  ASSERT_EQ(pwrite(memfd_, &tls, 8, kPageA + 8), 8);
  auto as = NewSpace();
  ASSERT_TRUE(as->MapFile(kData, memfd_, kPageA, 4096, Prot{true, true, false}).ok());
  auto ctx = NewContext();
  CpuState cpu = StartAt(kCode);
  cpu.regs.fs_base = kData;
  Event ev = ctx->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu.regs.rax, tls);
  EXPECT_EQ(cpu.regs.rdx, 0u);
  EXPECT_EQ(cpu.regs.fs_base, kData);
  // xmm0 lives at byte 160 of the fxsave area; set it and run again. The
  // state stayed in the vCPU: sync it before writing, as sigreturn does.
  const uint64_t x = 0x1122334455667788ull;
  ctx->SyncFp(cpu);
  EXPECT_EQ(cpu.fp_live, nullptr);
  std::memcpy(cpu.fp + 160, &x, 8);
  cpu.regs.rip = kCode;
  ev = ctx->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu.regs.rdx, x);
}

// Syscall exits leave the FPU state in the vCPU: one KVM_SET_XSAVE at the
// start, none after, and KVM_GET_XSAVE only when the Sentry asks.
TEST_F(KvmPlatformTest, FpStaysInTheVcpuAcrossSyscalls) {
  // 1: movq %rdi,%xmm1; syscall; jmp 1b
  Load({0x66, 0x48, 0x0f, 0x6e, 0xcf, 0x0f, 0x05, 0xeb, 0xf7}, 0, 0);
  auto as = NewSpace();
  auto ctx = NewContext();
  auto* kctx = static_cast<KvmContext*>(ctx.get());
  CpuState cpu = StartAt(kCode);
  cpu.regs.rdi = 0x4242;
  for (int i = 0; i < 10; ++i) {
    Event ev = ctx->Switch(*as, cpu);
    ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  }
  EXPECT_EQ(kctx->xsave_loads(), 1u);
  EXPECT_EQ(kctx->xsave_saves(), 0u);
  EXPECT_EQ(cpu.fp_live, ctx.get());
  ctx->SyncFp(cpu);
  EXPECT_EQ(kctx->xsave_saves(), 1u);
  EXPECT_EQ(cpu.fp_live, nullptr);
  uint64_t xmm1;
  std::memcpy(&xmm1, cpu.fp + 176, 8);  // xmm1 at byte 160 + 16
  EXPECT_EQ(xmm1, 0x4242u);
  uint16_t fcw;
  std::memcpy(&fcw, cpu.fp, 2);
  EXPECT_EQ(fcw, 0x37f);
  // A replaced image (sigreturn, execve) is loaded again.
  cpu.ResetFp();
  Event ev = ctx->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(kctx->xsave_loads(), 2u);
  // Release hands the live state back to the task.
  cpu.regs.rdi = 0x4343;
  ev = ctx->Switch(*as, cpu);
  ctx->Release();
  EXPECT_EQ(cpu.fp_live, nullptr);
  std::memcpy(&xmm1, cpu.fp + 176, 8);
  EXPECT_EQ(xmm1, 0x4343u);
}

// The FPU state survives an exception exit (a triple fault on PVM) when
// it stays in the vCPU: xmm1 set, ud2, then xmm1 read back after the
// Sentry resumed past the ud2.
TEST_F(KvmPlatformTest, FpSurvivesAnException) {
  // movq %rdi,%xmm1; ud2; movq %xmm1,%rsi; syscall
  Load({0x66, 0x48, 0x0f, 0x6e, 0xcf, 0x0f, 0x0b, 0x66, 0x48, 0x0f, 0x7e,
        0xce, 0x0f, 0x05},
       0, 0);
  auto as = NewSpace();
  auto ctx = NewContext();
  CpuState cpu = StartAt(kCode);
  cpu.regs.rdi = 0x7777;
  Event ev = ctx->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kException) << ev.detail;
  EXPECT_EQ(ev.signo, SIGILL);
  EXPECT_EQ(cpu.regs.rip, kCode + 5);
  cpu.regs.rip += 2;
  ev = ctx->Switch(*as, cpu);
  ASSERT_EQ(ev.kind, Event::Kind::kSyscall) << ev.detail;
  EXPECT_EQ(cpu.regs.rsi, 0x7777u);
}

TEST_F(KvmPlatformTest, PoolIsTwiceTheCpusAndReadyAfterFinishSetup) {
  EXPECT_EQ(DefaultPoolSize(), 2 * static_cast<size_t>(sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_EQ(platform_->options().pool_size, DefaultPoolSize());
  ASSERT_TRUE(platform_->FinishSetup().ok());
  EXPECT_EQ(platform_->pool()->free_count(), DefaultPoolSize());
}

TEST_F(KvmPlatformTest, MemoryBarrier) {
  // The registration was issued at Create; the first barrier waits for it.
  EXPECT_TRUE(platform_->MemoryBarrier().ok());
  EXPECT_TRUE(platform_->MemoryBarrier().ok());
}

TEST(KvmPoolModeTest, EagerMakesThePoolInFinishSetup) {
  int fd = memfd_create("kvm-eager-test", 0);
  ASSERT_GE(fd, 0);
  KvmOptions o;
  o.pool_size = 3;
  o.pool_mode = PoolMode::kEager;
  auto p = KvmPlatform::Create(fd, 1ull << 30, o);
  if (!p.ok()) GTEST_SKIP() << p.status();
  EXPECT_EQ((*p)->pool(), nullptr);
  ASSERT_TRUE((*p)->FinishSetup().ok());
  ASSERT_NE((*p)->pool(), nullptr);
  EXPECT_EQ((*p)->pool()->free_count(), 3u);
  EXPECT_TRUE((*p)->MemoryBarrier().ok());
  p->reset();
  close(fd);
}

TEST(KvmPoolModeTest, Parse) {
  EXPECT_EQ(*ParsePoolMode("background"), PoolMode::kBackground);
  EXPECT_EQ(*ParsePoolMode("eager"), PoolMode::kEager);
  EXPECT_FALSE(ParsePoolMode("lazy").ok());
}

TEST_F(KvmPlatformTest, InterruptStopsASpinningGuest) {
  Load({0xeb, 0xfe}, 0, 0);  // 1: jmp 1b
  auto as = NewSpace();
  auto ctx = NewContext();
  CpuState cpu = StartAt(kCode);
  std::thread t([&] {
    usleep(100 * 1000);
    ctx->Interrupt();
  });
  Event ev = ctx->Switch(*as, cpu);
  t.join();
  EXPECT_EQ(ev.kind, Event::Kind::kInterrupted) << ev.detail;
  EXPECT_EQ(cpu.regs.rip, kCode);
  // An interrupt before Switch makes the next Switch return at once.
  ctx->Interrupt();
  ev = ctx->Switch(*as, cpu);
  EXPECT_EQ(ev.kind, Event::Kind::kInterrupted);
}

}  // namespace
}  // namespace sandboxd::kvm
