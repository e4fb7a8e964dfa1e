// Building a sandbox: the work shared by `sentry run` (one program from the
// command line) and `sentry serve` (a warm Sentry driven over the control
// channel, proto/control.proto).
//
// It comes in two phases, so that a warm Sentry does the first one before
// anyone asks for a sandbox:
//
//   Prewarm        what does not depend on the spec: the host facts /proc
//                  shows, the memory file, the platform (systrap's stub
//                  template), the vDSO and its TSC calibration;
//   Sandbox::Create  the spec's part: the kernel, the root filesystem (the
//                  rootfs fd under a tmpfs overlay), /dev, /proc, the init
//                  program loaded and ready; Start then runs it.
//
// Every step is timed (StageClock, base/stage_clock.h) so that the daemon can say where the
// milliseconds of a create go.
//
// A Sandbox lives until the Sentry process exits: the kernel's objects
// (filesystems, job control) are referenced from host threads that outlive
// any orderly teardown, as in `sentry run`, which _exits when init is done.
#ifndef SANDBOXD_SENTRY_BOOT_H_
#define SANDBOXD_SENTRY_BOOT_H_

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/stage_clock.h"
#include "base/unique_fd.h"
#include "platforms/platform.h"
#include "platforms/registry.h"
#include "sentry/proc/procfs.h"
#include "sentry/state/image_dir.h"
#include "sentry/fs/tty/host_tty.h"
#include "sentry/fs/tty/pty_relay.h"
#include "sentry/fs/vfs.h"
#include "sentry/host_filter.h"
#include "sentry/kernel/kernel.h"
#include "sentry/mm/memory_file.h"
#include "sentry/syscalls/syscalls.h"
#include "sentry/vdso/vdso_mapping.h"

namespace sandboxd::fs {
class TmpFs;
class OverlayFs;
class DevFs;
namespace tty {
class DevPts;
}  // namespace tty
}  // namespace sandboxd::fs

