// FsState: the Vfs, its mounts, and locations (a mount and a path).
#include "sentry/state/fs_state.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sentry/fs/inotify.h"
#include "sentry/state/saved_size.h"

namespace sandboxd::state {

bool FsState::InTree(const fs::Vfs& vfs, const std::shared_ptr<fs::Mount>& m) {
  absl::MutexLock lock(&vfs.mu_);
  if (m == vfs.root_mount_) return true;
  for (const auto& [key, mount] : vfs.mounts_) {
    if (mount == m) return true;
  }
  return false;
}

absl::StatusOr<uint64_t> FsState::SaveMount(Saver& s, const fs::Vfs& vfs,
                                   const std::shared_ptr<fs::Mount>& m) {
  SBX_SAVED_SIZE(fs::Mount, 128);
  return s.Save<fs::Mount, pb::Mount>(
      m.get(), s.state().mutable_mounts(), [&](pb::Mount* r) {
        if (!InTree(vfs, m)) {
          return absl::InvalidArgumentError(
              absl::StrCat("save: mount ", m->id, " is not in the mount tree"));
        }
        r->set_id(m->id);
        if (IsPseudoFs(m->fstype)) {
          RETURN_IF_ERROR(
              SavePseudoInode(s, m->root->inode(), m->fstype, "/").status());
        }
        ASSIGN_OR_RETURN(uint64_t root, FsState::SaveInode(s, m->root->inode()));
        r->set_root_inode(root);
        if (m->parent != nullptr) {
          ASSIGN_OR_RETURN(uint64_t parent, SaveMount(s, vfs, m->parent));
          r->set_parent(parent);
          bool reachable = false;
          r->set_mountpoint(vfs.PathOf(fs::Location{m->parent, m->parent->root},
                                       fs::Location{m->parent, m->mountpoint},
                                       &reachable));
          if (!reachable) {
            return absl::UnimplementedError(absl::StrCat(
                "save: mount ", m->id, " on a removed mountpoint"));
          }
        }
        r->set_fstype(m->fstype);
        r->set_source(m->source);
        r->set_read_only(m->read_only);
        return absl::OkStatus();
      });
}

namespace {

// Resolves `path` below `mount`'s root, never above it.
absl::StatusOr<fs::Location> ResolveIn(fs::Vfs& vfs,
                                       const std::shared_ptr<fs::Mount>& mount,
                                       const std::string& path) {
  fs::Location root{mount, mount->root};
  fs::FsContext ctx(root, root);
  fs::Location out;
  int err = vfs.Resolve(ctx, root, path, /*follow_last=*/false, &out);
  if (err < 0) {
    return absl::NotFoundError(absl::StrCat("resolving \"", path, "\" in mount ",
                                            mount->id, ": errno ", -err));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::shared_ptr<fs::Mount>> FsState::LoadMount(Loader& l,
                                                              fs::Vfs& vfs,
                                                              uint64_t id) {
  return l.Load<fs::Mount, pb::Mount>(
      id, l.state().mounts(), "mount",
      [&](const pb::Mount& r) -> absl::StatusOr<std::shared_ptr<fs::Mount>> {
        if (r.parent() == 0) {
          // Only the namespace's root has no parent; LoadVfs built it.
          return absl::InvalidArgumentError("a second root mount");
        }
        ASSIGN_OR_RETURN(std::shared_ptr<fs::Mount> parent,
                         LoadMount(l, vfs, r.parent()));
        ASSIGN_OR_RETURN(std::shared_ptr<fs::Inode> root,
                         FsState::LoadInode(l, r.root_inode()));
        ASSIGN_OR_RETURN(fs::Location where,
                         ResolveIn(vfs, parent, r.mountpoint()));
        if (where.mount != parent) {
          return absl::UnimplementedError(
              "mounts stacked on one mountpoint cannot be loaded yet");
        }
        int err = vfs.MountAt(where, root, r.fstype(), r.source(), r.read_only());
        if (err < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "mounting on \"", r.mountpoint(), "\": errno ", -err));
        }
        absl::MutexLock lock(&vfs.mu_);
        auto it = vfs.mounts_.find({where.mount.get(), where.dentry.get()});
        if (it == vfs.mounts_.end()) {
          return absl::InternalError("the new mount is not in the tree");
        }
        it->second->id = r.id();
        return it->second;
      });
}

absl::Status FsState::SaveVfs(Saver& s, const fs::Vfs& vfs) {
  SBX_SAVED_SIZE(fs::Vfs, 80);
  std::vector<std::shared_ptr<fs::Mount>> all;
  {
    absl::MutexLock lock(&vfs.mu_);
    all.push_back(vfs.root_mount_);
    for (const auto& [key, m] : vfs.mounts_) all.push_back(m);
    s.state().mutable_vfs()->set_next_mount_id(vfs.next_mount_id_);
  }
  s.state().mutable_vfs()->set_inotify_next_cookie(fs::inotify::NextCookie());
  for (const auto& m : all) {
    ASSIGN_OR_RETURN(uint64_t id, SaveMount(s, vfs, m));
    if (m == vfs.root_mount_) s.state().mutable_vfs()->set_root_mount(id);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<fs::Vfs>> FsState::LoadVfs(Loader& l) {
  const pb::Vfs& v = l.state().vfs();
  const auto& mounts = l.state().mounts();
  if (v.root_mount() == 0 || v.root_mount() > static_cast<uint64_t>(mounts.size())) {
    return absl::InvalidArgumentError("vfs: no root mount");
  }
  const pb::Mount& rr = mounts.Get(v.root_mount() - 1);
  if (rr.parent() != 0) {
    return absl::InvalidArgumentError("vfs: the root mount has a parent");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<fs::Inode> root,
                   LoadInode(l, rr.root_inode()));
  auto vfs = std::make_unique<fs::Vfs>(root, rr.fstype(), rr.source(),
                                       rr.read_only());
  vfs->root_mount_->id = rr.id();
  l.Register(v.root_mount(), mounts, vfs->root_mount_);
  for (int i = 0; i < mounts.size(); i++) {
    RETURN_IF_ERROR(LoadMount(l, *vfs, i + 1).status());
  }
  if (v.inotify_next_cookie() != 0) fs::inotify::SetNextCookie(v.inotify_next_cookie());
  absl::MutexLock lock(&vfs->mu_);
  vfs->next_mount_id_ = v.next_mount_id();
  return vfs;
}

absl::StatusOr<pb::Location> FsState::SaveLocation(Saver& s, const fs::Vfs& vfs,
                                                   const fs::Location& loc) {
  SBX_SAVED_SIZE(fs::Location, 32);
  pb::Location out;
  if (!loc.valid()) return out;
  ASSIGN_OR_RETURN(uint64_t mount, SaveMount(s, vfs, loc.mount));
  bool reachable = false;
  std::string path = vfs.PathOf(fs::Location{loc.mount, loc.mount->root}, loc,
                                &reachable);
  if (!reachable) {
    return absl::UnimplementedError(absl::StrCat(
        "save: location \"", path, "\" was removed (not saved yet)"));
  }
  out.set_mount(mount);
  out.set_path(path);
  return out;
}

absl::StatusOr<fs::Location> FsState::LoadLocation(Loader& l, fs::Vfs& vfs,
                                                   const pb::Location& rec) {
  if (rec.mount() == 0) return fs::Location{};
  ASSIGN_OR_RETURN(std::shared_ptr<fs::Mount> mount,
                   LoadMount(l, vfs, rec.mount()));
  return ResolveIn(vfs, mount, rec.path());
}

}  // namespace sandboxd::state
