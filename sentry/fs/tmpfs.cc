#include "sentry/fs/tmpfs.h"

#include <limits.h>
#include <linux/falloc.h>
#include <time.h>

#include <algorithm>
#include <cstdio>  // RENAME_NOREPLACE, RENAME_EXCHANGE
#include <cstdlib>
#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace sandboxd::fs {

namespace {

constexpr uint64_t kPageSize = mm::kPageSize;
constexpr uint64_t kBlocksPerPage = kPageSize / 512;

// Linux tmpfs reports a directory's size as 20 bytes per entry, counting
// "." and "..", since some programs misbehave when a directory has size 0.
constexpr uint64_t kBogoDirentSize = 20;

// statfs(2) sets ST_VALID in f_flags; the VFS ORs in the mount's own flags
// (ST_RDONLY, ST_NOSUID, ...), which the filesystem does not know.
constexpr unsigned long kStValid = 0x0020;

// Timestamps follow the host's realtime clock; if the Sentry ever
// virtualizes CLOCK_REALTIME (e.g. across restore), this is the one place
// to change.
timespec Now() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

}  // namespace

// ---------------------------------------------------------------------------
// TmpFsSuperblock

TmpFsSuperblock::TmpFsSuperblock(mm::MemoryFile* memfile,
                                 const TmpFsOptions& opts)
    : memfile_(memfile),
      dev_(opts.dev),
      // Rounded up, as Linux does with size=; the division avoids the
      // overflow PageRoundUp would have for huge limits.
      max_pages_(opts.size_limit / kPageSize +
                 (opts.size_limit % kPageSize != 0)),
      max_inodes_(opts.inode_limit) {}

uint64_t TmpFsSuperblock::ReservePages(uint64_t n) {
  if (max_pages_ == 0) {
    pages_used_.fetch_add(n, std::memory_order_relaxed);
    return n;
  }
  uint64_t used = pages_used_.load(std::memory_order_relaxed);
  for (;;) {
    if (used >= max_pages_) return 0;
    const uint64_t grant = std::min(n, max_pages_ - used);
    if (pages_used_.compare_exchange_weak(used, used + grant,
                                          std::memory_order_relaxed)) {
      return grant;
    }
  }
}

void TmpFsSuperblock::ReleasePages(uint64_t n) {
  pages_used_.fetch_sub(n, std::memory_order_relaxed);
}

bool TmpFsSuperblock::WithinLimit(uint64_t n) const {
  return max_pages_ == 0 || n <= max_pages_;
}