namespace sandboxd::boot {

// Stage and StageClock (base/stage_clock.h): every step is named there.
using ::sandboxd::Stage;
using ::sandboxd::StageClock;

struct PrewarmOptions {
  // A name from platforms/registry.h, and that back-end's options
  // (sentry run --systrap-fastpath=timer, --kvm-vcpu-pool=eager, ...).
  std::string platform = platform::Registry::Get().DefaultName();
  platform::OptionValues platform_options;
  // false: the vDSO makes every call a system call (sentry run --vdso=syscall).
  bool vdso_tsc = true;
  // Wait for the vDSO's TSC calibration (~1 ms) in Prewarm rather than in
  // Sandbox::Create, where `sentry run` overlaps it with its other work.
  bool wait_calibration = false;
  // Run once the host's facts have been read and before anything forks or
  // starts a thread (sentry serve's isolation: namespaces, pivot_root into
  // an empty root, capabilities dropped). Null: nothing.
  std::function<absl::Status(StageClock*)> isolate;
  // Build the Sentry's own seccomp filter (host_filter.h), which
  // Sandbox::Start loads before the program runs.
  bool sentry_seccomp = true;
  // Make what the first address space needs now
  // (Platform::PrepareAddressSpace; systrap: its stub process), not in
  // Sandbox::Create: for a warm Sentry, which has the time while it waits.
  bool prepare_address_space = false;
  // Have the host allocate this much of the memory file now
  // (MemoryFile::Populate): the sandbox's first pages then cost no
  // allocation at their first touch. Best effort (needs Linux 5.14).
  uint64_t populate_bytes = 0;
};

// What Prewarm makes; Sandbox::Create consumes it.
struct Prewarmed {
  fs::proc::HostInfo host;
  std::unique_ptr<mm::MemoryFile> memfile;
  std::unique_ptr<platform::Platform> platform;
  std::unique_ptr<vdso::Vdso> vdso;
  std::optional<host_filter::Program> filter;
};

// Preconditions: platform::Registry::InitProcess has run (first thing in
// main).
// Reads the host's /proc: call it while that is still reachable.
absl::StatusOr<Prewarmed> Prewarm(const PrewarmOptions& o, StageClock* clock);

// A process's standard I/O, as host descriptors. An invalid fd leaves that
// descriptor closed in the sandbox. With `terminal` set, fds[0] is a
// terminal (the host's, or a pty replica the daemon made) and every fd on
// that same terminal becomes a terminal file of the sandbox.
//
// With `relay_terminal` too (sentry serve: the daemon's pty), the process's
// terminal is instead a new pair of the sandbox's own devpts (/dev/pts/N,
// its controlling terminal), and fds[0] is only the host side that a
// fs::tty::PtyRelay connects to that pair's master.
struct Stdio {
  std::array<UniqueFd, 3> fds;
  bool terminal = false;
  bool relay_terminal = false;
};

struct ProcessConfig {
  std::vector<std::string> argv;  // argv[0]: a path, or a name found in PATH
  std::vector<std::string> env;   // "K=V"
  std::string cwd = "/";
  // Who the process runs as (spec.process.user, `sentry run --user`):
  // real, effective, saved and filesystem ids, supplementary groups, and
  // the capabilities Linux gives that uid (every one for 0, none else).
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
  // Docker's defaults for what `env` lacks (a sandbox's processes, from
  // `sentry serve`; `sentry run` passes only --env): PATH (the usual
  // search path), HOSTNAME (the sandbox's host name) and HOME (the user's
  // in the rootfs's /etc/passwd, else "/").
  bool default_env = false;
};

struct Limits {
  uint64_t memory_bytes = 0;  // 0: none; else /proc/meminfo's MemTotal
  uint64_t cpu_millis = 0;    // 0: none; else ceil(cpu_millis/1000) CPUs
  uint64_t pids = 0;          // 0: none; else the most tasks at once
};

// The limits an update removes (Sandbox::UpdateLimits).
struct LimitsLifted {
  bool memory = false;
  bool cpu = false;
  bool pids = false;
};

// A mount of the spec (SandboxSpec.mounts, `sentry run -v/--tmpfs`), made
// at `target` after /dev and /proc, in order. A missing mountpoint is
// made (directories, or an empty file for a file bind) in the root's
// overlay first, as runc does.
struct MountConfig {
  enum class Type { kBind, kTmpfs };
  Type type = Type::kBind;
  std::string target;     // absolute path in the sandbox
  bool read_only = false;
  // kBind: the host directory (O_PATH|O_DIRECTORY) or file (O_RDONLY, or
  // O_RDWR when writable), served by hostfs; `source` is its host path,
  // shown as the mount's source.
  UniqueFd host;
  std::string source;
  // kTmpfs: mount(2)'s tmpfs options (size=, mode=, nr_inodes=...).
  std::string options;
};

struct SandboxConfig {
  UniqueFd rootfs;  // the host directory, O_PATH|O_DIRECTORY
  std::vector<MountConfig> mounts;
  // The root mount is read-only (EROFS on writes to it; the spec's mounts
  // are what the program may write to).
  bool read_only_root = false;
  ProcessConfig init;
  std::string hostname = "sandbox";
  Limits limits;
  bool strace = false;  // print every syscall to stderr
  // Init is a container's (kernel::Kernel::set_container_init).
  bool container_init = false;
  // /etc/hostname in the overlay says `hostname` (as docker's does), when
  // the rootfs has an /etc.
  bool etc_hostname = false;
  // Files of the sandbox's /etc written over the rootfs's before the
  // program starts (name in /etc, content), in the overlay's upper layer:
  // the network mode's hosts and resolv.conf (sentry run). Nothing is
  // written when the rootfs has no /etc.
  std::vector<std::pair<std::string, std::string>> etc_files;
};

// A restore: the image, and what the caller gives anew (the rootfs
// directory is reopened, never saved; the limits may be overridden).
struct RestoreConfig {
  UniqueFd rootfs;     // the host directory, O_PATH|O_DIRECTORY
  // The bind mounts the saved sandbox had, reopened (by target: the
  // image records each bind mount by its target, its tmpfs mounts whole).
  // Others are ignored; a bind mount of the image without one here fails
  // the restore.
  std::vector<MountConfig> mounts;
  std::string image;   // the image directory (sentry/state/image_dir.h)
  // When valid, the image's files are opened relative to it (`image`
  // only names it in errors): a warm Sentry's root is empty.
  UniqueFd image_dir;
  std::string hostname = "sandbox";
  Limits limits;       // memory_bytes below the image's need: refused
  bool strace = false;
  bool container_init = false;  // as SandboxConfig's
  // Memory: loaded in the background while the program runs (an
  // mm::AsyncLoader, installed before the load and started after it), or,
  // with `eager_pages`, read before Restore returns.
  bool eager_pages = false;
  mm::AsyncLoadOptions page_loading;
};

// Error codes of Create and Exec, for callers that mirror a shell's exit
// status: NotFound: the program does not exist (127);
// FailedPrecondition: it exists but cannot be executed (126); any other
// code: the sandbox itself could not be built (125).
int ShellExitCodeFor(const absl::Status& s);

// Resource use, as SentryStats reports it.
struct Stats {
  std::vector<pid_t> pids;  // live thread-group leaders
  uint32_t tasks = 0;
  uint64_t memory_bytes = 0;
  uint64_t cpu_user_nanos = 0;
  uint64_t cpu_system_nanos = 0;
  std::map<uint64_t, uint64_t> unimplemented;
  uint64_t oom_kills = 0;              // kernel::Kernel::OutOfMemory
  uint64_t memory_limit_refusals = 0;  // mm::MemoryFile::limit_refusals
  uint64_t memory_limit_bytes = 0;     // the application's share
};

// One sandbox: its kernel and filesystems, the init program, the processes
// started into it later. Thread-safe: Start, Exec, Signal, WaitPid and Stats
// may be called from any thread.
class Sandbox {
 public:
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Builds the kernel around `pw` and loads the init program, which does
  // not run until Start. Steps are recorded in `clock`.
  static absl::StatusOr<std::unique_ptr<Sandbox>> Create(
      Prewarmed pw, SandboxConfig config, Stdio stdio, StageClock* clock);

