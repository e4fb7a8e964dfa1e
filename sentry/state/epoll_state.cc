// FsState: epoll files and their interests (the watched files by id).
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sentry/fs/epoll.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/saved_size.h"

namespace sandboxd::state {

absl::Status FsState::SaveEpoll(Saver& s, const fs::Vfs& vfs, fs::EpollFile* ep,
                                pb::File* rec) {
  SBX_SAVED_SIZE(fs::EpollFile, 200);
  SBX_SAVED_SIZE(fs::EpollFile::Interest, 96);
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

absl::Status FsState::AddEpollInterest(fs::EpollFile& ep, const std::shared_ptr<fs::File>& file,
                                       const pb::EpollInterest& i) {
  struct epoll_event ev = {};
  ev.events = i.events();
  ev.data.u64 = i.data();
  int64_t err = ep.Ctl(EPOLL_CTL_ADD, i.fd(), file, ev);
  if (err < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "epoll interest in fd ", i.fd(), ": errno ", -err));
  }
  if (!i.disabled()) return absl::OkStatus();
  // An EPOLLONESHOT interest that had fired: disabled, off the ready list.
  absl::MutexLock lock(&ep.mu_);
  absl::MutexLock rl(&ep.ready_mu_);
  auto it = ep.interests_.find({file.get(), i.fd()});
  if (it == ep.interests_.end()) return absl::OkStatus();
  fs::EpollFile::Interest* in = it->second.get();
  in->disabled = true;
  if (in->queued) {
    in->queued = false;
    ep.ready_.erase(std::remove(ep.ready_.begin(), ep.ready_.end(), in), ep.ready_.end());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<fs::File>> FsState::LoadEpoll(
    Loader& l, fs::Vfs& vfs, const pb::File& rec) {
  const pb::Epoll& r = rec.epoll();
  auto ep = std::make_shared<fs::EpollFile>();
  ep->nonblock_.store(r.nonblock());
  for (const pb::EpollInterest& i : r.interests()) {
    if (l.DeferFile(i.file())) {
      // A procfs file: opened again once every process is loaded, as a
      // descriptor's is (Loader::DeferredUse). None is pollable in the
      // Sentry yet (Ctl refuses it, EPERM): this is for when one is.
      l.deferred_uses().push_back(Loader::DeferredUse{
          i.file(), absl::StrCat("epoll interest in fd ", i.fd()),
          [ep, i](std::shared_ptr<fs::File> f) { return AddEpollInterest(*ep, f, i); }});
      continue;
    }
    ASSIGN_OR_RETURN(std::shared_ptr<fs::File> file,
                     LoadFile(l, vfs, i.file()));
    if (file == nullptr) {
      return absl::InvalidArgumentError("epoll interest without a file");
    }
    RETURN_IF_ERROR(AddEpollInterest(*ep, file, i));
  }
  return std::static_pointer_cast<fs::File>(ep);
}

}  // namespace sandboxd::state
