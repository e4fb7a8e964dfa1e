#include "sentry/fs/overlay.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <set>
#include <vector>

namespace sandboxd::fs {

// ---------------------------------------------------------------------------
// OverlayFs

OverlayFs::OverlayFs(std::shared_ptr<Inode> upper_root,
                     std::shared_ptr<Inode> lower_root, uint64_t dev)
    : dev_(dev) {
  // The root is merged from the start: it takes the lower root's mode,
  // owner and times, as if it had been copied up.
  Attr la;
  if (lower_root->GetAttr(&la) == 0) {
    SetAttrRequest req;
    req.set_mode = req.set_uid = req.set_gid = true;
    req.mode = la.mode & 07777;
    req.uid = la.uid;
    req.gid = la.gid;
    req.set_atime = req.set_mtime = true;
    req.atime = la.atime;
    req.mtime = la.mtime;
    upper_root->SetAttr(req);
  }
  root_ = std::make_shared<OverlayInode>(this, nullptr, "", std::move(upper_root),
                                         std::move(lower_root));
}

std::shared_ptr<Inode> OverlayFs::Root() const { return root_; }

bool OverlayFs::IsOpaque(const Inode* upper_dir) {
  if (upper_dir == nullptr) return false;
  absl::MutexLock l(&mu_);
  auto it = opaque_.find(upper_dir);
  if (it == opaque_.end()) return false;
  if (it->second.expired()) {
    opaque_.erase(it);
    return false;
  }
  return true;
}

void OverlayFs::SetOpaque(const std::shared_ptr<Inode>& upper_dir) {
  absl::MutexLock l(&mu_);
  opaque_[upper_dir.get()] = upper_dir;
}

// ---------------------------------------------------------------------------
// OverlayInode

OverlayInode::OverlayInode(OverlayFs* fs, std::shared_ptr<OverlayInode> parent,
                           std::string name, std::shared_ptr<Inode> upper,
                           std::shared_ptr<Inode> lower)
    : fs_(fs),
      type_(upper != nullptr ? upper->Type() : lower->Type()),
      parent_(std::move(parent)),
      name_(std::move(name)),
      upper_(std::move(upper)),
      lower_(std::move(lower)) {
  // The inode number stays the lower file's across a copy-up.
  Attr a;
  std::shared_ptr<Inode> src = lower_ != nullptr ? lower_ : upper_;
  if (src->GetAttr(&a) == 0) ino_ = a.ino;
}

std::shared_ptr<Inode> OverlayInode::Current() {
  absl::MutexLock l(&mu_);
  return upper_ != nullptr ? upper_ : lower_;
}

Fifo* OverlayInode::GetFifo() {
  if (type_ != S_IFIFO) return nullptr;
  std::shared_ptr<Inode> c = Current();
  return c != nullptr ? c->GetFifo() : nullptr;
}

std::shared_ptr<Inode> OverlayInode::upper() {
  absl::MutexLock l(&mu_);
  return upper_;
}

bool OverlayInode::IsWhiteout(Inode& i) {
  if (i.Type() != S_IFCHR) return false;
  Attr a;
  return i.GetAttr(&a) == 0 && a.rdev == 0;
}

int OverlayInode::GetAttr(Attr* out) {
  std::shared_ptr<Inode> up, low;
  {
    absl::MutexLock l(&mu_);
    up = upper_;
    low = lower_;
  }
  int r = (up != nullptr ? up : low)->GetAttr(out);
  if (r < 0) return r;
  if (type_ == S_IFDIR && up != nullptr && low != nullptr) {
    // A merged directory: its upper copy holds only what changed, so the
    // size and link count the program expects are the lower one's.
    Attr la;
    if (low->GetAttr(&la) == 0) {
      out->size = la.size;
      out->blocks = la.blocks;
      out->nlink = std::max(out->nlink, la.nlink);
    }
  }
  out->dev = fs_->dev();
  out->ino = ino_;
  return 0;
}

int OverlayInode::StatFs(struct statfs* out) {
  // Free space and inodes are the upper layer's: that is where writes go.
  // What is in use is both layers': the lower filesystem's use (the image's
  // filesystem on the host, as docker's overlay reports its backing one)
  // plus the upper's, so that df shows the image's filesystem in use and
  // grows with what the sandbox writes. The type is overlayfs's, as Linux's
  // ovl_statfs() reports it.
  OverlayInode& root = *fs_->root_;
  int r = root.upper()->StatFs(out);
  if (r != 0) return r;
  out->f_type = kOverlayFsMagic;
  std::shared_ptr<Inode> lower;
  {
    absl::MutexLock l(&root.mu_);
    lower = root.lower_;
  }
  struct statfs low;
  if (lower != nullptr && out->f_bsize > 0 && lower->StatFs(&low) == 0 &&
      low.f_bfree <= low.f_blocks && low.f_ffree <= low.f_files) {
    const uint64_t used_bytes = static_cast<uint64_t>(low.f_blocks - low.f_bfree) *
                                static_cast<uint64_t>(low.f_bsize);
    out->f_blocks += used_bytes / static_cast<uint64_t>(out->f_bsize);
    out->f_files += low.f_files - low.f_ffree;
  }
  return 0;
}

int OverlayInode::CopyUp(bool with_data) {
  absl::MutexLock copy(&copy_mu_);
  std::shared_ptr<OverlayInode> parent;
  std::string name;
  std::shared_ptr<Inode> lower;
  {
    absl::MutexLock l(&mu_);
    if (upper_ != nullptr) return 0;
    parent = parent_;
    name = name_;
    lower = lower_;
  }
  if (parent == nullptr) return -EIO;  // the root always has an upper
  int r = parent->CopyUp();
  if (r < 0) return r;
  std::shared_ptr<Inode> pu = parent->upper();
  Attr a;
  r = lower->GetAttr(&a);
  if (r < 0) return r;
  CreateRequest req;
  req.type = type_;
  req.mode = a.mode & 07777;
  req.uid = a.uid;
  req.gid = a.gid;
  req.rdev = a.rdev;
  if (type_ == S_IFLNK) {
    r = lower->Readlink(&req.target);
    if (r < 0) return r;
  }
  std::shared_ptr<Inode> up;
  r = pu->Create(name, req, &up);
  if (r < 0) return r;
  if (type_ == S_IFREG && with_data) {
    std::vector<uint8_t> buf(1 << 20);
    uint64_t off = 0;
    for (;;) {
      int64_t n = lower->Read(buf.data(), buf.size(), off);
      if (n < 0) {
        pu->Unlink(name, false);
        return static_cast<int>(n);
      }
      if (n == 0) break;
      int64_t w = up->Write(buf.data(), static_cast<uint64_t>(n), off);
      if (w != n) {
        pu->Unlink(name, false);
        return w < 0 ? static_cast<int>(w) : -EIO;
      }
      off += static_cast<uint64_t>(n);
    }
  }
  if (type_ != S_IFLNK) {
    SetAttrRequest times;
    times.set_atime = times.set_mtime = true;
    times.atime = a.atime;
    times.mtime = a.mtime;
    up->SetAttr(times);
  }
  absl::MutexLock l(&mu_);
  upper_ = std::move(up);
  return 0;
}

int OverlayInode::SetAttr(const SetAttrRequest& req) {
  bool truncating = req.set_size && req.size == 0;
  int r = CopyUp(/*with_data=*/!truncating);
  if (r < 0) return r;
  return upper()->SetAttr(req);
}

int OverlayInode::LookupLayers(const std::string& name,
                               std::shared_ptr<Inode>* u,
                               std::shared_ptr<Inode>* l) {
  std::shared_ptr<Inode> up, low;
  {
    absl::MutexLock lock(&mu_);
    up = upper_;
    low = lower_;
  }
  u->reset();
  l->reset();
  if (up != nullptr) {
    int r = up->Lookup(name, u);
    if (r < 0 && r != -ENOENT) return r;
    if (*u != nullptr && IsWhiteout(**u)) {
      u->reset();
      return -ENOENT;
    }
  }
  bool opaque = up != nullptr && fs_->IsOpaque(up.get());
  if (low != nullptr && !opaque) {
    // A non-directory in the upper layer hides whatever is below it.
    if (*u == nullptr || (*u)->Type() == S_IFDIR) {
      int r = low->Lookup(name, l);
      if (r < 0 && r != -ENOENT && r != -ENOTDIR) return r;
      if (*u != nullptr && *l != nullptr &&
          ((*l)->Type() != S_IFDIR || fs_->IsOpaque(u->get()))) {
        l->reset();
      }
    }
  }
  return (*u == nullptr && *l == nullptr) ? -ENOENT : 0;
}

int OverlayInode::Lookup(const std::string& name, std::shared_ptr<Inode>* out) {
  if (type_ != S_IFDIR) return -ENOTDIR;
  {
    absl::MutexLock l(&mu_);
    auto it = children_.find(name);
    if (it != children_.end()) {
      if (auto c = it->second.lock()) {
        *out = c;
        return 0;
      }
      children_.erase(it);
    }
  }
  std::shared_ptr<Inode> u, low;
  int r = LookupLayers(name, &u, &low);
  if (r < 0) return r;
  auto self = std::static_pointer_cast<OverlayInode>(shared_from_this());
  auto child = std::make_shared<OverlayInode>(fs_, self, name, u, low);
  absl::MutexLock l(&mu_);
  auto& slot = children_[name];
  if (auto existing = slot.lock()) {
    *out = existing;
    return 0;
  }
  slot = child;
  *out = child;
  return 0;
}

int OverlayInode::ReadDir(std::vector<DirEntry>* out) {
  if (type_ != S_IFDIR) return -ENOTDIR;
  std::shared_ptr<Inode> up, low;
  {
    absl::MutexLock l(&mu_);
    up = upper_;
    low = lower_;
  }
  std::map<std::string, DirEntry> merged;
  if (low != nullptr && !(up != nullptr && fs_->IsOpaque(up.get()))) {
    std::vector<DirEntry> le;
    int r = low->ReadDir(&le);
    if (r < 0) return r;
    for (auto& e : le) merged[e.name] = e;
  }
  if (up != nullptr) {
    std::vector<DirEntry> ue;
    int r = up->ReadDir(&ue);
    if (r < 0) return r;
    for (auto& e : ue) {
      if (e.type == DT_CHR) {
        std::shared_ptr<Inode> c;
        if (up->Lookup(e.name, &c) == 0 && IsWhiteout(*c)) {
          merged.erase(e.name);
          continue;
        }
      }
      merged[e.name] = e;
    }
  }
  out->clear();
  for (auto& [name, e] : merged) out->push_back(std::move(e));
  return 0;
}

int OverlayInode::RemoveWhiteout(const std::string& name) {
  std::shared_ptr<Inode> up = upper();
  std::shared_ptr<Inode> c;
  if (up->Lookup(name, &c) == 0 && IsWhiteout(*c)) {
    return up->Unlink(name, false);
  }
  return 0;
}

int OverlayInode::AddWhiteout(const std::string& name) {
  CreateRequest wh;
  wh.type = S_IFCHR;
  wh.mode = 0;
  wh.rdev = 0;
  std::shared_ptr<Inode> ignored;
  return upper()->Create(name, wh, &ignored);
}

void OverlayInode::Forget(const std::string& name) {
  absl::MutexLock l(&mu_);
  children_.erase(name);
}

int OverlayInode::Create(const std::string& name, const CreateRequest& req,
                         std::shared_ptr<Inode>* out) {
  if (type_ != S_IFDIR) return -ENOTDIR;
  std::shared_ptr<Inode> u, low;
  int r = LookupLayers(name, &u, &low);
  if (r == 0) return -EEXIST;
  if (r != -ENOENT) return r;
  r = CopyUp();
  if (r < 0) return r;
  std::shared_ptr<Inode> up = upper();
  // Was there a whiteout (the name existed below and was deleted)?
  std::shared_ptr<Inode> wh;
  bool over_whiteout = up->Lookup(name, &wh) == 0 && IsWhiteout(*wh);
  if (over_whiteout) {
    r = up->Unlink(name, false);
    if (r < 0) return r;
  }
  std::shared_ptr<Inode> created;
  r = up->Create(name, req, &created);
  if (r < 0) {
    if (over_whiteout) AddWhiteout(name);
    return r;
  }
  // A directory made where a lower one was deleted must not show it.
  if (req.type == S_IFDIR) {
    std::shared_ptr<Inode> lower;
    {
      absl::MutexLock l(&mu_);
      lower = lower_;
    }
    std::shared_ptr<Inode> below;
    if (over_whiteout ||
        (lower != nullptr && lower->Lookup(name, &below) == 0)) {
      fs_->SetOpaque(created);
    }
  }
  auto self = std::static_pointer_cast<OverlayInode>(shared_from_this());
  auto child = std::make_shared<OverlayInode>(fs_, self, name, created, nullptr);
  absl::MutexLock l(&mu_);
  children_[name] = child;
  *out = child;
  return 0;
}

int OverlayInode::Link(const std::string& name,
                       const std::shared_ptr<Inode>& target) {
  if (type_ != S_IFDIR) return -ENOTDIR;
  auto t = std::dynamic_pointer_cast<OverlayInode>(target);
  if (t == nullptr) return -EXDEV;
  std::shared_ptr<Inode> u, low;
  if (LookupLayers(name, &u, &low) == 0) return -EEXIST;
  int r = t->CopyUp();
  if (r < 0) return r;
  r = CopyUp();
  if (r < 0) return r;
  r = RemoveWhiteout(name);
  if (r < 0) return r;
  r = upper()->Link(name, t->upper());
  if (r < 0) return r;
  Forget(name);
  return 0;
}

int OverlayInode::Unlink(const std::string& name, bool dir) {
  if (type_ != S_IFDIR) return -ENOTDIR;
  std::shared_ptr<Inode> child;
  int r = Lookup(name, &child);
  if (r < 0) return r;
  auto c = std::static_pointer_cast<OverlayInode>(child);
  if (dir && c->Type() != S_IFDIR) return -ENOTDIR;
  if (!dir && c->Type() == S_IFDIR) return -EISDIR;
  std::shared_ptr<Inode> cu, cl;
  {
    absl::MutexLock l(&c->mu_);
    cu = c->upper_;
    cl = c->lower_;
  }
  if (dir) {
    std::vector<DirEntry> entries;
    r = c->ReadDir(&entries);
    if (r < 0) return r;
    if (!entries.empty()) return -ENOTEMPTY;
  }
  r = CopyUp();
  if (r < 0) return r;
  std::shared_ptr<Inode> up = upper();
  if (cu != nullptr) {
    if (dir) {
      // Only whiteouts are left in it (the merged view is empty).
      std::vector<DirEntry> left;
      cu->ReadDir(&left);
      for (const auto& e : left) cu->Unlink(e.name, false);
    }
    r = up->Unlink(name, dir);
    if (r < 0) return r;
  }
  // Still visible below? Hide it.
  std::shared_ptr<Inode> lower;
  {
    absl::MutexLock l(&mu_);
    lower = lower_;
  }
  std::shared_ptr<Inode> below;
  if (cl != nullptr ||
      (lower != nullptr && !fs_->IsOpaque(up.get()) &&
       lower->Lookup(name, &below) == 0)) {
    r = AddWhiteout(name);
    if (r < 0) return r;
  }
  Forget(name);
  return 0;
}

int OverlayInode::Rename(const std::string& old_name, Inode& new_dir_base,
                         const std::string& new_name, unsigned flags) {
  auto* new_dir = dynamic_cast<OverlayInode*>(&new_dir_base);
  if (new_dir == nullptr || new_dir->fs_ != fs_) return -EXDEV;
  if (flags & RENAME_EXCHANGE) return -EXDEV;  // not offered by this overlay
  std::shared_ptr<Inode> src_base;
  int r = Lookup(old_name, &src_base);
  if (r < 0) return r;
  auto src = std::static_pointer_cast<OverlayInode>(src_base);
  std::shared_ptr<Inode> dst_base;
  bool have_dst = new_dir->Lookup(new_name, &dst_base) == 0;
  if (have_dst && (flags & RENAME_NOREPLACE)) return -EEXIST;
  std::shared_ptr<Inode> src_lower;
  {
    absl::MutexLock l(&src->mu_);
    src_lower = src->lower_;
  }
  if (src->Type() == S_IFDIR && src_lower != nullptr) return -EXDEV;
  if (have_dst) {
    auto dst = std::static_pointer_cast<OverlayInode>(dst_base);
    if (src->Type() == S_IFDIR && dst->Type() != S_IFDIR) return -ENOTDIR;
    if (src->Type() != S_IFDIR && dst->Type() == S_IFDIR) return -EISDIR;
    if (dst->Type() == S_IFDIR) {
      std::vector<DirEntry> entries;
      r = dst->ReadDir(&entries);
      if (r < 0) return r;
      if (!entries.empty()) return -ENOTEMPTY;
      // The empty target directory goes first (whiteouts included).
      r = new_dir->Unlink(new_name, true);
      if (r < 0) return r;
    }
  }
  r = src->CopyUp();
  if (r < 0) return r;
  r = new_dir->CopyUp();
  if (r < 0) return r;
  r = new_dir->RemoveWhiteout(new_name);
  if (r < 0) return r;
  r = upper()->Rename(old_name, *new_dir->upper(), new_name, flags);
  if (r < 0) return r;
  // The old name may still exist below.
  std::shared_ptr<Inode> lower, below;
  {
    absl::MutexLock l(&mu_);
    lower = lower_;
  }
  if (lower != nullptr && !fs_->IsOpaque(upper().get()) &&
      lower->Lookup(old_name, &below) == 0) {
    AddWhiteout(old_name);
  }
  Forget(old_name);
  new_dir->Forget(new_name);
  {
    absl::MutexLock l(&src->mu_);
    src->parent_ = std::static_pointer_cast<OverlayInode>(
        new_dir->shared_from_this());
    src->name_ = new_name;
  }
  return 0;
}

int OverlayInode::Readlink(std::string* target) {
  return Current()->Readlink(target);
}

int64_t OverlayInode::Read(void* buf, uint64_t n, uint64_t off) {
  return Current()->Read(buf, n, off);
}

int64_t OverlayInode::Write(const void* buf, uint64_t n, uint64_t off) {
  int r = CopyUp();
  if (r < 0) return r;
  return upper()->Write(buf, n, off);
}

int64_t OverlayInode::Allocate(int mode, uint64_t off, uint64_t len) {
  int r = CopyUp();
  if (r < 0) return r;
  return upper()->Allocate(mode, off, len);
}

int OverlayInode::Sync() {
  std::shared_ptr<Inode> u = upper();
  return u != nullptr ? u->Sync() : 0;
}

}  // namespace sandboxd::fs
