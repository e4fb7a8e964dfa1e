// tmpfs: a filesystem whose files live in the sandbox's memory file.
//
// Regular-file data is kept in memory-file pages (one map entry per 4 KiB
// page that has ever been written or fallocated; holes read as zeros), so
// that a later mmap can map those very pages into the application and a
// checkpoint can save them with the rest of the memory file. Directories,
// symlink targets and metadata live on the Sentry's heap.
//
// Ownership: a TmpFs (one per mount) owns the root directory; a directory
// owns its entries (shared_ptr), and open files / the VFS hold more
// references. An inode whose last name is gone lives on while referenced and
// frees its pages when the last reference drops, as an unlinked-but-open file
// does on Linux. All inodes share the TmpFsSuperblock (limits, accounting,
// inode numbers), which therefore outlives the TmpFs if inodes do.
//
// Lock order (all absl::Mutex):
//   TmpFsSuperblock::rename_mu  (only cross-directory Rename takes it)
//   > directory mu_, ancestors before descendants; the two directories of a
//     cross-directory Rename that are not ancestor and descendant in
//     address order
//   > TmpFsRegularFile::data_mu_ > TmpFsInode::mu_ of a non-directory
// No lock is ever held while taking rename_mu, and nothing else is locked
// while a non-directory's mu_ is held.
#ifndef SANDBOXD_SENTRY_FS_TMPFS_H_
#define SANDBOXD_SENTRY_FS_TMPFS_H_

#include <sys/statfs.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/fs/inode.h"
#include "sentry/fs/pipe.h"
#include "sentry/mm/memory_file.h"

namespace sandboxd::fs {

// TMPFS_MAGIC from linux/magic.h: statfs(2)'s f_type for tmpfs.
inline constexpr uint32_t kTmpfsMagic = 0x01021994;

// Linux's MAX_LFS_FILESIZE on 64-bit: writes and truncates beyond it fail
// with EFBIG.
inline constexpr uint64_t kTmpfsMaxFileSize = INT64_MAX;

// fcntl(2) file seals (F_SEAL_* of <linux/fcntl.h>; not every libc has
// the newer ones).
inline constexpr int kSealSeal = 0x0001;
inline constexpr int kSealShrink = 0x0002;
inline constexpr int kSealGrow = 0x0004;
inline constexpr int kSealWrite = 0x0008;
inline constexpr int kSealFutureWrite = 0x0010;
inline constexpr int kSealExec = 0x0020;
inline constexpr int kAllSeals = 0x003f;

struct TmpFsOptions {
  uint64_t dev = 0;          // st_dev of every inode
  uint64_t size_limit = 0;   // bytes of data, rounded up to pages; 0: none
  uint64_t inode_limit = 0;  // 0: none
  uint32_t root_mode = 01777;  // permission bits of the root directory
  uint32_t root_uid = 0;
  uint32_t root_gid = 0;
};

// The options of a tmpfs mounted without size= or nr_inodes=, sized as
// Linux sizes one: half of the memory (`total_ram`: what the sandbox's
// /proc/meminfo calls MemTotal) and as many inodes as half of its pages.
// total_ram 0: unlimited.
TmpFsOptions DefaultTmpFsOptions(uint64_t total_ram);

// mount(2)'s tmpfs options onto `o`: size= (bytes with k/m/g, or N% of
// `total_ram`), nr_inodes=, mode= (octal), uid=, gid=. 0, or -EINVAL for
// an unknown option or a bad value, as Linux's tmpfs answers.
int ParseTmpFsOptions(const std::string& data, uint64_t total_ram,
                      TmpFsOptions* o);

// State shared by all inodes of one tmpfs mount. Thread-safe.
class TmpFsSuperblock {
 public:
  // Preconditions: `memfile` outlives this object.
  TmpFsSuperblock(mm::MemoryFile* memfile, const TmpFsOptions& opts);

  mm::MemoryFile* memfile() const { return memfile_; }
  uint64_t dev() const { return dev_; }

  // Per-mount inode numbers (Linux tmpfs numbers per superblock too), so that
  // a restored mount can continue the same sequence.
  uint64_t NextIno() {
    return next_ino_.fetch_add(1, std::memory_order_relaxed);
  }

