// The embedded vDSO image: its ELF shape, its symbols, and its code run in
// this process (mapped by hand below a vvar page, as the loader maps it),
// fed by a real Timekeeper; and Vdso::Map's mappings in an MM.
#include <elf.h>
#include <errno.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>

#include <cstring>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "sentry/mm/memory_file.h"
#include "sentry/mm/mm.h"
#include "sentry/vdso/timekeeper.h"
#include "sentry/vdso/vdso_image.h"
#include "sentry/vdso/vdso_mapping.h"
#include "sentry/vdso/vvar.h"

namespace sandboxd::vdso {
namespace {

const Elf64_Ehdr& Ehdr() {
  return *reinterpret_cast<const Elf64_Ehdr*>(kVdsoImage);
}
const Elf64_Phdr* Phdrs() {
  return reinterpret_cast<const Elf64_Phdr*>(kVdsoImage + Ehdr().e_phoff);
}
std::map<int64_t, uint64_t> DynamicTags() {
  std::map<int64_t, uint64_t> tags;
  for (int i = 0; i < Ehdr().e_phnum; i++) {
    if (Phdrs()[i].p_type != PT_DYNAMIC) continue;
    for (auto* d = reinterpret_cast<const Elf64_Dyn*>(kVdsoImage +
                                                      Phdrs()[i].p_offset);
         d->d_tag != DT_NULL; d++) {
      tags[d->d_tag] = d->d_un.d_val;
    }
  }
  return tags;
}

struct Symbol {
  uint64_t value = 0;
  std::string version;
};
// The image's dynamic symbols with their versions (from DT_HASH's chain
// count, DT_VERSYM and DT_VERDEF, as a dynamic loader reads them).
std::map<std::string, Symbol> DynamicSymbols() {
  auto tags = DynamicTags();
  const char* strtab = reinterpret_cast<const char*>(kVdsoImage + tags[DT_STRTAB]);
  auto* syms = reinterpret_cast<const Elf64_Sym*>(kVdsoImage + tags[DT_SYMTAB]);
  uint32_t nsyms = reinterpret_cast<const uint32_t*>(kVdsoImage + tags[DT_HASH])[1];
  auto* versym = reinterpret_cast<const Elf64_Half*>(kVdsoImage + tags[DT_VERSYM]);
  std::map<int, std::string> versions;
  auto* vd = reinterpret_cast<const uint8_t*>(kVdsoImage + tags[DT_VERDEF]);
  for (uint64_t i = 0; i < tags[DT_VERDEFNUM]; i++) {
    auto* def = reinterpret_cast<const Elf64_Verdef*>(vd);
    auto* aux = reinterpret_cast<const Elf64_Verdaux*>(vd + def->vd_aux);
    versions[def->vd_ndx] = strtab + aux->vda_name;
    vd += def->vd_next;
  }
  std::map<std::string, Symbol> out;
  for (uint32_t i = 1; i < nsyms; i++) {
    if (syms[i].st_shndx == SHN_UNDEF || syms[i].st_shndx == SHN_ABS) continue;
    out[strtab + syms[i].st_name] =
        Symbol{syms[i].st_value, versions[versym[i] & 0x7fff]};
  }
  return out;
}

TEST(VdsoImage, IsARelocationFreeX8664SharedObject) {
  ASSERT_GE(kVdsoImageSize, sizeof(Elf64_Ehdr));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(kVdsoImage) % 4096, 0u);
  EXPECT_EQ(std::memcmp(Ehdr().e_ident, ELFMAG, SELFMAG), 0);
  EXPECT_EQ(Ehdr().e_ident[EI_CLASS], ELFCLASS64);
  EXPECT_EQ(Ehdr().e_type, ET_DYN);
  EXPECT_EQ(Ehdr().e_machine, EM_X86_64);
  int loads = 0, dynamic = 0, note = 0;
  for (int i = 0; i < Ehdr().e_phnum; i++) {
    const Elf64_Phdr& p = Phdrs()[i];
    if (p.p_type == PT_LOAD) {
      loads++;
      EXPECT_EQ(p.p_vaddr, 0u);
      EXPECT_EQ(p.p_offset, 0u);
      EXPECT_EQ(p.p_flags, PF_R | PF_X);
      EXPECT_LE(p.p_memsz, Vdso::ImageMapSize());
    }
    dynamic += p.p_type == PT_DYNAMIC;
    note += p.p_type == PT_NOTE;
  }
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(dynamic, 1);
  EXPECT_EQ(note, 1);
  auto tags = DynamicTags();
  EXPECT_TRUE(tags.count(DT_HASH));
  EXPECT_TRUE(tags.count(DT_GNU_HASH));
  for (int64_t bad : {DT_RELA, DT_REL, DT_JMPREL, DT_TEXTREL, DT_NEEDED}) {
    EXPECT_FALSE(tags.count(bad)) << "dynamic tag " << bad;
  }
}

TEST(VdsoImage, ExportsLinuxSymbolsAsLinux26) {
  auto syms = DynamicSymbols();
  for (const char* name :
       {"__vdso_clock_gettime", "__vdso_gettimeofday", "__vdso_time",
        "__vdso_clock_getres", "__vdso_getcpu"}) {
    ASSERT_TRUE(syms.count(name)) << name;
    EXPECT_EQ(syms[name].version, "LINUX_2.6") << name;
    // The unprefixed alias is the same function.
    std::string alias = std::string(name).substr(strlen("__vdso_"));
    ASSERT_TRUE(syms.count(alias)) << alias;
    EXPECT_EQ(syms[alias].value, syms[name].value) << alias;
  }
}

// The image mapped by hand in this process, [vvar][text], as Vdso::Map lays
// it out, with a Timekeeper writing the vvar page.
class VdsoInProcess : public ::testing::Test {
 protected:
  void Load(bool use_tsc) {
    size_t len = Vdso::kVvarSize + Vdso::ImageMapSize();
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    map_ = Mapping(p, len);
    uint8_t* text = map_.bytes() + Vdso::kVvarSize;
    std::memcpy(text, kVdsoImage, kVdsoImageSize);
    ASSERT_EQ(mprotect(text, Vdso::ImageMapSize(), PROT_READ | PROT_EXEC), 0);
    auto syms = DynamicSymbols();
    clock_gettime_ = reinterpret_cast<int (*)(clockid_t, timespec*)>(
        text + syms["__vdso_clock_gettime"].value);
    gettimeofday_ = reinterpret_cast<int (*)(timeval*, struct timezone*)>(
        text + syms["__vdso_gettimeofday"].value);
    time_ = reinterpret_cast<long (*)(long*)>(text + syms["__vdso_time"].value);
    clock_getres_ = reinterpret_cast<int (*)(clockid_t, timespec*)>(
        text + syms["__vdso_clock_getres"].value);
    getcpu_ = reinterpret_cast<long (*)(unsigned*, unsigned*, void*)>(
        text + syms["__vdso_getcpu"].value);
    vvar_ = reinterpret_cast<Vvar*>(map_.bytes());
    std::string why;
    tk_ = std::make_unique<Timekeeper>(vvar_, use_tsc && HostTscUsable(&why));
    ASSERT_TRUE(tk_->Start().ok());
    tk_->WaitCalibrated();
  }

