#include "sentry/fs/proc/procfs.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "base/unique_fd.h"
#include "sentry/fs/epoll.h"
#include "sentry/fs/eventfd.h"
#include "sentry/fs/file.h"
#include "sentry/fs/mappable.h"
#include "sentry/fs/pipe.h"
#include "sentry/fs/proc/format.h"
#include "sentry/fs/timerfd.h"
#include "sentry/fs/tty/terminal.h"
#include "sentry/fs/vfs.h"
#include "sentry/mm/mm.h"

namespace sandboxd::fs::proc {
namespace {

using kernel::Kernel;
using kernel::Task;
using kernel::ThreadGroup;

constexpr uint32_t kProcSuperMagic = 0x9fa0;
// /proc/[pid]/{cmdline,environ} copy at most this much of the process's
// memory, so that a process cannot make the Sentry allocate without bound.
constexpr uint64_t kMaxArgs = 2 * 1024 * 1024;

timespec Now() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

// What every procfs inode shares.
struct Shared {
  Kernel* kernel = nullptr;
  ProcFsOptions opts;
};

// A stable inode number for a per-process name, so that two lookups of one
// file agree (ls -i, find's cycle checks).
uint64_t InoFor(pid_t pid, pid_t tid, const std::string& name) {
  const uint64_t h = std::hash<std::string>()(name) & 0xfffff;
  return (static_cast<uint64_t>(pid) << 40) ^
         (static_cast<uint64_t>(tid) << 20) ^ h ^ (1ull << 62);
}

// The caller's root: paths in links are shown from it.
Location ReaderRoot(Kernel& k) {
  Task* t = Task::Current();
  return t != nullptr ? t->group().fs().root() : k.vfs().Root();
}

// ---------------------------------------------------------------------------
// Inode kinds

class ProcInode : public Inode {
 public:
  ProcInode(std::shared_ptr<Shared> fs, uint32_t type, uint32_t perm,
            uint64_t ino)
      : fs_(std::move(fs)), type_(type), perm_(perm), ino_(ino), time_(Now()) {}

  uint32_t Type() const override { return type_; }
  int GetAttr(Attr* out) override {
    *out = Attr();
    out->dev = fs_->opts.dev;
    out->ino = ino_;
    out->mode = type_ | perm_;
    out->nlink = type_ == S_IFDIR ? 2 : 1;
    out->size = type_ == S_IFLNK ? 64 : 0;
    out->blksize = 1024;
    out->atime = out->mtime = out->ctime = time_;
    return 0;
  }
  int StatFs(struct statfs* out) override {
    Inode::StatFs(out);
    out->f_type = kProcSuperMagic;
    out->f_bsize = 4096;
    return 0;
  }

 protected:
  const std::shared_ptr<Shared> fs_;

 private:
  const uint32_t type_;
  const uint32_t perm_;
  const uint64_t ino_;
  const timespec time_;
};

// Generates a file's text: 0 or -errno (-ESRCH once the process is gone).
using Generator = std::function<int(std::string*)>;
// Takes one write(2) of a writable file: bytes accepted or -errno.
using Writer = std::function<int64_t(const std::string&)>;

// An open procfs file: the text generated at open, read at the
// description's offset.
class SnapshotFile final : public InodeFile {
 public:
  SnapshotFile(std::shared_ptr<Inode> inode, int flags, std::string data,
               Writer writer)
      : InodeFile(std::move(inode), flags),
        data_(std::move(data)),
        writer_(std::move(writer)) {}

  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override {
    if ((StatusFlags() & O_ACCMODE) == O_WRONLY) return -EBADF;
    absl::MutexLock l(&mu_);
    const int64_t off = offset >= 0 ? offset : offset_;
    if (static_cast<uint64_t>(off) >= data_.size()) return 0;
    const uint64_t len = std::min<uint64_t>(n, data_.size() - off);
    std::memcpy(buf, data_.data() + off, len);
    if (offset < 0) offset_ += static_cast<int64_t>(len);
    return static_cast<int64_t>(len);
  }

  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const IoContext& io) override {
    if ((StatusFlags() & O_ACCMODE) == O_RDONLY) return -EBADF;
    if (!writer_) return -EINVAL;
    return writer_(std::string(static_cast<const char*>(buf), n));
  }

  int64_t Seek(int64_t offset, int whence) override {
    absl::MutexLock l(&mu_);
    int64_t base;
    switch (whence) {
      case SEEK_SET:
        base = 0;
        break;
      case SEEK_CUR:
        base = offset_;
        break;
      default:
        return -EINVAL;  // seq_file has no end
    }
    if (base + offset < 0) return -EINVAL;
    offset_ = base + offset;
    return offset_;
  }

 private:
  const std::string data_;
  const Writer writer_;
  absl::Mutex mu_;
  int64_t offset_ ABSL_GUARDED_BY(mu_) = 0;
};

class SeqInode final : public ProcInode {
 public:
  SeqInode(std::shared_ptr<Shared> fs, uint64_t ino, Generator gen,
           Writer writer = Writer())
      : ProcInode(std::move(fs), S_IFREG, writer ? 0644 : 0444, ino),
        gen_(std::move(gen)),
        writer_(std::move(writer)) {}

  int Open(int flags, std::shared_ptr<File>* out) override {
    if (flags & O_PATH) return Inode::Open(flags, out);
    const int acc = flags & O_ACCMODE;
    if ((acc == O_WRONLY || acc == O_RDWR) && !writer_) return -EACCES;
    std::string data;
    if (acc != O_WRONLY) {
      int r = gen_(&data);
      if (r < 0) return r;
    }
    *out = std::make_shared<SnapshotFile>(shared_from_this(), flags,
                                          std::move(data), writer_);
    return 0;
  }

 private:
  const Generator gen_;
  const Writer writer_;
};

// Symlinks; magic ones also know the object they lead to.
class LinkInode final : public ProcInode {
 public:
  using Follower = std::function<int(Location*)>;
  LinkInode(std::shared_ptr<Shared> fs, uint64_t ino, Generator target,
            Follower follow = Follower(), uint32_t perm = 0777)
      : ProcInode(std::move(fs), S_IFLNK, perm, ino),
        target_(std::move(target)),
        follow_(std::move(follow)) {}

