// Tests that need /dev/kvm. Where there is none (or no usable flavour),
// each is skipped with the reason.
#include <sys/ioctl.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>

#include "gtest/gtest.h"
#include "platforms/kvm/guest_pvm.h"
#include "platforms/kvm/probe.h"
#include "platforms/kvm/stub_pvm.h"
#include "platforms/kvm/vm.h"

namespace sandboxd::kvm {
namespace {

// The flavour of this host, or a skip reason.
FlavourInfo HostFlavour(std::string* skip) {
  auto kvm = OpenKvm();
  if (!kvm.ok()) {
    *skip = std::string(kvm.status().message());
    return {};
  }
  FlavourInfo f = DetectFlavour(kvm->get());
  if (f.flavour == Flavour::kNone) *skip = "no usable KVM: " + f.reason;
  return f;
}

#define REQUIRE_KVM(flavour_var)                         \
  std::string skip_;                                     \
  FlavourInfo flavour_var = HostFlavour(&skip_);         \
  if (!skip_.empty()) GTEST_SKIP() << skip_;

TEST(Kvm, VmSlotsAndTimings) {
  REQUIRE_KVM(f);
  auto vm = Vm::Create(f.flavour);
  ASSERT_TRUE(vm.ok()) << vm.status();
  // A memory-file-like slot at GPA 0 over a shared mapping.
  const size_t size = 64ull << 20;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  Mapping m(p, size);
  ASSERT_TRUE((*vm)->SetSlot(0, 0, p, size,
                             &(*vm)->mutable_timings().memfile_slot_ns)
                  .ok());
  auto mem = PrivateMemory::Create(vm->get(), 1, 1 << 20);
  ASSERT_TRUE(mem.ok()) << mem.status();
  // Overlapping slots are refused, with the slot in the message.
  auto bad = (*vm)->SetSlot(2, 0x1000, p, 4096);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("slot 2"), std::string::npos);
  const VmTimings& t = (*vm)->timings();
  EXPECT_GT(t.create_vm_ns, 0u);
  EXPECT_GT(t.memfile_slot_ns, 0u);
  EXPECT_GT(t.private_slot_ns, 0u);
  std::printf("flavour %s; open %.1f us, create VM %.1f us, cpuid %.1f us, "
              "64 MiB slot %.1f us, 1 MiB slot %.1f us\n",
              FlavourName(f.flavour), t.open_kvm_ns / 1e3,
              t.create_vm_ns / 1e3, t.supported_cpuid_ns / 1e3,
              t.memfile_slot_ns / 1e3, t.private_slot_ns / 1e3);
}

TEST(Kvm, PrivateMemoryPagesAreZeroedAndReusedAfterQuarantine) {
  REQUIRE_KVM(f);
  auto vm = Vm::Create(f.flavour);
  ASSERT_TRUE(vm.ok()) << vm.status();
  auto mem = PrivateMemory::Create(vm->get(), 1, 3 * 4096);
  ASSERT_TRUE(mem.ok()) << mem.status();
  auto a = (*mem)->AllocPage();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->phys, kPrivateBase);
  a->host[7] = 42;
  (*mem)->FreeTable(*a);
  EXPECT_EQ((*mem)->quarantined(), 1u);
  // Quarantined: the next page is another one.
  auto b = (*mem)->AllocPage();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->phys, kPrivateBase + 4096);
  EXPECT_EQ((*mem)->HostOf(b->phys), b->host);
  ASSERT_TRUE((*mem)->AllocPage().ok());
  // All in use or quarantined, no reclaim callback: exhausted.
  EXPECT_EQ((*mem)->AllocPage().status().code(),
            absl::StatusCode::kResourceExhausted);
  // With one, the allocator asks for the flush and takes the page back,
  // zeroed.
  int reclaims = 0;
  PrivateMemory* m = mem->get();
  m->set_reclaim([&reclaims, m] {
    ++reclaims;
    m->ReleaseQuarantine();
    return absl::OkStatus();
  });
  auto c = m->AllocPage();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(reclaims, 1);
  EXPECT_EQ(c->phys, kPrivateBase);
  EXPECT_EQ(c->host[7], 0u);
  EXPECT_EQ(m->quarantined(), 0u);
  // Nothing quarantined: no reclaim helps, none is asked for.
  EXPECT_EQ(m->AllocPage().status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(reclaims, 1);
}

