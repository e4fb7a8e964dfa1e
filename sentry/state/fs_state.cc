#include "sentry/state/fs_state.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "base/unique_fd.h"
#include "sentry/fs/epoll.h"
#include "sentry/fs/eventfd.h"
#include "sentry/fs/inotify.h"
#include "sentry/fs/overlay.h"
#include "sentry/fs/timerfd.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/fs/tty/terminal.h"
#include "sentry/kernel/signalfd.h"
#include "sentry/mm/memory_file.h"
#include "sentry/socket/unix_socket.h"
#include "sentry/state/socket_state.h"
#include "sentry/state/tty_state.h"

namespace sandboxd::state {
namespace {

constexpr uint64_t kPage = mm::kPageSize;

// "sandboxd::fs::HostFsInode", for errors about what cannot be saved.
template <typename T>
std::string KindName(const T& obj) {
  const char* mangled = typeid(obj).name();
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string out = status == 0 && d != nullptr ? d : mangled;
  free(d);
  return out;
}

pb::Timespec ToPb(const timespec& t) {
  pb::Timespec out;
  out.set_sec(t.tv_sec);
  out.set_nsec(t.tv_nsec);
  return out;
}

timespec FromPb(const pb::Timespec& t) {
  return timespec{static_cast<time_t>(t.sec()), static_cast<long>(t.nsec())};
}

}  // namespace

bool FsState::InTree(const fs::Vfs& vfs, const std::shared_ptr<fs::Mount>& m) {
  absl::MutexLock lock(&vfs.mu_);
  if (m == vfs.root_mount_) return true;
  for (const auto& [key, mount] : vfs.mounts_) {
    if (mount == m) return true;
  }
  return false;
}

// ---- tmpfs ----

absl::StatusOr<uint64_t> FsState::SaveSuperblock(
    Saver& s, const std::shared_ptr<fs::TmpFsSuperblock>& sb) {
  return s.Save<fs::TmpFsSuperblock, pb::TmpFsSuperblock>(
      sb.get(), s.state().mutable_tmpfs_superblocks(),
      [&](pb::TmpFsSuperblock* r) {
        r->set_dev(sb->dev_);
        r->set_max_pages(sb->max_pages_);
        r->set_max_inodes(sb->max_inodes_);
        r->set_next_ino(sb->next_ino_.load());
        return absl::OkStatus();
      });
}

absl::StatusOr<uint64_t> FsState::SaveInode(
    Saver& s, const std::shared_ptr<fs::Inode>& inode) {
  return s.Save<fs::Inode, pb::Inode>(
      inode.get(), s.state().mutable_inodes(), [&](pb::Inode* rec) {
        if (auto* o = dynamic_cast<fs::OverlayInode*>(inode.get())) {
          return SaveOverlayInode(s, *o, rec->mutable_overlay());
        }
        auto* t = dynamic_cast<fs::TmpFsInode*>(inode.get());
        if (t == nullptr) {
          // Pseudo-filesystem inodes are saved by SavePseudoInode, when
          // their path is known (a mount's root, an open file).
          return absl::UnimplementedError(absl::StrCat(
              "save: ", KindName(*inode), " inodes cannot be saved yet"));
        }
        pb::TmpFsInode* r = rec->mutable_tmpfs();
        ASSIGN_OR_RETURN(uint64_t sb, SaveSuperblock(s, t->sb_));
        r->set_superblock(sb);
        r->set_ino(t->ino_);
        r->set_type(t->type_);
        {
          absl::ReaderMutexLock l(&t->mu_);
          r->set_perm(t->perm_);
          r->set_uid(t->uid_);
          r->set_gid(t->gid_);
          r->set_nlink(t->nlink_);
          *r->mutable_atime() = ToPb(t->atime_);
          *r->mutable_mtime() = ToPb(t->mtime_);
          *r->mutable_ctime() = ToPb(t->ctime_);
        }
        if (auto* d = dynamic_cast<fs::TmpFsDirectory*>(t)) {
          std::map<std::string, std::shared_ptr<fs::TmpFsInode>> entries;
          {
            absl::ReaderMutexLock l(&d->mu_);
            entries = d->entries_;
            r->set_removed(d->removed_);
          }
          for (const auto& [name, child] : entries) {
            ASSIGN_OR_RETURN(uint64_t id, SaveInode(s, child));
            pb::TmpFsDirEntry* e = r->add_entries();
            e->set_name(name);
            e->set_inode(id);
          }
        } else if (auto* f = dynamic_cast<fs::TmpFsRegularFile*>(t)) {
          absl::MutexLock l(&f->data_mu_);
          r->set_size(f->size_);
          r->set_seals(f->seals_);
          // writable_maps_ is not saved: the loaded writable shared
          // mappings count themselves again (MmState).
          // Runs where both the file's and the memory file's pages are
          // consecutive: one PageWriter call each.
          pb::PageRun* run = nullptr;
          for (const auto& [index, off] : f->pages_) {
            if (run != nullptr && run->index() + run->count() == index &&
                run->memfile_offset() + run->count() * kPage == off) {
              run->set_count(run->count() + 1);
              continue;
            }
            run = r->add_pages();
            run->set_index(index);
            run->set_count(1);
            run->set_memfile_offset(off);
          }
          for (const pb::PageRun& p : r->pages()) {
            RETURN_IF_ERROR(s.pages().SavePages(p.memfile_offset(),
                                                p.count() * kPage));
          }
        } else if (auto* sl = dynamic_cast<fs::TmpFsSymlink*>(t)) {
          r->set_target(sl->target_);
        } else if (auto* sp = dynamic_cast<fs::TmpFsSpecialFile*>(t)) {
          r->set_rdev(sp->rdev_);
        } else {
          return absl::UnimplementedError(absl::StrCat(
              "save: ", KindName(*inode), " inodes cannot be saved yet"));
        }
        return absl::OkStatus();
      });
}

bool FsState::IsPseudoFs(const std::string& fstype) {
  return fstype == "proc" || fstype == "devtmpfs";
}

absl::StatusOr<uint64_t> FsState::SavePseudoInode(
    Saver& s, const std::shared_ptr<fs::Inode>& inode,
    const std::string& fstype, const std::string& path) {
  return s.Save<fs::Inode, pb::Inode>(
      inode.get(), s.state().mutable_inodes(), [&](pb::Inode* rec) {
        pb::PseudoInode* r = rec->mutable_pseudo();
        r->set_fstype(fstype);
        r->set_path(path);
        return absl::OkStatus();
      });
}

absl::StatusOr<std::shared_ptr<fs::Inode>> FsState::LoadPseudoInode(
    Loader& l, const pb::PseudoInode& r) {
  std::shared_ptr<fs::Inode> cur = l.pseudo_root(r.fstype());
  if (cur == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the loader was given no ", r.fstype(), " filesystem to load into"));
  }
  for (absl::string_view name : absl::StrSplit(r.path(), '/', absl::SkipEmpty())) {
    if (name == "." || name == "..") {
      return absl::InvalidArgumentError(absl::StrCat("path \"", r.path(), "\""));
    }
    std::shared_ptr<fs::Inode> next;
    int err = cur->Lookup(std::string(name), &next);
    if (err < 0) {
      return absl::NotFoundError(absl::StrCat(r.fstype(), " path \"", r.path(),
                                              "\": errno ", -err));
    }
    cur = std::move(next);
  }
  return cur;
}

absl::StatusOr<std::shared_ptr<fs::Inode>> FsState::LoadInode(Loader& l,
                                                              uint64_t id) {
  return l.Load<fs::Inode, pb::Inode>(
      id, l.state().inodes(), "inode",
      [&](const pb::Inode& rec) -> absl::StatusOr<std::shared_ptr<fs::Inode>> {
        if (rec.has_overlay()) return LoadOverlayInode(l, rec.overlay());
        if (rec.has_pseudo()) return LoadPseudoInode(l, rec.pseudo());
        if (!rec.has_tmpfs()) {
          return absl::InvalidArgumentError("inode of unknown kind");
        }
        const pb::TmpFsInode& r = rec.tmpfs();
        auto sbor = l.Load<fs::TmpFsSuperblock, pb::TmpFsSuperblock>(
            r.superblock(), l.state().tmpfs_superblocks(), "tmpfs superblock",
            [&](const pb::TmpFsSuperblock& sr)
                -> absl::StatusOr<std::shared_ptr<fs::TmpFsSuperblock>> {
              if (l.memfile() == nullptr) {
                return absl::FailedPreconditionError("no memory file to load into");
              }
              fs::TmpFsOptions opts;
              opts.dev = sr.dev();
              opts.size_limit = sr.max_pages() * kPage;
              opts.inode_limit = sr.max_inodes();
              auto sb = std::make_shared<fs::TmpFsSuperblock>(l.memfile(), opts);
              sb->next_ino_.store(sr.next_ino());
              return sb;
            });
        if (!sbor.ok()) return sbor.status();
        std::shared_ptr<fs::TmpFsSuperblock> sb = *sbor;
        if (sb == nullptr) return absl::InvalidArgumentError("no superblock");
        const uint64_t next_ino = sb->next_ino_.load();
        if (!sb->ReserveInode()) {
          return absl::ResourceExhaustedError("tmpfs inode limit reached");
        }
        // The constructors number inodes from the superblock's sequence:
        // point it at the saved number for this one construction (loads
        // run on one thread), then put the saved sequence back.
        sb->next_ino_.store(r.ino());
        std::shared_ptr<fs::TmpFsInode> t;
        switch (r.type()) {
          case S_IFDIR:
            t = std::make_shared<fs::TmpFsDirectory>(
                sb, r.perm(), r.uid(), r.gid(),
                std::weak_ptr<fs::TmpFsDirectory>());
            break;
          case S_IFREG:
            t = std::make_shared<fs::TmpFsRegularFile>(sb, r.perm(), r.uid(),
                                                       r.gid());
            break;
          case S_IFLNK:
            t = std::make_shared<fs::TmpFsSymlink>(sb, r.uid(), r.gid(),
                                                   r.target());
            break;
          case S_IFIFO:
          case S_IFCHR:
          case S_IFBLK:
          case S_IFSOCK:
            t = std::make_shared<fs::TmpFsSpecialFile>(
                sb, r.type(), r.perm(), r.uid(), r.gid(), r.rdev());
            break;
          default:
            sb->next_ino_.store(next_ino);
            sb->ReleaseInode();
            return absl::InvalidArgumentError(
                absl::StrCat("tmpfs inode of type ", r.type()));
        }
        sb->next_ino_.store(next_ino);
        {
          absl::MutexLock lock(&t->mu_);
          t->perm_ = r.perm() & 07777;
          t->nlink_ = r.nlink();
          t->atime_ = FromPb(r.atime());
          t->mtime_ = FromPb(r.mtime());
          t->ctime_ = FromPb(r.ctime());
        }
        if (auto* d = dynamic_cast<fs::TmpFsDirectory*>(t.get())) {
          // Children are loaded outside this directory's lock: a hard link
          // may lead back to an inode already loaded elsewhere.
          std::map<std::string, std::shared_ptr<fs::TmpFsInode>> entries;
          uint32_t subdirs = 0;
          auto self = std::static_pointer_cast<fs::TmpFsDirectory>(t);
          for (const pb::TmpFsDirEntry& e : r.entries()) {
            if (e.name().empty() || e.name() == "." || e.name() == ".." ||
                e.name().find('/') != std::string::npos ||
                e.name().size() > fs::kNameMax) {
              return absl::InvalidArgumentError(
                  absl::StrCat("bad directory entry name \"", e.name(), "\""));
            }
            ASSIGN_OR_RETURN(std::shared_ptr<fs::Inode> child,
                             LoadInode(l, e.inode()));
            auto tc = std::dynamic_pointer_cast<fs::TmpFsInode>(child);
            if (tc == nullptr || tc->sb_ != sb) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "entry \"", e.name(), "\" is not of this tmpfs"));
            }
            if (auto* cd = dynamic_cast<fs::TmpFsDirectory*>(tc.get())) {
              absl::MutexLock cl(&cd->mu_);
              if (!cd->parent_.expired()) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "directory \"", e.name(), "\" has two parents"));
              }
              cd->parent_ = self;
              subdirs++;
            }
            entries.emplace(e.name(), std::move(tc));
          }
          absl::MutexLock lock(&d->mu_);
          d->entries_ = std::move(entries);
          d->subdirs_ = subdirs;
          d->removed_ = r.removed();
        } else if (auto* f = dynamic_cast<fs::TmpFsRegularFile*>(t.get())) {
          absl::MutexLock lock(&f->data_mu_);
          f->size_ = r.size();
          f->seals_ = r.seals();
          for (const pb::PageRun& p : r.pages()) {
            if (p.count() == 0 || p.count() > (1ull << 40) / kPage) {
              return absl::InvalidArgumentError("bad page run");
            }
            const uint64_t len = p.count() * kPage;
            if (sb->ReservePages(p.count()) != p.count()) {
              return absl::ResourceExhaustedError("tmpfs size limit reached");
            }
            absl::StatusOr<uint64_t> off = l.memfile()->Allocate(len);
            if (!off.ok()) {
              sb->ReleasePages(p.count());
              return off.status();
            }
            for (uint64_t i = 0; i < p.count(); i++) {
              f->pages_[p.index() + i] = *off + i * kPage;
            }
            RETURN_IF_ERROR(Annotate(
                l.pages().LoadPages(p.memfile_offset(), len,
                                    l.memfile()->Internal(*off)),
                absl::StrCat("data of tmpfs inode ", r.ino())));
          }
        }
        return std::static_pointer_cast<fs::Inode>(t);
      });
}

