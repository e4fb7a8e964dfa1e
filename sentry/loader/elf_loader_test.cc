#include "sentry/loader/elf_loader.h"

#include <elf.h>
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sentry/mm/memory_file.h"
#include "sentry/mm/mm.h"

namespace sandboxd::loader {
namespace {

using ::testing::HasSubstr;

constexpr uintptr_t kMin = 0x10000;
constexpr uintptr_t kMax = 0x7ffffffff000;
constexpr uint64_t kPg = 4096;

// An AddressSpace that accepts every mapping: the loader only talks to MM,
// and MM's copies go through the memory file's internal mapping.
class FakeAddressSpace : public platform::AddressSpace {
 public:
  absl::Status MapFile(uintptr_t, int, off_t, size_t,
                       platform::Prot) override {
    return absl::OkStatus();
  }
  void Unmap(uintptr_t, size_t) override {}
};

struct Segment {
  uint32_t type = PT_LOAD;
  uint32_t flags = PF_R;
  uint64_t offset = 0;
  uint64_t vaddr = 0;
  uint64_t filesz = 0;
  uint64_t memsz = 0;
};

// A minimal ELF64 x86-64 image: header at 0, program headers at 64, and
// every other byte a position-dependent pattern (so a segment's contents
// tell where in the file they came from).
struct ElfImage {
  uint16_t type = ET_EXEC;
  uint64_t entry = 0;
  std::vector<Segment> segs;
  size_t size = 0x4000;

  std::vector<uint8_t> Bytes() const {
    std::vector<uint8_t> f(size);
    for (size_t i = 0; i < size; i++) f[i] = static_cast<uint8_t>(i * 7 + 3);
    Elf64_Ehdr eh{};
    std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    eh.e_type = type;
    eh.e_machine = EM_X86_64;
    eh.e_version = EV_CURRENT;
    eh.e_entry = entry;
    eh.e_phoff = sizeof(Elf64_Ehdr);
    eh.e_ehsize = sizeof(Elf64_Ehdr);
    eh.e_phentsize = sizeof(Elf64_Phdr);
    eh.e_phnum = static_cast<uint16_t>(segs.size());
    std::memcpy(f.data(), &eh, sizeof(eh));
    for (size_t i = 0; i < segs.size(); i++) {
      Elf64_Phdr ph{};
      ph.p_type = segs[i].type;
      ph.p_flags = segs[i].flags;
      ph.p_offset = segs[i].offset;
      ph.p_vaddr = segs[i].vaddr;
      ph.p_paddr = segs[i].vaddr;
      ph.p_filesz = segs[i].filesz;
      ph.p_memsz = segs[i].memsz;
      ph.p_align = kPg;
      std::memcpy(f.data() + sizeof(eh) + i * sizeof(ph), &ph, sizeof(ph));
    }
    return f;
  }
};

// An ELF file as the loader reads it: a Mappable over bytes in memory.
class BytesFile : public mm::Mappable {
 public:
  explicit BytesFile(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  uint64_t Size() override { return bytes_.size(); }
  int64_t ReadAt(void* dst, uint64_t n, uint64_t off) override {
    if (off >= bytes_.size()) return 0;
    n = std::min<uint64_t>(n, bytes_.size() - off);
    std::memcpy(dst, bytes_.data() + off, n);
    return static_cast<int64_t>(n);
  }
  std::string Name() override { return "/test/elf"; }

 private:
  const std::vector<uint8_t> bytes_;
};

class ElfLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mf = mm::MemoryFile::Create(1ull << 30);
    ASSERT_TRUE(mf.ok()) << mf.status();
    mf_ = std::move(mf).value();
    mm_ = std::make_unique<mm::MM>(
        mf_.get(), std::make_unique<FakeAddressSpace>(), kMin, kMax);
  }

  absl::StatusOr<LoadedImage> Load(const ElfImage& img) {
    file_ = img.Bytes();
    return LoadElf(std::make_shared<BytesFile>(file_), *mm_);
  }
  absl::StatusOr<LoadedImage> LoadRaw(const std::vector<uint8_t>& bytes) {
    return LoadElf(std::make_shared<BytesFile>(bytes), *mm_);
  }

