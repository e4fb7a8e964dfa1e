// /proc/[pid] and /proc/[pid]/task/[tid]: the per-process and per-thread
// files, generated from snapshots of the thread group taken under the
// tasklist lock. Internal to sentry/proc.
#ifndef SANDBOXD_SENTRY_PROC_PROCESS_DIRS_H_
#define SANDBOXD_SENTRY_PROC_PROCESS_DIRS_H_

#include <sys/types.h>

#include <memory>

#include "sentry/fs/inode.h"
#include "sentry/proc/inodes.h"

namespace sandboxd::fs::proc {

// The directory of thread group `g` (tid 0: /proc/[pid]) or of its thread
// `tid` (/proc/[pid]/task/[tid], and /proc/[tid]).
std::shared_ptr<Inode> ProcessDir(std::shared_ptr<Shared> fs,
                                  std::shared_ptr<ThreadGroup> g, pid_t tid);

}  // namespace sandboxd::fs::proc

#endif  // SANDBOXD_SENTRY_PROC_PROCESS_DIRS_H_
