// FsState: tmpfs superblocks and inodes (data in the memory file), and the
// pseudo-filesystem (procfs, devfs) inodes saved by path.
#include <string.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "sentry/fs/hostfs.h"
#include "sentry/fs/overlay.h"
#include "sentry/fs/tmpfs.h"
#include "sentry/mm/memory_file.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/kind_name.h"
#include "sentry/state/saved_size.h"

namespace sandboxd::state {
namespace {

constexpr uint64_t kPage = mm::kPageSize;

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

absl::StatusOr<uint64_t> FsState::SaveSuperblock(
    Saver& s, const std::shared_ptr<fs::TmpFsSuperblock>& sb) {
  SBX_SAVED_SIZE(fs::TmpFsSuperblock, 64);
  SBX_SAVED_SIZE(fs::TmpFsOptions, 40);
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
  SBX_SAVED_SIZE(fs::Inode, 24);
  SBX_SAVED_SIZE(fs::TmpFsInode, 128);
  SBX_SAVED_SIZE(fs::TmpFsDirectory, 200);
  SBX_SAVED_SIZE(fs::TmpFsRegularFile, 208);
  SBX_SAVED_SIZE(fs::TmpFsSymlink, 160);
  // A FIFO's fifo_ is linked to its pipe by the loaded ends (LinkFifo).
  SBX_SAVED_SIZE(fs::TmpFsSpecialFile, 144);
  return s.Save<fs::Inode, pb::Inode>(
      inode.get(), s.state().mutable_inodes(), [&](pb::Inode* rec) {
        if (auto* o = dynamic_cast<fs::OverlayInode*>(inode.get())) {
          return SaveOverlayInode(s, *o, rec->mutable_overlay());
        }
        if (fs::hostfs::IsHostInode(*inode)) {
          std::string label, path;
          if (!fs::hostfs::PathOf(*inode, &label, &path)) {
            return absl::UnimplementedError(
                "save: a bind-mounted file removed or replaced on the host "
                "while in use");
          }
          if (label.empty()) {
            return absl::UnimplementedError(absl::StrCat(
                "save: a rootfs file \"", path, "\" outside its overlay"));
          }
          rec->mutable_host()->set_label(label);
          rec->mutable_host()->set_path(path);
          if (path == "/") {
            for (const fs::hostfs::OwnerRecord& o : fs::hostfs::Owners(*inode)) {
              pb::HostOwnerRecord* r = rec->mutable_host()->add_owners();
              r->set_dev(o.dev);
              r->set_ino(o.ino);
              r->set_uid(o.uid);
              r->set_gid(o.gid);
            }
          }
          return absl::OkStatus();
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
        if (rec.has_host()) {
          const pb::HostInode& h = rec.host();
          std::shared_ptr<fs::Inode> cur = l.host_root(h.label());
          if (cur == nullptr) {
            return absl::FailedPreconditionError(absl::StrCat(
                "the bind mount on ", h.label(), " was not handed in"));
          }
          for (absl::string_view name :
               absl::StrSplit(h.path(), '/', absl::SkipEmpty())) {
            std::shared_ptr<fs::Inode> next;
            if (int err = cur->Lookup(std::string(name), &next); err < 0) {
              return absl::NotFoundError(absl::StrCat(
                  "bind mount on ", h.label(), ": \"", h.path(), "\": ",
                  strerror(-err)));
            }
            cur = std::move(next);
          }
          if (h.owners_size() > 0) {
            std::vector<fs::hostfs::OwnerRecord> owners;
            owners.reserve(h.owners_size());
            for (const pb::HostOwnerRecord& r : h.owners()) {
              owners.push_back({r.dev(), r.ino(), r.uid(), r.gid()});
            }
            fs::hostfs::AddOwners(*cur, owners);
          }
          return cur;
        }
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
                FillPages(l.pages(), l.memfile(), p.memfile_offset(), len,
                          *off),
                absl::StrCat("data of tmpfs inode ", r.ino())));
          }
        }
        return std::static_pointer_cast<fs::Inode>(t);
      });
}

}  // namespace sandboxd::state