  int Readlink(std::string* out) override { return target_(out); }
  int FollowMagicLink(Location* out) override {
    return follow_ ? follow_(out) : kNotMagicLink;
  }

 private:
  const Generator target_;
  const Follower follow_;
};

// A directory whose entries are computed at each listing and lookup.
class DirInode final : public ProcInode {
 public:
  using Lister = std::function<int(std::vector<DirEntry>*)>;
  using Looker =
      std::function<int(const std::string&, std::shared_ptr<Inode>*)>;
  DirInode(std::shared_ptr<Shared> fs, uint64_t ino, uint32_t perm, Lister list,
           Looker lookup)
      : ProcInode(std::move(fs), S_IFDIR, perm, ino),
        list_(std::move(list)),
        lookup_(std::move(lookup)) {}

  int Lookup(const std::string& name, std::shared_ptr<Inode>* out) override {
    return lookup_(name, out);
  }
  int ReadDir(std::vector<DirEntry>* out) override {
    out->clear();
    return list_(out);
  }
  bool CacheLookups() const override { return false; }
  int Create(const std::string&, const CreateRequest&,
             std::shared_ptr<Inode>*) override {
    return -EACCES;
  }
  int Unlink(const std::string&, bool) override { return -EACCES; }

 private:
  const Lister list_;
  const Looker lookup_;
};

// A fixed directory (/proc/sys and below).
std::shared_ptr<Inode> StaticDir(
    std::shared_ptr<Shared> fs,
    std::vector<std::pair<std::string, std::shared_ptr<Inode>>> entries) {
  auto map = std::make_shared<std::map<std::string, std::shared_ptr<Inode>>>(
      entries.begin(), entries.end());
  return std::make_shared<DirInode>(
      fs, NextInodeNumber(), 0555,
      [map](std::vector<DirEntry>* out) {
        for (const auto& [name, inode] : *map) {
          Attr a;
          inode->GetAttr(&a);
          out->push_back(DirEntry{name, a.ino, DirentType(inode->Type())});
        }
        return 0;
      },
      [map](const std::string& name, std::shared_ptr<Inode>* out) {
        auto it = map->find(name);
        if (it == map->end()) return -ENOENT;
        *out = it->second;
        return 0;
      });
}

std::shared_ptr<Inode> TextFile(const std::shared_ptr<Shared>& fs,
                                Generator gen) {
  return std::make_shared<SeqInode>(fs, NextInodeNumber(), std::move(gen));
}

std::shared_ptr<Inode> ConstFile(const std::shared_ptr<Shared>& fs,
                                 std::string text) {
  return TextFile(fs, [text](std::string* out) {
    *out = text;
    return 0;
  });
}

// ---------------------------------------------------------------------------
// Reopening what a descriptor refers to (/proc/[pid]/fd/N of files that
// have no name in the tree).

// An inode standing for an open file that has no Location: stat gives the
// file's own stat; opening gives ENXIO (sockets, eventfd, epoll, timerfd:
// as Linux's sockfs and anon inodes).
class OpenFileInode : public Inode {
 public:
  explicit OpenFileInode(std::shared_ptr<File> file) : file_(std::move(file)) {
    struct stat st;
    if (file_->Stat(&st) == 0) type_ = st.st_mode & S_IFMT;
  }
  uint32_t Type() const override { return type_; }
  int GetAttr(Attr* out) override {
    struct stat st;
    int64_t r = file_->Stat(&st);
    if (r < 0) return static_cast<int>(r);
    *out = Attr();
    out->dev = st.st_dev;
    out->ino = st.st_ino;
    out->mode = st.st_mode;
    out->nlink = st.st_nlink;
    out->size = st.st_size;
    out->rdev = st.st_rdev;
    out->atime = st.st_atim;
    out->mtime = st.st_mtim;
    out->ctime = st.st_ctim;
    return 0;
  }
  int Open(int flags, std::shared_ptr<File>* out) override {
    if (flags & O_PATH) return Inode::Open(flags, out);
    return Reopen(flags, out);
  }

 protected:
  virtual int Reopen(int flags, std::shared_ptr<File>* out) { return -ENXIO; }
  const std::shared_ptr<File> file_;

 private:
  uint32_t type_ = S_IFREG;
};

// A pipe opened for reading and writing at once (a FIFO's O_RDWR): one
// description that is both a reader and a writer, so it never sees EOF or
// EPIPE from itself.
class PipeReadWrite final : public File, public waiter::EventSource {
 public:
  PipeReadWrite(const std::shared_ptr<Pipe>& pipe, int flags)
      : read_(std::make_shared<PipeEnd>(pipe, false, flags)),
        write_(std::make_shared<PipeEnd>(pipe, true, flags)) {}

  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override {
    return read_->Read(buf, n, offset, io);
  }
  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const IoContext& io) override {
    return write_->Write(buf, n, offset, io);
  }
  int64_t Seek(int64_t, int) override { return -ESPIPE; }
  int64_t Stat(struct stat* st) override { return read_->Stat(st); }
  int64_t Ioctl(uint64_t request, void* buf) override {
    return read_->Ioctl(request, buf);
  }
  int StatusFlags() const override {
    return (read_->StatusFlags() & ~O_ACCMODE) | O_RDWR;
  }
  int64_t SetStatusFlags(int flags) override {
    int64_t r = read_->SetStatusFlags(flags);
    return r < 0 ? r : write_->SetStatusFlags(flags);
  }
  waiter::EventMask Readiness(waiter::EventMask mask) override {
    return read_->Readiness(mask) | write_->Readiness(mask);
  }
  // Both ends notify the pipe's one queue: register once.
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask) override {
    read_->EventRegister(w, mask);
  }
  void EventUnregister(waiter::Waiter* w) override { read_->EventUnregister(w); }
  std::shared_ptr<waiter::WaitQueue> event_queue() override {
    return read_->event_queue();
  }

 private:
  const std::shared_ptr<PipeEnd> read_;
  const std::shared_ptr<PipeEnd> write_;
};

