#include "sentry/fs/vfs.h"

#include "sentry/fs/credentials.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/sysmacros.h>

#include <atomic>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sentry/fs/file.h"
#include "sentry/fs/inotify.h"

namespace sandboxd::fs {

// ---------------------------------------------------------------------------
// Inode defaults

int Inode::StatFs(struct statfs* out) {
  *out = {};
  out->f_type = 0x01021994;  // TMPFS_MAGIC: an in-memory filesystem
  out->f_bsize = 4096;
  out->f_namelen = kNameMax;
  out->f_frsize = 4096;
  return 0;
}

int Inode::Open(int flags, std::shared_ptr<File>* out) {
  *out = std::make_shared<InodeFile>(shared_from_this(), flags);
  return 0;
}

uint8_t DirentType(uint32_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return DT_REG;
    case S_IFDIR: return DT_DIR;
    case S_IFLNK: return DT_LNK;
    case S_IFCHR: return DT_CHR;
    case S_IFBLK: return DT_BLK;
    case S_IFIFO: return DT_FIFO;
    case S_IFSOCK: return DT_SOCK;
    default: return DT_UNKNOWN;
  }
}

uint64_t NextInodeNumber() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

// ---------------------------------------------------------------------------
// Vfs

Vfs::Vfs(std::shared_ptr<Inode> root, std::string fstype, std::string source,
         bool read_only) {
  root_mount_ = std::make_shared<Mount>();
  root_mount_->root = std::make_shared<Dentry>(std::move(root), "", nullptr);
  root_mount_->fstype = std::move(fstype);
  root_mount_->source = std::move(source);
  root_mount_->read_only = read_only;
  root_mount_->id = next_mount_id_++;
}

Location Vfs::Root() const { return Location{root_mount_, root_mount_->root}; }

int Vfs::MountAt(const Location& where, std::shared_ptr<Inode> fs_root,
                 std::string fstype, std::string source, bool read_only) {
  // A directory on a directory, or (a single-file bind mount) a
  // non-directory on a non-directory, as Linux allows.
  const bool dir_on = where.inode().Type() == S_IFDIR;
  if (dir_on != (fs_root->Type() == S_IFDIR)) {
    return dir_on ? -ENOTDIR : -EISDIR;
  }
  auto m = std::make_shared<Mount>();
  m->root = std::make_shared<Dentry>(std::move(fs_root), "", nullptr);
  m->parent = where.mount;
  m->mountpoint = where.dentry;
  m->fstype = std::move(fstype);
  m->source = std::move(source);
  m->read_only = read_only;
  absl::MutexLock l(&mu_);
  m->id = next_mount_id_++;
  // A new mount on a mountpoint stacks on top of what is mounted there.
  Location top = MountedOn(where);
  m->parent = top.mount;
  m->mountpoint = top.dentry;
  top.dentry->mounts_here_++;
  mounts_[{top.mount.get(), top.dentry.get()}] = m;
  return 0;
}

int Vfs::Unmount(Location where, bool detach) {
  absl::MutexLock l(&mu_);
  if (where.dentry != where.mount->root) return -EINVAL;
  if (where.mount == root_mount_) return -EBUSY;
  std::vector<std::shared_ptr<Mount>> doomed{where.mount};
  for (size_t i = 0; i < doomed.size(); i++) {
    for (const auto& [key, m] : mounts_) {
      if (m->parent == doomed[i]) {
        if (!detach) return -EBUSY;
        doomed.push_back(m);
      }
    }
  }
  // References to the mount: `where`, mounts_'s entry and doomed[0]; any
  // more is a user (a Location in an open file, a cwd, a root).
  if (!detach && where.mount.use_count() > 3) return -EBUSY;
  for (auto it = doomed.rbegin(); it != doomed.rend(); ++it) {
    const Mount& m = **it;
    m.mountpoint->mounts_here_--;
    mounts_.erase({m.parent.get(), m.mountpoint.get()});
  }
  return 0;
}

