// FsState: inotify files: watches (inodes by id), queued events.
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sentry/fs/inotify.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/saved_size.h"

namespace sandboxd::state {

absl::Status FsState::SaveInotify(Saver& s, fs::InotifyFile* in,
                                  pb::File* rec) {
  SBX_SAVED_SIZE(fs::InotifyFile, 160);
  SBX_SAVED_SIZE(fs::InotifyFile::Event, 48);
  SBX_SAVED_SIZE(fs::InotifyFile::WatchState, 24);
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

absl::StatusOr<std::shared_ptr<fs::File>> FsState::LoadInotify(
    Loader& l, const pb::File& rec) {
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

}  // namespace sandboxd::state