// A pipe's end: opening it opens the pipe again, as a FIFO: a new read
// end, write end, or both.
class PipeLinkInode final : public OpenFileInode {
 public:
  using OpenFileInode::OpenFileInode;

 protected:
  int Reopen(int flags, std::shared_ptr<File>* out) override {
    auto* end = static_cast<PipeEnd*>(file_.get());
    const int keep = flags & (O_NONBLOCK | O_DIRECT);
    switch (flags & O_ACCMODE) {
      case O_RDONLY:
        *out = std::make_shared<PipeEnd>(end->pipe_ptr(), false, keep);
        return 0;
      case O_WRONLY:
        *out = std::make_shared<PipeEnd>(end->pipe_ptr(), true, keep);
        return 0;
      case O_RDWR:
        *out = std::make_shared<PipeReadWrite>(end->pipe_ptr(), keep);
        return 0;
      default:
        return -EINVAL;
    }
  }
};

// An inherited host descriptor (stdio): opening it gives a new descriptor
// of the same host open file description (its offset is shared, unlike a
// Linux reopen; the host path is never looked at).
class HostLinkInode final : public OpenFileInode {
 public:
  using OpenFileInode::OpenFileInode;

 protected:
  int Reopen(int flags, std::shared_ptr<File>* out) override {
    auto* hf = static_cast<HostFile*>(file_.get());
    int d = fcntl(hf->host_fd(), F_DUPFD_CLOEXEC, 3);
    if (d < 0) return -errno;
    auto f = std::make_shared<HostFile>(UniqueFd(d));
    if (flags & O_NONBLOCK) f->SetStatusFlags(f->StatusFlags() | O_NONBLOCK);
    *out = std::move(f);
    return 0;
  }
};

// What readlink of /proc/[pid]/fd/N says for a file without a path.
std::string AnonName(File& f) {
  struct stat st = {};
  f.Stat(&st);
  if (auto* p = dynamic_cast<PipeEnd*>(&f)) {
    return absl::StrCat("pipe:[", p->pipe().ino(), "]");
  }
  if (dynamic_cast<EventFd*>(&f) != nullptr) return "anon_inode:[eventfd]";
  if (dynamic_cast<EpollFile*>(&f) != nullptr) return "anon_inode:[eventpoll]";
  if (dynamic_cast<TimerFd*>(&f) != nullptr) return "anon_inode:[timerfd]";
  switch (st.st_mode & S_IFMT) {
    case S_IFIFO:
      return absl::StrCat("pipe:[", st.st_ino, "]");
    case S_IFSOCK:
      return absl::StrCat("socket:[", st.st_ino, "]");
    case S_IFCHR:
      if (st.st_rdev == makedev(1, 3)) return "/dev/null";
      if (major(st.st_rdev) == 136) {
        return absl::StrCat("/dev/pts/", minor(st.st_rdev));
      }
      if (st.st_rdev == makedev(5, 0)) return "/dev/tty";
      break;
    default:
      break;
  }
  // A host file the sandbox has no name for.
  return absl::StrCat("anon_inode:[host:", st.st_ino, "]");
}

// ---------------------------------------------------------------------------
// Snapshots of processes

struct ThreadInfo {
  pid_t tid = 0;
  bool sleeping = false;
  int64_t start_ns = 0;
  uint64_t mask = 0;
  uint64_t pending = 0;
};

// One thread group, copied under the tasklist lock.
struct ProcInfo {
  pid_t tgid = 0, ppid = 0, pgid = 0, sid = 0;
  uint32_t tty_nr = 0;
  pid_t tpgid = -1;
  bool zombie = false;
  std::string comm, exe;
  uint64_t arg_start = 0, arg_end = 0, env_start = 0, env_end = 0;
  std::vector<uint64_t> auxv;
  int exit_signal = SIGCHLD;
  int64_t start_ns = 0;
  std::shared_ptr<mm::MM> mm;
  std::shared_ptr<FdTable> fds;
  std::shared_ptr<FsContext> fs;
  std::vector<ThreadInfo> threads;
};

// -ESRCH once the group has been reaped.
int Snapshot(Kernel& k, const std::weak_ptr<ThreadGroup>& weak, ProcInfo* out) {
  std::shared_ptr<ThreadGroup> g = weak.lock();
  if (g == nullptr) return -ESRCH;
  bool gone = false;
  k.WithTasklistLock([&] {
    if (g->reaped) {
      gone = true;
      return;
    }
    out->tgid = g->tgid();
    out->ppid = g->parent != nullptr ? g->parent->tgid() : 0;
    out->pgid = g->pgid;
    out->sid = g->sid;
    if (g->ctty != nullptr && !g->ctty->hung_up()) {
      // Linux's new_encode_dev, as do_task_stat prints it.
      dev_t d = g->ctty->Device();
      out->tty_nr = (minor(d) & 0xff) | (major(d) << 8) |
                    ((minor(d) & ~0xffu) << 12);
      out->tpgid = g->ctty->foreground();
      if (out->tpgid == 0) out->tpgid = -1;
    }
    out->zombie = g->zombie;
    out->comm = g->comm;
    out->exe = g->exe;
    out->arg_start = g->arg_start;
    out->arg_end = g->arg_end;
    out->env_start = g->env_start;
    out->env_end = g->env_end;
    out->auxv = g->auxv;
    out->exit_signal = g->exit_signal;
    out->start_ns = g->start_ns;
    out->mm = g->mm_ptr();
    out->fds = g->fds_ptr();
    out->fs = g->fs_ptr();
    for (const auto& t : g->Tasks()) {
      out->threads.push_back(ThreadInfo{t->tid(), t->sleeping(), t->start_ns(),
                                        t->signal_mask(),
                                        t->pending_signals()});
    }
  });
  if (gone) return -ESRCH;
  std::sort(
      out->threads.begin(), out->threads.end(),
      [](const ThreadInfo& a, const ThreadInfo& b) { return a.tid < b.tid; });
  return 0;
}