Location Vfs::MountedOn(const Location& loc) const {
  Location cur = loc;
  for (;;) {
    auto it = mounts_.find({cur.mount.get(), cur.dentry.get()});
    if (it == mounts_.end()) return cur;
    cur = Location{it->second, it->second->root};
  }
}

int Vfs::Step(const Location& root, const Location& cur,
              const std::string& name, Location* out) {
  if (name == "..") {
    absl::MutexLock l(&mu_);
    Location c = cur;
    if (c == root) {
      *out = c;
      return 0;
    }
    while (c.dentry == c.mount->root && c.mount->parent != nullptr) {
      c = Location{c.mount->parent, c.mount->mountpoint};
      if (c == root) {
        *out = MountedOn(c);
        return 0;
      }
    }
    if (c.dentry->parent_ != nullptr) c.dentry = c.dentry->parent_;
    *out = MountedOn(c);
    return 0;
  }
  if (name.size() > kNameMax) return -ENAMETOOLONG;
  // Directories whose entries come and go behind the VFS's back (devpts, procfs)
  // are asked every time; their dentries are replaced when stale.
  const bool dynamic = !cur.inode().CacheLookups();
  if (!dynamic) {
    absl::MutexLock l(&mu_);
    auto it = cur.dentry->children_.find(name);
    if (it != cur.dentry->children_.end()) {
      *out = MountedOn(Location{cur.mount, it->second});
      return 0;
    }
  }
  std::shared_ptr<Inode> child;
  int r = cur.inode().Lookup(name, &child);
  if ((r == -EMFILE || r == -ENFILE) && !dynamic) {
    // The host's descriptors: the cache of files looked up before holds
    // them (README.md, "Host descriptors").
    size_t pruned;
    {
      absl::MutexLock l(&mu_);
      pruned = PruneUnusedLocked();
    }
    if (pruned != 0) r = cur.inode().Lookup(name, &child);
  }
  if (r < 0) {
    if (dynamic) {
      absl::MutexLock l(&mu_);
      auto it = cur.dentry->children_.find(name);
      if (it != cur.dentry->children_.end() && it->second->mounts_here_ == 0) {
        cur.dentry->children_.erase(it);
      }
    }
    return r;
  }
  absl::MutexLock l(&mu_);
  auto& slot = cur.dentry->children_[name];
  if (slot == nullptr || slot->inode() != child) {
    if (slot == nullptr || (dynamic && slot->mounts_here_ == 0)) {
      slot = std::make_shared<Dentry>(child, name, cur.dentry);
    }
  }
  *out = MountedOn(Location{cur.mount, slot});
  return 0;
}

size_t Vfs::PruneUnusedLocked() {
  size_t n = 0;
  std::function<void(Dentry&)> prune = [&](Dentry& d) {
    for (auto it = d.children_.begin(); it != d.children_.end();) {
      Dentry& c = *it->second;
      prune(c);
      if (it->second.use_count() == 1 && c.children_.empty() &&
          c.mounts_here_ == 0 && c.inode_.use_count() == 1) {
        it = d.children_.erase(it);
        n++;
      } else {
        ++it;
      }
    }
  };
  if (root_mount_ != nullptr && root_mount_->root != nullptr) {
    prune(*root_mount_->root);
  }
  for (const auto& [key, m] : mounts_) {
    if (m->root != nullptr) prune(*m->root);
  }
  return n;
}

int Vfs::Lookup(const Location& dir, const std::string& name, Location* out) {
  if (dir.inode().Type() != S_IFDIR) return -ENOTDIR;
  Location root = Root();
  return Step(root, dir, name, out);
}

namespace {

// Splits a path into components; records whether it ended in '/'.
std::vector<std::string> Components(const std::string& path,
                                    bool* trailing_slash) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') i++;
    size_t j = i;
    while (j < path.size() && path[j] != '/') j++;
    if (j > i) parts.push_back(path.substr(i, j - i));
    i = j;
  }
  *trailing_slash = !path.empty() && path.back() == '/';
  return parts;
}

}  // namespace