  static int64_t Ns(const timespec& ts) {
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }

  Mapping map_;
  Vvar* vvar_ = nullptr;
  std::unique_ptr<Timekeeper> tk_;
  int (*clock_gettime_)(clockid_t, timespec*) = nullptr;
  int (*gettimeofday_)(timeval*, struct timezone*) = nullptr;
  long (*time_)(long*) = nullptr;
  int (*clock_getres_)(clockid_t, timespec*) = nullptr;
  long (*getcpu_)(unsigned*, unsigned*, void*) = nullptr;
};

TEST_F(VdsoInProcess, ClocksAgreeWithTheHost) {
  Load(/*use_tsc=*/true);
  std::string why;
  if (!HostTscUsable(&why)) GTEST_SKIP() << "no usable TSC: " << why;
  ASSERT_EQ(vvar_->mode, kVvarModeTsc);
  for (clockid_t clk : {CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_BOOTTIME}) {
    timespec before, got, after;
    clock_gettime(clk, &before);
    ASSERT_EQ(clock_gettime_(clk, &got), 0);
    clock_gettime(clk, &after);
    // Within the host readings around it, give or take the calibration
    // error (the Timekeeper keeps it well under this).
    EXPECT_GE(Ns(got), Ns(before) - 50000) << clk;
    EXPECT_LE(Ns(got), Ns(after) + 50000) << clk;
    EXPECT_LT(got.tv_nsec, 1000000000) << clk;
  }
  timeval tv;
  struct timezone tz = {99, 99};
  timeval host_tv;
  gettimeofday(&host_tv, nullptr);
  ASSERT_EQ(gettimeofday_(&tv, &tz), 0);
  EXPECT_LE(std::llabs((tv.tv_sec - host_tv.tv_sec) * 1000000 +
                       (tv.tv_usec - host_tv.tv_usec)),
            1000);
  EXPECT_EQ(tz.tz_minuteswest, 0);
  EXPECT_EQ(gettimeofday_(nullptr, nullptr), 0);
  long t = 0;
  long r = time_(&t);
  EXPECT_EQ(r, t);
  EXPECT_LE(std::labs(r - ::time(nullptr)), 1);
  EXPECT_EQ(time_(nullptr) >= r, true);
}

TEST_F(VdsoInProcess, MonotonicNeverGoesBackAcrossUpdates) {
  Load(/*use_tsc=*/true);
  // 300 ms spans the updater's first eight updates (1, 2, 4, ... 128 ms).
  timespec prev{}, cur;
  ASSERT_EQ(clock_gettime_(CLOCK_MONOTONIC, &prev), 0);
  timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  uint64_t n = 0;
  for (;;) {
    ASSERT_EQ(clock_gettime_(CLOCK_MONOTONIC, &cur), 0);
    ASSERT_GE(Ns(cur), Ns(prev)) << "after " << n << " reads";
    prev = cur;
    n++;
    if ((n & 1023) == 0) {
      timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      if (Ns(now) - Ns(start) > 300000000) break;
    }
  }
}

TEST_F(VdsoInProcess, CoarseClocksAndResolutions) {
  Load(/*use_tsc=*/true);
  timespec res;
  ASSERT_EQ(clock_getres_(CLOCK_MONOTONIC, &res), 0);
  timespec host_res;
  clock_getres(CLOCK_MONOTONIC, &host_res);
  EXPECT_EQ(Ns(res), Ns(host_res));
  ASSERT_EQ(clock_getres_(CLOCK_MONOTONIC_COARSE, &res), 0);
  clock_getres(CLOCK_MONOTONIC_COARSE, &host_res);
  EXPECT_EQ(Ns(res), Ns(host_res));
  EXPECT_EQ(clock_getres_(CLOCK_REALTIME_COARSE, nullptr), 0);
  for (clockid_t clk : {CLOCK_MONOTONIC_COARSE, CLOCK_REALTIME_COARSE}) {
    timespec coarse, fine;
    ASSERT_EQ(clock_gettime_(clk, &coarse), 0);
    ASSERT_EQ(clock_gettime_(clk == CLOCK_MONOTONIC_COARSE ? CLOCK_MONOTONIC
                                                           : CLOCK_REALTIME,
                             &fine),
              0);
    EXPECT_LE(Ns(coarse), Ns(fine));
    EXPECT_LT(Ns(fine) - Ns(coarse), Ns(host_res) + 100000);
    if (vvar_->mode == kVvarModeTsc) {
      EXPECT_EQ(coarse.tv_nsec % host_res.tv_nsec, 0);
    }
  }
}

TEST_F(VdsoInProcess, OtherClocksMakeTheSystemCall) {
  Load(/*use_tsc=*/true);
  timespec ts;
  // The raw syscall's result, -errno, as Linux's vDSO returns it.
  EXPECT_EQ(clock_gettime_(12345, &ts), -EINVAL);
  EXPECT_EQ(clock_getres_(12345, &ts), -EINVAL);
  timespec host;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &host);
  ASSERT_EQ(clock_gettime_(CLOCK_PROCESS_CPUTIME_ID, &ts), 0);
  EXPECT_GE(Ns(ts), Ns(host));
  ASSERT_EQ(clock_gettime_(CLOCK_MONOTONIC_RAW, &ts), 0);
}