int64_t Ticks(int64_t ns) { return ns * kClockTicksPerSecond / 1000000000; }

// A process-directed view (tid 0) or one thread's.
TaskStat MakeTaskStat(Kernel& k, ThreadGroup& g, const ProcInfo& p, pid_t tid) {
  TaskStat s;
  s.tgid = p.tgid;
  s.pid = tid != 0 ? tid : p.tgid;
  s.ppid = p.ppid;
  s.pgid = p.pgid;
  s.sid = p.sid;
  s.tty_nr = p.tty_nr;
  s.tpgid = p.tpgid;
  s.comm = p.comm;
  s.num_threads = static_cast<int>(p.threads.size());
  s.exit_signal = p.exit_signal;
  int64_t start = p.start_ns;
  if (p.zombie) {
    s.state = 'Z';
    s.exit_code = g.exit_status().WaitStatus();
  } else {
    bool all_sleeping = !p.threads.empty();
    for (const ThreadInfo& t : p.threads) {
      if (tid != 0 && t.tid != tid) continue;
      if (!t.sleeping) all_sleeping = false;
      if (tid != 0) {
        start = t.start_ns;
        s.sig_blocked = t.mask;
        s.sig_pending = t.pending;
      }
    }
    s.state = all_sleeping ? 'S' : 'R';
    if (g.stopped()) s.state = 'T';  // job control: the whole group
    if (tid == 0 && !p.threads.empty()) {
      s.sig_blocked = p.threads.front().mask;
      s.sig_pending = p.threads.front().pending;
    }
  }
  s.start_ticks = Ticks(start - k.boot_ns());
  for (int sig = 1; sig <= 64; sig++) {
    kernel::SigAction a = g.GetAction(sig);
    if (a.handler == kernel::kSigIgn) s.sig_ignored |= 1ull << (sig - 1);
    if (a.handler > kernel::kSigIgn) s.sig_caught |= 1ull << (sig - 1);
  }
  rlimit rss = g.GetLimit(RLIMIT_RSS);
  s.rss_limit = rss.rlim_cur;
  s.max_signals = g.GetLimit(RLIMIT_SIGPENDING).rlim_cur;
  if (p.fs != nullptr) s.umask = p.fs->umask();
  if (p.fds != nullptr) {
    std::vector<int> fds = p.fds->Fds();
    uint64_t n = fds.empty() ? 0 : static_cast<uint64_t>(fds.back()) + 1;
    s.fd_size = std::max<uint64_t>(64, (n + 63) / 64 * 64);
  }
  s.has_mm = p.mm != nullptr && !p.zombie;
  if (s.has_mm) {
    MemoryUsage& m = s.mem;
    for (const mm::VmaInfo& v : p.mm->Vmas()) {
      const uint64_t len = v.end - v.start;
      m.vm_size += len;
      if (v.name == "[stack]" || v.growsdown) {
        m.stack += len;
        if (s.start_stack == 0) s.start_stack = v.end;
      } else if (v.is_private && v.prot.write && v.mappable == nullptr) {
        m.data += len;
      }
      if (!v.is_private) m.shared += len;
      const bool of_exe = v.name == p.exe || (v.mappable != nullptr &&
                                              v.mappable->Name() == p.exe);
      if (of_exe && v.prot.exec) {
        m.exe += len;
        if (s.start_code == 0) s.start_code = v.start;
        s.end_code = v.end;
      }
      if (v.name == "[heap]" && s.start_brk == 0) s.start_brk = v.start;
    }
    m.rss = p.mm->BackedBytes();
    s.arg_start = p.arg_start;
    s.arg_end = p.arg_end;
    s.env_start = p.env_start;
    s.env_end = p.env_end;
    if (s.start_brk == 0) s.start_brk = p.mm->brk();
  }
  return s;
}

// /proc/[pid]/cmdline and environ: the strings as they are now in the
// process's memory.
int ReadStrings(const ProcInfo& p, uint64_t start, uint64_t end,
                std::string* out) {
  out->clear();
  if (p.mm == nullptr || p.zombie || end <= start) return 0;
  uint64_t n = std::min<uint64_t>(end - start, kMaxArgs);
  out->resize(n);
  int64_t r = p.mm->CopyIn(start, out->data(), n);
  out->resize(r > 0 ? static_cast<uint64_t>(r) : 0);
  return 0;
}

std::string MapsText(const ProcInfo& p) {
  std::string s;
  if (p.mm == nullptr || p.zombie) return s;
  for (const mm::VmaInfo& v : p.mm->Vmas()) {
    MapsEntry e;
    e.start = v.start;
    e.end = v.end;
    e.read = v.prot.read;
    e.write = v.prot.write;
    e.exec = v.prot.exec;
    e.is_private = v.is_private;
    e.offset = v.offset;
    e.name = v.name;
    if (v.mappable != nullptr) {
      if (e.name.empty()) e.name = v.mappable->Name();
      if (auto* im = dynamic_cast<InodeMappable*>(v.mappable.get())) {
        Attr a;
        if (im->inode()->GetAttr(&a) == 0) {
          e.dev_major = major(a.dev);
          e.dev_minor = minor(a.dev);
          e.ino = a.ino;
        }
      }
    } else if (v.shared_anon && e.name.empty()) {
      e.name = "/dev/zero (deleted)";
    }
    s += MapsLine(e);
  }
  return s;
}

// /proc/[pid]/mem: the process's memory at the file offset.
class MemFile final : public InodeFile {
 public:
  MemFile(std::shared_ptr<Inode> inode, int flags, std::shared_ptr<mm::MM> mm)
      : InodeFile(std::move(inode), flags), mm_(std::move(mm)) {}

  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override {
    absl::MutexLock l(&mu_);
    const int64_t off = offset >= 0 ? offset : offset_;
    n = std::min<uint64_t>(n, 1 << 20);
    // Patched syscall sites read as the program's own bytes.
    int64_t r = mm_->CopyInOriginal(static_cast<uintptr_t>(off), buf, n);
    if (r < 0) return -EIO;  // Linux: an unmapped address reads as EIO
    if (offset < 0) offset_ += r;
    return r;
  }
  int64_t Write(const void*, uint64_t, int64_t, const IoContext&) override {
    return -EBADF;
  }
  int64_t Seek(int64_t offset, int whence) override {
    absl::MutexLock l(&mu_);
    switch (whence) {
      case SEEK_SET:
        offset_ = offset;
        break;
      case SEEK_CUR:
        offset_ += offset;
        break;
      default:
        return -EINVAL;
    }
    return offset_;
  }