  // Rebuilds a checkpointed sandbox around `pw` from `config.image`: the
  // image is checked first (CheckImage: a bad one is an error naming the
  // file or field), then the kernel, a new /dev, /dev/pts and /proc, the
  // rootfs reopened, every object loaded with its memory read from
  // pages.img (in the background from the end of the load, unless
  // `config.eager_pages`); `stdio` stands for the saved sandbox's
  // inherited stdio. Nothing runs until Start, which starts every task
  // where it stopped, whether or not its memory has arrived.
  static absl::StatusOr<std::unique_ptr<Sandbox>> Restore(
      Prewarmed pw, RestoreConfig config, Stdio stdio, StageClock* clock);
  // Saves the running sandbox into the image directory `dir` (a path,
  // replaced as SaveImage does; or a descriptor, filled as SaveImageInto
  // does): every task
  // is stopped at a safe point (Kernel::StopTheWorld), the image written
  // (state::SaveImage, `spec` into its manifest; a restored sandbox's
  // pages are all loaded first), then the sandbox goes on
  // (`leave_running`) or is killed. A failed save (an object that cannot
  // be saved: the error names it) leaves the sandbox running and no image.
  // `while_stopped`, when given, runs after a successful save and before
  // the sandbox goes on (what stood where at the save: sentry run's
  // stdout offset).
  absl::StatusOr<state::SaveResult> Checkpoint(
      const state::ImageDir& dir, bool leave_running, const std::string& spec,
      StageClock* clock, const std::function<void()>& while_stopped = nullptr);
  // Loads the Sentry's seccomp filter (when Prewarm built one), then runs
  // init on a thread of its own: returns at once.
  absl::Status Start();
  bool started();
  // Blocks until init and every other task have exited; init's status.
  // Preconditions: Start was called.
  kernel::ExitStatus Wait();
  // Waits (boundedly) until what process `pid` wrote to its relayed
  // terminal has reached the host side, so that its exit is told after its
  // last output. Nothing when it has none.
  void DrainTerminal(pid_t pid) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether every task has exited (Wait would not block).
  bool done();