  // Reserves up to `n` pages against the size limit and returns how many it
  // got (fewer only when the limit is reached), so that writes can be short.
  uint64_t ReservePages(uint64_t n);
  void ReleasePages(uint64_t n);
  // Whether `n` pages are within the size limit at all: fallocate's
  // pre-check, so that an impossible request fails before allocating.
  bool WithinLimit(uint64_t n) const;
  // False when the inode limit is reached.
  bool ReserveInode();
  void ReleaseInode();

  void FillStatFs(struct statfs* out) const;

  // Serializes renames between two different directories: while it is held
  // the shape of the tree (who is whose ancestor) cannot change, so such a
  // rename can decide in which order to lock its two directories.
  absl::Mutex rename_mu;

 private:
  friend struct ::sandboxd::state::FsState;
  mm::MemoryFile* const memfile_;
  const uint64_t dev_;
  const uint64_t max_pages_;   // 0: unlimited
  const uint64_t max_inodes_;  // 0: unlimited
  std::atomic<uint64_t> pages_used_{0};
  std::atomic<uint64_t> inodes_used_{0};
  std::atomic<uint64_t> next_ino_{1};  // the root is inode 1, as on Linux
};

// What every tmpfs inode has: identity, ownership, permissions, link count
// and times, guarded by mu_.
class TmpFsInode : public Inode {
 public:
  ~TmpFsInode() override;

  uint32_t Type() const override { return type_; }
  int GetAttr(Attr* out) override;
  // Mode, owner and times for every kind; sizes only for regular files
  // (EISDIR for directories, EINVAL for the rest, as truncate(2) says).
  int SetAttr(const SetAttrRequest& req) override;
  int StatFs(struct statfs* out) override;

  uint64_t ino() const { return ino_; }
  const std::shared_ptr<TmpFsSuperblock>& superblock() const { return sb_; }

 protected:
  // Takes one unit of the inode limit, which the caller has reserved; the
  // destructor gives it back.
  TmpFsInode(std::shared_ptr<TmpFsSuperblock> sb, uint32_t type,
             uint32_t perm, uint32_t uid, uint32_t gid);

  // Common fields; kinds add theirs in FillKindAttrLocked.
  void FillAttrLocked(Attr* out) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  virtual void FillKindAttrLocked(Attr* out) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_) {}
  // Applies mode, owner and times (not size) and sets ctime to `now`.
  void ApplySetAttrLocked(const SetAttrRequest& req, const timespec& now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TouchAtime() ABSL_LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<TmpFsSuperblock> sb_;
  const uint64_t ino_;
  const uint32_t type_;  // S_IFMT bits

  mutable absl::Mutex mu_;
  uint32_t perm_ ABSL_GUARDED_BY(mu_);  // 07777 bits
  uint32_t uid_ ABSL_GUARDED_BY(mu_);
  uint32_t gid_ ABSL_GUARDED_BY(mu_);
  // Names that refer to a non-directory; directories compute theirs
  // (2 + subdirectories, 0 once removed).
  uint32_t nlink_ ABSL_GUARDED_BY(mu_) = 1;
  timespec atime_ ABSL_GUARDED_BY(mu_);
  timespec mtime_ ABSL_GUARDED_BY(mu_);
  timespec ctime_ ABSL_GUARDED_BY(mu_);

  // Directories change their children's link counts and ctimes, and read
  // their children's mode for directory checks.
  friend class TmpFsDirectory;
  friend struct ::sandboxd::state::FsState;
};

class TmpFsDirectory final : public TmpFsInode {
 public:
  TmpFsDirectory(std::shared_ptr<TmpFsSuperblock> sb, uint32_t perm,
                 uint32_t uid, uint32_t gid,
                 std::weak_ptr<TmpFsDirectory> parent);

  int Lookup(const std::string& name, std::shared_ptr<Inode>* out) override;
  int ReadDir(std::vector<DirEntry>* out) override;
  int Create(const std::string& name, const CreateRequest& req,
             std::shared_ptr<Inode>* out) override;
  int Link(const std::string& name,
           const std::shared_ptr<Inode>& target) override;
  int Unlink(const std::string& name, bool dir) override;
  // Also refuses, by itself, the two moves that would corrupt the tree or
  // deadlock if the VFS ever let them through: a directory into its own
  // subtree (EINVAL), and over a directory that contains the source
  // (ENOTEMPTY; EINVAL with RENAME_EXCHANGE).
  int Rename(const std::string& old_name, Inode& new_dir,
             const std::string& new_name, unsigned flags) override
      // Locks two directories in an order decided at run time.
      ABSL_NO_THREAD_SAFETY_ANALYSIS;