 private:
  const std::shared_ptr<mm::MM> mm_;
  absl::Mutex mu_;
  int64_t offset_ ABSL_GUARDED_BY(mu_) = 0;
};

class MemInode final : public ProcInode {
 public:
  MemInode(std::shared_ptr<Shared> fs, uint64_t ino,
           std::weak_ptr<ThreadGroup> g)
      : ProcInode(std::move(fs), S_IFREG, 0600, ino), g_(std::move(g)) {}

  int Open(int flags, std::shared_ptr<File>* out) override {
    if (flags & O_PATH) return Inode::Open(flags, out);
    // Writing another address space through /proc is not offered.
    if ((flags & O_ACCMODE) != O_RDONLY) return -EACCES;
    ProcInfo p;
    int r = Snapshot(*fs_->kernel, g_, &p);
    if (r < 0) return r;
    if (p.mm == nullptr) return -ESRCH;
    *out = std::make_shared<MemFile>(shared_from_this(), flags, p.mm);
    return 0;
  }

 private:
  const std::weak_ptr<ThreadGroup> g_;
};

// ---------------------------------------------------------------------------
// /proc/[pid] and /proc/[pid]/task/[tid]

class ProcessDirs {
 public:
  ProcessDirs(std::shared_ptr<Shared> fs, std::shared_ptr<ThreadGroup> g,
              pid_t tid)
      : fs_(std::move(fs)), g_(g), pid_(g->tgid()), tid_(tid) {}

  std::shared_ptr<Inode> Dir() {
    auto self = std::make_shared<ProcessDirs>(*this);
    static const std::vector<std::pair<const char*, uint8_t>> kNames = {
        {"auxv", DT_REG},      {"cgroup", DT_REG}, {"cmdline", DT_REG},
        {"comm", DT_REG},      {"cwd", DT_LNK},    {"environ", DT_REG},
        {"exe", DT_LNK},       {"fd", DT_DIR},     {"fdinfo", DT_DIR},
        {"limits", DT_REG},    {"maps", DT_REG},   {"mem", DT_REG},
        {"mountinfo", DT_REG}, {"mounts", DT_REG}, {"oom_score_adj", DT_REG},
        {"root", DT_LNK},      {"stat", DT_REG},   {"statm", DT_REG},
        {"status", DT_REG},    {"task", DT_DIR},
    };
    return std::make_shared<DirInode>(
        fs_, Ino("."), 0555,
        [self](std::vector<DirEntry>* out) {
          for (const auto& [name, type] : kNames) {
            if (self->tid_ != 0 && std::strcmp(name, "task") == 0) continue;
            out->push_back(DirEntry{name, self->Ino(name), type});
          }
          return 0;
        },
        [self](const std::string& name, std::shared_ptr<Inode>* out) {
          return self->Lookup(name, out);
        });
  }

 private:
  uint64_t Ino(const std::string& name) const {
    return InoFor(pid_, tid_, name);
  }
  Kernel& kernel() const { return *fs_->kernel; }

  int Info(ProcInfo* p) const { return Snapshot(kernel(), g_, p); }

  // A text file generated from the process's snapshot.
  std::shared_ptr<Inode> Seq(
      const std::string& name,
      std::function<int(const ProcInfo&, std::string*)> gen,
      Writer writer = Writer()) const {
    auto self = *this;
    return std::make_shared<SeqInode>(
        fs_, Ino(name),
        [self, gen](std::string* out) {
          ProcInfo p;
          int r = self.Info(&p);
          if (r < 0) return r;
          return gen(p, out);
        },
        std::move(writer));
  }

