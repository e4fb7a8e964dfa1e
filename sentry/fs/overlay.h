// An overlay filesystem: a writable upper layer (tmpfs, in the memory file)
// over a read-only lower layer (the rootfs from the host), so that writes
// and deletes inside the sandbox never touch the host.
//
// - A name is looked up in the upper layer first; a whiteout there (a
//   character device 0/0) hides the lower name. A directory in both layers
//   is merged unless the upper one is opaque (created over a whiteout).
// - Anything that changes a lower file first copies it up: its parent
//   directories, then the file (data, mode, owner, times).
// - Renaming a directory that has lower contents fails with EXDEV, as
//   Linux's overlayfs does without redirect_dir; `mv` copies instead.
//
// Lock order: a directory's OverlayInode::mu_ before its children's;
// no lock is held while calling into the layers except during copy-up of
// the inode itself.
#ifndef SANDBOXD_SENTRY_FS_OVERLAY_H_
#define SANDBOXD_SENTRY_FS_OVERLAY_H_

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/fs/inode.h"

namespace sandboxd::fs {

class OverlayInode;

// OVERLAYFS_SUPER_MAGIC (linux/magic.h): statfs(2)'s f_type of an overlay.
inline constexpr uint32_t kOverlayFsMagic = 0x794c7630;

class OverlayFs {
 public:
  // `upper_root` must be an empty writable directory; `lower_root` any
  // directory. `dev` is the st_dev the overlay reports.
  OverlayFs(std::shared_ptr<Inode> upper_root, std::shared_ptr<Inode> lower_root,
            uint64_t dev);
  std::shared_ptr<Inode> Root() const;
  uint64_t dev() const { return dev_; }

 private:
  friend class OverlayInode;
  friend struct ::sandboxd::state::FsState;
  bool IsOpaque(const Inode* upper_dir);
  void SetOpaque(const std::shared_ptr<Inode>& upper_dir);

  const uint64_t dev_;
  std::shared_ptr<OverlayInode> root_;
  absl::Mutex mu_;
  // Upper directories that hide the lower layer below them.
  std::map<const Inode*, std::weak_ptr<Inode>> opaque_ ABSL_GUARDED_BY(mu_);
};

class OverlayInode : public Inode {
 public:
  OverlayInode(OverlayFs* fs, std::shared_ptr<OverlayInode> parent,
               std::string name, std::shared_ptr<Inode> upper,
               std::shared_ptr<Inode> lower);

  uint32_t Type() const override { return type_; }
  int GetAttr(Attr* out) override;
  int SetAttr(const SetAttrRequest& req) override;
  int StatFs(struct statfs* out) override;
  int Lookup(const std::string& name, std::shared_ptr<Inode>* out) override;
  int ReadDir(std::vector<DirEntry>* out) override;
  int Create(const std::string& name, const CreateRequest& req,
             std::shared_ptr<Inode>* out) override;
  int Link(const std::string& name,
           const std::shared_ptr<Inode>& target) override;
  int Unlink(const std::string& name, bool dir) override;
  int Rename(const std::string& old_name, Inode& new_dir,
             const std::string& new_name, unsigned flags) override;
  int Readlink(std::string* target) override;
  int64_t Read(void* buf, uint64_t n, uint64_t off) override;
  int64_t Write(const void* buf, uint64_t n, uint64_t off) override;
  int64_t Allocate(int mode, uint64_t off, uint64_t len) override;
  int Sync() override;
  // The layer's FIFO: the upper one's once copied up, else the lower's
  // (both stay alive with this inode).
  Fifo* GetFifo() override;

  // Makes sure this inode exists in the upper layer. with_data=false skips
  // copying a regular file's contents (the caller truncates it to zero).
  int CopyUp(bool with_data = true);
  // The upper-layer inode after a copy-up: what a shared mapping maps, so
  // that writes through it land in the file. Null on failure.
  std::shared_ptr<Inode> UpperForSharedMapping() {
    return CopyUp() == 0 ? upper() : nullptr;
  }

 private:
  friend struct ::sandboxd::state::FsState;
  std::shared_ptr<Inode> Current();  // upper if present, else lower
  std::shared_ptr<Inode> upper();
  // The merged child, or -ENOENT; fills *child_upper/*child_lower.
  int LookupLayers(const std::string& name, std::shared_ptr<Inode>* u,
                   std::shared_ptr<Inode>* l);
  static bool IsWhiteout(Inode& i);
  int RemoveWhiteout(const std::string& name);
  int AddWhiteout(const std::string& name);
  void Forget(const std::string& name);

  OverlayFs* const fs_;
  const uint32_t type_;
  uint64_t ino_ = 0;
  absl::Mutex mu_;
  std::shared_ptr<OverlayInode> parent_ ABSL_GUARDED_BY(mu_);
  std::string name_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Inode> upper_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Inode> lower_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::weak_ptr<OverlayInode>> children_
      ABSL_GUARDED_BY(mu_);
  absl::Mutex copy_mu_;  // serializes copy-up of this inode
};

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_OVERLAY_H_