// ---- overlay ----

absl::StatusOr<uint64_t> FsState::SaveOverlayFs(Saver& s, fs::OverlayFs& o) {
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
  ASSIGN_OR_RETURN(uint64_t fs_id, SaveOverlayFs(s, *o.fs_));
  r->set_fs(fs_id);
  // The path from the overlay's root, then a lookup along it to check
  // that it still leads here (not unlinked, not renamed away).
  std::vector<std::string> names;
  std::shared_ptr<fs::OverlayInode> cur =
      std::static_pointer_cast<fs::OverlayInode>(o.shared_from_this());
  while (cur != o.fs_->root_) {
    std::shared_ptr<fs::OverlayInode> parent;
    {
      absl::MutexLock lock(&cur->mu_);
      parent = cur->parent_;
      names.push_back(cur->name_);
    }
    if (parent == nullptr) {
      return absl::UnimplementedError(
          "save: an overlay file with no name (removed while open)");
    }
    cur = std::move(parent);
  }
  std::string path;
  std::shared_ptr<fs::Inode> walk = o.fs_->root_;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {
    absl::StrAppend(&path, "/", *it);
    std::shared_ptr<fs::Inode> next;
    if (walk->Lookup(*it, &next) < 0) {
      walk = nullptr;
      break;
    }
    walk = std::move(next);
  }
  if (walk.get() != &o) {
    return absl::UnimplementedError(absl::StrCat(
        "save: overlay file \"", path, "\" was removed while open"));
  }
  r->set_path(path.empty() ? "/" : path);
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

// ---- mounts and locations ----

absl::StatusOr<uint64_t> FsState::SaveMount(Saver& s, const fs::Vfs& vfs,
                                   const std::shared_ptr<fs::Mount>& m) {
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
  std::vector<std::shared_ptr<fs::Mount>> all;
  {
    absl::MutexLock lock(&vfs.mu_);
    all.push_back(vfs.root_mount_);
    for (const auto& [key, m] : vfs.mounts_) all.push_back(m);
    s.state().mutable_vfs()->set_next_mount_id(vfs.next_mount_id_);
  }
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
  absl::MutexLock lock(&vfs->mu_);
  vfs->next_mount_id_ = v.next_mount_id();
  return vfs;
}

absl::StatusOr<pb::Location> FsState::SaveLocation(Saver& s, const fs::Vfs& vfs,
                                                   const fs::Location& loc) {
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

// ---- pipes ----

absl::StatusOr<uint64_t> FsState::SavePipe(Saver& s,
                                           const std::shared_ptr<fs::Pipe>& p) {
  return s.Save<fs::Pipe, pb::Pipe>(
      p.get(), s.state().mutable_pipes(), [&](pb::Pipe* r) {
        absl::MutexLock lock(&p->mu_);
        std::string data;
        data.reserve(p->size_);
        bool first = true;
        for (const auto& c : p->chunks_) {
          const uint64_t skip = first ? p->front_off_ : 0;
          data.append(reinterpret_cast<const char*>(c.data()) + skip,
                      c.size() - skip);
          first = false;
        }
        r->set_data(std::move(data));
        r->set_capacity(p->capacity_);
        return absl::OkStatus();
      });
}

absl::StatusOr<std::shared_ptr<fs::Pipe>> FsState::LoadPipe(Loader& l,
                                                            uint64_t id) {
  return l.Load<fs::Pipe, pb::Pipe>(
      id, l.state().pipes(), "pipe",
      [&](const pb::Pipe& r) -> absl::StatusOr<std::shared_ptr<fs::Pipe>> {
        if (r.data().size() > r.capacity() ||
            r.capacity() > fs::Pipe::kMaxCapacity || r.capacity() == 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "pipe of capacity ", r.capacity(), " holding ", r.data().size()));
        }
        auto p = std::make_shared<fs::Pipe>();
        absl::MutexLock lock(&p->mu_);
        p->capacity_ = r.capacity();
        p->Append(reinterpret_cast<const uint8_t*>(r.data().data()),
                  r.data().size());
        return p;
      });
}