 private:
  friend struct ::sandboxd::state::FsState;
  using Chain = std::vector<std::shared_ptr<TmpFsDirectory>>;

  void FillKindAttrLocked(Attr* out) const override
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // This directory and its ancestors up to the root (or to the last one
  // still linked). Preconditions: rename_mu is held, no directory lock is.
  Chain Ancestors();

  // The body of Rename once both directories are locked (they may be the
  // same). `old_chain`/`new_chain` are the directories' Ancestors() for a
  // cross-directory rename, empty otherwise. Inodes that lose their last
  // reference go to `doomed`, to be destroyed after the locks are dropped.
  static int RenameLocked(TmpFsDirectory* od, const std::string& old_name,
                          TmpFsDirectory* nd, const std::string& new_name,
                          unsigned flags, const Chain& old_chain,
                          const Chain& new_chain,
                          std::vector<std::shared_ptr<TmpFsInode>>* doomed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(od->mu_, nd->mu_);

  // Marks this empty directory removed (rmdir, or replaced by a rename):
  // nlink 0, and no entry may be added to it any more (ENOENT, as Linux's
  // IS_DEADDIR). Returns ENOTEMPTY instead if it has entries.
  // Preconditions: the parent's mu_ is held.
  int RemoveIfEmpty(const timespec& now) ABSL_LOCKS_EXCLUDED(mu_);

  // Directory mtime/ctime after an entry was added or removed.
  void ChangedLocked(const timespec& now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Ordered, so that ReadDir (and a directory offset the VFS derives from
  // an entry's position) is stable.
  std::map<std::string, std::shared_ptr<TmpFsInode>> entries_
      ABSL_GUARDED_BY(mu_);
  uint32_t subdirs_ ABSL_GUARDED_BY(mu_) = 0;
  bool removed_ ABSL_GUARDED_BY(mu_) = false;
  // Weak: the parent owns this directory, not the other way round. Reset
  // when the directory is removed.
  std::weak_ptr<TmpFsDirectory> parent_ ABSL_GUARDED_BY(mu_);
};

class TmpFsRegularFile final : public TmpFsInode {
 public:
  TmpFsRegularFile(std::shared_ptr<TmpFsSuperblock> sb, uint32_t perm,
                   uint32_t uid, uint32_t gid);
  // Frees every page: the last name is gone and nothing references us.
  ~TmpFsRegularFile() override;

  int GetAttr(Attr* out) override;
  int SetAttr(const SetAttrRequest& req) override;
  int64_t Read(void* buf, uint64_t n, uint64_t off) override;
  // Short (not failed) when the size limit is reached after some bytes.
  int64_t Write(const void* buf, uint64_t n, uint64_t off) override;
  // mode 0 and FALLOC_FL_KEEP_SIZE allocate (all or nothing);
  // FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE frees and zeroes.
  int64_t Allocate(int mode, uint64_t off, uint64_t len) override;

  // The memory-file offset of page `index` (byte offset index * 4096) in
  // *memfile_off. A missing page is a hole: -ENOENT, unless `allocate`, in
  // which case a zeroed page is allocated (-ENOSPC at the size limit,
  // -ENOMEM when the memory file is full). Beyond-EOF checks (SIGBUS) are
  // the caller's: the size can change right after this returns anyway.
  //
  // This is how mmap of a tmpfs file (MAP_SHARED maps these pages
  // themselves) and checkpoint reach the data. The file holds one memory-
  // file reference on each of its pages, dropped by truncate, hole
  // punching and destruction. `ref`: one more is added for the caller (a
  // mapping's PMA, under data_mu_ so that the page cannot go first), so a
  // page a process maps is freed only when the last mapping of it goes:
  // until then it stays mapped there, detached from the file (Linux
  // unmaps it instead, unmap_mapping_range, and a later touch past EOF is
  // SIGBUS), but never reused for other memory.
  int GetPage(uint64_t index, bool allocate, uint64_t* memfile_off,
              bool ref = false);

  // File seals (fcntl(2) F_ADD_SEALS, F_SEAL_* bits). Every tmpfs file
  // starts with F_SEAL_SEAL, as Linux's shmem files do, except memfds made
  // with MFD_ALLOW_SEALING, which start with `initial` (set before the
  // file is published). Writes, truncates and fallocate check them here;
  // mmap checks them through BeginSharedMapping.
  void set_initial_seals(int initial);
  // A file created with no name (memfd): link count 0, as
  // shmem_file_setup leaves it. Preconditions: not yet published.
  void MarkUnlinked();
  int Seals();
  // -EPERM once F_SEAL_SEAL is set, -EBUSY for F_SEAL_WRITE while a shared
  // mapping may write (Linux's mapping_deny_writable), -EINVAL for unknown
  // bits.
  int AddSeals(int seals);
  // A MAP_SHARED mapping is being made. -EPERM if it asks for PROT_WRITE
  // and a write seal is set. Otherwise *maywrite is cleared when a write
  // seal forbids upgrading the mapping later (mprotect), and if it stays
  // set the mapping is counted until EndSharedMapping.
  int BeginSharedMapping(bool prot_write, bool* maywrite);
  // A restored mapping that may write, counted again: -EBUSY under
  // F_SEAL_WRITE (which cannot be set while one exists), else counted
  // (F_SEAL_FUTURE_WRITE does not touch existing mappings).
  int RecountSharedMapping();
  void EndSharedMapping();

 private:
  friend struct ::sandboxd::state::FsState;
  // Makes pages [first, first + count) exist, in index order, allocating
  // missing runs contiguously. Returns how many leading pages of the range
  // exist afterwards; on a shortfall sets *err (-ENOSPC or -ENOMEM). Runs
  // it allocated are appended to `added` (first index, count) if non-null.
  uint64_t EnsurePagesLocked(
      uint64_t first, uint64_t count, int* err,
      std::vector<std::pair<uint64_t, uint64_t>>* added)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(data_mu_);
  // Frees pages with index in [first, end), coalescing memory-file runs.
  void FreePagesLocked(uint64_t first, uint64_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(data_mu_);
  // Zeroes bytes [from, to) of file data, which lie within one page.
  void ZeroWithinPageLocked(uint64_t from, uint64_t to)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(data_mu_);
  // truncate(2): frees whole pages past the new size (also fallocated
  // pages beyond EOF, as Linux does) and zeroes the partial last page.
  void SetSizeLocked(uint64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(data_mu_);
  void ModifiedNow() ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex data_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  uint64_t size_ ABSL_GUARDED_BY(data_mu_) = 0;
  // Page index -> memory-file offset of that page.
  std::map<uint64_t, uint64_t> pages_ ABSL_GUARDED_BY(data_mu_);
  int seals_ ABSL_GUARDED_BY(data_mu_);
  // Shared mappings that may write (Linux's i_mmap_writable).
  uint64_t writable_maps_ ABSL_GUARDED_BY(data_mu_) = 0;
};

class TmpFsSymlink final : public TmpFsInode {
 public:
  TmpFsSymlink(std::shared_ptr<TmpFsSuperblock> sb, uint32_t uid,
               uint32_t gid, std::string target);
  int Readlink(std::string* target) override;

 private:
  friend struct ::sandboxd::state::FsState;
  void FillKindAttrLocked(Attr* out) const override
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  const std::string target_;
};

// A FIFO, character or block device, or socket: only a type and a device
// number here; the VFS gives them behaviour (pipes, devfs, unix sockets)
// when they are opened or bound.
class TmpFsSpecialFile final : public TmpFsInode {
 public:
  TmpFsSpecialFile(std::shared_ptr<TmpFsSuperblock> sb, uint32_t type,
                   uint32_t perm, uint32_t uid, uint32_t gid, uint64_t rdev);

  Fifo* GetFifo() override { return fifo_.get(); }

 private:
  friend struct ::sandboxd::state::FsState;
  void FillKindAttrLocked(Attr* out) const override
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  const uint64_t rdev_;
  // A FIFO's pipe (null for the other types).
  const std::unique_ptr<Fifo> fifo_;
};

// One tmpfs mount.
class TmpFs {
 public:
  // Preconditions: `memfile` outlives this TmpFs and all of its inodes.
  TmpFs(mm::MemoryFile* memfile, const TmpFsOptions& opts);

  TmpFs(const TmpFs&) = delete;
  TmpFs& operator=(const TmpFs&) = delete;

  std::shared_ptr<Inode> Root() const { return root_; }
  const std::shared_ptr<TmpFsSuperblock>& superblock() const { return sb_; }

 private:
  const std::shared_ptr<TmpFsSuperblock> sb_;
  const std::shared_ptr<TmpFsDirectory> root_;
};

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_TMPFS_H_