TEST_F(VdsoInProcess, SyscallModeServesEverythingThroughTheKernel) {
  Load(/*use_tsc=*/false);
  EXPECT_EQ(vvar_->mode, kVvarModeSyscall);
  timespec before, got, after;
  clock_gettime(CLOCK_MONOTONIC, &before);
  ASSERT_EQ(clock_gettime_(CLOCK_MONOTONIC, &got), 0);
  clock_gettime(CLOCK_MONOTONIC, &after);
  EXPECT_GE(Ns(got), Ns(before));
  EXPECT_LE(Ns(got), Ns(after));
  timeval tv;
  EXPECT_EQ(gettimeofday_(&tv, nullptr), 0);
  EXPECT_LE(std::labs(time_(nullptr) - ::time(nullptr)), 1);
}

TEST_F(VdsoInProcess, GetcpuIsTheCpuWeRunOn) {
  Load(/*use_tsc=*/true);
  bool agreed = false;
  for (int i = 0; i < 100 && !agreed; i++) {
    unsigned cpu = ~0u, node = ~0u;
    ASSERT_EQ(getcpu_(&cpu, &node, nullptr), 0);
    agreed = static_cast<int>(cpu) == sched_getcpu() && node != ~0u;
  }
  EXPECT_TRUE(agreed);
  EXPECT_EQ(getcpu_(nullptr, nullptr, nullptr), 0);
}

