// Loads a program image into a fresh address space: static and static-PIE
// x86-64 ELF executables, and the initial stack (argv, envp, auxv) the
// System V ABI and Linux define.
#ifndef SANDBOXD_SENTRY_LOADER_ELF_LOADER_H_
#define SANDBOXD_SENTRY_LOADER_ELF_LOADER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "platforms/platform.h"
#include "sentry/mm/mm.h"

namespace sandboxd::loader {

struct LoadedImage {
  uint64_t entry = 0;
  uint64_t phdr = 0;    // address of the program headers in memory
  uint64_t phnum = 0;
  uint64_t phent = 0;
  uint64_t bias = 0;    // load bias (ET_DYN)
  uint64_t brk_start = 0;
};

// Where a static-PIE image goes (Linux's ELF_ET_DYN_BASE on x86-64).
inline constexpr uint64_t kPieBase = 0x555555554000ull;

// Maps the PT_LOAD segments of the ELF file `fd` into `mm`. Errors carry
// Linux's errno in the message and as code: kInvalidArgument for ENOEXEC,
// kUnimplemented for dynamic programs (an interpreter is not loaded yet).
absl::StatusOr<LoadedImage> LoadElf(int fd, mm::MM& mm);

struct StackSpec {
  std::vector<std::string> argv;
  std::vector<std::string> envp;
  std::string execfn;     // AT_EXECFN: the path as given to exec
  uint8_t random[16];     // AT_RANDOM
};

// Builds the initial stack at the top of `mm` and returns the initial
// register state: rsp at argc, rip at the entry point.
absl::StatusOr<platform::CpuState> SetupStack(mm::MM& mm,
                                              const LoadedImage& image,
                                              const StackSpec& spec);

}  // namespace sandboxd::loader

#endif  // SANDBOXD_SENTRY_LOADER_ELF_LOADER_H_