// ---- files ----

absl::StatusOr<uint64_t> FsState::SaveFile(Saver& s, const fs::Vfs& vfs,
                                           const std::shared_ptr<fs::File>& f) {
  return s.Save<fs::File, pb::File>(
      f.get(), s.state().mutable_files(), [&](pb::File* rec) -> absl::Status {
        // Before the InodeFile and HostFile cases, which would take a pty's
        // sides or a terminal's stdio for plain files (a /dev/ptmx opened
        // again is a new pair).
        if (dynamic_cast<fs::tty::TtyFile*>(f.get()) != nullptr) {
          return TtyState::SaveTtyFile(s, vfs, f, rec);
        }
        if (auto* in = dynamic_cast<fs::InodeFile*>(f.get())) {
          pb::InodeFile* r = rec->mutable_inode_file();
          const fs::Location& at = in->loc_;
          if (at.valid() && IsPseudoFs(at.mount->fstype)) {
            // A procfs or devfs file: its inode by its path, opened again
            // at load (a device's file, a procfs snapshot taken then).
            bool reachable = false;
            std::string path = vfs.PathOf(
                fs::Location{at.mount, at.mount->root}, at, &reachable);
            if (!reachable) {
              return absl::UnimplementedError(absl::StrCat(
                  "save: a ", at.mount->fstype, " file no longer at its path"));
            }
            RETURN_IF_ERROR(
                SavePseudoInode(s, in->inode_, at.mount->fstype, path).status());
          }
          ASSIGN_OR_RETURN(uint64_t inode, SaveInode(s, in->inode_));
          r->set_inode(inode);
          {
            absl::MutexLock lock(&in->mu_);
            r->set_flags(in->flags_);
            r->set_offset(in->offset_);
          }
          if (at.valid() && IsPseudoFs(at.mount->fstype)) {
            // Their files keep their own offsets (a procfs snapshot's).
            int64_t off = f->Seek(0, SEEK_CUR);
            r->set_offset(off > 0 ? off : 0);
          }
          const fs::Location& loc = in->loc_;
          if (loc.valid()) {
            bool reachable = false;
            if (InTree(vfs, loc.mount)) {
              vfs.PathOf(fs::Location{loc.mount, loc.mount->root}, loc,
                         &reachable);
            }
            if (reachable) {
              ASSIGN_OR_RETURN(*r->mutable_location(),
                               SaveLocation(s, vfs, loc));
            } else {
              // Unlinked while open, or never linked (memfd): shown as
              // "/NAME (deleted)" after the load too.
              r->set_detached(true);
              r->set_detached_name(loc.dentry->name_);
              r->set_detached_fstype(loc.mount->fstype);
            }
          }
          return absl::OkStatus();
        }
        if (auto* pe = dynamic_cast<fs::PipeEnd*>(f.get())) {
          pb::PipeEnd* r = rec->mutable_pipe_end();
          ASSIGN_OR_RETURN(uint64_t pipe, SavePipe(s, pe->pipe_ptr()));
          r->set_pipe(pipe);
          r->set_write_end(pe->write_end());
          r->set_flags(pe->StatusFlags() & (O_NONBLOCK | O_DIRECT));
          return absl::OkStatus();
        }
        if (auto* ev = dynamic_cast<fs::EventFd*>(f.get())) {
          pb::EventFd* r = rec->mutable_eventfd();
          r->set_count(ev->value());
          r->set_semaphore(ev->semaphore_);
          r->set_nonblock(ev->nonblock_.load());
          return absl::OkStatus();
        }
        if (auto* tf = dynamic_cast<fs::TimerFd*>(f.get())) {
          pb::TimerFd* r = rec->mutable_timerfd();
          fs::TimerFd::State& st = *tf->state_;
          r->set_clock(st.clock_);
          r->set_nonblock(tf->nonblock_.load());
          absl::MutexLock lock(&st.mu_);
          if (st.next_ns_ != 0) {
            r->set_armed(true);
            r->set_remaining_ns(
                std::max<int64_t>(st.next_ns_ - waiter::ClockNowNs(st.clock_), 1));
          }
          r->set_interval_ns(st.interval_ns_);
          r->set_ticks(st.ticks_);
          return absl::OkStatus();
        }
        if (auto* ep = dynamic_cast<fs::EpollFile*>(f.get())) {
          pb::Epoll* r = rec->mutable_epoll();
          r->set_nonblock(ep->nonblock_.load());
          struct Watched {
            std::shared_ptr<fs::File> file;
            pb::EpollInterest rec;
          };
          std::vector<Watched> watched;
          {
            absl::MutexLock lock(&ep->mu_);
            absl::MutexLock rl(&ep->ready_mu_);
            for (const auto& [key, i] : ep->interests_) {
              auto file = i->file.lock();
              if (file == nullptr) continue;  // dropped at the next look anyway
              Watched w{std::move(file), {}};
              w.rec.set_fd(i->fd);
              w.rec.set_events(i->events.load());
              w.rec.set_data(i->data);
              w.rec.set_disabled(i->disabled);
              watched.push_back(std::move(w));
            }
          }
          // Outside the epoll's locks: a watched file may be an epoll too.
          for (Watched& w : watched) {
            ASSIGN_OR_RETURN(uint64_t id, SaveFile(s, vfs, w.file));
            w.rec.set_file(id);
            *r->add_interests() = std::move(w.rec);
          }
          return absl::OkStatus();
        }
        if (auto* in = dynamic_cast<fs::InotifyFile*>(f.get())) {
          pb::Inotify* r = rec->mutable_inotify();
          r->set_nonblock(in->nonblock_.load());
          int last_wd = 0;
          for (const auto& w : in->Watches(&last_wd)) {
            ASSIGN_OR_RETURN(uint64_t inode, SaveInode(s, w.inode));
            pb::InotifyWatch* pw = r->add_watches();
            pw->set_wd(w.wd);
            pw->set_mask(w.mask);
            pw->set_inode(inode);
          }
          r->set_last_wd(last_wd);
          absl::MutexLock lock(&in->mu_);
          for (const auto& e : in->events_) {
            pb::InotifyEvent* pe = r->add_events();
            pe->set_wd(e.wd);
            pe->set_mask(e.mask);
            pe->set_cookie(e.cookie);
            pe->set_name(e.name);
          }
          r->set_overflow_queued(in->overflow_queued_);
          return absl::OkStatus();
        }
        if (auto* sf = dynamic_cast<kernel::SignalFd*>(f.get())) {
          std::shared_ptr<kernel::ThreadGroup> owner = sf->owner_.lock();
          if (owner == nullptr) {
            return absl::UnimplementedError(
                "save: a signalfd whose process has exited");
          }
          pb::SignalFd* r = rec->mutable_signalfd();
          r->set_mask(sf->mask());
          r->set_nonblock(sf->nonblock_.load());
          r->set_owner_tgid(owner->tgid());
          return absl::OkStatus();
        }
        if (auto* us = dynamic_cast<socket::UnixSocket*>(f.get())) {
          return SocketState::SaveUnixSocket(s, vfs, *us,
                                             rec->mutable_unix_socket());
        }
        if (auto* h = dynamic_cast<fs::HostFile*>(f.get())) {
          if (h->inherited_fd() < 0) {
            return absl::UnimplementedError(
                "save: a host file that is not inherited stdio (console, "
                "procfs)");
          }
          pb::HostFile* r = rec->mutable_host_file();
          r->set_host_fd(h->inherited_fd());
          r->set_flags(h->StatusFlags() & O_NONBLOCK);
          return absl::OkStatus();
        }
        return absl::UnimplementedError(
            absl::StrCat("save: ", KindName(*f), " files cannot be saved yet"));
      });
}