  int Lookup(const std::string& name, std::shared_ptr<Inode>* out) const {
    ProcInfo probe;
    if (Info(&probe) < 0) return -ENOENT;
    auto self = *this;
    Kernel* k = fs_->kernel;
    if (name == "stat" || name == "status" || name == "statm") {
      const int which = name == "stat" ? 0 : name == "status" ? 1 : 2;
      *out = Seq(name, [self, which](const ProcInfo& p, std::string* o) {
        std::shared_ptr<ThreadGroup> g = self.g_.lock();
        if (g == nullptr) return -ESRCH;
        TaskStat s = MakeTaskStat(*self.fs_->kernel, *g, p, self.tid_);
        *o = which == 0   ? StatLine(s)
             : which == 1 ? StatusText(s)
                          : StatmLine(s);
        return 0;
      });
    } else if (name == "cmdline") {
      *out = Seq(name, [](const ProcInfo& p, std::string* o) {
        return ReadStrings(p, p.arg_start, p.arg_end, o);
      });
    } else if (name == "environ") {
      *out = Seq(name, [](const ProcInfo& p, std::string* o) {
        return ReadStrings(p, p.env_start, p.env_end, o);
      });
    } else if (name == "comm") {
      // A thread's own name in task/TID (pthread_getname_np of another
      // thread reads it there); writable by the process itself, as on
      // Linux, which keeps the bytes written, newline included, up to 15.
      const pid_t tid = tid_ != 0 ? tid_ : pid_;
      *out = Seq(
          name,
          [k, tid](const ProcInfo& p, std::string* o) {
            std::string comm = p.comm;
            std::shared_ptr<Task> t = k->FindTask(tid);
            if (t != nullptr) {
              k->WithTasklistLock([&] {
                if (!t->thread_comm.empty()) comm = t->thread_comm;
              });
            }
            *o = comm + "\n";
            return 0;
          },
          [k, tid](const std::string& text) -> int64_t {
            Task* me = Task::Current();
            std::shared_ptr<Task> t = k->FindTask(tid);
            if (t == nullptr) return -ESRCH;
            if (me == nullptr || &me->group() != &t->group()) return -EINVAL;
            std::string name = text.substr(0, 15);
            name.resize(strnlen(name.data(), name.size()));
            k->WithTasklistLock([&] {
              if (t->tid() == t->group().tgid()) {
                t->group().comm = name;
                t->thread_comm.clear();
              } else {
                t->thread_comm = name;
              }
            });
            return static_cast<int64_t>(text.size());
          });
    } else if (name == "maps") {
      *out = Seq(name, [](const ProcInfo& p, std::string* o) {
        *o = MapsText(p);
        return 0;
      });
    } else if (name == "auxv") {
      *out = Seq(name, [](const ProcInfo& p, std::string* o) {
        o->assign(reinterpret_cast<const char*>(p.auxv.data()),
                  p.auxv.size() * sizeof(uint64_t));
        return 0;
      });
    } else if (name == "cgroup") {
      *out = Seq(name, [](const ProcInfo&, std::string* o) {
        *o = "0::/\n";  // the root of a cgroup v2 hierarchy
        return 0;
      });
    } else if (name == "limits") {
      *out = Seq(name, [self](const ProcInfo&, std::string* o) {
        std::shared_ptr<ThreadGroup> g = self.g_.lock();
        if (g == nullptr) return -ESRCH;
        std::array<rlimit, RLIM_NLIMITS> l;
        for (int i = 0; i < RLIM_NLIMITS; i++) l[i] = g->GetLimit(i);
        *o = LimitsText(l);
        return 0;
      });
    } else if (name == "mounts" || name == "mountinfo") {
      const bool info = name == "mountinfo";
      *out = Seq(name, [k, info](const ProcInfo& p, std::string* o) {
        Location root = p.fs != nullptr ? p.fs->root() : k->vfs().Root();
        *o = info ? k->vfs().MountInfoText(root) : k->vfs().MountsText(root);
        return 0;
      });
    } else if (name == "oom_score_adj") {
      *out = Seq(
          name,
          [self](const ProcInfo&, std::string* o) {
            std::shared_ptr<ThreadGroup> g = self.g_.lock();
            if (g == nullptr) return -ESRCH;
            *o = absl::StrCat(g->oom_score_adj.load(), "\n");
            return 0;
          },
          [self](const std::string& text) -> int64_t {
            int v;
            if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &v) ||
                v < -1000 || v > 1000) {
              return -EINVAL;
            }
            std::shared_ptr<ThreadGroup> g = self.g_.lock();
            if (g == nullptr) return -ESRCH;
            g->oom_score_adj.store(v);
            return static_cast<int64_t>(text.size());
          });
    } else if (name == "mem") {
      *out = std::make_shared<MemInode>(fs_, Ino(name), g_);
    } else if (name == "exe") {
      *out = std::make_shared<LinkInode>(
          fs_, Ino(name),
          [self](std::string* o) {
            ProcInfo p;
            int r = self.Info(&p);
            if (r < 0) return r;
            if (p.zombie || p.exe.empty()) return -ENOENT;
            *o = p.exe;
            return 0;
          },
          [self, k](Location* o) {
            ProcInfo p;
            int r = self.Info(&p);
            if (r < 0) return r;
            if (p.zombie || p.exe.empty() || p.fs == nullptr) return -ENOENT;
            // The executable by its path from the process's root.
            return k->vfs().Resolve(*p.fs, p.fs->root(), p.exe, true, o);
          });
    } else if (name == "cwd" || name == "root") {
      const bool cwd = name == "cwd";
      auto where = [self, cwd](Location* o) {
        ProcInfo p;
        int r = self.Info(&p);
        if (r < 0) return r;
        if (p.zombie || p.fs == nullptr) return -ENOENT;
        *o = cwd ? p.fs->cwd() : p.fs->root();
        return 0;
      };
      *out = std::make_shared<LinkInode>(
          fs_, Ino(name),
          [where, k](std::string* o) {
            Location l;
            int r = where(&l);
            if (r < 0) return r;
            *o = k->vfs().PathOf(ReaderRoot(*k), l);
            return 0;
          },
          where);
    } else if (name == "fd" || name == "fdinfo") {
      *out = FdDir(name == "fdinfo");
    } else if (name == "task" && tid_ == 0) {
      *out = TaskDir();
    } else {
      return -ENOENT;
    }
    return 0;
  }

  std::shared_ptr<Inode> FdDir(bool info) const {
    auto self = *this;
    return std::make_shared<DirInode>(
        fs_, Ino(info ? "fdinfo" : "fd"), info ? 0555 : 0500,
        [self, info](std::vector<DirEntry>* out) {
          ProcInfo p;
          int r = self.Info(&p);
          if (r < 0) return r;
          if (p.fds == nullptr) return 0;
          for (int fd : p.fds->Fds()) {
            std::string name = absl::StrCat(fd);
            out->push_back(
                DirEntry{name, self.Ino(absl::StrCat(info ? "i" : "f", fd)),
                         static_cast<uint8_t>(info ? DT_REG : DT_LNK)});
          }
          return 0;
        },
        [self, info](const std::string& name, std::shared_ptr<Inode>* out) {
          int fd;
          if (!absl::SimpleAtoi(name, &fd) || fd < 0 ||
              absl::StrCat(fd) != name) {
            return -ENOENT;
          }
          ProcInfo p;
          if (self.Info(&p) < 0 || p.fds == nullptr) return -ENOENT;
          if (p.fds->Get(fd) == nullptr) return -ENOENT;
          *out = info ? self.FdInfo(fd) : self.FdLink(fd, *p.fds);
          return 0;
        });
  }

  // The descriptor's file now (it may have been closed or replaced since
  // the lookup).
  int FileOf(int fd, std::shared_ptr<File>* f) const {
    ProcInfo p;
    int r = Info(&p);
    if (r < 0) return r;
    if (p.fds == nullptr) return -ENOENT;
    *f = p.fds->Get(fd);
    return *f == nullptr ? -ENOENT : 0;
  }

  std::shared_ptr<Inode> FdLink(int fd, FdTable& fds) const {
    auto self = *this;
    Kernel* k = fs_->kernel;
    // The link's permission bits say how the file is open, as Linux's do.
    uint32_t perm = 0500;
    if (auto f = fds.Get(fd)) {
      switch (f->StatusFlags() & O_ACCMODE) {
        case O_WRONLY:
          perm = 0300;
          break;
        case O_RDWR:
          perm = 0700;
          break;
        default:
          break;
      }
    }
    return std::make_shared<LinkInode>(
        fs_, Ino(absl::StrCat("f", fd)),
        [self, fd, k](std::string* o) {
          std::shared_ptr<File> f;
          int r = self.FileOf(fd, &f);
          if (r < 0) return r;
          Location l = f->location();
          *o = l.valid() ? k->vfs().PathOf(ReaderRoot(*k), l) : AnonName(*f);
          return 0;
        },
        [self, fd](Location* o) {
          std::shared_ptr<File> f;
          int r = self.FileOf(fd, &f);
          if (r < 0) return r;
          Location l = f->location();
          if (l.valid()) {
            *o = l;
            return 0;
          }
          // No name in the tree: a detached dentry for the open file.
          std::shared_ptr<Inode> inode;
          if (dynamic_cast<PipeEnd*>(f.get()) != nullptr) {
            inode = std::make_shared<PipeLinkInode>(f);
          } else if (dynamic_cast<HostFile*>(f.get()) != nullptr) {
            inode = std::make_shared<HostLinkInode>(f);
          } else {
            inode = std::make_shared<OpenFileInode>(f);
          }
          *o = Location{self.fs_->kernel->vfs().Root().mount,
                        std::make_shared<Dentry>(inode, AnonName(*f), nullptr)};
          return 0;
        },
        perm);
  }

  std::shared_ptr<Inode> FdInfo(int fd) const {
    auto self = *this;
    return std::make_shared<SeqInode>(
        fs_, Ino(absl::StrCat("i", fd)), [self, fd](std::string* o) {
          std::shared_ptr<File> f;
          int r = self.FileOf(fd, &f);
          if (r < 0) return r;
          ProcInfo p;
          r = self.Info(&p);
          if (r < 0) return r;
          int64_t pos = f->Seek(0, SEEK_CUR);
          if (pos < 0) pos = 0;
          int flags = f->StatusFlags();
          if (p.fds != nullptr && p.fds->GetCloexec(fd) == 1) {
            flags |= O_CLOEXEC;
          }
          struct stat st = {};
          f->Stat(&st);
          Location l = f->location();
          *o = FdInfoText(pos, flags, l.valid() ? l.mount->id : 0, st.st_ino);
          return 0;
        });
  }

  std::shared_ptr<Inode> TaskDir() const {
    auto self = *this;
    return std::make_shared<DirInode>(
        fs_, Ino("task"), 0555,
        [self](std::vector<DirEntry>* out) {
          ProcInfo p;
          int r = self.Info(&p);
          if (r < 0) return r;
          for (const ThreadInfo& t : p.threads) {
            out->push_back(DirEntry{absl::StrCat(t.tid),
                                    InoFor(self.pid_, t.tid, "."), DT_DIR});
          }
          return 0;
        },
        [self](const std::string& name, std::shared_ptr<Inode>* out) {
          pid_t tid;
          if (!absl::SimpleAtoi(name, &tid)) return -ENOENT;
          ProcInfo p;
          if (self.Info(&p) < 0) return -ENOENT;
          for (const ThreadInfo& t : p.threads) {
            if (t.tid != tid) continue;
            std::shared_ptr<ThreadGroup> g = self.g_.lock();
            if (g == nullptr) return -ENOENT;
            *out = ProcessDirs(self.fs_, g, tid).Dir();
            return 0;
          }
          return -ENOENT;
        });
  }

  std::shared_ptr<Shared> fs_;
  std::weak_ptr<ThreadGroup> g_;
  pid_t pid_;
  pid_t tid_;  // 0: the process's directory
};

