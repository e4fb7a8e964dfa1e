// FsState: open files, by kind (inode files, pipe ends, eventfd, timerfd,
// epoll, inotify, signalfd, Unix sockets, ttys, inherited host files).
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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
#include "sentry/socket/unix_socket.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/kind_name.h"
#include "sentry/state/saved_size.h"
#include "sentry/state/socket_state.h"
#include "sentry/state/tty_state.h"

namespace sandboxd::state {

absl::StatusOr<uint64_t> FsState::SaveFile(Saver& s, const fs::Vfs& vfs,
                                           const std::shared_ptr<fs::File>& f) {
  SBX_SAVED_SIZE(fs::File, 8);
  SBX_SAVED_SIZE(fs::InodeFile, 120);
  SBX_SAVED_SIZE(fs::PipeEnd, 40);
  SBX_SAVED_SIZE(fs::EventFd, 72);
  SBX_SAVED_SIZE(fs::TimerFd, 48);
  SBX_SAVED_SIZE(fs::TimerFd::State, 80);
  SBX_SAVED_SIZE(fs::EpollFile, 192);
  SBX_SAVED_SIZE(fs::EpollFile::Interest, 96);
  SBX_SAVED_SIZE(fs::InotifyFile, 152);
  SBX_SAVED_SIZE(fs::InotifyFile::Event, 48);
  SBX_SAVED_SIZE(fs::InotifyFile::WatchState, 24);
  SBX_SAVED_SIZE(kernel::SignalFd, 72);
  SBX_SAVED_SIZE(fs::HostFile, 72);
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
                std::max<int64_t>(st.next_ns_ - fs::ClockNowNs(st.clock_), 1));
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
              st.next_ns_ = fs::ClockNowNs(st.clock_) + r.remaining_ns();
              fs::TimerThread::Get().Arm(tf->state_, st.clock_, st.next_ns_);
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

}  // namespace sandboxd::state