absl::StatusOr<std::shared_ptr<fs::File>> FsState::LoadPseudoFile(
    Loader& l, fs::Vfs& vfs, const pb::InodeFile& r, fs::Location loc) {
  if (!loc.valid()) {
    return absl::InvalidArgumentError("a pseudo-filesystem file without a path");
  }
  // Opened again, as open(2) would: the device's or procfs's own file.
  std::shared_ptr<fs::File> f;
  int err = loc.dentry->inode()->Open(r.flags() & ~(O_CREAT | O_EXCL | O_TRUNC),
                                      &f);
  if (err < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "reopening \"", r.location().path(), "\": errno ", -err));
  }
  if (auto* in = dynamic_cast<fs::InodeFile*>(f.get())) {
    in->set_location(std::move(loc), &vfs);
  }
  // Devices ignore offsets; a procfs file reads on from where it was, in
  // the text generated now (the process's state at load).
  if (r.offset() > 0) f->Seek(r.offset(), SEEK_SET);
  return f;
}

absl::StatusOr<std::shared_ptr<fs::File>> FsState::LoadFile(Loader& l,
                                                            fs::Vfs& vfs,
                                                            uint64_t id) {
  return l.Load<fs::File, pb::File>(
      id, l.state().files(), "file",
      [&](const pb::File& rec) -> absl::StatusOr<std::shared_ptr<fs::File>> {
        switch (rec.kind_case()) {
          case pb::File::kInodeFile: {
            const pb::InodeFile& r = rec.inode_file();
            ASSIGN_OR_RETURN(std::shared_ptr<fs::Inode> inode,
                             LoadInode(l, r.inode()));
            if (inode == nullptr) return absl::InvalidArgumentError("no inode");
            fs::Location loc;
            if (r.detached()) {
              loc = fs::Vfs::Detached(inode, r.detached_name(),
                                      r.detached_fstype());
            } else if (r.has_location()) {
              ASSIGN_OR_RETURN(loc, LoadLocation(l, vfs, r.location()));
              // (A procfs lookup makes a new inode object each time.)
              if (loc.dentry->inode() != inode &&
                  !l.state().inodes(static_cast<int>(r.inode()) - 1).has_pseudo()) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "\"", r.location().path(), "\" names another inode"));
              }
            }
            if (l.state().inodes(static_cast<int>(r.inode()) - 1).has_pseudo()) {
              return LoadPseudoFile(l, vfs, r, std::move(loc));
            }
            auto f = std::make_shared<fs::InodeFile>(inode, r.flags());
            // Detached names belong to no tree: no Vfs to tell of events.
            if (loc.valid()) {
              f->set_location(std::move(loc), r.detached() ? nullptr : &vfs);
            }
            absl::MutexLock lock(&f->mu_);
            f->offset_ = r.offset();
            return std::static_pointer_cast<fs::File>(f);
          }
          case pb::File::kPipeEnd: {
            const pb::PipeEnd& r = rec.pipe_end();
            ASSIGN_OR_RETURN(std::shared_ptr<fs::Pipe> pipe,
                             LoadPipe(l, r.pipe()));
            if (pipe == nullptr) return absl::InvalidArgumentError("no pipe");
            return std::static_pointer_cast<fs::File>(
                std::make_shared<fs::PipeEnd>(pipe, r.write_end(), r.flags()));
          }
          case pb::File::kEventfd: {
            const pb::EventFd& r = rec.eventfd();
            if (r.count() > fs::EventFd::kMax) {
              return absl::InvalidArgumentError("eventfd counter too large");
            }
            return std::static_pointer_cast<fs::File>(
                std::make_shared<fs::EventFd>(
                    r.count(), (r.semaphore() ? EFD_SEMAPHORE : 0) |
                                   (r.nonblock() ? EFD_NONBLOCK : 0)));
          }
          case pb::File::kTimerfd: {
            const pb::TimerFd& r = rec.timerfd();
            std::shared_ptr<fs::TimerFd> tf;
            int64_t err = fs::TimerFd::Create(
                r.clock(), r.nonblock() ? TFD_NONBLOCK : 0, &tf);
            if (err < 0) {
              return absl::InvalidArgumentError(
                  absl::StrCat("timerfd on clock ", r.clock(), ": errno ", -err));
            }
            if (r.interval_ns() < 0 || (r.armed() && r.remaining_ns() < 1)) {
              return absl::InvalidArgumentError("timerfd with a bad time");
            }
            fs::TimerFd::State& st = *tf->state_;
            absl::MutexLock lock(&st.mu_);
            st.interval_ns_ = r.interval_ns();
            st.ticks_ = r.ticks();
            if (r.armed()) {
              st.next_ns_ = waiter::ClockNowNs(st.clock_) + r.remaining_ns();
              waiter::TimerThread::Get().Arm(tf->state_, st.clock_, st.next_ns_);
            }
            return std::static_pointer_cast<fs::File>(tf);
          }
          case pb::File::kEpoll: {
            const pb::Epoll& r = rec.epoll();
            auto ep = std::make_shared<fs::EpollFile>();
            ep->nonblock_.store(r.nonblock());
            for (const pb::EpollInterest& i : r.interests()) {
              ASSIGN_OR_RETURN(std::shared_ptr<fs::File> file,
                               LoadFile(l, vfs, i.file()));
              if (file == nullptr) {
                return absl::InvalidArgumentError("epoll interest without a file");
              }
              struct epoll_event ev = {};
              ev.events = i.events();
              ev.data.u64 = i.data();
              int64_t err = ep->Ctl(EPOLL_CTL_ADD, i.fd(), file, ev);
              if (err < 0) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "epoll interest in fd ", i.fd(), ": errno ", -err));
              }
              if (i.disabled()) {
                absl::MutexLock lock(&ep->mu_);
                absl::MutexLock rl(&ep->ready_mu_);
                auto it = ep->interests_.find({file.get(), i.fd()});
                if (it != ep->interests_.end()) {
                  fs::EpollFile::Interest* in = it->second.get();
                  in->disabled = true;
                  if (in->queued) {
                    in->queued = false;
                    ep->ready_.erase(std::remove(ep->ready_.begin(),
                                                 ep->ready_.end(), in),
                                     ep->ready_.end());
                  }
                }
              }
            }
            return std::static_pointer_cast<fs::File>(ep);
          }
          case pb::File::kInotify: {
            const pb::Inotify& r = rec.inotify();
            auto in = std::make_shared<fs::InotifyFile>(r.nonblock());
            std::vector<fs::InotifyFile::WatchState> watches;
            int last = 0;
            for (const pb::InotifyWatch& w : r.watches()) {
              ASSIGN_OR_RETURN(std::shared_ptr<fs::Inode> inode,
                               LoadInode(l, w.inode()));
              if (inode == nullptr || w.wd() <= last || w.wd() > r.last_wd()) {
                return absl::InvalidArgumentError(
                    absl::StrCat("inotify watch ", w.wd()));
              }
              last = w.wd();
              watches.push_back({w.wd(), w.mask(), std::move(inode)});
            }
            if (static_cast<size_t>(r.events_size()) >
                fs::InotifyFile::kMaxQueuedEvents + 1) {
              return absl::InvalidArgumentError("inotify queue too long");
            }
            in->RestoreWatches(watches, r.last_wd());
            absl::MutexLock lock(&in->mu_);
            for (const pb::InotifyEvent& e : r.events()) {
              fs::InotifyFile::Event ev{e.wd(), e.mask(), e.cookie(), e.name()};
              in->bytes_ += ev.size();
              in->events_.push_back(std::move(ev));
            }
            in->overflow_queued_ = r.overflow_queued();
            return std::static_pointer_cast<fs::File>(in);
          }
          case pb::File::kSignalfd: {
            // Its process was made first (KernelState::NewGroup): found by
            // its tgid among the image's groups.
            const pb::SignalFd& r = rec.signalfd();
            const auto& groups = l.state().thread_groups();
            uint64_t gid = 0;
            for (int i = 0; i < groups.size() && gid == 0; i++) {
              if (groups.Get(i).tgid() == r.owner_tgid()) gid = i + 1;
            }
            ASSIGN_OR_RETURN(
                std::shared_ptr<kernel::ThreadGroup> owner,
                (l.Load<kernel::ThreadGroup, pb::ThreadGroup>(
                    gid, groups, "thread group",
                    [](const pb::ThreadGroup&)
                        -> absl::StatusOr<std::shared_ptr<kernel::ThreadGroup>> {
                      return absl::FailedPreconditionError(
                          "a signalfd's process is loaded with the kernel "
                          "(KernelState::LoadKernel)");
                    })));
            if (owner == nullptr) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "signalfd of process ", r.owner_tgid(), ", not in the image"));
            }
            return std::static_pointer_cast<fs::File>(
                std::make_shared<kernel::SignalFd>(
                    std::move(owner), r.mask(), r.nonblock() ? SFD_NONBLOCK : 0));
          }
          case pb::File::kPtyFile:
            return TtyState::LoadPtyFile(l, vfs, rec.pty_file());
          case pb::File::kConsoleFile:
            return TtyState::LoadConsoleFile(l, rec.console_file());
          case pb::File::kUnixSocket:
            return SocketState::LoadUnixSocket(l, vfs, rec.unix_socket());
          case pb::File::kHostFile: {
            const pb::HostFile& r = rec.host_file();
            const int fd = l.host_fd(r.host_fd());
            if (fd < 0) {
              return absl::FailedPreconditionError(absl::StrCat(
                  "host descriptor ", r.host_fd(), " was not handed in"));
            }
            UniqueFd d(fcntl(fd, F_DUPFD_CLOEXEC, 3));
            if (!d.valid()) {
              return ErrnoStatus(absl::StrCat("dup of host fd ", fd), errno);
            }
            auto h = std::make_shared<fs::HostFile>(std::move(d));
            h->set_inherited_fd(r.host_fd());
            h->SetStatusFlags(r.flags());
            return std::static_pointer_cast<fs::File>(h);
          }
          default:
            return absl::InvalidArgumentError("file of unknown kind");
        }
      });
}

