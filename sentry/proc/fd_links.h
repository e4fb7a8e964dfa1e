// /proc/[pid]/fd/N of files that have no name in the tree (pipes, sockets,
// anonymous files, inherited host files): what the link reads, and what
// following it reaches. Internal to sentry/proc.
#ifndef SANDBOXD_SENTRY_PROC_FD_LINKS_H_
#define SANDBOXD_SENTRY_PROC_FD_LINKS_H_

#include <memory>
#include <string>

#include "sentry/fs/file.h"
#include "sentry/fs/inode.h"

namespace sandboxd::fs::proc {

// What readlink of /proc/[pid]/fd/N says for a file without a path
// ("pipe:[ino]", "socket:[ino]", "anon_inode:[eventfd]", ...).
std::string AnonName(File& f);

// The inode a detached dentry for `f` stands on: a pipe end's reopens the
// pipe (O_RDONLY a new read end, O_WRONLY a new write end, O_RDWR both), a
// host file's gives a new descriptor of the same host description; any
// other stats as the file itself and opens with ENXIO.
std::shared_ptr<Inode> OpenFileInodeFor(std::shared_ptr<File> f);

}  // namespace sandboxd::fs::proc

#endif  // SANDBOXD_SENTRY_PROC_FD_LINKS_H_