bool TmpFsSuperblock::ReserveInode() {
  if (max_inodes_ == 0) {
    inodes_used_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  uint64_t used = inodes_used_.load(std::memory_order_relaxed);
  do {
    if (used >= max_inodes_) return false;
  } while (!inodes_used_.compare_exchange_weak(used, used + 1,
                                               std::memory_order_relaxed));
  return true;
}

void TmpFsSuperblock::ReleaseInode() {
  inodes_used_.fetch_sub(1, std::memory_order_relaxed);
}

namespace {

constexpr uint64_t kOptPage = 4096;

// A number as tmpfs's options take it (memparse): an optional k, m, g
// suffix. (size=N% of memory is not supported: EINVAL.)
bool ParseMemNumber(const std::string& v, uint64_t* out) {
  if (v.empty()) return false;
  uint64_t mult = 1;
  std::string digits = v;
  switch (v.back()) {
    case 'k': case 'K': mult = 1ull << 10; digits.pop_back(); break;
    case 'm': case 'M': mult = 1ull << 20; digits.pop_back(); break;
    case 'g': case 'G': mult = 1ull << 30; digits.pop_back(); break;
    default: break;
  }
  uint64_t n;
  if (!absl::SimpleAtoi(digits, &n)) return false;
  if (n != 0 && mult > UINT64_MAX / n) return false;
  *out = n * mult;
  return true;
}

}  // namespace

// Unknown options are EINVAL, as Linux's tmpfs says.
int ParseTmpFsOptions(const std::string& data, uint64_t total_ram,
                      TmpFsOptions* o) {
  for (absl::string_view opt : absl::StrSplit(data, ',', absl::SkipEmpty())) {
    std::string key(opt), value;
    if (size_t eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key.resize(eq);
    }
    uint64_t n = 0;
    if (key == "size" && !value.empty() && value.back() == '%') {
      // A share of the memory, in pages, as Linux's shmem_parse_one().
      uint64_t pct;
      if (!absl::SimpleAtoi(value.substr(0, value.size() - 1), &pct) ||
          pct > UINT64_MAX / (total_ram / kOptPage + 1)) {
        return -EINVAL;
      }
      o->size_limit = (total_ram / kOptPage * pct + 99) / 100 * kOptPage;
    } else if (key == "size") {
      if (!ParseMemNumber(value, &n) || n > UINT64_MAX - kOptPage) return -EINVAL;
      o->size_limit = (n + kOptPage - 1) / kOptPage * kOptPage;
    } else if (key == "nr_inodes") {
      if (!ParseMemNumber(value, &n)) return -EINVAL;
      o->inode_limit = n;
    } else if (key == "mode") {
      char* end = nullptr;
      unsigned long m = strtoul(value.c_str(), &end, 8);
      if (value.empty() || *end != 0 || m > 07777) return -EINVAL;
      o->root_mode = static_cast<uint32_t>(m);
    } else if (key == "uid") {
      if (!absl::SimpleAtoi(value, &o->root_uid)) return -EINVAL;
    } else if (key == "gid") {
      if (!absl::SimpleAtoi(value, &o->root_gid)) return -EINVAL;
    } else {
      return -EINVAL;
    }
  }
  return 0;
}

TmpFsOptions DefaultTmpFsOptions(uint64_t total_ram) {
  TmpFsOptions o;
  const uint64_t half_pages = total_ram / kPageSize / 2;
  o.size_limit = half_pages * kPageSize;
  o.inode_limit = half_pages;
  return o;
}

void TmpFsSuperblock::FillStatFs(struct statfs* out) const {
  std::memset(out, 0, sizeof(*out));
  out->f_type = kTmpfsMagic;
  out->f_bsize = kPageSize;
  out->f_frsize = kPageSize;
  out->f_namelen = NAME_MAX;
  out->f_flags = kStValid;
  // As on Linux, an unlimited tmpfs reports zero blocks and inodes.
  if (max_pages_ != 0) {
    const uint64_t used =
        std::min(pages_used_.load(std::memory_order_relaxed), max_pages_);
    out->f_blocks = max_pages_;
    out->f_bfree = max_pages_ - used;
    out->f_bavail = max_pages_ - used;
  }
  if (max_inodes_ != 0) {
    const uint64_t used =
        std::min(inodes_used_.load(std::memory_order_relaxed), max_inodes_);
    out->f_files = max_inodes_;
    out->f_ffree = max_inodes_ - used;
  }
  out->f_fsid.__val[0] = static_cast<int>(dev_ & 0xffffffff);
  out->f_fsid.__val[1] = static_cast<int>(dev_ >> 32);
}

// ---------------------------------------------------------------------------
// TmpFsInode

TmpFsInode::TmpFsInode(std::shared_ptr<TmpFsSuperblock> sb, uint32_t type,
                       uint32_t perm, uint32_t uid, uint32_t gid)
    : sb_(std::move(sb)),
      ino_(sb_->NextIno()),
      type_(type),
      perm_(perm & 07777),
      uid_(uid),
      gid_(gid) {
  const timespec now = Now();
  atime_ = mtime_ = ctime_ = now;
}

TmpFsInode::~TmpFsInode() { sb_->ReleaseInode(); }

void TmpFsInode::FillAttrLocked(Attr* out) const {
  *out = Attr();
  out->dev = sb_->dev();
  out->ino = ino_;
  out->mode = type_ | perm_;
  out->nlink = nlink_;
  out->uid = uid_;
  out->gid = gid_;
  out->blksize = kPageSize;
  out->atime = atime_;
  out->mtime = mtime_;
  out->ctime = ctime_;
}

int TmpFsInode::GetAttr(Attr* out) {
  absl::ReaderMutexLock l(&mu_);
  FillAttrLocked(out);
  FillKindAttrLocked(out);
  return 0;
}

void TmpFsInode::ApplySetAttrLocked(const SetAttrRequest& req,
                                    const timespec& now) {
  if (req.set_mode) perm_ = req.mode & 07777;
  if (req.set_uid) uid_ = req.uid;
  if (req.set_gid) gid_ = req.gid;
  if (req.set_atime) atime_ = req.atime;
  if (req.set_mtime) mtime_ = req.mtime;
  ctime_ = now;
}

int TmpFsInode::SetAttr(const SetAttrRequest& req) {
  if (req.set_size) return type_ == S_IFDIR ? -EISDIR : -EINVAL;
  absl::MutexLock l(&mu_);
  ApplySetAttrLocked(req, Now());
  return 0;
}

int TmpFsInode::StatFs(struct statfs* out) {
  sb_->FillStatFs(out);
  return 0;
}

void TmpFsInode::TouchAtime() {
  const timespec now = Now();
  absl::MutexLock l(&mu_);
  atime_ = now;
}

// ---------------------------------------------------------------------------
// TmpFsDirectory

TmpFsDirectory::TmpFsDirectory(std::shared_ptr<TmpFsSuperblock> sb,
                               uint32_t perm, uint32_t uid, uint32_t gid,
                               std::weak_ptr<TmpFsDirectory> parent)
    : TmpFsInode(std::move(sb), S_IFDIR, perm, uid, gid),
      parent_(std::move(parent)) {}

void TmpFsDirectory::FillKindAttrLocked(Attr* out) const {
  out->nlink = removed_ ? 0 : 2 + subdirs_;
  out->size = kBogoDirentSize * (2 + entries_.size());
}

void TmpFsDirectory::ChangedLocked(const timespec& now) {
  mtime_ = now;
  ctime_ = now;
}

int TmpFsDirectory::Lookup(const std::string& name,
                           std::shared_ptr<Inode>* out) {
  absl::ReaderMutexLock l(&mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return -ENOENT;
  *out = it->second;
  return 0;
}

int TmpFsDirectory::ReadDir(std::vector<DirEntry>* out) {
  const timespec now = Now();
  absl::MutexLock l(&mu_);  // exclusive: atime changes
  out->clear();
  out->reserve(entries_.size());
  for (const auto& [name, inode] : entries_) {
    // ino_ and type_ are constant: no need for the child's lock.
    out->push_back(DirEntry{name, inode->ino_, DirentType(inode->type_)});
  }
  atime_ = now;
  return 0;
}

int TmpFsDirectory::Create(const std::string& name, const CreateRequest& req,
                           std::shared_ptr<Inode>* out) {
  const uint32_t type = req.type & S_IFMT;
  switch (type) {
    case S_IFREG:
    case S_IFDIR:
    case S_IFLNK:
    case S_IFIFO:
    case S_IFCHR:
    case S_IFBLK:
    case S_IFSOCK:
      break;
    default:
      return -EINVAL;
  }
  if (type == S_IFLNK) {
    if (req.target.empty()) return -ENOENT;
    // Linux tmpfs keeps a target plus its NUL in one page at most.
    if (req.target.size() >= PATH_MAX) return -ENAMETOOLONG;
  }

  const timespec now = Now();
  absl::MutexLock l(&mu_);
  if (removed_) return -ENOENT;
  auto it = entries_.lower_bound(name);
  if (it != entries_.end() && it->first == name) return -EEXIST;
  if (!sb_->ReserveInode()) return -ENOSPC;

  // A set-group-ID directory hands its group (and, to subdirectories, the
  // bit itself) down, as Linux's inode_init_owner does.
  uint32_t perm = req.mode & 07777;
  uint32_t gid = req.gid;
  if (perm_ & S_ISGID) {
    gid = gid_;
    if (type == S_IFDIR) perm |= S_ISGID;
  }

  std::shared_ptr<TmpFsInode> child;
  switch (type) {
    case S_IFREG:
      child = std::make_shared<TmpFsRegularFile>(sb_, perm, req.uid, gid);
      break;
    case S_IFDIR:
      child = std::make_shared<TmpFsDirectory>(
          sb_, perm, req.uid, gid,
          std::static_pointer_cast<TmpFsDirectory>(shared_from_this()));
      ++subdirs_;
      break;
    case S_IFLNK:
      child = std::make_shared<TmpFsSymlink>(sb_, req.uid, gid, req.target);
      break;
    default:
      child = std::make_shared<TmpFsSpecialFile>(sb_, type, perm, req.uid,
                                                 gid, req.rdev);
      break;
  }
  entries_.emplace_hint(it, name, child);
  ChangedLocked(now);
  *out = std::move(child);
  return 0;
}

int TmpFsDirectory::Link(const std::string& name,
                         const std::shared_ptr<Inode>& target) {
  auto t = std::dynamic_pointer_cast<TmpFsInode>(target);
  if (t == nullptr || t->sb_ != sb_) return -EXDEV;
  if (t->type_ == S_IFDIR) return -EPERM;

  const timespec now = Now();
  absl::MutexLock l(&mu_);
  if (removed_) return -ENOENT;
  auto it = entries_.lower_bound(name);
  if (it != entries_.end() && it->first == name) return -EEXIST;
  {
    absl::MutexLock tl(&t->mu_);
    // An open file whose last name is gone cannot get a new one (Linux
    // allows that only for O_TMPFILE files).
    if (t->nlink_ == 0) return -ENOENT;
    ++t->nlink_;
    t->ctime_ = now;
  }
  entries_.emplace_hint(it, name, std::move(t));
  ChangedLocked(now);
  return 0;
}

int TmpFsDirectory::RemoveIfEmpty(const timespec& now) {
  absl::MutexLock l(&mu_);
  if (!entries_.empty()) return -ENOTEMPTY;
  removed_ = true;
  parent_.reset();
  ctime_ = now;
  return 0;
}

int TmpFsDirectory::Unlink(const std::string& name, bool dir) {
  // Declared before the lock so that, if this was the last reference, the
  // inode (and its pages) is destroyed after mu_ is released.
  std::shared_ptr<TmpFsInode> doomed;
  const timespec now = Now();
  absl::MutexLock l(&mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return -ENOENT;
  TmpFsInode* child = it->second.get();
  if (child->type_ == S_IFDIR) {
    if (!dir) return -EISDIR;
    int ret = static_cast<TmpFsDirectory*>(child)->RemoveIfEmpty(now);
    if (ret != 0) return ret;
    --subdirs_;
  } else {
    if (dir) return -ENOTDIR;
    absl::MutexLock cl(&child->mu_);
    --child->nlink_;
    child->ctime_ = now;
  }
  doomed = std::move(it->second);
  entries_.erase(it);
  ChangedLocked(now);
  return 0;
}

TmpFsDirectory::Chain TmpFsDirectory::Ancestors() {
  Chain chain;
  auto d = std::static_pointer_cast<TmpFsDirectory>(shared_from_this());
  while (d != nullptr) {
    chain.push_back(d);
    std::shared_ptr<TmpFsDirectory> parent;
    {
      absl::ReaderMutexLock l(&d->mu_);
      parent = d->parent_.lock();
    }
    d = std::move(parent);
  }
  return chain;
}

int TmpFsDirectory::Rename(const std::string& old_name, Inode& new_dir,
                           const std::string& new_name, unsigned flags) {
  if ((flags & ~unsigned{RENAME_NOREPLACE | RENAME_EXCHANGE}) != 0 ||
      ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE))) {
    return -EINVAL;
  }
  auto* nd = dynamic_cast<TmpFsDirectory*>(&new_dir);
  if (nd == nullptr || nd->sb_ != sb_) return -EXDEV;

  // Destroyed after every lock below is released.
  std::vector<std::shared_ptr<TmpFsInode>> doomed;
  if (nd == this) {
    absl::MutexLock l(&mu_);
    return RenameLocked(this, old_name, this, new_name, flags, {}, {},
                        &doomed);
  }

  // Between two directories: with rename_mu held, ancestry is fixed (only
  // such renames move directories), so the ancestor can be locked before
  // its descendant, the same order as every parent-then-child locking
  // elsewhere. Unrelated directories go in address order.
  absl::MutexLock rl(&sb_->rename_mu);
  const Chain old_chain = Ancestors();
  const Chain new_chain = nd->Ancestors();
  auto contains = [](const Chain& c, const TmpFsDirectory* d) {
    return std::any_of(c.begin(), c.end(),
                       [d](const auto& e) { return e.get() == d; });
  };
  TmpFsDirectory* first = this;
  TmpFsDirectory* second = nd;
  if (contains(old_chain, nd) ||
      (!contains(new_chain, this) && std::less<>()(nd, this))) {
    std::swap(first, second);
  }
  absl::MutexLock l1(&first->mu_);
  absl::MutexLock l2(&second->mu_);
  return RenameLocked(this, old_name, nd, new_name, flags, old_chain,
                      new_chain, &doomed);
}

int TmpFsDirectory::RenameLocked(
    TmpFsDirectory* od, const std::string& old_name, TmpFsDirectory* nd,
    const std::string& new_name, unsigned flags, const Chain& old_chain,
    const Chain& new_chain, std::vector<std::shared_ptr<TmpFsInode>>* doomed) {
  auto oit = od->entries_.find(old_name);
  if (oit == od->entries_.end()) return -ENOENT;
  if (nd->removed_) return -ENOENT;
  const std::shared_ptr<TmpFsInode> moved = oit->second;
  auto nit = nd->entries_.find(new_name);
  TmpFsInode* victim = nit == nd->entries_.end() ? nullptr : nit->second.get();

  if ((flags & RENAME_NOREPLACE) && victim != nullptr) return -EEXIST;
  if ((flags & RENAME_EXCHANGE) && victim == nullptr) return -ENOENT;
  // Two names of one inode (or one name onto itself): Linux does nothing.
  if (victim == moved.get()) return 0;

  const bool moved_dir = moved->type_ == S_IFDIR;
  const bool victim_dir = victim != nullptr && victim->type_ == S_IFDIR;
  auto contains = [](const Chain& c, const TmpFsInode* d) {
    return std::any_of(c.begin(), c.end(),
                       [d](const auto& e) { return e.get() == d; });
  };
  // The chains are empty within one directory, where neither can happen.
  // Checked before locking either inode: locking an ancestor of a held
  // directory would invert the lock order.
  if (moved_dir && contains(new_chain, moved.get())) return -EINVAL;
  if (victim_dir && contains(old_chain, victim)) {
    return (flags & RENAME_EXCHANGE) ? -EINVAL : -ENOTEMPTY;
  }

  const timespec now = Now();
  // A moved inode's ctime changes; a moved directory's ".." now names `to`.
  auto moved_into = [&now](TmpFsInode* inode, TmpFsDirectory* to) {
    absl::MutexLock l(&inode->mu_);
    inode->ctime_ = now;
    if (inode->type_ == S_IFDIR) {
      static_cast<TmpFsDirectory*>(inode)->parent_ =
          std::static_pointer_cast<TmpFsDirectory>(to->shared_from_this());
    }
  };

  if (flags & RENAME_EXCHANGE) {
    std::swap(oit->second, nit->second);
    if (od != nd && moved_dir != victim_dir) {
      // One ".." moves from one directory to the other.
      if (moved_dir) {
        --od->subdirs_;
        ++nd->subdirs_;
      } else {
        ++od->subdirs_;
        --nd->subdirs_;
      }
    }
    moved_into(moved.get(), nd);
    moved_into(victim, od);
  } else {
    if (victim != nullptr) {
      if (moved_dir && !victim_dir) return -ENOTDIR;
      if (!moved_dir && victim_dir) return -EISDIR;
      if (victim_dir) {
        int ret = static_cast<TmpFsDirectory*>(victim)->RemoveIfEmpty(now);
        if (ret != 0) return ret;
        --nd->subdirs_;
      } else {
        absl::MutexLock vl(&victim->mu_);
        --victim->nlink_;
        victim->ctime_ = now;
      }
      doomed->push_back(std::move(nit->second));
      nit->second = moved;
    } else {
      nd->entries_.emplace(new_name, moved);
    }
    // Map iterators survive insertions, so oit is still valid.
    od->entries_.erase(oit);
    if (moved_dir && od != nd) {
      --od->subdirs_;
      ++nd->subdirs_;
    }
    moved_into(moved.get(), nd);
  }
  od->ChangedLocked(now);
  if (nd != od) nd->ChangedLocked(now);
  return 0;
}

// ---------------------------------------------------------------------------
// TmpFsRegularFile

TmpFsRegularFile::TmpFsRegularFile(std::shared_ptr<TmpFsSuperblock> sb,
                                   uint32_t perm, uint32_t uid, uint32_t gid)
    : TmpFsInode(std::move(sb), S_IFREG, perm, uid, gid),
      seals_(kSealSeal) {}

void TmpFsRegularFile::set_initial_seals(int initial) {
  absl::MutexLock l(&data_mu_);
  seals_ = initial;
}

void TmpFsRegularFile::MarkUnlinked() {
  absl::MutexLock l(&mu_);
  nlink_ = 0;
}

int TmpFsRegularFile::Seals() {
  absl::ReaderMutexLock l(&data_mu_);
  return seals_;
}

int TmpFsRegularFile::AddSeals(int seals) {
  if (seals & ~kAllSeals) return -EINVAL;
  absl::MutexLock l(&data_mu_);
  if (seals_ & kSealSeal) return -EPERM;
  if ((seals & kSealWrite) && !(seals_ & kSealWrite) && writable_maps_ > 0) {
    return -EBUSY;
  }
  // F_SEAL_EXEC on an executable file implies the write seals (W^X).
  if (seals & kSealExec) {
    absl::ReaderMutexLock il(&mu_);
    if (perm_ & 0111) {
      seals |= kSealShrink | kSealGrow | kSealWrite | kSealFutureWrite;
    }
  }
  seals_ |= seals;
  return 0;
}

int TmpFsRegularFile::BeginSharedMapping(bool prot_write, bool* maywrite) {
  absl::MutexLock l(&data_mu_);
  if (seals_ & (kSealWrite | kSealFutureWrite)) {
    if (prot_write) return -EPERM;
    *maywrite = false;  // seal_check_write clears VM_MAYWRITE
  }
  if (*maywrite) writable_maps_++;
  return 0;
}

int TmpFsRegularFile::RecountSharedMapping() {
  absl::MutexLock l(&data_mu_);
  if (seals_ & kSealWrite) return -EBUSY;
  writable_maps_++;
  return 0;
}

void TmpFsRegularFile::EndSharedMapping() {
  absl::MutexLock l(&data_mu_);
  writable_maps_--;
}

TmpFsRegularFile::~TmpFsRegularFile() {
  // Uncontended (no references are left); taken for the annotations.
  absl::MutexLock l(&data_mu_);
  FreePagesLocked(0, UINT64_MAX);
}

uint64_t TmpFsRegularFile::EnsurePagesLocked(
    uint64_t first, uint64_t count, int* err,
    std::vector<std::pair<uint64_t, uint64_t>>* added) {
  const uint64_t end = first + count;
  uint64_t idx = first;
  auto it = pages_.lower_bound(first);
  while (idx < end) {
    if (it != pages_.end() && it->first == idx) {
      ++idx;
      ++it;
      continue;
    }
    // [idx, hole_end) is a hole; `it` is the first page after it.
    const uint64_t hole_end =
        it == pages_.end() ? end : std::min(end, it->first);
    const uint64_t want = hole_end - idx;
    const uint64_t got = sb_->ReservePages(want);
    if (got == 0) {
      *err = -ENOSPC;
      break;
    }
    // One contiguous memory-file range per hole keeps the memory file (and
    // later the page tables of mappings) compact; a fragmented memory file
    // may not have such a range, so fall back to smaller pieces.
    uint64_t chunk = got;
    absl::StatusOr<uint64_t> off = sb_->memfile()->Allocate(chunk * kPageSize);
    while (!off.ok() && chunk > 1) {
      chunk /= 2;
      off = sb_->memfile()->Allocate(chunk * kPageSize);
    }
    if (!off.ok()) {
      // The memory file (the sandbox's memory) is full, not the tmpfs:
      // Linux says ENOMEM when shmem cannot charge memory.
      sb_->ReleasePages(got);
      *err = -ENOMEM;
      break;
    }
    if (chunk < got) sb_->ReleasePages(got - chunk);
    for (uint64_t i = 0; i < chunk; ++i) {
      pages_.emplace_hint(it, idx + i, *off + i * kPageSize);
    }
    if (added != nullptr) added->emplace_back(idx, chunk);
    idx += chunk;
    if (chunk == got && got < want) {
      *err = -ENOSPC;
      break;
    }
  }
  return idx - first;
}

void TmpFsRegularFile::FreePagesLocked(uint64_t first, uint64_t end) {
  auto it = pages_.lower_bound(first);
  const auto stop = pages_.lower_bound(end);
  mm::MemoryFile* mf = sb_->memfile();
  // Contiguous memory-file runs are freed together: one hole punch each.
  // The file's reference is dropped: a page a mapping still holds (its
  // PMA's reference, GetPage) is freed when that mapping goes.
  uint64_t run_off = 0, run_len = 0, count = 0;
  while (it != stop) {
    if (run_len != 0 && run_off + run_len == it->second) {
      run_len += kPageSize;
    } else {
      if (run_len != 0) mf->DecRef(run_off, run_len);
      run_off = it->second;
      run_len = kPageSize;
    }
    ++count;
    it = pages_.erase(it);
  }
  if (run_len != 0) mf->DecRef(run_off, run_len);
  sb_->ReleasePages(count);
}

void TmpFsRegularFile::ZeroWithinPageLocked(uint64_t from, uint64_t to) {
  if (from >= to) return;
  auto it = pages_.find(from / kPageSize);
  if (it == pages_.end()) return;  // a hole reads as zeros already
  // A restored page's data first (the rest of the page stays); if it
  // cannot be loaded, the zeros are written all the same.
  sb_->memfile()->WaitLoaded(it->second, kPageSize);
  std::memset(sb_->memfile()->Internal(it->second + from % kPageSize), 0,
              to - from);
}

void TmpFsRegularFile::SetSizeLocked(uint64_t size) {
  if (size <= size_) {
    // Zero the cut-off tail of the last page so that growing the file
    // again shows zeros there, not the old data.
    if (!mm::IsPageAligned(size)) {
      ZeroWithinPageLocked(size, mm::PageRoundUp(size));
    }
    FreePagesLocked(mm::PageRoundUp(size) / kPageSize, UINT64_MAX);
  } else if (!mm::IsPageAligned(size_)) {
    // Bytes past EOF in the old last page are zero unless a shared mapping
    // wrote them; growing must not expose such bytes.
    ZeroWithinPageLocked(size_, std::min(size, mm::PageRoundUp(size_)));
  }
  size_ = size;
}

void TmpFsRegularFile::ModifiedNow() {
  const timespec now = Now();
  absl::MutexLock l(&mu_);
  mtime_ = now;
  ctime_ = now;
}

int TmpFsRegularFile::GetAttr(Attr* out) {
  absl::ReaderMutexLock dl(&data_mu_);
  absl::ReaderMutexLock l(&mu_);
  FillAttrLocked(out);
  out->size = size_;
  out->blocks = pages_.size() * kBlocksPerPage;
  return 0;
}

int TmpFsRegularFile::SetAttr(const SetAttrRequest& req) {
  if (req.set_size && req.size > kTmpfsMaxFileSize) return -EFBIG;
  absl::MutexLock dl(&data_mu_);
  if (req.set_mode && (seals_ & kSealExec)) {
    // F_SEAL_EXEC: the execute bits are fixed (shmem_setattr).
    absl::ReaderMutexLock il(&mu_);
    if ((perm_ ^ req.mode) & 0111) return -EPERM;
  }
  bool size_changed = false;
  if (req.set_size) {
    if (((seals_ & kSealShrink) && req.size < size_) ||
        ((seals_ & kSealGrow) && req.size > size_)) {
      return -EPERM;
    }
    size_changed = req.size != size_;
    SetSizeLocked(req.size);
  }
  const timespec now = Now();
  absl::MutexLock l(&mu_);
  // Linux updates mtime only if the size really changed; an explicit mtime
  // in the same request wins (ApplySetAttrLocked runs after).
  if (size_changed) mtime_ = now;
  ApplySetAttrLocked(req, now);
  return 0;
}

int64_t TmpFsRegularFile::Read(void* buf, uint64_t n, uint64_t off) {
  if (n == 0) return 0;
  uint64_t done = 0;
  {
    absl::ReaderMutexLock l(&data_mu_);
    if (off < size_) {
      n = std::min(n, size_ - off);
      auto* dst = static_cast<uint8_t*>(buf);
      auto it = pages_.lower_bound(off / kPageSize);
      while (done < n) {
        const uint64_t pos = off + done;
        const uint64_t idx = pos / kPageSize;
        const uint64_t in_page = pos % kPageSize;
        const uint64_t chunk = std::min(kPageSize - in_page, n - done);
        if (it != pages_.end() && it->first == idx) {
          // A restore may still be loading the page: wait for it, or fail
          // as a read error (never zeros).
          if (sb_->memfile()->WaitLoaded(it->second, kPageSize) < 0) {
            if (done == 0) return -EIO;
            break;
          }
          std::memcpy(dst + done,
                      sb_->memfile()->Internal(it->second + in_page), chunk);
          ++it;
        } else {
          std::memset(dst + done, 0, chunk);
        }
        done += chunk;
      }
    }
  }
  TouchAtime();
  return static_cast<int64_t>(done);
}

int64_t TmpFsRegularFile::Write(const void* buf, uint64_t n, uint64_t off) {
  if (n == 0) return 0;
  if (off >= kTmpfsMaxFileSize) return -EFBIG;
  n = std::min(n, kTmpfsMaxFileSize - off);
  {
    absl::MutexLock l(&data_mu_);
    if (seals_ & (kSealWrite | kSealFutureWrite)) return -EPERM;
    if ((seals_ & kSealGrow) && off + n > size_) return -EPERM;
    const uint64_t first = off / kPageSize;
    const uint64_t count = (off + n - 1) / kPageSize + 1 - first;
    int err = 0;
    const uint64_t have = EnsurePagesLocked(first, count, &err, nullptr);
    if (have == 0) return err;
    if (have < count) n = (first + have) * kPageSize - off;  // short write

    if (off > size_ && !mm::IsPageAligned(size_)) {
      // See SetSizeLocked: the gap after the old EOF must read as zeros.
      ZeroWithinPageLocked(size_, std::min(off, mm::PageRoundUp(size_)));
    }
    const auto* src = static_cast<const uint8_t*>(buf);
    auto it = pages_.find(first);
    for (uint64_t done = 0; done < n; ++it) {
      const uint64_t in_page = (off + done) % kPageSize;
      const uint64_t chunk = std::min(kPageSize - in_page, n - done);
      // The rest of a restored page must be its saved data, not zeros.
      if (sb_->memfile()->WaitLoaded(it->second, kPageSize) < 0) {
        if (done == 0) return -EIO;
        n = done;
        break;
      }
      std::memcpy(sb_->memfile()->Internal(it->second + in_page), src + done,
                  chunk);
      done += chunk;
    }
    size_ = std::max(size_, off + n);
  }
  ModifiedNow();
  return static_cast<int64_t>(n);
}

int64_t TmpFsRegularFile::Allocate(int mode, uint64_t off, uint64_t len) {
  if ((mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE)) != 0) {
    return -EOPNOTSUPP;
  }
  if ((mode & FALLOC_FL_PUNCH_HOLE) && !(mode & FALLOC_FL_KEEP_SIZE)) {
    return -EOPNOTSUPP;  // as vfs_fallocate requires
  }
  if (len == 0) return -EINVAL;
  if (off > kTmpfsMaxFileSize || len > kTmpfsMaxFileSize - off) return -EFBIG;
  const uint64_t end = off + len;

  if (mode & FALLOC_FL_PUNCH_HOLE) {
    {
      absl::MutexLock l(&data_mu_);
      if (seals_ & (kSealWrite | kSealFutureWrite)) return -EPERM;
      const uint64_t first_full = mm::PageRoundUp(off);
      const uint64_t end_full = mm::PageRoundDown(end);
      // Partial pages at either edge are zeroed, whole ones freed.
      ZeroWithinPageLocked(off, std::min(end, first_full));
      if (end_full >= first_full) ZeroWithinPageLocked(end_full, end);
      if (end_full > first_full) {
        FreePagesLocked(first_full / kPageSize, end_full / kPageSize);
      }
    }
    ModifiedNow();
    return 0;
  }

  const uint64_t first = off / kPageSize;
  const uint64_t count = (end - 1) / kPageSize + 1 - first;
  if (!sb_->WithinLimit(count)) return -ENOSPC;
  // Without a size limit, a range larger than the whole memory file would
  // only fail after filling it (and the page map) first.
  if (count > sb_->memfile()->max_size() / kPageSize) return -ENOMEM;
  {
    absl::MutexLock l(&data_mu_);
    // shmem_fallocate checks the grow seal even with FALLOC_FL_KEEP_SIZE.
    if ((seals_ & kSealGrow) && end > size_) return -EPERM;
    std::vector<std::pair<uint64_t, uint64_t>> added;
    int err = 0;
    if (EnsurePagesLocked(first, count, &err, &added) < count) {
      // fallocate is all or nothing: give back what this call took.
      for (const auto& [idx, n] : added) FreePagesLocked(idx, idx + n);
      return err;
    }
    if (!(mode & FALLOC_FL_KEEP_SIZE) && end > size_) SetSizeLocked(end);
  }
  ModifiedNow();
  return 0;
}

