// The hardware flavour's stub, tested without hardware: its bytes, its
// tables, the registers it is entered with and the decoding of its exits
// from a synthetic kvm_run and stack.
#include "platforms/kvm/guest_hw.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "platforms/kvm/guest_pvm.h"

namespace sandboxd::kvm::hw {
namespace {

// A TableAllocator over a plain buffer (GPA = offset + kBase).
class BufferAllocator : public TableAllocator {
 public:
  static constexpr uint64_t kBase = 1ull << 40;
  BufferAllocator() : mem_(64 * 512) {}
  absl::StatusOr<TablePage> AllocTable() override {
    if (next_ >= 64) return absl::ResourceExhaustedError("full");
    uint64_t* host = &mem_[next_ * 512];
    std::memset(host, 0, 4096);
    return TablePage{host, kBase + 4096 * next_++};
  }
  void FreeTable(TablePage) override {}
  uint64_t* HostOf(uint64_t phys) override {
    return &mem_[(phys - kBase) / 8];
  }

 private:
  std::vector<uint64_t> mem_;
  uint64_t next_ = 0;
};

class StubRegionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    region_.assign(RegionBytes(kVcpus), 0);
    ASSERT_TRUE(WriteStubRegion(region_.data(), kVcpus).ok());
  }
  static constexpr int kVcpus = 4;
  std::vector<uint8_t> region_;
};

TEST_F(StubRegionTest, SyscallEntryIsOutThenSysret) {
  const uint8_t want[] = {0xe6, 0xe1, 0x48, 0x0f, 0x07};
  EXPECT_EQ(std::memcmp(region_.data() + kSyscallEntry, want, sizeof(want)), 0);
  EXPECT_EQ(kSysretAt, 2u);  // the sysretq follows the 2-byte OUT
}

TEST_F(StubRegionTest, EveryVectorHasAnOutToItsPortThenHlt) {
  for (int v = 0; v < kVectors; ++v) {
    const uint8_t* e = region_.data() + kVectorEntries + kVectorEntrySize * v;
    EXPECT_EQ(e[0], 0xe6) << v;
    EXPECT_EQ(e[1], 0x80 + v) << v;
    EXPECT_EQ(e[2], 0xf4) << v;
  }
}

TEST_F(StubRegionTest, IdtGatesPointAtTheEntriesThroughIst1) {
  for (int v = 0; v < kVectors; ++v) {
    IdtGate g;
    std::memcpy(&g, region_.data() + kIdtOffset + sizeof(IdtGate) * v, sizeof(g));
    EXPECT_EQ(GateHandler(g), kStubVa + kVectorEntries + kVectorEntrySize * v);
    EXPECT_EQ((g.low >> 16) & 0xffff, kKernelCs);
    EXPECT_EQ((g.low >> 32) & 7, 1u) << "IST of vector " << v;
    EXPECT_EQ((g.low >> 40) & 0xf, 0xeu);  // interrupt gate
    EXPECT_EQ((g.low >> 47) & 1, 1u);      // present
    const uint64_t dpl = (g.low >> 45) & 3;
    EXPECT_EQ(dpl, (v == 3 || v == 4) ? 3u : 0u) << v;
  }
}

TEST_F(StubRegionTest, GdtAndTssOfEachVcpu) {
  uint64_t gdt[kGdtEntries];
  std::memcpy(gdt, region_.data() + kGdtOffset, sizeof(gdt));
  EXPECT_EQ(gdt[kUserCs / 8], CodeSegment64(3));
  EXPECT_EQ(gdt[kKernelCs / 8], CodeSegment64(0));
  EXPECT_EQ(SystemDescriptorBase({gdt[kTss / 8], gdt[kTss / 8 + 1]}), TssVa(0));
  for (int i = 0; i < kVcpus; ++i) {
    Tss64 tss;
    std::memcpy(&tss, region_.data() + (TssVa(i) - kStubVa), sizeof(tss));
    EXPECT_EQ(tss.ist[0], StackTopVa(i));
    EXPECT_EQ(tss.rsp[0], StackTopVa(i));
    EXPECT_EQ(StackTopVa(i) % 16, 0u);
    EXPECT_EQ(StackTopVa(i), TssVa(i + 1));  // areas do not overlap
  }
  EXPECT_FALSE(WriteStubRegion(region_.data(), 0).ok());
  EXPECT_FALSE(WriteStubRegion(region_.data(), kMaxVcpus + 1).ok());
  EXPECT_LE(RegionBytes(kMaxVcpus), 2ull << 20);
}

TEST(StubMapping, CodeIsExecutableAndNothingIsUser) {
  BufferAllocator alloc;
  auto pt = PageTables::Create(&alloc);
  ASSERT_TRUE(pt.ok());
  const uint64_t phys = 0x100000;
  ASSERT_TRUE(MapStubRegion(&*pt, phys, 2).ok());
  auto code = pt->Lookup(kStubVa);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(code->phys, phys);
  EXPECT_EQ(code->flags & kPteUser, 0u);
  EXPECT_EQ(code->flags & kPteNoExec, 0u);
  EXPECT_EQ(code->flags & kPteWrite, 0u);
  auto stack = pt->Lookup(StackTopVa(1) - 8);
  ASSERT_TRUE(stack.has_value());
  EXPECT_EQ(stack->phys, phys + RegionBytes(2) - 8);
  EXPECT_NE(stack->flags & kPteWrite, 0u);
  EXPECT_NE(stack->flags & kPteNoExec, 0u);
  EXPECT_EQ(stack->flags & kPteUser, 0u);
  EXPECT_FALSE(pt->Lookup(kStubVa + RegionBytes(2)).has_value());
}

