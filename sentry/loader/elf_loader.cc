#include "sentry/loader/elf_loader.h"

#include <elf.h>
#include <errno.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace sandboxd::loader {
namespace {

constexpr uint64_t kPage = 4096;
uint64_t PageDown(uint64_t x) { return x & ~(kPage - 1); }
uint64_t PageUp(uint64_t x) { return (x + kPage - 1) & ~(kPage - 1); }

absl::Status NoExec(absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("exec format error (ENOEXEC): ", why));
}

absl::Status FromErrno(absl::string_view what, int64_t neg_errno) {
  return ErrnoStatus(what, static_cast<int>(-neg_errno));
}

int ProtOf(uint32_t p_flags) {
  return ((p_flags & PF_R) ? PROT_READ : 0) |
         ((p_flags & PF_W) ? PROT_WRITE : 0) |
         ((p_flags & PF_X) ? PROT_EXEC : 0);
}

bool ReadAll(mm::Mappable& f, void* buf, size_t n, uint64_t off) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    int64_t r = f.ReadAt(p, n, off);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return true;
}

}  // namespace

absl::StatusOr<LoadedImage> LoadElf(std::shared_ptr<mm::Mappable> file,
                                    mm::MM& mm, bool as_interp) {
  mm::Mappable& fd = *file;
  Elf64_Ehdr eh;
  int64_t got = fd.ReadAt(&eh, sizeof(eh), 0);
  if (got < 0) return ErrnoStatus("reading the ELF header", static_cast<int>(-got));
  if (got < static_cast<int64_t>(sizeof(eh)) ||
      std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) {
    return NoExec("not an ELF file");
  }
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64) {
    return NoExec("not an x86-64 ELF file");
  }
  if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) {
    return NoExec("not an executable");
  }
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 ||
      eh.e_phnum > 256) {
    return NoExec("bad program header table");
  }
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  if (!ReadAll(fd, ph.data(), ph.size() * sizeof(Elf64_Phdr), eh.e_phoff)) {
    return NoExec("truncated program header table");
  }

  std::vector<const Elf64_Phdr*> loads;
  std::string interp;
  uint64_t phdr_vaddr = 0;
  bool exec_stack = false;
  for (const Elf64_Phdr& p : ph) {
    switch (p.p_type) {
      case PT_LOAD:
        if (p.p_memsz == 0) break;
        if (p.p_filesz > p.p_memsz ||
            (p.p_vaddr % kPage) != (p.p_offset % kPage)) {
          return NoExec("misaligned PT_LOAD segment");
        }
        if (!loads.empty() && p.p_vaddr < loads.back()->p_vaddr) {
          return NoExec("PT_LOAD segments out of order");
        }
        loads.push_back(&p);
        break;
      case PT_INTERP: {
        if (as_interp) return NoExec("an interpreter with an interpreter");
        if (p.p_filesz < 2 || p.p_filesz > 4096) return NoExec("bad PT_INTERP");
        std::string path(p.p_filesz, '\0');
        if (!ReadAll(fd, path.data(), path.size(), p.p_offset)) {
          return NoExec("truncated PT_INTERP");
        }
        if (path.back() != '\0') return NoExec("PT_INTERP not terminated");
        path.pop_back();
        interp = path;
        break;
      }
      case PT_PHDR:
        phdr_vaddr = p.p_vaddr;
        break;
      case PT_GNU_STACK:
        exec_stack = (p.p_flags & PF_X) != 0;
        break;
      default:
        break;
    }
  }
  (void)exec_stack;
  if (loads.empty()) return NoExec("no PT_LOAD segment");

  uint64_t lo = PageDown(loads.front()->p_vaddr);
  uint64_t hi = 0;
  for (const Elf64_Phdr* p : loads) hi = std::max(hi, p->p_vaddr + p->p_memsz);
  hi = PageUp(hi);
  uint64_t bias = 0;
  if (eh.e_type == ET_DYN) {
    if (lo != 0) return NoExec("ET_DYN image not linked at 0");
    if (as_interp) {
      // Where mmap would put it: reserve the whole span, then map over it.
      int64_t at = mm.Mmap(0, hi - lo, PROT_NONE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
      if (at < 0) return FromErrno("placing the interpreter", at);
      bias = static_cast<uint64_t>(at);
    } else {
      bias = kPieBase;
    }
  }
  if (lo + bias < mm.min_addr() || hi + bias > mm.max_addr() || hi <= lo) {
    return NoExec("segments outside the user address range");
  }

  // Each segment as Linux's elf_load() maps it: the file's pages privately
  // (demand-paged, and named by the file in /proc/[pid]/maps with their
  // offsets), later segments over earlier ones where they share a page; the
  // tail of the last file page zeroed if the segment is writable; the bss
  // beyond it anonymous and read-write.
  const platform::Prot any{true, true, true};
  const uint64_t file_size = fd.Size();
  for (const Elf64_Phdr* p : loads) {
    if (p->p_offset > file_size || p->p_filesz > file_size - p->p_offset) {
      return NoExec("truncated ELF segment");
    }
  }
  for (const Elf64_Phdr* p : loads) {
    const int prot = ProtOf(p->p_flags);
    const uint64_t seg = p->p_vaddr + bias;
    const uint64_t start = PageDown(seg);
    const uint64_t file_end = seg + p->p_filesz;
    uint64_t zero_from = start;
    if (p->p_filesz > 0) {
      int64_t r = mm.MmapFile(start, PageUp(file_end) - start, prot,
                              MAP_PRIVATE | MAP_FIXED, file,
                              PageDown(p->p_offset), any);
      if (r < 0) return FromErrno("mapping an ELF segment", r);
      zero_from = file_end;
      if (p->p_memsz > p->p_filesz && (prot & PROT_WRITE) &&
          PageUp(file_end) > file_end) {
        static const uint8_t kZeros[kPage] = {};
        uint64_t n = PageUp(file_end) - file_end;
        if (mm.CopyOut(file_end, kZeros, n) != static_cast<int64_t>(n)) {
          return FromErrno("zeroing the end of an ELF segment", -EFAULT);
        }
      }
    }
    const uint64_t bss = PageUp(zero_from);
    const uint64_t end = PageUp(seg + p->p_memsz);
    if (end > bss) {
      int64_t r = mm.Mmap(bss, end - bss,
                          PROT_READ | PROT_WRITE | (prot & PROT_EXEC),
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED);
      if (r < 0) return FromErrno("mapping an ELF segment's bss", r);
    }
  }
  // An interpreter's reservation keeps only its segments: the holes between
  // them are unmapped, as Linux leaves them.
  if (as_interp) {
    uint64_t prev_end = lo + bias;
    for (const Elf64_Phdr* p : loads) {
      uint64_t start = PageDown(p->p_vaddr + bias);
      if (start > prev_end) mm.Munmap(prev_end, start - prev_end);
      prev_end = std::max(prev_end, PageUp(p->p_vaddr + bias + p->p_memsz));
    }
    if (hi + bias > prev_end) mm.Munmap(prev_end, hi + bias - prev_end);
  }

  LoadedImage img;
  img.bias = bias;
  img.entry = eh.e_entry + bias;
  img.phnum = eh.e_phnum;
  img.phent = eh.e_phentsize;
  if (phdr_vaddr != 0) {
    img.phdr = phdr_vaddr + bias;
  } else {
    for (const Elf64_Phdr* p : loads) {
      if (eh.e_phoff >= p->p_offset && eh.e_phoff < p->p_offset + p->p_filesz) {
        img.phdr = p->p_vaddr + (eh.e_phoff - p->p_offset) + bias;
        break;
      }
    }
  }
  img.brk_start = hi + bias;
  img.interp = interp;
  img.start = img.entry;
  if (!as_interp) mm.SetBrkStart(img.brk_start);
  return img;
}