int TmpFsRegularFile::GetPage(uint64_t index, bool allocate,
                              uint64_t* memfile_off, bool ref) {
  if (index > kTmpfsMaxFileSize / kPageSize) return -EFBIG;
  if (!allocate) {
    absl::ReaderMutexLock l(&data_mu_);
    auto it = pages_.find(index);
    if (it == pages_.end()) return -ENOENT;
    if (ref) sb_->memfile()->IncRef(it->second, kPageSize);
    *memfile_off = it->second;
    return 0;
  }
  absl::MutexLock l(&data_mu_);
  int err = 0;
  if (EnsurePagesLocked(index, 1, &err, nullptr) == 0) return err;
  *memfile_off = pages_.at(index);
  if (ref) sb_->memfile()->IncRef(*memfile_off, kPageSize);
  return 0;
}

// ---------------------------------------------------------------------------
// TmpFsSymlink and TmpFsSpecialFile

TmpFsSymlink::TmpFsSymlink(std::shared_ptr<TmpFsSuperblock> sb, uint32_t uid,
                           uint32_t gid, std::string target)
    // Symlink permissions are always 0777 on Linux and never checked.
    : TmpFsInode(std::move(sb), S_IFLNK, 0777, uid, gid),
      target_(std::move(target)) {}

void TmpFsSymlink::FillKindAttrLocked(Attr* out) const {
  // The target lives on the Sentry heap, not in memory-file pages, so it
  // occupies no blocks (Linux uses a page only for targets >= 128 bytes).
  out->size = target_.size();
}