  // True if [addr, addr+n) in the MM holds the file's bytes at `offset`.
  bool HoldsFileBytes(uint64_t addr, uint64_t offset, uint64_t n) {
    std::vector<uint8_t> got(n);
    if (mm_->CopyIn(addr, got.data(), n) != static_cast<int64_t>(n)) {
      return false;
    }
    return std::memcmp(got.data(), file_.data() + offset, n) == 0;
  }
  bool AllZero(uint64_t addr, uint64_t n) {
    std::vector<uint8_t> got(n, 0xff);
    if (mm_->CopyIn(addr, got.data(), n) != static_cast<int64_t>(n)) {
      return false;
    }
    for (uint8_t b : got) {
      if (b != 0) return false;
    }
    return true;
  }
  bool Writable(uint64_t addr) {
    uint8_t b = 0;
    if (mm_->CopyIn(addr, &b, 1) != 1) return false;
    return mm_->CopyOut(addr, &b, 1) == 1;
  }
  bool Executable(uint64_t addr) {
    int code;
    return mm_->HandleFault(addr, /*write=*/false, /*exec=*/true, &code);
  }

  std::unique_ptr<mm::MemoryFile> mf_;
  std::unique_ptr<mm::MM> mm_;
  std::vector<uint8_t> file_;
};

// A typical static executable: text R-X from offset 0 (with the headers),
// data RW- in its own page with a bss past the file bytes.
ElfImage StaticExec() {
  ElfImage img;
  img.type = ET_EXEC;
  img.entry = 0x400100;
  img.segs = {
      {PT_LOAD, PF_R | PF_X, 0, 0x400000, 0x1000, 0x1000},
      {PT_LOAD, PF_R | PF_W, 0x1010, 0x402010, 0x20, 0x3000},
  };
  return img;
}

TEST_F(ElfLoaderTest, StaticExecutable) {
  auto r = Load(StaticExec());
  ASSERT_TRUE(r.ok()) << r.status();
  const LoadedImage& li = *r;
  EXPECT_EQ(li.entry, 0x400100u);
  EXPECT_EQ(li.bias, 0u);
  // The program headers are in the text segment, at file offset 64.
  EXPECT_EQ(li.phdr, 0x400040u);
  EXPECT_EQ(li.phnum, 2u);
  EXPECT_EQ(li.phent, sizeof(Elf64_Phdr));
  // brk starts at the page after the end of bss (0x405010).
  EXPECT_EQ(li.brk_start, 0x406000u);
  EXPECT_EQ(mm_->brk(), 0x406000u);

  EXPECT_TRUE(HoldsFileBytes(0x400000, 0, 0x1000));
  EXPECT_TRUE(HoldsFileBytes(0x402010, 0x1010, 0x20));
  // bss is zero although the file has bytes after p_filesz.
  ASSERT_NE(file_[0x1030], 0);
  EXPECT_TRUE(AllZero(0x402030, 0x405010 - 0x402030));
  // The program headers as the program would read them through AT_PHDR.
  Elf64_Phdr ph;
  ASSERT_EQ(mm_->CopyIn(li.phdr + sizeof(ph), &ph, sizeof(ph)),
            static_cast<int64_t>(sizeof(ph)));
  EXPECT_EQ(ph.p_vaddr, 0x402010u);

  // Protections: text is read-only and executable, data writable and not.
  uint32_t x = 0xdeadbeef;
  EXPECT_EQ(mm_->CopyOut(0x400100, &x, 4), -EFAULT);
  EXPECT_TRUE(HoldsFileBytes(0x400100, 0x100, 4)) << "text was changed";
  EXPECT_TRUE(Executable(0x400100));
  EXPECT_EQ(mm_->CopyOut(0x402010, &x, 4), 4);
  EXPECT_TRUE(Writable(0x404ff0));  // bss
  EXPECT_FALSE(Executable(0x402010));
  EXPECT_FALSE(Executable(0x404000));
  // Nothing between the segments, nor past bss.
  uint8_t b;
  EXPECT_EQ(mm_->CopyIn(0x401000, &b, 1), -EFAULT);
  EXPECT_EQ(mm_->CopyIn(0x406000, &b, 1), -EFAULT);
}

TEST_F(ElfLoaderTest, SegmentsAreFileMappingsWithTheirOffsets) {
  // What /proc/[pid]/maps shows, as on Linux: each segment's file pages are
  // a private mapping of the file at the segment's page offset; the bss
  // past them is anonymous and read-write.
  ASSERT_TRUE(Load(StaticExec()).ok());
  std::vector<mm::VmaInfo> v = mm_->Vmas();
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].start, 0x400000u);
  EXPECT_EQ(v[0].end, 0x401000u);
  EXPECT_EQ(v[0].offset, 0u);
  ASSERT_NE(v[0].mappable, nullptr);
  EXPECT_EQ(v[0].mappable->Name(), "/test/elf");
  EXPECT_TRUE(v[0].prot.exec);
  EXPECT_FALSE(v[0].prot.write);
  EXPECT_EQ(v[1].start, 0x402000u);
  EXPECT_EQ(v[1].end, 0x403000u);
  EXPECT_EQ(v[1].offset, 0x1000u);
  ASSERT_NE(v[1].mappable, nullptr);
  EXPECT_TRUE(v[1].is_private);
  EXPECT_TRUE(v[1].prot.write);
  EXPECT_EQ(v[2].start, 0x403000u);
  EXPECT_EQ(v[2].end, 0x406000u);
  EXPECT_EQ(v[2].mappable, nullptr);
  EXPECT_TRUE(v[2].prot.write);
}

