// memfd_create(2) and file seals (mm/memfd.c).
//
// A memfd is a regular file of the Kernel's internal tmpfs
// (Kernel::memfd_superblock, Linux's shm_mnt) with no name in any
// directory: its data is in memory-file pages, so MAP_SHARED mappings share
// them across fork like any tmpfs file's, and its Location is a detached
// dentry "memfd:NAME" that /proc shows as "/memfd:NAME (deleted)". Seals
// live on the tmpfs file (TmpFsRegularFile::AddSeals); the write paths,
// truncate, fallocate and mmap check them there.
#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>

#include <memory>
#include <string>

#include "sentry/fs/tmpfs.h"
#include "sentry/syscalls/memfd_syscalls.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {
namespace {

// From <linux/memfd.h>.
constexpr unsigned kMfdCloexec = 0x0001;
constexpr unsigned kMfdAllowSealing = 0x0002;
constexpr unsigned kMfdHugetlb = 0x0004;
constexpr unsigned kMfdNoexecSeal = 0x0008;
constexpr unsigned kMfdExec = 0x0010;
constexpr unsigned kMfdAll =
    kMfdCloexec | kMfdAllowSealing | kMfdHugetlb | kMfdNoexecSeal | kMfdExec;
constexpr unsigned kMfdHugeShift = 26;
constexpr unsigned kMfdHugeMask = 0x3f;
// The kernel's O_LARGEFILE (userspace headers define it as 0 on x86_64),
// which F_GETFL shows on a memfd as Linux does.
constexpr int kOLargefile = 0100000;
// MFD_NAME_MAX_LEN: NAME_MAX minus the "memfd:" prefix.
constexpr uint64_t kNameMax = 255 - 6;

int64_t SysMemfdCreate(Task& t, const SyscallArgs& a) {
  unsigned flags = static_cast<unsigned>(a.a[1]);
  unsigned allowed = kMfdAll;
  // A huge page size may be encoded in the flags, with MFD_HUGETLB only.
  if (flags & kMfdHugetlb) allowed |= kMfdHugeMask << kMfdHugeShift;
  if (a.a[1] > UINT32_MAX || (flags & ~allowed)) return -EINVAL;
  if ((flags & kMfdExec) && (flags & kMfdNoexecSeal)) return -EINVAL;
  if (flags & kMfdHugetlb) {
    // No hugetlbfs in the Sentry: memory-file pages are 4 KiB.
    t.kernel().CountUnimplemented(SYS_memfd_create);
    return -EINVAL;
  }
  std::string name;
  int64_t r = t.mm().CopyInString(a.a[0], kNameMax, &name);
  if (r == -ENAMETOOLONG) return -EINVAL;
  if (r < 0) return r;

  const auto& sb = t.kernel().memfd_superblock();
  if (!sb->ReserveInode()) return -ENFILE;
  // Mode 0777 as Linux gives memfds; MFD_NOEXEC_SEAL drops the x bits and
  // seals them off (and implies sealing is allowed).
  uint32_t perm = (flags & kMfdNoexecSeal) ? 0666 : 0777;
  auto inode = std::make_shared<fs::TmpFsRegularFile>(sb, perm, 0, 0);
  inode->MarkUnlinked();
  if (flags & kMfdNoexecSeal) {
    inode->set_initial_seals(fs::kSealExec);
  } else if (flags & kMfdAllowSealing) {
    inode->set_initial_seals(0);
  }
  auto file = std::make_shared<fs::InodeFile>(inode, O_RDWR | kOLargefile);
  file->set_location(fs::Vfs::Detached(inode, "memfd:" + name, "tmpfs"));
  return t.group().fds().Install(file, (flags & kMfdCloexec) != 0);
}

}  // namespace

int64_t FcntlSeals(Task& t, fs::File& f, int cmd, uint64_t arg) {
  auto inode = f.inode();
  auto* tmp = dynamic_cast<fs::TmpFsRegularFile*>(inode.get());
  if (tmp == nullptr) return -EINVAL;
  if (cmd == F_GET_SEALS) return tmp->Seals();
  // Adding seals needs a writable description (memfd_add_seals).
  int acc = f.StatusFlags() & O_ACCMODE;
  if (acc != O_WRONLY && acc != O_RDWR) return -EPERM;
  if (arg > UINT32_MAX) return -EINVAL;
  return tmp->AddSeals(static_cast<int>(arg));
}

void RegisterMemfd(Entry* table) {
  table[SYS_memfd_create] = {SysMemfdCreate, "memfd_create"};
}

}  // namespace sandboxd::syscalls
