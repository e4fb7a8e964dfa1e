// The facts of a process's current program image that /proc reports and a
// checkpoint keeps: its name, its executable, and where exec put argv, envp
// and the auxiliary vector. exec (and boot) produce one; fork copies it.
#ifndef SANDBOXD_SENTRY_LOADER_EXEC_IMAGE_H_
#define SANDBOXD_SENTRY_LOADER_EXEC_IMAGE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sandboxd::loader {

struct ExecImage {
  std::string comm;  // the program's name (16 bytes with the NUL, as Linux)
  std::string exe;   // the executable's path in the sandbox
  // Where the initial argv and envp strings are in the address space
  // (/proc/[pid]/cmdline, environ, stat); SetupStack fills them in.
  uint64_t arg_start = 0, arg_end = 0, env_start = 0, env_end = 0;
  // The auxiliary vector as written (/proc/[pid]/auxv); SetupStack's.
  std::vector<uint64_t> auxv;
};

// The comm exec gives a program: the last component of the path it was
// exec'd by, cut to 15 bytes (Linux's __set_task_comm of kbasename).
inline std::string CommOfPath(std::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(
      path.substr(slash == std::string_view::npos ? 0 : slash + 1, 15));
}

}  // namespace sandboxd::loader

#endif  // SANDBOXD_SENTRY_LOADER_EXEC_IMAGE_H_