int Vfs::Walk(const FsContext& ctx, Location cur, const std::string& path,
              bool follow_last, int* symlinks, Location* out) {
  bool trailing;
  std::vector<std::string> parts = Components(path, &trailing);
  if (trailing) follow_last = true;
  const Location root = ctx.root();
  if (!path.empty() && path[0] == '/') cur = root;
  for (size_t i = 0; i < parts.size(); i++) {
    const std::string& name = parts[i];
    if (cur.inode().Type() != S_IFDIR) return -ENOTDIR;
    // may_lookup: search permission on every directory walked through.
    if (const Credentials* c = CurrentCredentials(); c != nullptr) {
      int r = CheckInodePermission(*c, cur.inode(), kMayExec);
      if (r < 0) return r;
    }
    if (name == ".") continue;
    Location next;
    int r = Step(root, cur, name, &next);
    if (r < 0) return r;
    bool last = i + 1 == parts.size();
    if (next.inode().Type() == S_IFLNK && (!last || follow_last)) {
      if (++*symlinks > kMaxSymlinks) return -ELOOP;
      Location magic;
      r = next.inode().FollowMagicLink(&magic);
      if (r == 0) {
        cur = magic;
        continue;
      }
      if (r != kNotMagicLink) return r;
      std::string target;
      r = next.inode().Readlink(&target);
      if (r < 0) return r;
      if (target.empty()) return -ENOENT;
      Location resolved;
      r = Walk(ctx, cur, target, true, symlinks, &resolved);
      if (r < 0) return r;
      next = resolved;
    }
    cur = next;
  }
  if (trailing && cur.inode().Type() != S_IFDIR) return -ENOTDIR;
  *out = cur;
  return 0;
}

int Vfs::Resolve(const FsContext& ctx, const Location& start,
                 const std::string& path, bool follow_last, Location* out) {
  if (path.empty()) return -ENOENT;
  if (path.size() >= kPathMax) return -ENAMETOOLONG;
  int symlinks = 0;
  return Walk(ctx, start, path, follow_last, &symlinks, out);
}

int Vfs::ResolveParent(const FsContext& ctx, const Location& start,
                       const std::string& path, Location* parent,
                       std::string* name, bool* trailing_slash) {
  if (path.empty()) return -ENOENT;
  if (path.size() >= kPathMax) return -ENAMETOOLONG;
  size_t end = path.size();
  while (end > 0 && path[end - 1] == '/') end--;
  *trailing_slash = end < path.size();
  if (end == 0) {  // "/" or "///"
    *parent = ctx.root();
    name->clear();
    return 0;
  }
  size_t slash = path.rfind('/', end - 1);
  std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  *name = path.substr(slash == std::string::npos ? 0 : slash + 1,
                      end - (slash == std::string::npos ? 0 : slash + 1));
  if (name->size() > kNameMax) return -ENAMETOOLONG;
  Location p = start;
  if (!dir.empty()) {
    int symlinks = 0;
    int r = Walk(ctx, start, dir, true, &symlinks, &p);
    if (r < 0) return r;
  }
  if (p.inode().Type() != S_IFDIR) return -ENOTDIR;
  *parent = p;
  return 0;
}

int Vfs::Create(const Location& dir, const std::string& name,
                const CreateRequest& req, Location* out) {
  if (name.empty() || name == "." || name == "..") return -EEXIST;
  if (name.size() > kNameMax) return -ENAMETOOLONG;
  if (dir.inode().Type() != S_IFDIR) return -ENOTDIR;
  if (dir.mount->read_only || dir.inode().ReadOnly()) return -EROFS;
  std::shared_ptr<Inode> child;
  int r = dir.inode().Create(name, req, &child);
  if (r < 0) return r;
  {
    absl::MutexLock l(&mu_);
    auto d = std::make_shared<Dentry>(child, name, dir.dentry);
    dir.dentry->children_[name] = d;
    if (out != nullptr) *out = Location{dir.mount, d};
  }
  inotify::NotifyEntry(dir.inode(), IN_CREATE, name, req.type == S_IFDIR);
  return 0;
}