// ---- descriptor tables and fs contexts ----

absl::StatusOr<uint64_t> FsState::SaveFdTable(
    Saver& s, const fs::Vfs& vfs, const std::shared_ptr<fs::FdTable>& t) {
  return s.Save<fs::FdTable, pb::FdTable>(
      t.get(), s.state().mutable_fd_tables(), [&](pb::FdTable* r) {
        std::vector<std::pair<int, fs::FdTable::Entry>> open;
        {
          absl::MutexLock lock(&t->mu_);
          r->set_max_fds(t->max_fds_);
          for (size_t fd = 0; fd < t->fds_.size(); fd++) {
            if (t->fds_[fd].file != nullptr) open.emplace_back(fd, t->fds_[fd]);
          }
        }
        for (const auto& [fd, e] : open) {
          ASSIGN_OR_RETURN(uint64_t file, SaveFile(s, vfs, e.file));
          pb::FdEntry* fe = r->add_fds();
          fe->set_fd(fd);
          fe->set_file(file);
          fe->set_cloexec(e.cloexec);
        }
        return absl::OkStatus();
      });
}

absl::StatusOr<std::shared_ptr<fs::FdTable>> FsState::LoadFdTable(
    Loader& l, fs::Vfs& vfs, uint64_t id) {
  return l.Load<fs::FdTable, pb::FdTable>(
      id, l.state().fd_tables(), "fd table",
      [&](const pb::FdTable& r)
          -> absl::StatusOr<std::shared_ptr<fs::FdTable>> {
        auto t = std::make_shared<fs::FdTable>(r.max_fds());
        for (const pb::FdEntry& e : r.fds()) {
          ASSIGN_OR_RETURN(std::shared_ptr<fs::File> f,
                           LoadFile(l, vfs, e.file()));
          if (f == nullptr || e.fd() < 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("descriptor ", e.fd(), " without a file"));
          }
          int64_t got = t->InstallAt(e.fd(), std::move(f), e.cloexec());
          if (got != e.fd()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "installing descriptor ", e.fd(), ": errno ", -got));
          }
        }
        return t;
      });
}