// ---------------------------------------------------------------------------
// System-wide files

std::string CpuInfo(const Shared& fs) {
  if (!fs.opts.host.cpuinfo.empty()) return fs.opts.host.cpuinfo;
  std::string s;
  for (int i = 0; i < fs.opts.host.num_cpus; i++) {
    absl::StrAppend(&s, "processor\t: ", i, "\nvendor_id\t: unknown\n\n");
  }
  return s;
}

MemInfo Memory(Kernel& k, const ProcFsOptions& opts) {
  MemInfo m;
  m.total = opts.memory_limit != 0 ? opts.memory_limit : opts.host.mem_total;
  m.used = k.memory_file().AllocatedBytes();
  return m;
}

struct Counts {
  int running = 0;
  int total = 0;
  pid_t last = 0;
};

Counts CountTasks(Kernel& k) {
  Counts c;
  for (const auto& g : k.ThreadGroups()) {
    c.last = std::max(c.last, g->tgid());
    k.WithTasklistLock([&] {
      if (g->zombie) return;
      for (const auto& t : g->Tasks()) {
        c.total++;
        if (!t->sleeping()) c.running++;
        c.last = std::max(c.last, t->tid());
      }
    });
  }
  return c;
}

std::string StatFile(Kernel& k, const ProcFsOptions& opts) {
  // CPU time is not accounted per CPU yet: every counter is 0.
  std::vector<CpuTimes> cpus(std::max(1, opts.host.num_cpus));
  timespec real;
  clock_gettime(CLOCK_REALTIME, &real);
  const int64_t uptime_ns = kernel::MonotonicNanos() - k.boot_ns();
  const int64_t btime = real.tv_sec - uptime_ns / 1000000000;
  Counts c = CountTasks(k);
  return StatText(cpus, btime, static_cast<uint64_t>(c.last), c.running, 0);
}