// After an unlink, rmdir or a rename over `victim`: a file that keeps
// other names has a new link count (IN_ATTRIB); one without names is gone
// (IN_DELETE_SELF). Returns whether the victim's watches must be dropped.
static bool NotifyNameRemoved(Inode& victim, bool is_dir) {
  if (!inotify::Active()) return false;
  Attr a;
  bool gone = is_dir || (victim.GetAttr(&a) == 0 && a.nlink == 0);
  if (!is_dir) inotify::NotifyInode(victim, IN_ATTRIB);
  if (gone) inotify::NotifyDeleteSelf(victim);
  return gone;
}

int Vfs::Unlink(const Location& dir, const std::string& name, bool is_dir) {
  if (name == ".") return is_dir ? -EINVAL : -EISDIR;
  if (name == "..") return is_dir ? -ENOTEMPTY : -EISDIR;
  if (name.empty()) return is_dir ? -EBUSY : -EISDIR;
  if (dir.mount->read_only) return -EROFS;
  Location child;
  int r = Step(Root(), dir, name, &child);
  if (r < 0) return r;
  if (child.mount != dir.mount) return -EBUSY;  // a mountpoint
  r = dir.inode().Unlink(name, is_dir);
  if (r < 0) return r;
  {
    absl::MutexLock l(&mu_);
    auto it = dir.dentry->children_.find(name);
    if (it != dir.dentry->children_.end()) {
      it->second->deleted_ = true;
      dir.dentry->children_.erase(it);
    }
  }
  // The victim's watches go (IN_IGNORED) before the directory hears of
  // the name, as Linux orders them.
  if (NotifyNameRemoved(child.inode(), is_dir)) {
    inotify::DropWatches(child.inode());
  }
  inotify::NotifyEntry(dir.inode(), IN_DELETE, name, is_dir);
  return 0;
}

// fsnotify_move: IN_MOVED_FROM and IN_MOVED_TO with one cookie, IN_ATTRIB
// for a replaced file, IN_MOVE_SELF for the moved one; a replaced file
// that lost its last name is then gone. An exchange is two moves.
static void NotifyRename(const Location& old_dir, const std::string& old_name,
                         const Location& new_dir, const std::string& new_name,
                         const Location& src, const Location* dst,
                         unsigned flags) {
  Inode& moved = src.inode();
  bool is_dir = moved.Type() == S_IFDIR;
  uint32_t cookie = inotify::NewCookie();
  inotify::NotifyEntry(old_dir.inode(), IN_MOVED_FROM, old_name, is_dir, cookie);
  inotify::NotifyEntry(new_dir.inode(), IN_MOVED_TO, new_name, is_dir, cookie);
  bool exchange = (flags & RENAME_EXCHANGE) != 0;
  if (dst != nullptr && !exchange && dst->inode().Type() != S_IFDIR) {
    inotify::NotifyInode(dst->inode(), IN_ATTRIB);
  }
  inotify::NotifyInode(moved, IN_MOVE_SELF);
  if (dst == nullptr) return;
  Inode& other = dst->inode();
  if (exchange) {
    bool other_dir = other.Type() == S_IFDIR;
    cookie = inotify::NewCookie();
    inotify::NotifyEntry(new_dir.inode(), IN_MOVED_FROM, new_name, other_dir,
                         cookie);
    inotify::NotifyEntry(old_dir.inode(), IN_MOVED_TO, old_name, other_dir,
                         cookie);
    inotify::NotifyInode(other, IN_MOVE_SELF);
    return;
  }
  Attr a;
  if (other.Type() == S_IFDIR || (other.GetAttr(&a) == 0 && a.nlink == 0)) {
    inotify::NotifyDeleteSelf(other);
    inotify::DropWatches(other);
  }
}