absl::StatusOr<uint64_t> FsState::SaveFsContext(
    Saver& s, const fs::Vfs& vfs, const std::shared_ptr<fs::FsContext>& c) {
  return s.Save<fs::FsContext, pb::FsContext>(
      c.get(), s.state().mutable_fs_contexts(), [&](pb::FsContext* r) {
        ASSIGN_OR_RETURN(*r->mutable_root(), SaveLocation(s, vfs, c->root()));
        ASSIGN_OR_RETURN(*r->mutable_cwd(), SaveLocation(s, vfs, c->cwd()));
        r->set_umask(c->umask());
        return absl::OkStatus();
      });
}

absl::StatusOr<std::shared_ptr<fs::FsContext>> FsState::LoadFsContext(
    Loader& l, fs::Vfs& vfs, uint64_t id) {
  return l.Load<fs::FsContext, pb::FsContext>(
      id, l.state().fs_contexts(), "fs context",
      [&](const pb::FsContext& r)
          -> absl::StatusOr<std::shared_ptr<fs::FsContext>> {
        ASSIGN_OR_RETURN(fs::Location root, LoadLocation(l, vfs, r.root()));
        ASSIGN_OR_RETURN(fs::Location cwd, LoadLocation(l, vfs, r.cwd()));
        if (!root.valid() || !cwd.valid()) {
          return absl::InvalidArgumentError("no root or working directory");
        }
        auto c = std::make_shared<fs::FsContext>(root, cwd);
        c->exchange_umask(r.umask());
        return c;
      });
}

