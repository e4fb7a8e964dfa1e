#include "sentry/proc/process_dirs.h"

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
#include "sentry/fs/timerfd.h"
#include "sentry/fs/tty/terminal.h"
#include "sentry/fs/vfs.h"
#include "sentry/loader/exec_image.h"
#include "sentry/mm/mm.h"
#include "sentry/proc/fd_links.h"
#include "sentry/proc/format.h"
#include "sentry/proc/inodes.h"

namespace sandboxd::fs::proc {
namespace {

// Snapshots of processes

struct ThreadInfo {
  pid_t tid = 0;
  bool sleeping = false;
  int64_t start_ns = 0;
  uint64_t mask = 0;
  uint64_t pending = 0;
  std::shared_ptr<const fs::Credentials> creds;
  kernel::Task::SchedState sched;
};

// One thread group, copied under the tasklist lock.
struct ProcInfo {
  pid_t tgid = 0, ppid = 0, pgid = 0, sid = 0;
  uint32_t tty_nr = 0;
  pid_t tpgid = -1;
  bool zombie = false;
  loader::ExecImage image;
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
    out->image = g->image;
    out->exit_signal = g->exit_signal;
    out->start_ns = g->start_ns;
    out->mm = g->mm_ptr();
    out->fds = g->fds_ptr();
    out->fs = g->fs_ptr();
    for (const auto& t : g->Tasks()) {
      out->threads.push_back(ThreadInfo{t->tid(), t->sleeping(), t->start_ns(),
                                        t->signal_mask(),
                                        t->pending_signals(), t->creds(),
                                        t->sched});
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
  s.comm = p.image.comm;
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
        s.creds = t.creds;
        s.sched = {t.sched.nice, t.sched.policy, t.sched.rt_priority};
      }
    }
    s.state = all_sleeping ? 'S' : 'R';
    if (g.stopped()) s.state = 'T';  // job control: the whole group
    if (tid == 0 && !p.threads.empty()) {
      s.sig_blocked = p.threads.front().mask;
      s.sig_pending = p.threads.front().pending;
      s.creds = p.threads.front().creds;
      const kernel::Task::SchedState& sc = p.threads.front().sched;
      s.sched = {sc.nice, sc.policy, sc.rt_priority};
    }
  }
  s.start_ticks = Ticks(start - k.boot_ns());
  // utime and stime: the thread's, or the whole process's (its live and
  // exited threads), as getrusage and the CPU clocks count them.
  kernel::Usage usage;
  if (tid != 0) {
    if (std::shared_ptr<kernel::Task> t = k.FindTask(tid)) {
      usage = t->cputime().Read(kernel::MonotonicNowNs());
    }
  } else {
    usage = g.SelfUsage();
  }
  s.utime_ticks = static_cast<uint64_t>(Ticks(usage.user_ns));
  s.stime_ticks = static_cast<uint64_t>(Ticks(usage.sys_ns));
  for (int sig = 1; sig <= 64; sig++) {
    kernel::SigAction a = g.GetAction(sig);
    if (a.handler == kernel::kSigIgn) s.sig_ignored |= 1ull << (sig - 1);
    if (a.handler > kernel::kSigIgn) s.sig_caught |= 1ull << (sig - 1);
  }
  rlimit rss = g.GetLimit(RLIMIT_RSS);
  s.rss_limit = rss.rlim_cur;
  s.max_signals = g.GetLimit(RLIMIT_SIGPENDING).rlim_cur;
  s.no_new_privs = g.no_new_privs.load();
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
      const bool of_exe =
          v.name == p.image.exe ||
          (v.mappable != nullptr && v.mappable->Name() == p.image.exe);
      if (of_exe && v.prot.exec) {
        m.exe += len;
        if (s.start_code == 0) s.start_code = v.start;
        s.end_code = v.end;
      }
      if (v.name == "[heap]" && s.start_brk == 0) s.start_brk = v.start;
    }
    m.rss = p.mm->BackedBytes();
    s.arg_start = p.image.arg_start;
    s.arg_end = p.image.arg_end;
    s.env_start = p.image.env_start;
    s.env_end = p.image.env_end;
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
      Writer writer = Writer(), ProcPoll poll = ProcPoll::kNone) const {
    auto self = *this;
    return std::make_shared<SeqInode>(
        fs_, Ino(name),
        [self, gen](std::string* out) {
          ProcInfo p;
          int r = self.Info(&p);
          if (r < 0) return r;
          return gen(p, out);
        },
        std::move(writer), poll);
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
        return ReadStrings(p, p.image.arg_start, p.image.arg_end, o);
      });
    } else if (name == "environ") {
      *out = Seq(name, [](const ProcInfo& p, std::string* o) {
        return ReadStrings(p, p.image.env_start, p.image.env_end, o);
      });
    } else if (name == "comm") {
      // A thread's own name in task/TID (pthread_getname_np of another
      // thread reads it there); writable by the process itself, as on
      // Linux, which keeps the bytes written, newline included, up to 15.
      const pid_t tid = tid_ != 0 ? tid_ : pid_;
      *out = Seq(
          name,
          [k, tid](const ProcInfo& p, std::string* o) {
            std::string comm = p.image.comm;
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
                t->group().image.comm = name;
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
        o->assign(reinterpret_cast<const char*>(p.image.auxv.data()),
                  p.image.auxv.size() * sizeof(uint64_t));
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
      // Pollable, as Linux's mounts_poll.
      *out = Seq(
          name,
          [k, info](const ProcInfo& p, std::string* o) {
            Location root = p.fs != nullptr ? p.fs->root() : k->vfs().Root();
            *o = info ? k->vfs().MountInfoText(root)
                      : k->vfs().MountsText(root);
            return 0;
          },
          Writer(), ProcPoll::kMounts);
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
            if (p.zombie || p.image.exe.empty()) return -ENOENT;
            *o = p.image.exe;
            return 0;
          },
          [self, k](Location* o) {
            ProcInfo p;
            int r = self.Info(&p);
            if (r < 0) return r;
            if (p.zombie || p.image.exe.empty() || p.fs == nullptr) {
              return -ENOENT;
            }
            // The executable by its path from the process's root.
            return k->vfs().Resolve(*p.fs, p.fs->root(), p.image.exe, true, o);
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
          std::shared_ptr<Inode> inode = OpenFileInodeFor(f);
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

}  // namespace

std::shared_ptr<Inode> ProcessDir(std::shared_ptr<Shared> fs,
                                  std::shared_ptr<ThreadGroup> g, pid_t tid) {
  return ProcessDirs(std::move(fs), std::move(g), tid).Dir();
}

}  // namespace sandboxd::fs::proc
