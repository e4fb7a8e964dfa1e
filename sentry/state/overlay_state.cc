// FsState: overlay filesystems and their inodes (upper tmpfs, lower
// layers by path).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "sentry/fs/overlay.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/saved_size.h"

namespace sandboxd::state {

absl::StatusOr<uint64_t> FsState::SaveOverlayFs(Saver& s, fs::OverlayFs& o) {
  SBX_SAVED_SIZE(fs::OverlayFs, 80);
  return s.Save<fs::OverlayFs, pb::OverlayFs>(
      &o, s.state().mutable_overlays(), [&](pb::OverlayFs* r) {
        r->set_dev(o.dev_);
        std::shared_ptr<fs::Inode> upper, lower;
        {
          absl::MutexLock lock(&o.root_->mu_);
          upper = o.root_->upper_;
          lower = o.root_->lower_;
        }
        if (lower == nullptr || lower.get() != s.rootfs()) {
          return absl::UnimplementedError(
              "save: an overlay whose lower layer is not the rootfs root");
        }
        r->set_lower_path("/");
        ASSIGN_OR_RETURN(uint64_t up, SaveInode(s, upper));
        r->set_upper_root(up);
        std::vector<std::shared_ptr<fs::Inode>> opaque;
        {
          absl::MutexLock lock(&o.mu_);
          for (const auto& [key, weak] : o.opaque_) {
            if (auto d = weak.lock()) opaque.push_back(std::move(d));
          }
        }
        for (const auto& d : opaque) {
          // Opaque directories removed from the upper tree since are
          // garbage the overlay drops on its own: not worth a record.
          if (!s.Saved(s.state().mutable_inodes(), d.get())) continue;
          ASSIGN_OR_RETURN(uint64_t id, SaveInode(s, d));
          r->add_opaque(id);
        }
        return absl::OkStatus();
      });
}

absl::Status FsState::SaveOverlayInode(Saver& s, fs::OverlayInode& o,
                                       pb::OverlayInode* r) {
  SBX_SAVED_SIZE(fs::OverlayInode, 192);
  ASSIGN_OR_RETURN(uint64_t fs_id, SaveOverlayFs(s, *o.fs_));
  r->set_fs(fs_id);
  // The path from the overlay's root, then a lookup along it to check
  // that it still leads here (not unlinked, not renamed away).
  std::vector<std::string> names;
  std::shared_ptr<fs::OverlayInode> cur =
      std::static_pointer_cast<fs::OverlayInode>(o.shared_from_this());
  bool named = true;  // a chain of names up to the root
  while (cur != o.fs_->root_) {
    std::shared_ptr<fs::OverlayInode> parent;
    {
      absl::MutexLock lock(&cur->mu_);
      parent = cur->parent_;
      names.push_back(cur->name_);
    }
    if (parent == nullptr) {
      named = false;
      break;
    }
    cur = std::move(parent);
  }
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    absl::StrAppend(&path, "/", *it);
  }
  bool reachable = named;
  if (reachable) {
    std::shared_ptr<fs::Inode> walk = o.fs_->root_;
    for (auto it = names.rbegin(); it != names.rend(); ++it) {
      std::shared_ptr<fs::Inode> next;
      if (walk->Lookup(*it, &next) < 0) {
        walk = nullptr;
        break;
      }
      walk = std::move(next);
    }
    reachable = walk.get() == &o;
  }
  if (reachable) {
    r->set_path(path.empty() ? "/" : path);
    return absl::OkStatus();
  }
  // Removed while open. Linux keeps such a file as long as it is open;
  // its data is all in the upper layer when it has no lower file (made in
  // the overlay, or copied up before the removal: a copy-up drops
  // nothing the file still shows), so that inode is saved.
  std::shared_ptr<fs::Inode> upper, lower;
  std::string name;
  {
    absl::MutexLock lock(&o.mu_);
    upper = o.upper_;
    lower = o.lower_;
    name = o.name_;
  }
  if (upper == nullptr) {
    // Only the rootfs has it, at the path it had in the overlay (a file
    // renamed in the overlay was copied up first); the load finds it there
    // again, and checks that it is the same file.
    fs::Attr a;
    if (!named || lower == nullptr || lower->GetAttr(&a) != 0) {
      return absl::UnimplementedError(absl::StrCat(
          "save: overlay file \"", path.empty() ? name : path,
          "\" of the lower layer was removed while open, and its rootfs "
          "file cannot be named"));
    }
    r->set_detached_lower_path(path);
    r->set_detached_lower_ino(a.ino);
    r->set_detached_name(name);
    r->set_detached_ino(o.ino_);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(uint64_t up, SaveInode(s, upper));
  r->set_detached_upper(up);
  r->set_detached_name(name);
  r->set_detached_ino(o.ino_);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<fs::Inode>> FsState::LoadOverlayInode(
    Loader& l, const pb::OverlayInode& r) {
  auto ofs = l.Load<fs::OverlayFs, pb::OverlayFs>(
      r.fs(), l.state().overlays(), "overlay",
      [&](const pb::OverlayFs& rec)
          -> absl::StatusOr<std::shared_ptr<fs::OverlayFs>> {
        if (rec.lower_path() != "/") {
          return absl::UnimplementedError(absl::StrCat(
              "a lower layer at \"", rec.lower_path(), "\" of the rootfs"));
        }
        if (l.rootfs() == nullptr) {
          return absl::FailedPreconditionError(
              "the rootfs was not handed in (lower layer)");
        }
        ASSIGN_OR_RETURN(std::shared_ptr<fs::Inode> upper,
                         LoadInode(l, rec.upper_root()));
        auto tu = std::dynamic_pointer_cast<fs::TmpFsInode>(upper);
        if (tu == nullptr || tu->Type() != S_IFDIR) {
          return absl::InvalidArgumentError("upper root is not a tmpfs directory");
        }
        // The constructor gives the upper root the lower root's attributes,
        // as at boot; the loaded ones are the right ones since.
        uint32_t perm, uid, gid;
        timespec at, mt, ct;
        {
          absl::MutexLock lock(&tu->mu_);
          perm = tu->perm_, uid = tu->uid_, gid = tu->gid_;
          at = tu->atime_, mt = tu->mtime_, ct = tu->ctime_;
        }
        auto o = std::make_shared<fs::OverlayFs>(upper, l.rootfs(), rec.dev());
        {
          absl::MutexLock lock(&tu->mu_);
          tu->perm_ = perm, tu->uid_ = uid, tu->gid_ = gid;
          tu->atime_ = at, tu->mtime_ = mt, tu->ctime_ = ct;
        }
        for (uint64_t id : rec.opaque()) {
          ASSIGN_OR_RETURN(std::shared_ptr<fs::Inode> d, LoadInode(l, id));
          if (d == nullptr || d->Type() != S_IFDIR) {
            return absl::InvalidArgumentError("opaque entry is not a directory");
          }
          o->SetOpaque(d);
        }
        // Its inodes point at it plainly: the caller keeps it alive.
        l.Keep(o);
        return o;
      });
  if (!ofs.ok()) return ofs.status();
  if (*ofs == nullptr) return absl::InvalidArgumentError("no overlay");
  if (r.detached_upper() != 0) {
    // Removed while open: an inode of its own, reached from no directory,
    // over its upper inode alone.
    if (!r.path().empty() || r.detached_name().empty() ||
        r.detached_name().find('/') != std::string::npos) {
      return absl::InvalidArgumentError(
          "a removed overlay file with a path, or without a name");
    }
    ASSIGN_OR_RETURN(std::shared_ptr<fs::Inode> upper,
                     LoadInode(l, r.detached_upper()));
    if (std::dynamic_pointer_cast<fs::TmpFsInode>(upper) == nullptr) {
      return absl::InvalidArgumentError(
          "a removed overlay file's upper inode is not a tmpfs inode");
    }
    auto o = std::make_shared<fs::OverlayInode>(ofs->get(), nullptr,
                                                r.detached_name(), upper, nullptr);
    o->ino_ = r.detached_ino();
    return o;
  }
  if (!r.detached_lower_path().empty()) {
    // Removed while open with only its rootfs file: found again there.
    if (!r.path().empty() || r.detached_name().empty() ||
        r.detached_name().find('/') != std::string::npos) {
      return absl::InvalidArgumentError(
          "a removed overlay file with a path, or without a name");
    }
    std::shared_ptr<fs::Inode> lower = l.rootfs();
    for (absl::string_view name :
         absl::StrSplit(r.detached_lower_path(), '/', absl::SkipEmpty())) {
      std::shared_ptr<fs::Inode> next;
      if (name == "." || name == ".." || lower->Lookup(std::string(name), &next) < 0) {
        lower = nullptr;
        break;
      }
      lower = std::move(next);
    }
    fs::Attr a;
    if (lower == nullptr || lower->GetAttr(&a) != 0 || a.ino != r.detached_lower_ino()) {
      return absl::NotFoundError(absl::StrCat(
          "overlay file \"", r.detached_lower_path(),
          "\", removed while open: the rootfs has it no longer (or another "
          "file there)"));
    }
    auto o = std::make_shared<fs::OverlayInode>(ofs->get(), nullptr,
                                                r.detached_name(), nullptr, lower);
    o->ino_ = r.detached_ino();
    return o;
  }
  std::shared_ptr<fs::Inode> cur = (*ofs)->Root();
  for (absl::string_view name : absl::StrSplit(r.path(), '/', absl::SkipEmpty())) {
    std::shared_ptr<fs::Inode> next;
    int err = cur->Lookup(std::string(name), &next);
    if (err < 0) {
      return absl::NotFoundError(absl::StrCat("overlay path \"", r.path(),
                                              "\": errno ", -err));
    }
    cur = std::move(next);
  }
  return cur;
}

}  // namespace sandboxd::state