// ---- locks ----

absl::Status FsState::SaveLocks(Saver& s, fs::LockTable& table) {
  struct Entry {
    std::shared_ptr<fs::Inode> inode;
    std::vector<fs::RecordLock> records;
    std::vector<fs::LockTable::FlockLock> flocks;
  };
  std::vector<Entry> entries;
  {
    absl::MutexLock lock(&table.mu_);
    for (const auto& [key, e] : table.inodes_) {
      auto inode = e.inode.lock();
      if (inode == nullptr) continue;  // stale: dropped at the next use
      if (e.records.empty() && e.flocks.empty()) continue;  // waiters only
      entries.push_back({std::move(inode), e.records, e.flocks});
    }
  }
  auto* files = s.state().mutable_files();
  auto* tables = s.state().mutable_fd_tables();
  for (const Entry& e : entries) {
    pb::InodeLocks* r = s.state().add_locks();
    ASSIGN_OR_RETURN(uint64_t inode, SaveInode(s, e.inode));
    r->set_inode(inode);
    for (const fs::RecordLock& lk : e.records) {
      const bool ofd = lk.owner.kind == fs::RecordLockOwner::Kind::kOfd;
      const void* owner = ofd ? static_cast<const void*>(
                                    reinterpret_cast<const fs::File*>(lk.owner.id))
                              : static_cast<const void*>(
                                    reinterpret_cast<const fs::FdTable*>(lk.owner.id));
      const uint64_t id = ofd ? s.IdOf(files, owner) : s.IdOf(tables, owner);
      if (id == 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "save: a ", ofd ? "file description" : "descriptor table",
            " that owns a lock was not saved before the locks"));
      }
      pb::RecordLock* rl = r->add_records();
      rl->set_type(lk.type);
      rl->set_start(lk.start);
      rl->set_end(lk.end);
      rl->set_ofd(ofd);
      rl->set_owner(id);
      rl->set_pid(lk.owner.pid);
    }
    for (const auto& fl : e.flocks) {
      const uint64_t id =
          s.IdOf(files, reinterpret_cast<const fs::File*>(fl.file));
      if (id == 0) {
        return absl::FailedPreconditionError(
            "save: a file description that owns a flock was not saved "
            "before the locks");
      }
      pb::FlockLock* f = r->add_flocks();
      f->set_file(id);
      f->set_type(fl.type);
    }
  }
  return absl::OkStatus();
}

