// The daemon's log: one line per event on stderr (journald adds the time
// under systemd).
#ifndef SANDBOXD_DAEMON_LOG_H_
#define SANDBOXD_DAEMON_LOG_H_

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"

namespace sandboxd {
namespace daemon {

template <typename... Args>
void Log(const Args&... args) {
  std::string line = absl::StrCat("sandboxd: ", args..., "\n");
  fputs(line.c_str(), stderr);
}

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_LOG_H_
