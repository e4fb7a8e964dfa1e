// The bridge from a VFS inode to mm's file-backed mappings.
#ifndef SANDBOXD_SENTRY_FS_MAPPABLE_H_
#define SANDBOXD_SENTRY_FS_MAPPABLE_H_

#include <memory>
#include <string>

#include "sentry/fs/hostfs.h"
#include "sentry/fs/inode.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/mm/mm.h"

namespace sandboxd::state {
struct MmState;
}  // namespace sandboxd::state

namespace sandboxd::fs {

// Pages of a regular file for mmap and for the ELF loader. `name` is the
// file's path as /proc/self/maps shows it.
class InodeMappable : public mm::Mappable {
 public:
  // `cache`: a hostfs file's page cache (hostfs::SharedPageCache), for a
  // MAP_SHARED mapping of a file of a writable bind mount.
  // `cache_may_write`: whether the mapping may ever write (max_prot).
  InodeMappable(std::shared_ptr<Inode> inode, std::string name,
                std::shared_ptr<hostfs::PageCache> cache = nullptr,
                bool cache_may_write = false)
      : inode_(std::move(inode)),
        tmpfs_(dynamic_cast<TmpFsRegularFile*>(inode_.get())),
        name_(std::move(name)),
        cache_(std::move(cache)) {
    if (cache_ != nullptr) cache_->BeginMapping(cache_may_write);
  }
  ~InodeMappable() override {
    if (counted_) tmpfs_->EndSharedMapping();
    if (cache_ != nullptr) cache_->EndMapping();  // writes back
  }
  // For a MAP_SHARED mapping, before it is made: checks the file's seals
  // (-EPERM for PROT_WRITE under a write seal; *maywrite cleared when
  // mprotect may not add write later) and, if the mapping may write,
  // counts it on the file for as long as this object (shared by every VMA
  // of the mapping) lives, so that F_SEAL_WRITE fails with EBUSY.
  int BeginShared(bool prot_write, bool* maywrite) {
    if (tmpfs_ == nullptr) return 0;
    int r = tmpfs_->BeginSharedMapping(prot_write, maywrite);
    counted_ = r == 0 && *maywrite;
    return r;
  }
  // A restore: a mapping that was counted at the save is counted again,
  // whatever seals were added since it was made (F_SEAL_FUTURE_WRITE
  // leaves existing writable mappings alone). -EBUSY under F_SEAL_WRITE,
  // which Linux refuses while such a mapping exists: a bad image.
  int RecountShared() {
    if (tmpfs_ == nullptr) return 0;
    int r = tmpfs_->RecountSharedMapping();
    counted_ = r == 0;
    return r;
  }
  uint64_t Size() override {
    Attr a;
    return inode_->GetAttr(&a) == 0 ? a.size : 0;
  }
  int64_t ReadAt(void* dst, uint64_t n, uint64_t off) override {
    uint64_t done = 0;
    while (done < n) {
      int64_t r = inode_->Read(static_cast<char*>(dst) + done, n - done,
                               off + done);
      if (r < 0) return done > 0 ? static_cast<int64_t>(done) : r;
      if (r == 0) break;
      done += static_cast<uint64_t>(r);
    }
    return static_cast<int64_t>(done);
  }
  std::string Name() override { return name_; }
  // The mapped file (for /proc/[pid]/maps's device and inode).
  const std::shared_ptr<Inode>& inode() const { return inode_; }
  bool SupportsShared() override {
    return tmpfs_ != nullptr || cache_ != nullptr;
  }
  int SharedPage(uint64_t index, uint64_t* memfile_off) override {
    if (tmpfs_ != nullptr) {
      return tmpfs_->GetPage(index, true, memfile_off, /*ref=*/true);
    }
    if (cache_ != nullptr) return cache_->GetPage(index, memfile_off, /*ref=*/true);
    return -ENODEV;
  }
  int Sync() override { return cache_ != nullptr ? cache_->Writeback() : 0; }
  const std::shared_ptr<hostfs::PageCache>& page_cache() const {
    return cache_;
  }

 private:
  friend struct ::sandboxd::state::MmState;  // saves and restores counted_
  const std::shared_ptr<Inode> inode_;
  // Set when the file's data is in memory-file pages (shared mappings).
  TmpFsRegularFile* const tmpfs_;
  const std::string name_;
  bool counted_ = false;
  // Set for a shared mapping of a writable hostfs file: its pages.
  const std::shared_ptr<hostfs::PageCache> cache_;
};

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_MAPPABLE_H_