absl::Status FsState::LoadLocks(Loader& l, fs::Vfs& vfs, fs::LockTable& table) {
  auto lock_type_ok = [](int t) { return t == F_RDLCK || t == F_WRLCK; };
  for (const pb::InodeLocks& r : l.state().locks()) {
    ASSIGN_OR_RETURN(std::shared_ptr<fs::Inode> inode, LoadInode(l, r.inode()));
    if (inode == nullptr) return absl::InvalidArgumentError("locks of no inode");
    for (const pb::RecordLock& rl : r.records()) {
      if (!lock_type_ok(rl.type()) || rl.start() < 0 || rl.end() < rl.start()) {
        return absl::InvalidArgumentError("malformed record lock");
      }
      fs::RecordLock lk;
      lk.type = rl.type();
      lk.start = rl.start();
      lk.end = rl.end();
      if (rl.ofd()) {
        ASSIGN_OR_RETURN(std::shared_ptr<fs::File> f,
                         LoadFile(l, vfs, rl.owner()));
        if (f == nullptr) return absl::InvalidArgumentError("lock without owner");
        lk.owner = fs::RecordLockOwner::Ofd(f.get());
      } else {
        ASSIGN_OR_RETURN(std::shared_ptr<fs::FdTable> t,
                         LoadFdTable(l, vfs, rl.owner()));
        if (t == nullptr) return absl::InvalidArgumentError("lock without owner");
        lk.owner = fs::RecordLockOwner::Posix(t.get(), rl.pid());
      }
      // The saved locks coexisted, so none conflicts with another.
      int err = table.SetRecord(inode, lk, nullptr);
      if (err < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("setting a saved record lock: errno ", -err));
      }
    }
    for (const pb::FlockLock& fl : r.flocks()) {
      if (!lock_type_ok(fl.type())) {
        return absl::InvalidArgumentError("malformed flock");
      }
      ASSIGN_OR_RETURN(std::shared_ptr<fs::File> f, LoadFile(l, vfs, fl.file()));
      if (f == nullptr) return absl::InvalidArgumentError("flock without owner");
      int err = table.Flock(inode, f.get(), fl.type(), nullptr);
      if (err < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("setting a saved flock: errno ", -err));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace sandboxd::state