absl::StatusOr<LoadedImage> LoadProgram(std::shared_ptr<mm::Mappable> file,
                                        mm::MM& mm,
                                        const InterpOpener& open_interp) {
  ASSIGN_OR_RETURN(LoadedImage img, LoadElf(std::move(file), mm));
  if (img.interp.empty()) return img;
  absl::StatusOr<std::shared_ptr<mm::Mappable>> interp = open_interp(img.interp);
  if (!interp.ok()) {
    return Annotate(interp.status(),
                    absl::StrCat("opening the interpreter ", img.interp));
  }
  absl::StatusOr<LoadedImage> li = LoadElf(*interp, mm, /*as_interp=*/true);
  if (!li.ok()) {
    return Annotate(li.status(),
                    absl::StrCat("loading the interpreter ", img.interp));
  }
  img.interp_base = li->bias;
  img.start = li->entry;
  return img;
}

absl::StatusOr<platform::CpuState> SetupStack(mm::MM& mm,
                                              const LoadedImage& image,
                                              StackSpec& spec) {
  // Room for the strings and vectors, and 128 KiB for the program; the
  // stack grows down from there (MAP_GROWSDOWN).
  uint64_t strings = 0;
  for (const auto* v : {&spec.argv, &spec.envp}) {
    for (const auto& s : *v) {
      if (s.size() + 1 > kMaxArgStrlen) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "argument list too long (E2BIG): a string of ", s.size() + 1,
            " bytes"));
      }
      strings += s.size() + 1;
    }
  }
  if (strings > kMaxArgBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("argument list too long (E2BIG): ", strings, " bytes"));
  }
  const uint64_t kInitialStack =
      PageUp(strings + (spec.argv.size() + spec.envp.size()) * 8 + 4096) +
      128 * 1024;
  const uint64_t top = mm.max_addr() - kPage;
  int64_t r = mm.Mmap(top - kInitialStack, kInitialStack,
                      PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_GROWSDOWN);
  if (r < 0) return FromErrno("mapping the initial stack", r);
  mm.SetName(top - kInitialStack, kInitialStack, "[stack]");

  // Strings and AT_RANDOM bytes at the top, then the vectors below them.
  uint64_t sp = top;
  auto push_bytes = [&](const void* data, size_t n) -> absl::StatusOr<uint64_t> {
    sp -= n;
    if (mm.CopyOut(sp, data, n) != static_cast<int64_t>(n)) {
      return absl::ResourceExhaustedError(
          "argument list too long (E2BIG): the initial stack overflows");
    }
    return sp;
  };
  auto push_string = [&](const std::string& s) {
    return push_bytes(s.c_str(), s.size() + 1);
  };
  ASSIGN_OR_RETURN(uint64_t execfn, push_string(spec.execfn));
  ASSIGN_OR_RETURN(uint64_t platform_str, push_string("x86_64"));
  ASSIGN_OR_RETURN(uint64_t random, push_bytes(spec.random, 16));
  std::vector<uint64_t> envp, argv;
  spec.image.env_end = sp;
  for (auto it = spec.envp.rbegin(); it != spec.envp.rend(); ++it) {
    ASSIGN_OR_RETURN(uint64_t a, push_string(*it));
    envp.insert(envp.begin(), a);
  }
  spec.image.env_start = sp;
  spec.image.arg_end = sp;
  for (auto it = spec.argv.rbegin(); it != spec.argv.rend(); ++it) {
    ASSIGN_OR_RETURN(uint64_t a, push_string(*it));
    argv.insert(argv.begin(), a);
  }
  spec.image.arg_start = sp;

  std::vector<uint64_t> auxv;
  // Linux puts the architecture's entries (the vDSO) first.
  if (image.vdso != 0) auxv = {AT_SYSINFO_EHDR, image.vdso};
  auxv.insert(auxv.end(), {
      AT_PHDR, image.phdr,      AT_PHENT, image.phent,
      AT_PHNUM, image.phnum,    AT_PAGESZ, kPage,
      AT_BASE, image.interp_base, AT_FLAGS, 0,
      AT_ENTRY, image.entry,    AT_UID, spec.uid,
      AT_EUID, spec.euid,       AT_GID, spec.gid,
      AT_EGID, spec.egid,       AT_SECURE, spec.secure ? 1u : 0u,
      AT_CLKTCK, 100,           AT_HWCAP, getauxval(AT_HWCAP),
      AT_HWCAP2, getauxval(AT_HWCAP2),
      AT_RANDOM, random,        AT_EXECFN, execfn,
      AT_PLATFORM, platform_str,
      AT_MINSIGSTKSZ, getauxval(AT_MINSIGSTKSZ),
      AT_NULL, 0});
  spec.image.auxv = auxv;
  std::vector<uint64_t> vec;
  vec.push_back(spec.argv.size());
  vec.insert(vec.end(), argv.begin(), argv.end());
  vec.push_back(0);
  vec.insert(vec.end(), envp.begin(), envp.end());
  vec.push_back(0);
  vec.insert(vec.end(), auxv.begin(), auxv.end());
  sp = (sp - vec.size() * 8) & ~15ull;  // argc 16-byte aligned
  if (mm.CopyOut(sp, vec.data(), vec.size() * 8) !=
      static_cast<int64_t>(vec.size() * 8)) {
    return absl::ResourceExhaustedError(
        "argument list too long (E2BIG): the initial stack overflows");
  }

  platform::CpuState cpu;
  cpu.regs.rip = image.start != 0 ? image.start : image.entry;
  cpu.regs.rsp = sp;
  cpu.regs.eflags = 0x202;
  cpu.regs.cs = 0x33;
  cpu.regs.ss = 0x2b;
  return cpu;
}

}  // namespace sandboxd::loader