int Vfs::Rename(const Location& old_dir, const std::string& old_name,
                const Location& new_dir, const std::string& new_name,
                unsigned flags) {
  if (old_name.empty() || old_name == "." || old_name == ".." ||
      new_name.empty() || new_name == "." || new_name == "..") {
    return -EBUSY;
  }
  if (old_name.size() > kNameMax || new_name.size() > kNameMax) {
    return -ENAMETOOLONG;
  }
  if (old_dir.mount != new_dir.mount) return -EXDEV;
  if (old_dir.mount->read_only) return -EROFS;
  Location src;
  int r = Step(Root(), old_dir, old_name, &src);
  if (r < 0) return r;
  if (src.mount != old_dir.mount) return -EBUSY;
  Location dst;
  bool have_dst = Step(Root(), new_dir, new_name, &dst) == 0;
  if (have_dst && dst.mount != new_dir.mount) return -EBUSY;
  if (have_dst && dst.dentry == src.dentry) return 0;  // same file
  {
    // A directory cannot move below itself.
    absl::MutexLock l(&mu_);
    for (auto d = new_dir.dentry; d != nullptr; d = d->parent_) {
      if (d == src.dentry) return -EINVAL;
      if (have_dst && (flags & RENAME_EXCHANGE) && d == dst.dentry &&
          d != new_dir.dentry) {
        return -EINVAL;
      }
    }
    if (flags & RENAME_EXCHANGE) {
      for (auto d = old_dir.dentry; d != nullptr; d = d->parent_) {
        if (have_dst && d == dst.dentry) return -EINVAL;
      }
    }
  }
  r = old_dir.inode().Rename(old_name, new_dir.inode(), new_name, flags);
  if (r < 0) return r;
  if (inotify::Active()) {
    NotifyRename(old_dir, old_name, new_dir, new_name, src,
                 have_dst ? &dst : nullptr, flags);
  }
  absl::MutexLock l(&mu_);
  auto& from = old_dir.dentry->children_;
  auto& to = new_dir.dentry->children_;
  std::shared_ptr<Dentry> moving = from.count(old_name) ? from[old_name] : nullptr;
  std::shared_ptr<Dentry> replaced = to.count(new_name) ? to[new_name] : nullptr;
  from.erase(old_name);
  to.erase(new_name);
  if (moving != nullptr) {
    moving->name_ = new_name;
    moving->parent_ = new_dir.dentry;
    to[new_name] = moving;
  }
  if (replaced != nullptr) {
    if (flags & RENAME_EXCHANGE) {
      replaced->name_ = old_name;
      replaced->parent_ = old_dir.dentry;
      from[old_name] = replaced;
    } else {
      replaced->deleted_ = true;
    }
  }
  return 0;
}

int Vfs::Link(const Location& target, const Location& dir,
              const std::string& name) {
  if (name.empty() || name == "." || name == "..") return -EEXIST;
  if (name.size() > kNameMax) return -ENAMETOOLONG;
  if (target.inode().Type() == S_IFDIR) return -EPERM;
  if (target.mount != dir.mount) return -EXDEV;
  if (dir.mount->read_only) return -EROFS;
  int r = dir.inode().Link(name, target.dentry->inode());
  if (r < 0) return r;
  {
    absl::MutexLock l(&mu_);
    dir.dentry->children_[name] =
        std::make_shared<Dentry>(target.dentry->inode(), name, dir.dentry);
  }
  // fsnotify_link: the link count, then the new name.
  inotify::NotifyInode(target.inode(), IN_ATTRIB);
  inotify::NotifyEntry(dir.inode(), IN_CREATE, name, false);
  return 0;
}

