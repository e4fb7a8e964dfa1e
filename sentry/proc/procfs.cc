#include "sentry/proc/procfs.h"

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
#include "sentry/mm/mm.h"
#include "sentry/proc/format.h"
#include "sentry/proc/inodes.h"
#include "sentry/proc/process_dirs.h"

namespace sandboxd::fs::proc {
namespace {

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
  // An update of the limit (Kernel::SetLimits) shows here too, its
  // removal included (the host's total then).
  const uint64_t limit = k.memory_limit();
  m.total = limit != 0 ? limit : opts.host.mem_total;
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
  if (o.checkpoint != nullptr) {
    fixed.emplace_back("sandbox", SandboxDir(fs, o.checkpoint));
  }
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
          *out = ProcessDir(fs, g, 0);
          return 0;
        }
        // A thread's tid also names a directory (not listed), as on Linux.
        if (std::shared_ptr<Task> t = k.FindTask(pid)) {
          *out = ProcessDir(fs, t->group_ptr(), pid);
          return 0;
        }
        return -ENOENT;
      });
}

}  // namespace sandboxd::fs::proc