  // Starts another process in the running sandbox: no parent, a session of
  // its own, the sandbox's root. FailedPrecondition when the sandbox is
  // not running; NotFound/FailedPrecondition as Create for the program.
  absl::StatusOr<pid_t> Exec(const ProcessConfig& p, Stdio stdio);
  // Blocks until `pid` (init, or a process Exec started) has exited.
  // NotFound for any other pid.
  absl::StatusOr<kernel::ExitStatus> WaitPid(pid_t pid);

  // The window size of the relayed terminal (Stdio::relay_terminal) of
  // `pid` (1: init's): SIGWINCH to its foreground process group.
  // NotFound when that process was not given one.
  absl::Status ResizeTerminal(pid_t pid, uint16_t rows, uint16_t cols);

  // Sends `signo` to init (process-directed), to process `pid` (when not
  // 0), or to every process. NotFound when there is no such process left.
  absl::Status Signal(int signo, bool all, pid_t pid = 0);
  // SIGKILL to every process.
  void KillAll();

  Stats GetStats();
  // The limits now (the spec's, or the last UpdateLimits').
  Limits CurrentLimits();
  // Changes the running sandbox's limits; a field 0 keeps its value, one
  // `lifted` has none from then on (runc's update with -1). A memory limit
  // below the application's use now: FailedPrecondition.
  absl::Status UpdateLimits(const Limits& lim, LimitsLifted lifted = {});

  kernel::Kernel& kernel() { return *kernel_; }
  const syscalls::Table& table() const { return table_; }
  // The terminal of init's stdio, or null.
  const std::shared_ptr<fs::tty::HostTerminal>& console() const {
    return console_;
  }
  // /proc/sandbox/checkpoint's side (sentry/proc/checkpoint.h): every
  // Checkpoint reports its end there; self_checkpoint.h installs the
  // requester.
  fs::proc::CheckpointControl& checkpoints() { return *checkpoints_; }

 private:
  Sandbox() = default;

  // SandboxConfig::etc_hostname: /etc/hostname in the overlay.
  absl::Status WriteEtcHostname(const std::string& hostname);
  // A program loaded into a fresh address space, ready for a task.
  struct Loaded;
  absl::StatusOr<Loaded> Load(const ProcessConfig& p,
                              const std::shared_ptr<fs::FsContext>& fsctx);
  absl::StatusOr<std::shared_ptr<fs::FsContext>> NewFsContext(
      const std::string& cwd);
  // Builds a descriptor table from `stdio`; `term` is the terminal those
  // descriptors are on, if any.
  std::shared_ptr<fs::FdTable> NewFdTable(
      Stdio& stdio, const std::shared_ptr<fs::tty::HostTerminal>& term);
  // The kernel and what does not depend on the spec's program (Create's
  // and Restore's first step).
  static absl::StatusOr<std::unique_ptr<Sandbox>> NewKernel(
      Prewarmed& pw, const std::string& hostname, const Limits& lim,
      bool strace, Stdio& stdio);
  // A new pair of the sandbox's devpts relayed to stdio.fds[0] (taken),
  // its replica owned by `uid` and installed as descriptors 0-2 of `fds`;
  // `*term` is the pair, for the caller to make the process's
  // controlling terminal.
  absl::StatusOr<std::unique_ptr<fs::tty::PtyRelay>> RelayTerminal(
      Stdio& stdio, uint32_t uid, fs::FdTable& fds,
      std::shared_ptr<fs::tty::Terminal>* term);
  // A restored pair that was relayed (Pty::relayed), relayed to `host`
  // through a new master file.
  absl::StatusOr<std::unique_ptr<fs::tty::PtyRelay>> RelayPty(
      std::shared_ptr<fs::tty::Pty> pty, UniqueFd host);
  absl::Status MountDev();
  // SandboxConfig::etc_files into /etc (replacing what is there, a
  // symlink included).
  absl::Status WriteEtcFiles(
      const std::vector<std::pair<std::string, std::string>>& files);
  absl::Status MountProc(fs::proc::HostInfo host, uint64_t memory_limit);
  // The spec's mounts, in order.
  absl::Status MountSpec(std::vector<MountConfig>& mounts);
  // devfs with devpts in it; procfs over the kernel (unmounted).
  void MakeDev();
  void MakeProc(fs::proc::HostInfo host, uint64_t memory_limit);