int TmpFsSymlink::Readlink(std::string* target) {
  *target = target_;
  TouchAtime();
  return 0;
}

TmpFsSpecialFile::TmpFsSpecialFile(std::shared_ptr<TmpFsSuperblock> sb,
                                   uint32_t type, uint32_t perm, uint32_t uid,
                                   uint32_t gid, uint64_t rdev)
    : TmpFsInode(std::move(sb), type, perm, uid, gid),
      rdev_(rdev),
      fifo_(type == S_IFIFO ? std::make_unique<Fifo>() : nullptr) {}

void TmpFsSpecialFile::FillKindAttrLocked(Attr* out) const {
  out->rdev = rdev_;
}

// ---------------------------------------------------------------------------
// TmpFs

namespace {

std::shared_ptr<TmpFsDirectory> MakeRoot(
    const std::shared_ptr<TmpFsSuperblock>& sb, const TmpFsOptions& opts) {
  // The first reservation cannot fail: any limit (0 means none) admits
  // one inode, and the root counts against it as on Linux.
  sb->ReserveInode();
  return std::make_shared<TmpFsDirectory>(sb, opts.root_mode & 07777,
                                          opts.root_uid, opts.root_gid,
                                          std::weak_ptr<TmpFsDirectory>());
}

}  // namespace

TmpFs::TmpFs(mm::MemoryFile* memfile, const TmpFsOptions& opts)
    : sb_(std::make_shared<TmpFsSuperblock>(memfile, opts)),
      root_(MakeRoot(sb_, opts)) {}

}  // namespace sandboxd::fs