TEST_F(ElfLoaderTest, PtPhdrGivesThePhdrAddress) {
  ElfImage img = StaticExec();
  img.segs.insert(img.segs.begin(),
                  {PT_PHDR, PF_R, 64, 0x400040, 3 * 56, 3 * 56});
  auto r = Load(img);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->phdr, 0x400040u);
  EXPECT_EQ(r->phnum, 3u);
}

TEST_F(ElfLoaderTest, StaticPieLoadsAtPieBase) {
  ElfImage img;
  img.type = ET_DYN;
  img.entry = 0x180;
  img.segs = {
      {PT_LOAD, PF_R | PF_X, 0, 0, 0x1800, 0x1800},
      {PT_LOAD, PF_R | PF_W, 0x2000, 0x3000, 0x100, 0x1100},
  };
  auto r = Load(img);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->bias, kPieBase);
  EXPECT_EQ(r->entry, kPieBase + 0x180);
  EXPECT_EQ(r->phdr, kPieBase + 64);
  EXPECT_EQ(r->brk_start, kPieBase + 0x5000);
  EXPECT_TRUE(HoldsFileBytes(kPieBase, 0, 0x1800));
  EXPECT_TRUE(HoldsFileBytes(kPieBase + 0x3000, 0x2000, 0x100));
  EXPECT_TRUE(AllZero(kPieBase + 0x3100, 0x1000));
  EXPECT_TRUE(Executable(kPieBase + 0x180));
  EXPECT_FALSE(Writable(kPieBase + 0x180));
  EXPECT_TRUE(Writable(kPieBase + 0x3000));
  // Nothing at the link-time addresses.
  uint8_t b;
  EXPECT_EQ(mm_->CopyIn(0x10000, &b, 1), -EFAULT);
}

TEST_F(ElfLoaderTest, SegmentsSharingAPage) {
  // Data starting in the page where text ends. As on Linux, each segment is
  // mapped over the one before: the shared page holds the file's bytes
  // (the offsets are congruent) with the later segment's protections.
  ElfImage img;
  img.entry = 0x400100;
  img.segs = {
      {PT_LOAD, PF_R | PF_X, 0, 0x400000, 0x1234, 0x1234},
      {PT_LOAD, PF_R | PF_W, 0x1234, 0x401234, 0x100, 0x1e00},
  };
  auto r = Load(img);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(HoldsFileBytes(0x400000, 0, 0x1234));
  EXPECT_TRUE(HoldsFileBytes(0x401234, 0x1234, 0x100));
  EXPECT_TRUE(AllZero(0x401334, 0x403034 - 0x401334));
  EXPECT_EQ(r->brk_start, 0x404000u);
  // Page 0x400000 is text only, 0x401000 is shared, 0x402000 data only.
  EXPECT_FALSE(Writable(0x400800));
  EXPECT_TRUE(Executable(0x400800));
  EXPECT_TRUE(Writable(0x401300));
  EXPECT_FALSE(Executable(0x401100));
  EXPECT_TRUE(Writable(0x402000));
  EXPECT_FALSE(Executable(0x402000));
}

// A dynamic program: PT_INTERP names "/lib/ld.so" (file offset 0x200).
ElfImage DynamicExec() {
  ElfImage img = StaticExec();
  img.segs.push_back({PT_INTERP, PF_R, 0x200, 0x400200, 11, 11});
  return img;
}

std::vector<uint8_t> WithInterpPath(std::vector<uint8_t> b) {
  std::memcpy(b.data() + 0x200, "/lib/ld.so", 11);
  return b;
}