  // Declared first, destroyed last: the objects below point into them.
  syscalls::Table table_;
  std::unique_ptr<vdso::Vdso> vdso_;
  std::optional<host_filter::Program> filter_;
  std::unique_ptr<kernel::Kernel> kernel_;
  std::unique_ptr<fs::tty::JobControl> job_control_;
  std::shared_ptr<fs::tty::HostTerminal> console_;
  // Init's terminal is a relayed devpts pair (Stdio::relay_terminal):
  // /dev/console opens its replica (relay_console_, set by RelayTerminal
  // for init, or by Restore for the relayed pair the image holds), as
  // docker binds the container's pty there.
  bool relay_console_wanted_ = false;
  absl::Mutex console_mu_;
  std::shared_ptr<fs::Inode> relay_console_ ABSL_GUARDED_BY(console_mu_);
  std::shared_ptr<fs::tty::DevPts> devpts_;
  std::unique_ptr<fs::DevFs> devfs_;
  std::unique_ptr<fs::TmpFs> upper_;
  std::unique_ptr<fs::OverlayFs> overlay_;
  std::unique_ptr<fs::TmpFs> shm_;
  std::unique_ptr<fs::proc::ProcFs> procfs_;
  std::shared_ptr<fs::proc::CheckpointControl> checkpoints_;
  std::shared_ptr<fs::Vfs> vfs_;
  std::shared_ptr<fs::FsContext> init_fs_;
  // The hostfs root under the overlay: what a checkpoint names as the
  // rootfs a restore reopens.
  std::shared_ptr<fs::Inode> rootfs_;
  // A restored sandbox: what its Loader built that nothing else owns (the
  // overlay, the tmpfs superblocks), kept as long as the sandbox.
  bool restored_ = false;
  std::vector<std::shared_ptr<void>> kept_;
  absl::Mutex checkpoint_mu_;  // one checkpoint at a time
  kernel::Task* init_ = nullptr;  // owned by the kernel

  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  kernel::ExitStatus init_status_ ABSL_GUARDED_BY(mu_);
  // Processes Exec started (pid -> group), kept after they are reaped so
  // that a late WaitPid still gets the status.
  std::map<pid_t, std::shared_ptr<kernel::ThreadGroup>> execs_
      ABSL_GUARDED_BY(mu_);
  // Relayed terminals (Stdio::relay_terminal) by the pid they were made
  // for (1: init). Stopped first at the destruction, while the kernel
  // their hang-ups reach still exists.
  std::map<pid_t, std::unique_ptr<fs::tty::PtyRelay>> relays_
      ABSL_GUARDED_BY(mu_);
  // CPU time of reaped Exec'd processes (nobody's children).
  kernel::Usage reaped_usage_ ABSL_GUARDED_BY(mu_);
  std::thread runner_;
};

}  // namespace sandboxd::boot

#endif  // SANDBOXD_SENTRY_BOOT_H_