std::string Vfs::PathOf(const Location& root, const Location& loc,
                        bool* reachable) const {
  absl::MutexLock l(&mu_);
  std::vector<std::string> parts;
  Location c = loc;
  bool ok = true;
  bool deleted = false;
  for (;;) {
    if (c == root) break;
    if (c.dentry == c.mount->root) {
      if (c.mount->parent == nullptr) {
        ok = false;  // not below the process root
        break;
      }
      c = Location{c.mount->parent, c.mount->mountpoint};
      continue;
    }
    if (c.dentry->deleted_) deleted = true;
    parts.push_back(c.dentry->name_);
    if (c.dentry->parent_ == nullptr) {
      ok = false;
      break;
    }
    c.dentry = c.dentry->parent_;
  }
  if (reachable != nullptr) *reachable = ok && !deleted;
  std::string path;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    absl::StrAppend(&path, "/", *it);
  }
  if (path.empty()) path = "/";
  if (deleted) absl::StrAppend(&path, " (deleted)");
  return path;
}

bool Vfs::ParentOf(const Location& loc, std::shared_ptr<Inode>* dir,
                   std::string* name, bool* unlinked) const {
  if (!loc.valid() || loc.dentry == loc.mount->root) return false;
  absl::MutexLock l(&mu_);
  // A Detached() name belongs to no tree: no parent to tell.
  if (loc.mount->parent == nullptr && loc.mount != root_mount_) return false;
  const auto& parent = loc.dentry->parent_;
  if (parent == nullptr) return false;
  *dir = parent->inode();
  *name = loc.dentry->name_;
  *unlinked = loc.dentry->deleted_;
  return true;
}

Location Vfs::Detached(std::shared_ptr<Inode> inode, const std::string& name,
                       const std::string& fstype) {
  auto mount = std::make_shared<Mount>();
  mount->root = std::make_shared<Dentry>(inode, "", nullptr);
  mount->fstype = fstype;
  auto d = std::make_shared<Dentry>(std::move(inode), name, mount->root);
  // Never linked anywhere: shown as deleted. No Vfs knows these dentries,
  // so no lock guards them.
  d->deleted_ = true;
  return Location{std::move(mount), std::move(d)};
}

std::vector<std::pair<std::shared_ptr<Mount>, std::string>> Vfs::MountsInOrder(
    const Location& root) const {
  std::vector<std::shared_ptr<Mount>> all;
  all.push_back(root_mount_);
  {
    absl::MutexLock l(&mu_);
    for (const auto& [key, m] : mounts_) all.push_back(m);
  }
  std::sort(all.begin(), all.end(),
            [](const auto& a, const auto& b) { return a->id < b->id; });
  std::vector<std::pair<std::shared_ptr<Mount>, std::string>> out;
  for (auto& m : all) {
    std::string where =
        m->parent == nullptr
            ? "/"
            : PathOf(root, Location{m->parent, m->mountpoint});
    out.emplace_back(std::move(m), std::move(where));
  }
  return out;
}

std::string Vfs::MountsText(const Location& root) const {
  std::string out;
  for (const auto& [m, where] : MountsInOrder(root)) {
    absl::StrAppend(&out, m->source, " ", where, " ", m->fstype, " ",
                    m->read_only ? "ro" : "rw", " 0 0\n");
  }
  return out;
}

std::string Vfs::MountInfoText(const Location& root) const {
  std::string out;
  for (const auto& [m, where] : MountsInOrder(root)) {
    Attr a;
    if (m->root->inode()->GetAttr(&a) != 0) a = Attr();
    const char* rw = m->read_only ? "ro" : "rw";
    // id parent major:minor root mountpoint options - fstype source super.
    absl::StrAppend(&out, m->id, " ",
                    m->parent != nullptr ? m->parent->id : m->id, " ",
                    major(a.dev), ":", minor(a.dev), " / ", where, " ", rw,
                    ",relatime - ", m->fstype, " ", m->source, " ", rw, "\n");
  }
  return out;
}

}  // namespace sandboxd::fs
