// The Sentry's child side of clone(): runs between clone and exec in a
// multi-threaded daemon, so it only makes async-signal-safe calls (no
// allocation, no locks). Everything it needs is prepared before clone.
#ifndef SANDBOXD_DAEMON_SPAWN_SIGNAL_SAFE_H_
#define SANDBOXD_DAEMON_SPAWN_SIGNAL_SAFE_H_

namespace sandboxd {
namespace daemon {

struct SpawnChildArgs {
  const char* path;
  char* const* argv;
  char* const* envp;
  int control_fd;     // becomes fd 3 in the Sentry
  int stdin_fd;       // becomes fd 0 (/dev/null)
  int sync_fd;        // read end of a pipe: one byte means "exec now"
  // A network namespace to enter before exec (setns), or -1: the Sentry
  // then starts in it, as `sentry serve --network=host` in the daemon's.
  int netns_fd;
};

// Makes the child its own process group leader (so the daemon can kill the
// Sentry with its stubs), waits for the parent's go, enters netns_fd's
// namespace, and execs. Never returns; exits 127 when anything fails,
// kSpawnSetnsFailed when the setns does.
[[noreturn]] void RunSpawnChild(const SpawnChildArgs& a);

// The spawn child's exit status when it could not enter the network
// namespace (the daemon lacks CAP_SYS_ADMIN over it).
inline constexpr int kSpawnSetnsFailed = 126;

}  // namespace daemon
}  // namespace sandboxd

#endif  // SANDBOXD_DAEMON_SPAWN_SIGNAL_SAFE_H_