// An interpreter: ET_DYN linked at 0, entry at 0x120.
ElfImage Interpreter() {
  ElfImage img;
  img.type = ET_DYN;
  img.entry = 0x120;
  img.segs = {
      {PT_LOAD, PF_R | PF_X, 0, 0, 0x1000, 0x1000},
      {PT_LOAD, PF_R | PF_W, 0x1000, 0x2000, 0x80, 0x1000},
  };
  return img;
}

TEST_F(ElfLoaderTest, LoadElfReportsTheInterpreter) {
  file_ = WithInterpPath(DynamicExec().Bytes());
  auto f = std::make_shared<BytesFile>(file_);
  auto r = LoadElf(f, *mm_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->interp, "/lib/ld.so");
  EXPECT_EQ(r->entry, 0x400100u);
}

TEST_F(ElfLoaderTest, LoadProgramLoadsTheInterpreter) {
  file_ = WithInterpPath(DynamicExec().Bytes());
  auto f = std::make_shared<BytesFile>(file_);
  std::vector<uint8_t> ld = Interpreter().Bytes();
  std::string asked;
  auto r = LoadProgram(f, *mm_, [&](const std::string& path)
                           -> absl::StatusOr<std::shared_ptr<mm::Mappable>> {
    asked = path;
    return std::make_shared<BytesFile>(ld);
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(asked, "/lib/ld.so");
  // The program keeps its own entry (AT_ENTRY); execution starts in the
  // interpreter, placed page-aligned where mmap puts things.
  EXPECT_EQ(r->entry, 0x400100u);
  ASSERT_NE(r->interp_base, 0u);
  EXPECT_EQ(r->interp_base % kPg, 0u);
  EXPECT_EQ(r->start, r->interp_base + 0x120);
  EXPECT_EQ(r->brk_start, 0x406000u);  // the program's, not the interpreter's
  EXPECT_EQ(mm_->brk(), 0x406000u);
  std::vector<uint8_t> got(0x1000);
  ASSERT_EQ(mm_->CopyIn(r->interp_base, got.data(), got.size()), 0x1000);
  EXPECT_EQ(std::memcmp(got.data(), ld.data(), got.size()), 0);
  EXPECT_TRUE(Executable(r->start));
  EXPECT_TRUE(Writable(r->interp_base + 0x2000));
  EXPECT_FALSE(Writable(r->interp_base + 0x100));

  // SetupStack passes AT_BASE and starts at the interpreter.
  StackSpec spec;
  spec.argv = {"prog"};
  spec.execfn = "prog";
  std::memset(spec.random, 7, 16);
  auto cpu = SetupStack(*mm_, *r, spec);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ(cpu->regs.rip, r->start);
  uint64_t p = cpu->regs.rsp + 8 * (1 + 1 + 1 + 1);  // argc, argv[0], 0, 0
  std::map<uint64_t, uint64_t> aux;
  for (int i = 0; i < 64; i++, p += 16) {
    uint64_t kv[2];
    ASSERT_EQ(mm_->CopyIn(p, kv, 16), 16);
    if (kv[0] == AT_NULL) break;
    aux[kv[0]] = kv[1];
  }
  EXPECT_EQ(aux[AT_BASE], r->interp_base);
  EXPECT_EQ(aux[AT_ENTRY], 0x400100u);
}

TEST_F(ElfLoaderTest, InterpreterErrorsNameTheInterpreter) {
  file_ = WithInterpPath(DynamicExec().Bytes());
  auto f = std::make_shared<BytesFile>(file_);
  auto r = LoadProgram(f, *mm_, [](const std::string&)
                           -> absl::StatusOr<std::shared_ptr<mm::Mappable>> {
    return absl::NotFoundError("no such file (ENOENT)");
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("/lib/ld.so"));

  // An interpreter that itself asks for an interpreter is not executable.
  ElfImage bad = Interpreter();
  bad.segs.push_back({PT_INTERP, PF_R, 0x200, 0x200, 11, 11});
  std::vector<uint8_t> bad_bytes = WithInterpPath(bad.Bytes());
  r = LoadProgram(f, *mm_, [&](const std::string&)
                      -> absl::StatusOr<std::shared_ptr<mm::Mappable>> {
    return std::make_shared<BytesFile>(bad_bytes);
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("/lib/ld.so"));
}

TEST_F(ElfLoaderTest, MalformedInterpPathIsNoexec) {
  auto b = DynamicExec().Bytes();
  std::memcpy(b.data() + 0x200, "/lib/ld.soX", 11);  // no terminating NUL
  auto r = LoadRaw(b);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ElfLoaderTest, GarbageIsNoexec) {
  std::string script = "#!/bin/sh\necho hello\n";
  auto r = LoadRaw(std::vector<uint8_t>(script.begin(), script.end()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("ENOEXEC"));

  r = LoadRaw({});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);

  std::vector<uint8_t> zeros(4096, 0);
  r = LoadRaw(zeros);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  // Nothing was mapped for a rejected file.
  EXPECT_EQ(mm_->NumVmas(), 0u);
}

TEST_F(ElfLoaderTest, MalformedHeadersAreNoexec) {
  struct Case {
    const char* what;
    std::vector<uint8_t> bytes;
  };
  std::vector<Case> cases;
  {
    auto b = StaticExec().Bytes();
    b[EI_CLASS] = ELFCLASS32;
    cases.push_back({"32-bit", b});
  }
  {
    auto b = StaticExec().Bytes();
    uint16_t machine = EM_AARCH64;
    std::memcpy(b.data() + offsetof(Elf64_Ehdr, e_machine), &machine, 2);
    cases.push_back({"arm64", b});
  }
  {
    ElfImage img = StaticExec();
    img.type = ET_REL;
    cases.push_back({"relocatable", img.Bytes()});
  }
  {
    ElfImage img = StaticExec();
    img.segs[1].filesz = img.segs[1].memsz + 1;
    cases.push_back({"filesz > memsz", img.Bytes()});
  }
  {
    ElfImage img = StaticExec();
    img.segs[1].offset = 0x1011;  // vaddr % page != offset % page
    cases.push_back({"misaligned", img.Bytes()});
  }
  {
    ElfImage img = StaticExec();
    std::swap(img.segs[0], img.segs[1]);
    cases.push_back({"out of order", img.Bytes()});
  }
  {
    ElfImage img = StaticExec();
    img.segs[1].filesz = 0x10000;  // past the end of the file
    img.segs[1].memsz = 0x10000;
    cases.push_back({"truncated segment", img.Bytes()});
  }
  {
    ElfImage img = StaticExec();
    img.segs = {{PT_NOTE, PF_R, 0x200, 0x400200, 16, 16}};
    cases.push_back({"no PT_LOAD", img.Bytes()});
  }
  {
    ElfImage img = StaticExec();
    img.segs[0].vaddr = 0x1000;  // below the minimum user address
    img.segs[1].vaddr = 0x3010;
    cases.push_back({"below min address", img.Bytes()});
  }
  for (const Case& c : cases) {
    auto r = LoadRaw(c.bytes);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << c.what << ": " << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("ENOEXEC"))
        << c.what;
  }
}

// --- SetupStack ---------------------------------------------------------------

class SetupStackTest : public ElfLoaderTest {
 protected:
  std::string ReadString(uint64_t addr) {
    std::string s;
    EXPECT_EQ(mm_->CopyInString(addr, 4096, &s), 0) << std::hex << addr;
    return s;
  }
  uint64_t ReadWord(uint64_t addr) {
    uint64_t v = 0xbadbadbadbad;
    EXPECT_EQ(mm_->CopyIn(addr, &v, 8), 8) << std::hex << addr;
    return v;
  }
};

TEST_F(SetupStackTest, LinuxInitialStackLayout) {
  auto li = Load(StaticExec());
  ASSERT_TRUE(li.ok()) << li.status();
  StackSpec spec;
  spec.argv = {"/bin/prog", "-x", ""};
  spec.envp = {"A=1", "PATH=/bin:/usr/bin"};
  spec.execfn = "/bin/prog";
  for (int i = 0; i < 16; i++) spec.random[i] = static_cast<uint8_t>(0xa0 + i);
  auto cpu = SetupStack(*mm_, *li, spec);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  const uint64_t sp = cpu->regs.rsp;
  EXPECT_EQ(sp % 16, 0u);
  EXPECT_EQ(cpu->regs.rip, li->entry);
  EXPECT_LT(sp, kMax);
  EXPECT_GT(sp, kMax - (1 << 20));

  uint64_t p = sp;
  ASSERT_EQ(ReadWord(p), 3u);  // argc
  p += 8;
  std::vector<std::string> argv;
  for (uint64_t a; (a = ReadWord(p)) != 0; p += 8) {
    argv.push_back(ReadString(a));
    ASSERT_LT(argv.size(), 10u);
  }
  p += 8;
  EXPECT_EQ(argv, spec.argv);
  std::vector<std::string> envp;
  for (uint64_t a; (a = ReadWord(p)) != 0; p += 8) {
    envp.push_back(ReadString(a));
    ASSERT_LT(envp.size(), 10u);
  }
  p += 8;
  EXPECT_EQ(envp, spec.envp);

  std::map<uint64_t, uint64_t> aux;
  for (int i = 0;; i++) {
    ASSERT_LT(i, 64) << "no AT_NULL";
    uint64_t type = ReadWord(p), val = ReadWord(p + 8);
    p += 16;
    if (type == AT_NULL) break;
    EXPECT_EQ(aux.count(type), 0u) << "duplicate auxv entry " << type;
    aux[type] = val;
  }
  EXPECT_EQ(aux[AT_PAGESZ], 4096u);
  EXPECT_EQ(aux[AT_ENTRY], li->entry);
  EXPECT_EQ(aux[AT_PHDR], li->phdr);
  EXPECT_EQ(aux[AT_PHNUM], li->phnum);
  EXPECT_EQ(aux[AT_PHENT], sizeof(Elf64_Phdr));
  EXPECT_EQ(aux[AT_BASE], 0u);
  EXPECT_EQ(aux[AT_SECURE], 0u);
  ASSERT_EQ(aux.count(AT_RANDOM), 1u);
  uint8_t rnd[16];
  ASSERT_EQ(mm_->CopyIn(aux[AT_RANDOM], rnd, 16), 16);
  EXPECT_EQ(std::memcmp(rnd, spec.random, 16), 0);
  ASSERT_EQ(aux.count(AT_EXECFN), 1u);
  EXPECT_EQ(ReadString(aux[AT_EXECFN]), "/bin/prog");
  ASSERT_EQ(aux.count(AT_PLATFORM), 1u);
  EXPECT_EQ(ReadString(aux[AT_PLATFORM]), "x86_64");
  // Strings and random bytes lie above the vectors, in the stack mapping.
  EXPECT_GT(aux[AT_RANDOM], p);
  EXPECT_GT(aux[AT_EXECFN], p);
  // The stack is writable below the vectors.
  EXPECT_EQ(mm_->CopyOut(sp - 8, &sp, 8), 8);
  EXPECT_THAT(mm_->DebugString(), HasSubstr("[stack]"));
}

TEST_F(SetupStackTest, EmptyArgvAndEnvp) {
  LoadedImage li;
  li.entry = 0x401000;
  StackSpec spec;
  spec.execfn = "x";
  std::memset(spec.random, 0, 16);
  auto cpu = SetupStack(*mm_, li, spec);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  uint64_t sp = cpu->regs.rsp;
  EXPECT_EQ(sp % 16, 0u);
  EXPECT_EQ(ReadWord(sp), 0u);       // argc
  EXPECT_EQ(ReadWord(sp + 8), 0u);   // argv terminator
  EXPECT_EQ(ReadWord(sp + 16), 0u);  // envp terminator
  EXPECT_EQ(ReadWord(sp + 24), static_cast<uint64_t>(AT_PHDR));
}

TEST_F(SetupStackTest, VdsoIsTheFirstAuxvEntry) {
  LoadedImage li;
  li.entry = 0x401000;
  StackSpec spec;
  spec.execfn = "x";
  std::memset(spec.random, 0, 16);
  auto cpu = SetupStack(*mm_, li, spec);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  // Without a vDSO there is no AT_SYSINFO_EHDR (above: AT_PHDR comes first).
  li.vdso = 0x7fff12340000;
  cpu = SetupStack(*mm_, li, spec);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  uint64_t sp = cpu->regs.rsp;
  EXPECT_EQ(ReadWord(sp + 24), static_cast<uint64_t>(AT_SYSINFO_EHDR));
  EXPECT_EQ(ReadWord(sp + 32), li.vdso);
  EXPECT_EQ(ReadWord(sp + 40), static_cast<uint64_t>(AT_PHDR));
}

TEST_F(SetupStackTest, HugeArgumentsAreE2big) {
  LoadedImage li;
  li.entry = 0x401000;
  StackSpec spec;
  spec.execfn = "x";
  std::memset(spec.random, 0, 16);
  spec.argv.assign(600, std::string(4096, 'a'));  // > kMaxArgBytes (2 MiB)
  auto cpu = SetupStack(*mm_, li, spec);
  ASSERT_FALSE(cpu.ok());
  EXPECT_EQ(cpu.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(cpu.status().message()), HasSubstr("E2BIG"));
}

}  // namespace
}  // namespace sandboxd::loader
