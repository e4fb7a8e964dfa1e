// procfs: the sandbox's /proc, generated from the Sentry's own kernel state
// (never the host's /proc).
//
//   /proc/{self,thread-self}      symlinks to the calling task's directories
//   /proc/[pid]/...               every thread group of the sandbox (zombies
//                                 included, state Z), by sandbox pid
//   /proc/[pid]/task/[tid]/...    its threads
//   /proc/{cpuinfo,meminfo,vmstat,uptime,loadavg,stat,version,filesystems,
//         mounts}
//   /proc/sys/kernel/{hostname,ostype,osrelease,pid_max},
//   /proc/sys/vm/overcommit_memory
//   /proc/sandbox/{checkpoint,restored}  self-checkpoints (checkpoint.h)
//
// Files are generated at open (a seq_file-style snapshot), so that reads in
// small chunks see one consistent text. Directories of processes, threads
// and descriptors are never cached by the VFS (CacheLookups): a process
// that is reaped is gone at the next lookup. exe, cwd, root and fd/N are
// magic links (Inode::FollowMagicLink): following one reaches the object
// itself; opening fd/N of a pipe opens the pipe anew.
//
// Who is "self" is the task whose host thread makes the call
// (kernel::Task::Current()).
//
// Locks: what procfs reads from thread groups it copies under the tasklist
// lock (Kernel::WithTasklistLock); mm, fd-table and VFS calls are made
// after it is released.
#ifndef SANDBOXD_SENTRY_PROC_PROCFS_H_
#define SANDBOXD_SENTRY_PROC_PROCFS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "sentry/fs/inode.h"
#include "sentry/kernel/kernel.h"
#include "sentry/proc/checkpoint.h"

namespace sandboxd::fs::proc {

// What procfs shows of the host, read once before the sandbox starts.
struct HostInfo {
  std::string cpuinfo;     // the host's /proc/cpuinfo text
  uint64_t mem_total = 0;  // bytes
  int num_cpus = 1;
};

// Reads the host's /proc/cpuinfo and /proc/meminfo (MemTotal), through
// ordinary host opens; missing files give empty/zero fields.
HostInfo ReadHostInfo();

struct ProcFsOptions {
  uint64_t dev = 0;  // st_dev of every procfs inode
  HostInfo host;
  // The sandbox's memory limit in bytes; 0: none, MemTotal is the host's.
  uint64_t memory_limit = 0;
  // /proc/sandbox (checkpoint.h); null: no such directory.
  std::shared_ptr<CheckpointControl> checkpoint;
};

class ProcFs {
 public:
  // Preconditions: `k` outlives the filesystem and has its Vfs set.
  ProcFs(kernel::Kernel* k, ProcFsOptions opts);
  ProcFs(const ProcFs&) = delete;
  ProcFs& operator=(const ProcFs&) = delete;

  std::shared_ptr<Inode> Root() const { return root_; }

 private:
  std::shared_ptr<Inode> root_;
};

}  // namespace sandboxd::fs::proc

#endif  // SANDBOXD_SENTRY_PROC_PROCFS_H_