TEST(StubRegisters, UserModeSregsAndMsrs) {
  kvm_sregs s = {};
  UserSregs(&s, 3, 0x5000, 0x7000, 0x8000);
  EXPECT_EQ(s.cs.selector, kUserCs);
  EXPECT_EQ(s.cs.dpl, 3);
  EXPECT_EQ(s.cs.l, 1);
  EXPECT_EQ(s.ss.selector, kUserDs);
  EXPECT_EQ(s.ss.dpl, 3);
  EXPECT_EQ(s.cr3, 0x5000u);
  EXPECT_EQ(s.efer & 0x500, 0x500u);  // LME and LMA
  EXPECT_EQ(s.cr0 & 0x80000001, 0x80000001u);  // PG and PE
  EXPECT_EQ(s.cr4 & (1u << 5), 1u << 5);       // PAE
  EXPECT_EQ(s.fs.base, 0x7000u);
  EXPECT_EQ(s.gs.base, 0x8000u);
  EXPECT_EQ(s.tr.base, TssVa(3));
  EXPECT_EQ(s.tr.type, 11);
  EXPECT_EQ(s.gdt.base, kStubVa + kGdtOffset);
  EXPECT_EQ(s.idt.base, kStubVa + kIdtOffset);
  EXPECT_EQ(s.idt.limit, 32 * 16 - 1);

  Msr m[kMsrCount];
  StubMsrs(m);
  EXPECT_EQ(m[0].index, kMsrStar);
  EXPECT_EQ(m[0].value, kStar);
  EXPECT_EQ(m[1].index, kMsrLstar);
  EXPECT_EQ(m[1].value, kStubVa + kSyscallEntry);
  EXPECT_EQ(m[2].index, kMsrSyscallMask);
  EXPECT_NE(m[2].value & (1u << 9), 0u);  // IF off in the stub
}

kvm_run IoExit(uint16_t port) {
  kvm_run run = {};
  run.exit_reason = KVM_EXIT_IO;
  run.io.direction = KVM_EXIT_IO_OUT;
  run.io.port = port;
  run.io.size = 1;
  return run;
}

TEST(StubExits, Syscall) {
  const kvm_run run = IoExit(0xe1);
  // VMX/SVM report the OUT itself (skipped at the next KVM_RUN); an
  // emulated OUT reports the instruction after it.
  EXPECT_EQ(DecodeExit(run, kStubVa + kSyscallEntry, nullptr).kind,
            Exit::Kind::kSyscall);
  EXPECT_EQ(DecodeExit(run, kStubVa + kSysretAt, nullptr).kind,
            Exit::Kind::kSyscall);
  EXPECT_EQ(DecodeExit(run, kStubVa + kSysretAt + 3, nullptr).kind,
            Exit::Kind::kOther);
  // The program's own OUT to the port (were it allowed) is not a syscall.
  EXPECT_EQ(DecodeExit(run, 0x401000, nullptr).kind, Exit::Kind::kOther);
}

TEST(StubExits, PageFaultFromUserMode) {
  const kvm_run run = IoExit(0x80 + 14);
  // error code, RIP, CS, RFLAGS, RSP, SS as the CPU pushed them.
  const uint64_t frame[kFrameWords] = {0x6, 0x401234, 0x33, 0x10202, 0x7ffff000, 0x2b};
  const Exit e = DecodeExit(run, kStubVa + kVectorEntries + 14 * 8, frame);
  ASSERT_EQ(e.kind, Exit::Kind::kException);
  EXPECT_EQ(e.vector, 14);
  EXPECT_EQ(e.error_code, 6u);
  EXPECT_EQ(e.rip, 0x401234u);
  EXPECT_EQ(e.rsp, 0x7ffff000u);
  EXPECT_EQ(e.rflags, 0x10202u);
  EXPECT_TRUE(e.from_user);
}

TEST(StubExits, InvalidOpcodeHasNoErrorCodeAndAStubFaultIsNotUser) {
  const kvm_run run = IoExit(0x80 + 6);
  const uint64_t frame[kFrameWords] = {0xdead, 0x401000, 0x33, 0x202, 0x1000, 0x2b};
  Exit e = DecodeExit(run, kStubVa + kVectorEntries + 6 * 8 + 2, frame);
  ASSERT_EQ(e.kind, Exit::Kind::kException);
  EXPECT_EQ(e.error_code, 0u);  // the word below the frame is not its
  const kvm_run gp = IoExit(0x80 + 13);
  const uint64_t stub_frame[kFrameWords] = {0, kStubVa + kSysretAt, 0x10, 0x2, 0x1000, 0x18};
  e = DecodeExit(gp, kStubVa + kVectorEntries + 13 * 8 + 2, stub_frame);
  ASSERT_EQ(e.kind, Exit::Kind::kException);
  EXPECT_FALSE(e.from_user);  // e.g. SYSRET to a non-canonical RCX
}

TEST(StubExits, OtherExitsAreNotTheStubs) {
  kvm_run run = IoExit(0x80 + 14);
  EXPECT_EQ(DecodeExit(run, 0x401000, nullptr).kind, Exit::Kind::kOther);
  run = IoExit(0x80 + 40);
  EXPECT_EQ(DecodeExit(run, kStubVa + kVectorEntries + 40 * 8 + 2, nullptr).kind,
            Exit::Kind::kOther);
  run = {};
  run.exit_reason = KVM_EXIT_HLT;
  EXPECT_EQ(DecodeExit(run, 0, nullptr).kind, Exit::Kind::kOther);
}

}  // namespace
}  // namespace sandboxd::kvm::hw