// Vdso::Map in an MM: the VMAs, their protections and contents.
class NullAddressSpace : public platform::AddressSpace {
 public:
  absl::Status MapFile(uintptr_t, int, off_t, size_t, platform::Prot) override {
    return absl::OkStatus();
  }
  void Unmap(uintptr_t, size_t) override {}
};

TEST(VdsoMapping, MapsVvarBelowTheImage) {
  auto mf = mm::MemoryFile::Create(1ull << 30);
  ASSERT_TRUE(mf.ok());
  auto vdso = Vdso::Create(mf->get(), Vdso::Options{});
  ASSERT_TRUE(vdso.ok()) << vdso.status();
  (*vdso)->timekeeper().WaitCalibrated();
  mm::MM mm(mf->get(), std::make_unique<NullAddressSpace>(), 0x10000,
            0x7ffffffff000ull);
  auto base = (*vdso)->Map(mm);
  ASSERT_TRUE(base.ok()) << base.status();
  const uint64_t vvar = *base - Vdso::kVvarSize;

  std::string maps = mm.DebugString();
  EXPECT_NE(maps.find("r--p 00000000 00:00 0"), std::string::npos) << maps;
  EXPECT_NE(maps.find("[vvar]"), std::string::npos) << maps;
  EXPECT_NE(maps.find("r-xp 00000000 00:00 0"), std::string::npos) << maps;
  EXPECT_NE(maps.find("[vdso]"), std::string::npos) << maps;

  // The text is the image; the vvar page is the Timekeeper's live page.
  std::string text(kVdsoImageSize, '\0');
  ASSERT_EQ(mm.CopyIn(*base, text.data(), text.size()),
            static_cast<int64_t>(text.size()));
  EXPECT_EQ(std::memcmp(text.data(), kVdsoImage, kVdsoImageSize), 0);
  Vvar v1;
  ASSERT_EQ(mm.CopyIn(vvar, &v1, sizeof(v1)), static_cast<int64_t>(sizeof(v1)));
  if ((*vdso)->uses_tsc()) {
    EXPECT_EQ(v1.mode, kVvarModeTsc);
    (*vdso)->timekeeper().Update(Timekeeper::Now(), Timekeeper::kMaxIntervalNs);
    Vvar v2;
    ASSERT_EQ(mm.CopyIn(vvar, &v2, sizeof(v2)), static_cast<int64_t>(sizeof(v2)));
    EXPECT_GT(v2.seq, v1.seq);
  }

  // As Linux: [vvar] can never become writable or executable; [vdso] can
  // be made writable, privately.
  EXPECT_EQ(mm.Mprotect(vvar, 4096, PROT_READ | PROT_WRITE), -EACCES);
  EXPECT_EQ(mm.Mprotect(vvar, 4096, PROT_READ | PROT_EXEC), -EACCES);
  EXPECT_EQ(mm.CopyOut(vvar, "x", 1), -EFAULT);
  EXPECT_EQ(mm.Mprotect(*base, 4096, PROT_READ | PROT_WRITE | PROT_EXEC), 0);
  EXPECT_EQ(mm.CopyOut(*base, "\xcc", 1), 1);
  EXPECT_EQ(kVdsoImage[0], 0x7f) << "the embedded image is untouched";

  // fork keeps both; the child sees the same live vvar page.
  auto child = mm.Fork(std::make_unique<NullAddressSpace>());
  ASSERT_TRUE(child.ok());
  EXPECT_EQ((*child)->DebugString(), mm.DebugString());
  Vvar cv, pv;
  ASSERT_EQ((*child)->CopyIn(vvar, &cv, sizeof(cv)), static_cast<int64_t>(sizeof(cv)));
  ASSERT_EQ(mm.CopyIn(vvar, &pv, sizeof(pv)), static_cast<int64_t>(sizeof(pv)));
  EXPECT_EQ(cv.seq, pv.seq);
  uint8_t c0;
  ASSERT_EQ((*child)->CopyIn(*base, &c0, 1), 1);
  EXPECT_EQ(c0, 0xcc);

  // munmap works as for any mapping.
  EXPECT_EQ(mm.Munmap(vvar, Vdso::kVvarSize + Vdso::ImageMapSize()), 0);
  EXPECT_EQ(mm.DebugString().find("[vdso]"), std::string::npos);
}

}  // namespace
}  // namespace sandboxd::vdso