std::shared_ptr<Inode> SysDir(const std::shared_ptr<Shared>& fs) {
  Kernel* k = fs->kernel;
  auto kernel_dir = StaticDir(
      fs, {
              {"hostname", TextFile(fs,
                                    [k](std::string* o) {
                                      *o = k->options().hostname + "\n";
                                      return 0;
                                    })},
              {"ostype", ConstFile(fs, "Linux\n")},
              // As uname(2) in the sandbox says (sys_info.cc).
              {"osrelease", ConstFile(fs, "6.1.0\n")},
              {"pid_max", ConstFile(fs, absl::StrCat(kernel::kMaxPid, "\n"))},
          });
  // The heuristic overcommit (0): mappings are backed lazily.
  auto vm_dir = StaticDir(fs, {{"overcommit_memory", ConstFile(fs, "0\n")}});
  return StaticDir(fs, {{"kernel", kernel_dir}, {"vm", vm_dir}});
}

}  // namespace

HostInfo ReadHostInfo() {
  HostInfo h;
  auto slurp = [](const char* path, std::string* out) {
    UniqueFd fd(open(path, O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) return;
    char buf[65536];
    for (;;) {
      ssize_t n = read(fd.get(), buf, sizeof(buf));
      if (n <= 0) break;
      out->append(buf, static_cast<size_t>(n));
    }
  };
  slurp("/proc/cpuinfo", &h.cpuinfo);
  std::string meminfo;
  slurp("/proc/meminfo", &meminfo);
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    if (!absl::ConsumePrefix(&line, "MemTotal:")) continue;
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumeSuffix(&line, " kB");
    uint64_t kb;
    if (absl::SimpleAtoi(line, &kb)) h.mem_total = kb * 1024;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  h.num_cpus = n > 0 ? static_cast<int>(n) : 1;
  return h;
}

ProcFs::ProcFs(Kernel* k, ProcFsOptions opts) {
  auto fs = std::make_shared<Shared>();
  fs->kernel = k;
  fs->opts = std::move(opts);
  const ProcFsOptions& o = fs->opts;

  std::vector<std::pair<std::string, std::shared_ptr<Inode>>> fixed = {
      {"self", std::make_shared<LinkInode>(fs, NextInodeNumber(),
                                           [](std::string* out) {
                                             Task* t = Task::Current();
                                             if (t == nullptr) return -ENOENT;
                                             *out = absl::StrCat(
                                                 t->group().tgid());
                                             return 0;
                                           })},
      {"thread-self", std::make_shared<LinkInode>(fs, NextInodeNumber(),
                                                  [](std::string* out) {
                                                    Task* t = Task::Current();
                                                    if (t == nullptr)
                                                      return -ENOENT;
                                                    *out = absl::StrCat(
                                                        t->group().tgid(),
                                                        "/task/", t->tid());
                                                    return 0;
                                                  })},
      {"mounts", std::make_shared<LinkInode>(fs, NextInodeNumber(),
                                             [](std::string* out) {
                                               *out = "self/mounts";
                                               return 0;
                                             })},
      {"cpuinfo", ConstFile(fs, CpuInfo(*fs))},
      {"meminfo", TextFile(fs,
                           [k, &o](std::string* out) {
                             *out = MemInfoText(Memory(*k, o));
                             return 0;
                           })},
      {"vmstat", TextFile(fs,
                          [k, &o](std::string* out) {
                            *out = VmStatText(Memory(*k, o));
                            return 0;
                          })},
      {"uptime", TextFile(fs,
                          [k](std::string* out) {
                            // Idle time is not accounted: 0.
                            *out = UptimeText(
                                kernel::MonotonicNanos() - k->boot_ns(), 0);
                            return 0;
                          })},
      {"loadavg", TextFile(fs,
                           [k](std::string* out) {
                             // No load average is computed: 0.00.
                             Counts c = CountTasks(*k);
                             *out = LoadAvgText(0, 0, 0, c.running, c.total,
                                                c.last);
                             return 0;
                           })},
      {"stat", TextFile(fs,
                        [k, &o](std::string* out) {
                          *out = StatFile(*k, o);
                          return 0;
                        })},
      {"version",
       ConstFile(fs, "Linux version 6.1.0 (sandboxd) #1 SMP sandboxd\n")},
      {"filesystems",
       ConstFile(fs,
                 "nodev\ttmpfs\nnodev\tproc\nnodev\tdevtmpfs\nnodev\t"
                 "overlay\nnodev\tpipefs\nnodev\tsockfs\n")},
      {"sys", SysDir(fs)},
  };
  auto fixed_map =
      std::make_shared<std::map<std::string, std::shared_ptr<Inode>>>(
          fixed.begin(), fixed.end());

  root_ = std::make_shared<DirInode>(
      fs, NextInodeNumber(), 0555,
      [fs, fixed_map](std::vector<DirEntry>* out) {
        for (const auto& [name, inode] : *fixed_map) {
          Attr a;
          inode->GetAttr(&a);
          out->push_back(DirEntry{name, a.ino, DirentType(inode->Type())});
        }
        for (const auto& g : fs->kernel->ThreadGroups()) {
          out->push_back(DirEntry{absl::StrCat(g->tgid()),
                                  InoFor(g->tgid(), 0, "."), DT_DIR});
        }
        return 0;
      },
      [fs, fixed_map](const std::string& name, std::shared_ptr<Inode>* out) {
        auto it = fixed_map->find(name);
        if (it != fixed_map->end()) {
          *out = it->second;
          return 0;
        }
        pid_t pid;
        if (!absl::SimpleAtoi(name, &pid) || pid <= 0 ||
            absl::StrCat(pid) != name) {
          return -ENOENT;
        }
        Kernel& k = *fs->kernel;
        if (std::shared_ptr<ThreadGroup> g = k.FindGroup(pid)) {
          *out = ProcessDirs(fs, g, 0).Dir();
          return 0;
        }
        // A thread's tid also names a directory (not listed), as on Linux.
        if (std::shared_ptr<Task> t = k.FindTask(pid)) {
          *out = ProcessDirs(fs, t->group_ptr(), pid).Dir();
          return 0;
        }
        return -ENOENT;
      });
}

}  // namespace sandboxd::fs::proc