TEST(Kvm, VcpuPool) {
  REQUIRE_KVM(f);
  auto vm = Vm::Create(f.flavour);
  ASSERT_TRUE(vm.ok()) << vm.status();
  const uint64_t t0 = MonotonicNs();
  auto pool = VcpuPool::Create(vm->get(), 16);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const uint64_t sync_ns = MonotonicNs() - t0;
  // vCPU 0 is there at once.
  auto v0 = (*pool)->Take();
  ASSERT_TRUE(v0.ok()) << v0.status();
  EXPECT_EQ((*v0)->id(), 0);
  EXPECT_NE((*v0)->run(), nullptr);
  (*pool)->JoinFiller();
  const uint64_t all_ns = MonotonicNs() - t0;
  EXPECT_EQ((*pool)->free_count(), 15u);
  // The filtered CPUID is installed: KVM_GET_MSRS works and EFER exists.
  EXPECT_TRUE((*v0)->GetMsr(0xc0000080).ok());
  (*pool)->Give(std::move(*v0));
  EXPECT_EQ((*pool)->free_count(), 16u);
  // Past the target, Take creates more.
  std::vector<std::unique_ptr<Vcpu>> all;
  for (int i = 0; i < 17; ++i) {
    auto v = (*pool)->Take();
    ASSERT_TRUE(v.ok()) << v.status();
    all.push_back(std::move(*v));
  }
  EXPECT_EQ(all.back()->id(), 16);
  std::printf("vCPU 0: %.1f us (create VM to first vCPU: %.1f us); 16 vCPUs "
              "in the background: %.1f us\n",
              (*vm)->timings().first_vcpu_ns / 1e3, sync_ns / 1e3,
              all_ns / 1e3);
}

TEST(Kvm, ProbeRoundTrip) {
  REQUIRE_KVM(f);
  if (f.flavour == Flavour::kHardware) {
    GTEST_SKIP() << "hardware KVM: the hardware flavour of the stub is not "
                    "written yet";
  }
  auto r = RunProbe(500, absl::Seconds(5));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->round_trips, 500);
  EXPECT_GT(r->round_trip_median_ns, 0u);
  std::printf("probe (%s): first entry %.1f us, syscall round trip median "
              "%.1f us, min %.1f us over %d\n",
              FlavourName(r->flavour.flavour), r->first_entry_ns / 1e3,
              r->round_trip_median_ns / 1e3, r->round_trip_min_ns / 1e3,
              r->round_trips);
}

// The probe must be able to fail: a guest that spins, one that faults,
// and one that loses the value the host returned.
TEST(Kvm, ProbeFailsWhenTheGuestMisbehaves) {
  REQUIRE_KVM(f);
  if (f.flavour != Flavour::kPvm) GTEST_SKIP() << "PVM-only guest code";
  const uint8_t spin[] = {0xeb, 0xfe};  // 1: jmp 1b
  auto r = RunProbeWithCode(spin, sizeof(spin), 10, absl::Milliseconds(300));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded)
      << r.status();
  EXPECT_NE(r.status().message().find("rip=0x400000"), std::string::npos)
      << r.status();

  const uint8_t ud2[] = {0x0f, 0x0b};
  r = RunProbeWithCode(ud2, sizeof(ud2), 10, absl::Seconds(2));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("SHUTDOWN"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("exception=6"), std::string::npos)
      << r.status();

  // syscall; xor %edi,%edi; jmp: the result never reaches the next call.
  const uint8_t lose[] = {0x0f, 0x05, 0x31, 0xff, 0xeb, 0xfa};
  r = RunProbeWithCode(lose, sizeof(lose), 10, absl::Seconds(2));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("round trip 1 "), std::string::npos)
      << r.status();
}

// A guest whose user code faults must not look like a syscall: the probe's
// decoder reports the exit with the exception.
TEST(Kvm, UserExceptionStopsTheVcpuWithTheVector) {
  REQUIRE_KVM(f);
  if (f.flavour != Flavour::kPvm) GTEST_SKIP() << "PVM-only behaviour";
  auto vm = Vm::Create(f.flavour);
  ASSERT_TRUE(vm.ok()) << vm.status();
  auto mem = PrivateMemory::Create(vm->get(), 1, 1 << 20);
  ASSERT_TRUE(mem.ok());
  auto pt = PageTables::Create(mem->get());
  ASSERT_TRUE(pt.ok());
  ASSERT_TRUE(InstallPvmStub(mem->get(), &*pt).ok());
  auto code = (*mem)->AllocPage();
  ASSERT_TRUE(code.ok());
  const uint8_t ud2[] = {0x0f, 0x0b};
  std::memcpy(code->host, ud2, sizeof(ud2));
  ASSERT_TRUE(pt->Map(0x400000, code->phys, k4K, PteAccess{.exec = true}).ok());
  auto v = (*vm)->CreateVcpu(0);
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(InitPvmVcpu(**v).ok());
  kvm_sregs s;
  ASSERT_TRUE((*v)->GetSregs(&s).ok());
  UserModeSregs(&s, pt->root(), 0, 0);
  ASSERT_TRUE((*v)->SetSregs(s).ok());
  kvm_regs r = {};
  r.rip = 0x400000;
  r.rflags = 0x202;
  ASSERT_TRUE((*v)->SetRegs(r).ok());
  auto reason = (*v)->Run();
  ASSERT_TRUE(reason.ok()) << reason.status();
  EXPECT_EQ(*reason, static_cast<uint32_t>(KVM_EXIT_SHUTDOWN));
  kvm_vcpu_events ev = {};
  ASSERT_EQ(ioctl((*v)->fd(), KVM_GET_VCPU_EVENTS, &ev), 0);
  EXPECT_EQ(ev.exception.nr, 6);  // #UD
  std::string d = DescribeExit(**v, *reason);
  EXPECT_NE(d.find("SHUTDOWN"), std::string::npos) << d;
  EXPECT_NE(d.find("rip=0x400000"), std::string::npos) << d;
}

}  // namespace
}  // namespace sandboxd::kvm
