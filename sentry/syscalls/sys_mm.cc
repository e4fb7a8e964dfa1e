// Memory syscalls: thin decoders over mm::MM.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include <vector>

#include "sentry/fs/hostfs.h"
#include "sentry/fs/mappable.h"
#include "sentry/fs/overlay.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {
namespace {

int64_t SysMmap(Task& t, const SyscallArgs& a) {
  int flags = static_cast<int>(a.a[3]);
  int prot = static_cast<int>(a.a[2]);
  if (a.a[5] % 4096 != 0) return -EINVAL;
  if (flags & MAP_ANONYMOUS) {
    return t.mm().Mmap(a.a[0], a.a[1], prot, flags);
  }
  ASSIGN_OR_RETURN_ERRNO(std::shared_ptr<fs::File> f, FileFor(t, a.a[4]));
  auto inode = f->inode();
  fs::Location loc = f->location();
  if (inode == nullptr || inode->Type() != S_IFREG || !loc.valid()) {
    // Host stdio, directories, devices: nothing to map (yet, for devices).
    return -ENODEV;
  }
  int acc = f->StatusFlags() & O_ACCMODE;
  if (acc == O_WRONLY) return -EACCES;
  bool shared = (flags & MAP_TYPE) == MAP_SHARED ||
                (flags & MAP_TYPE) == MAP_SHARED_VALIDATE;
  if (shared && (prot & PROT_WRITE) && acc != O_RDWR) return -EACCES;
  std::shared_ptr<fs::hostfs::PageCache> cache;
  if (shared) {
    // A shared mapping maps the file's own pages, which only tmpfs files
    // (in the memory file) have; an overlay file is copied up first.
    auto* ov = dynamic_cast<fs::OverlayInode*>(inode.get());
    if (ov != nullptr && acc == O_RDWR) {
      auto up = ov->UpperForSharedMapping();
      if (up != nullptr && dynamic_cast<fs::TmpFsRegularFile*>(up.get())) {
        inode = up;
      }
    }
    if (fs::hostfs::IsHostInode(*inode) && !inode->ReadOnly()) {
      // A file of a writable bind mount: its shared mappings map its page
      // cache (hostfs.h, PageCache), which read/write see and which is
      // written back to the host.
      cache = fs::hostfs::SharedPageCache(*inode, &t.kernel().memory_file());
    }
    if (dynamic_cast<fs::TmpFsRegularFile*>(inode.get()) == nullptr &&
        cache == nullptr && (prot & PROT_WRITE)) {
      // Writable shared mappings of other files (none can be opened for
      // writing: the read-only rootfs and bind mounts) need a page cache.
      t.kernel().CountUnimplemented(SYS_mmap);
      return -ENODEV;
    }
  }
  if ((flags & MAP_TYPE) == MAP_SHARED_VALIDATE) {
    flags = (flags & ~MAP_TYPE) | MAP_SHARED;
  }
  platform::Prot max{true, !shared || acc == O_RDWR, true};
  std::string name = t.kernel().vfs().PathOf(t.group().fs().root(), loc);
  auto mappable = std::make_shared<fs::InodeMappable>(inode, name,
                                                      std::move(cache), max.write);
  if (shared) {
    // File seals (memfd): may refuse the mapping or its later mprotect.
    RETURN_IF_ERRNO(
        mappable->BeginShared((prot & PROT_WRITE) != 0, &max.write));
  }
  return t.mm().MmapFile(a.a[0], a.a[1], prot, flags, std::move(mappable),
                         a.a[5], max);
}

int64_t SysMunmap(Task& t, const SyscallArgs& a) {
  return t.mm().Munmap(a.a[0], a.a[1]);
}

int64_t SysMprotect(Task& t, const SyscallArgs& a) {
  return t.mm().Mprotect(a.a[0], a.a[1], static_cast<int>(a.a[2]));
}

int64_t SysMremap(Task& t, const SyscallArgs& a) {
  return t.mm().Mremap(a.a[0], a.a[1], a.a[2], static_cast<int>(a.a[3]),
                       a.a[4]);
}

int64_t SysBrk(Task& t, const SyscallArgs& a) { return t.mm().Brk(a.a[0]); }

int64_t SysMadvise(Task& t, const SyscallArgs& a) {
  return t.mm().Madvise(a.a[0], a.a[1], static_cast<int>(a.a[2]));
}

// mlock and friends: application memory is never swapped out by the
// Sentry, so locking is a matter of checking the range.
int64_t SysMlock(Task& t, const SyscallArgs& a) {
  return t.mm().Mlock(a.a[0], a.a[1]);
}

int64_t SysMunlock(Task& t, const SyscallArgs& a) { return SysMlock(t, a); }

int64_t SysMlock2(Task& t, const SyscallArgs& a) {
  constexpr uint64_t kMlockOnFault = 1;
  if (a.a[2] & ~kMlockOnFault) return -EINVAL;
  return t.mm().Mlock(a.a[0], a.a[1]);
}

int64_t SysMsync(Task& t, const SyscallArgs& a) {
  return t.mm().Msync(a.a[0], a.a[1], static_cast<int>(a.a[2]));
}

int64_t SysMincore(Task& t, const SyscallArgs& a) {
  std::vector<uint8_t> vec;
  int64_t r = t.mm().Mincore(a.a[0], a.a[1], &vec);
  if (!vec.empty() &&
      t.mm().CopyOut(a.a[2], vec.data(), vec.size()) !=
          static_cast<int64_t>(vec.size())) {
    return -EFAULT;
  }
  return r;
}

int64_t SysMlockall(Task& t, const SyscallArgs& a) {
  if (a.a[0] == 0 || (a.a[0] & ~7ull) != 0) return -EINVAL;
  return 0;
}

int64_t SysMunlockall(Task& t, const SyscallArgs& a) { return 0; }

}  // namespace

void RegisterMemory(Entry* table) {
  table[SYS_mmap] = {SysMmap, "mmap"};
  table[SYS_munmap] = {SysMunmap, "munmap"};
  table[SYS_mprotect] = {SysMprotect, "mprotect"};
  table[SYS_mremap] = {SysMremap, "mremap"};
  table[SYS_brk] = {SysBrk, "brk"};
  table[SYS_madvise] = {SysMadvise, "madvise"};
  table[SYS_mlock] = {SysMlock, "mlock"};
  table[SYS_munlock] = {SysMunlock, "munlock"};
  table[SYS_mlockall] = {SysMlockall, "mlockall"};
  table[SYS_mlock2] = {SysMlock2, "mlock2"};
  table[SYS_msync] = {SysMsync, "msync"};
  table[SYS_mincore] = {SysMincore, "mincore"};
  table[SYS_munlockall] = {SysMunlockall, "munlockall"};
}

}  // namespace sandboxd::syscalls
