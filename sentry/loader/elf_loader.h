// Loads a program image into a fresh address space: static and static-PIE
// x86-64 ELF executables, and the initial stack (argv, envp, auxv) the
// System V ABI and Linux define.
#ifndef SANDBOXD_SENTRY_LOADER_ELF_LOADER_H_
#define SANDBOXD_SENTRY_LOADER_ELF_LOADER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "platforms/platform.h"
#include "sentry/loader/exec_image.h"
#include "sentry/mm/mm.h"

namespace sandboxd::loader {

struct LoadedImage {
  uint64_t entry = 0;   // the program's entry point (AT_ENTRY)
  uint64_t phdr = 0;    // address of the program headers in memory
  uint64_t phnum = 0;
  uint64_t phent = 0;
  uint64_t bias = 0;    // load bias (ET_DYN)
  uint64_t brk_start = 0;
  std::string interp;   // PT_INTERP, if any
  uint64_t interp_base = 0;  // where the interpreter was loaded (AT_BASE)
  uint64_t start = 0;   // where execution begins: the interpreter's entry,
                        // or the program's
  uint64_t vdso = 0;    // where the vDSO is mapped (AT_SYSINFO_EHDR); 0: none
};

// Where a static-PIE image goes (Linux's ELF_ET_DYN_BASE on x86-64).
inline constexpr uint64_t kPieBase = 0x555555554000ull;

// Maps the PT_LOAD segments of the ELF `file` into `mm`: an executable
// (ET_EXEC at its addresses, ET_DYN at kPieBase) or, with as_interp, an
// interpreter (ET_DYN placed where mmap would put it). Errors carry Linux's
// errno in the message: kInvalidArgument for ENOEXEC.
absl::StatusOr<LoadedImage> LoadElf(std::shared_ptr<mm::Mappable> file,
                                    mm::MM& mm, bool as_interp = false);

// Loads `file` and, for a dynamic program, its interpreter, which
// `open_interp` opens by path (in the sandbox's filesystem).
using InterpOpener =
    std::function<absl::StatusOr<std::shared_ptr<mm::Mappable>>(const std::string&)>;
absl::StatusOr<LoadedImage> LoadProgram(std::shared_ptr<mm::Mappable> file,
                                        mm::MM& mm,
                                        const InterpOpener& open_interp);

// Linux's limit on argv + envp: a quarter of the default 8 MiB stack.
inline constexpr uint64_t kMaxArgBytes = 2 * 1024 * 1024;
// Linux's MAX_ARG_STRLEN: the longest argument or environment string
// (with its NUL) execve takes.
inline constexpr uint64_t kMaxArgStrlen = 128 * 1024;

struct StackSpec {
  std::vector<std::string> argv;
  std::vector<std::string> envp;
  std::string execfn;     // AT_EXECFN: the path as given to exec
  uint8_t random[16];     // AT_RANDOM
  // AT_UID, AT_EUID, AT_GID, AT_EGID: the credentials the program runs
  // with; AT_SECURE: it was exec'd set-user-ID or set-group-ID (or gained
  // capabilities), so its libc ignores LD_* variables.
  uint32_t uid = 0, euid = 0, gid = 0, egid = 0;
  bool secure = false;
  // SetupStack fills in its argv/envp ranges and auxv; comm and exe are
  // the caller's to set.
  ExecImage image;
};

// Builds the initial stack at the top of `mm` and returns the initial
// register state: rsp at argc, rip at the entry point.
absl::StatusOr<platform::CpuState> SetupStack(mm::MM& mm,
                                              const LoadedImage& image,
                                              StackSpec& spec);

// exec's last step, after SetupStack: maps ahead what every new program
// touches first, which would otherwise be a fault each (MM::Prefault):
// the interpreter's and the program's segments of at most
// kPrefaultFileBytes, the vDSO, and the stack SetupStack wrote. A dynamic
// /bin/true took 37 faults before, 14 after (sentry/loader/README.md).
inline constexpr uint64_t kPrefaultFileBytes = 256 * 1024;
inline void Prefault(mm::MM& mm) { mm.Prefault(kPrefaultFileBytes); }

}  // namespace sandboxd::loader

#endif  // SANDBOXD_SENTRY_LOADER_ELF_LOADER_H_
