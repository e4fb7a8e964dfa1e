// FsState: descriptor tables and fs contexts (root, cwd, umask).
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/saved_size.h"

namespace sandboxd::state {

absl::StatusOr<uint64_t> FsState::SaveFdTable(
    Saver& s, const fs::Vfs& vfs, const std::shared_ptr<fs::FdTable>& t) {
  SBX_SAVED_SIZE(fs::FdTable, 40);
  SBX_SAVED_SIZE(fs::FdTable::Entry, 24);
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
          ASSIGN_OR_RETURN(uint64_t file,
                           Annotate(SaveFile(s, vfs, e.file),
                                    absl::StrCat("descriptor ", fd)));
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
          if (l.DeferFile(e.file()) && e.fd() >= 0) {
            l.deferred_fds().push_back(
                Loader::DeferredFd{t, e.fd(), e.file(), e.cloexec()});
            continue;
          }
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

absl::Status FsState::LoadDeferredFds(Loader& l, fs::Vfs& vfs) {
  // In the order the tables listed them; a /proc/PID/fdinfo/N whose N is
  // itself deferred finds it when N came first (a lower descriptor of an
  // earlier table), and fails the load otherwise, naming it.
  std::vector<Loader::DeferredFd> deferred = std::move(l.deferred_fds());
  l.deferred_fds().clear();
  for (Loader::DeferredFd& d : deferred) {
    ASSIGN_OR_RETURN(std::shared_ptr<fs::File> f,
                     Annotate(LoadFile(l, vfs, d.file),
                              absl::StrCat("descriptor ", d.fd)));
    if (f == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("descriptor ", d.fd, " without a file"));
    }
    int64_t got = d.table->InstallAt(d.fd, std::move(f), d.cloexec);
    if (got != d.fd) {
      return absl::InvalidArgumentError(absl::StrCat(
          "installing descriptor ", d.fd, ": errno ", -got));
    }
  }
  // Then the files that epoll interests and messages in flight hold.
  std::vector<Loader::DeferredUse> uses = std::move(l.deferred_uses());
  l.deferred_uses().clear();
  for (Loader::DeferredUse& u : uses) {
    ASSIGN_OR_RETURN(std::shared_ptr<fs::File> f, Annotate(LoadFile(l, vfs, u.file), u.what));
    if (f == nullptr) return absl::InvalidArgumentError(absl::StrCat(u.what, " without a file"));
    RETURN_IF_ERROR(Annotate(u.install(std::move(f)), u.what));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> FsState::SaveFsContext(
    Saver& s, const fs::Vfs& vfs, const std::shared_ptr<fs::FsContext>& c) {
  SBX_SAVED_SIZE(fs::FsContext, 80);
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

}  // namespace sandboxd::state
