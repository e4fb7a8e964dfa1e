// FsState: the lock table (flock and POSIX record locks).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/saved_size.h"

namespace sandboxd::state {

absl::Status FsState::SaveLocks(Saver& s, fs::LockTable& table) {
  SBX_SAVED_SIZE(fs::LockTable, 120);
  SBX_SAVED_SIZE(fs::RecordLock, 48);
  SBX_SAVED_SIZE(fs::RecordLockOwner, 24);
  SBX_SAVED_SIZE(fs::LockTable::FlockLock, 16);
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
