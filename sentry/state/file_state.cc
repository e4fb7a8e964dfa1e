// FsState: open files, SaveFile and LoadFile by kind: inode files, pipe
// ends and inherited host files here; eventfd, timerfd and signalfd in
// event_file_state.cc, epoll and inotify in their own files, ttys in
// tty_state.cc, Unix and hostinet sockets in socket_state.cc.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
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
#include "sentry/socket/host_socket.h"
#include "sentry/socket/unix_socket.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/kind_name.h"
#include "sentry/state/saved_size.h"
#include "sentry/state/socket_state.h"
#include "sentry/state/tty_state.h"

namespace sandboxd::state {

namespace {

// What a host descriptor is, for an error that names it: its type, device
// and inode (the Sentry's own filter leaves it no /proc to read a path in).
std::string DescribeHostFd(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return "a host descriptor fstat refuses";
  const char* type = "file";
  switch (st.st_mode & S_IFMT) {
    case S_IFIFO: type = "pipe"; break;
    case S_IFSOCK: type = "socket"; break;
    case S_IFCHR: type = "character device"; break;
    case S_IFBLK: type = "block device"; break;
    case S_IFDIR: type = "directory"; break;
    case S_IFREG: type = "regular file"; break;
  }
  return absl::StrCat("a host ", type, ", device ", major(st.st_dev), ":",
                      minor(st.st_dev), " inode ", st.st_ino);
}

// Signal-driven I/O, common to every kind of file (fs/file_async.h).
void SaveAsync(fs::File& f, pb::File* rec) {
  const fs::FileAsync* as = f.async_if_any();
  if (as == nullptr) return;
  const fs::FileAsync::Saved a = as->Get();
  pb::FileAsync* r = rec->mutable_async();
  r->set_enabled(a.enabled);
  r->set_fd(a.fd);
  r->set_owner_type(a.owner.type);
  r->set_owner_pid(a.owner.pid);
  r->set_owner_uid(a.owner.uid);
  r->set_owner_euid(a.owner.euid);
  r->set_sig(a.sig);
}

absl::Status LoadAsync(const pb::FileAsync& r,
                       const std::shared_ptr<fs::File>& f) {
  if (r.owner_type() != F_OWNER_TID && r.owner_type() != F_OWNER_PID &&
      r.owner_type() != F_OWNER_PGRP) {
    return absl::InvalidArgumentError(
        absl::StrCat("async owner of unknown type ", r.owner_type()));
  }
  if (r.sig() < 0 || r.sig() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("async signal ", r.sig(), " out of range"));
  }
  fs::AsyncOwner o;
  o.type = r.owner_type();
  o.pid = r.owner_pid();
  o.uid = r.owner_uid();
  o.euid = r.owner_euid();
  fs::FileAsync& as = f->async();
  as.set_owner(o);
  as.set_sig(r.sig());
  // Registers on the restored file's queue again.
  if (r.enabled()) as.SetEnabled(*f, true, r.fd());
  return absl::OkStatus();
}

}  // namespace

absl::Status FsState::LinkFifo(const std::shared_ptr<fs::Inode>& inode,
                               uint64_t id,
                               const std::shared_ptr<fs::Pipe>& pipe) {
  SBX_SAVED_SIZE(fs::Fifo, 24);
  fs::Fifo* fifo = inode != nullptr ? inode->GetFifo() : nullptr;
  if (fifo == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("a FIFO's pipe end names inode ", id, ", not a FIFO"));
  }
  absl::MutexLock lock(&fifo->mu_);
  std::shared_ptr<fs::Pipe> cur = fifo->pipe_.lock();
  if (cur != nullptr && cur != pipe) {
    return absl::InvalidArgumentError(
        absl::StrCat("FIFO inode ", id, " has ends of two pipes"));
  }
  fifo->pipe_ = pipe;
  return absl::OkStatus();
}

// A FIFO description's name (PipeEnd's, PipeReadWrite's) into its record.
absl::Status FsState::SaveFifoLocation(Saver& s, const fs::Vfs& vfs, const fs::Location& loc,
                                       pb::PipeEnd* r) {
  if (!loc.valid()) return absl::OkStatus();
  bool reachable = false;
  if (InTree(vfs, loc.mount)) {
    vfs.PathOf(fs::Location{loc.mount, loc.mount->root}, loc, &reachable);
  }
  if (reachable) {
    ASSIGN_OR_RETURN(*r->mutable_location(), SaveLocation(s, vfs, loc));
  } else {
    r->set_detached_name(loc.dentry->name_);
    r->set_detached_fstype(loc.mount->fstype);
  }
  return absl::OkStatus();
}

// The name SaveFifoLocation kept, looked up again: it must name `fifo`.
absl::StatusOr<fs::Location> FsState::LoadFifoLocation(Loader& l, fs::Vfs& vfs,
                                                       const pb::PipeEnd& r,
                                                       const std::shared_ptr<fs::Inode>& fifo,
                                                       const fs::Vfs** tell) {
  *tell = nullptr;
  if (!r.has_location() && r.detached_name().empty()) return fs::Location{};
  if (fifo == nullptr) return absl::InvalidArgumentError("a pipe end with a name but no FIFO");
  if (!r.has_location()) {
    return fs::Vfs::Detached(fifo, r.detached_name(), r.detached_fstype());
  }
  ASSIGN_OR_RETURN(fs::Location loc, LoadLocation(l, vfs, r.location()));
  if (loc.dentry->inode() != fifo) {
    return absl::InvalidArgumentError(
        absl::StrCat("FIFO \"", r.location().path(), "\" names another inode"));
  }
  *tell = &vfs;
  return loc;
}

absl::StatusOr<uint64_t> FsState::SaveFile(Saver& s, const fs::Vfs& vfs,
                                           const std::shared_ptr<fs::File>& f) {
  SBX_SAVED_SIZE(fs::File, 16);
  SBX_SAVED_SIZE(fs::InodeFile, 128);
  SBX_SAVED_SIZE(fs::PipeEnd, 112);
  SBX_SAVED_SIZE(fs::PipeReadWrite, 96);
  SBX_SAVED_SIZE(fs::HostFile, 80);
  auto save_kind = [&](pb::File* rec) -> absl::Status {
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
            r->set_pseudo_state(in->SavedState());
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
          if (pe->fifo() != nullptr) {
            ASSIGN_OR_RETURN(uint64_t fifo, SaveInode(s, pe->fifo()));
            r->set_fifo(fifo);
            r->set_fifo_no_writer_yet(!pe->write_end() && pe->NoWriterYet());
          }
          RETURN_IF_ERROR(SaveFifoLocation(s, vfs, pe->location(), r));
          r->set_write_end(pe->write_end());
          r->set_flags(pe->StatusFlags() & (O_NONBLOCK | O_DIRECT));
          return absl::OkStatus();
        }
        if (auto* rw = dynamic_cast<fs::PipeReadWrite*>(f.get())) {
          pb::PipeEnd* r = rec->mutable_pipe_end();
          ASSIGN_OR_RETURN(uint64_t pipe, SavePipe(s, rw->pipe_ptr()));
          r->set_pipe(pipe);
          if (rw->fifo() != nullptr) {
            ASSIGN_OR_RETURN(uint64_t fifo, SaveInode(s, rw->fifo()));
            r->set_fifo(fifo);
          }
          RETURN_IF_ERROR(SaveFifoLocation(s, vfs, rw->location(), r));
          r->set_read_write(true);
          r->set_flags(rw->StatusFlags() & (O_NONBLOCK | O_DIRECT));
          return absl::OkStatus();
        }
        if (auto* ev = dynamic_cast<fs::EventFd*>(f.get())) {
          return SaveEventFd(ev, rec);
        }
        if (auto* tf = dynamic_cast<fs::TimerFd*>(f.get())) {
          return SaveTimerFd(tf, rec);
        }
        if (auto* ep = dynamic_cast<fs::EpollFile*>(f.get())) {
          return SaveEpoll(s, vfs, ep, rec);
        }
        if (auto* in = dynamic_cast<fs::InotifyFile*>(f.get())) {
          return SaveInotify(s, in, rec);
        }
        if (auto* sf = dynamic_cast<kernel::SignalFd*>(f.get())) {
          return SaveSignalFd(sf, rec);
        }
        if (auto* us = dynamic_cast<socket::UnixSocket*>(f.get())) {
          return SocketState::SaveUnixSocket(s, vfs, *us,
                                             rec->mutable_unix_socket());
        }
        if (auto* hs = dynamic_cast<socket::HostSocket*>(f.get())) {
          return SocketState::SaveHostSocket(*hs, rec->mutable_host_socket());
        }
        if (auto* h = dynamic_cast<fs::HostFile*>(f.get())) {
          if (h->inherited_fd() < 0) {
            return absl::UnimplementedError(absl::StrCat(
                "a host file that is not the sandbox's inherited stdio (",
                DescribeHostFd(h->host_fd()),
                ", reached through /dev/console, /dev/tty or "
                "/proc/PID/fd) cannot be saved"));
          }
          pb::HostFile* r = rec->mutable_host_file();
          r->set_host_fd(h->inherited_fd());
          r->set_flags(h->StatusFlags() & O_NONBLOCK);
          return absl::OkStatus();
        }
        return absl::UnimplementedError(
            absl::StrCat("save: ", KindName(*f), " files cannot be saved yet"));
      };
  return s.Save<fs::File, pb::File>(
      f.get(), s.state().mutable_files(), [&](pb::File* rec) -> absl::Status {
        RETURN_IF_ERROR(save_kind(rec));
        SaveAsync(*f, rec);
        return absl::OkStatus();
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
  if (!r.pseudo_state().empty()) {
    auto* in = dynamic_cast<fs::InodeFile*>(f.get());
    if (in == nullptr || in->LoadSavedState(r.pseudo_state()) < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"", r.location().path(), "\": a state this file does not take"));
    }
  }
  return f;
}

absl::StatusOr<std::shared_ptr<fs::File>> FsState::LoadFile(Loader& l,
                                                            fs::Vfs& vfs,
                                                            uint64_t id) {
  auto load_kind =
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
            std::shared_ptr<fs::Inode> fifo;
            if (r.fifo() != 0) {
              ASSIGN_OR_RETURN(fifo, LoadInode(l, r.fifo()));
              RETURN_IF_ERROR(LinkFifo(fifo, r.fifo(), pipe));
            }
            const fs::Vfs* tell = nullptr;
            ASSIGN_OR_RETURN(fs::Location loc, LoadFifoLocation(l, vfs, r, fifo, &tell));
            if (r.read_write()) {
              if (r.write_end()) {
                return absl::InvalidArgumentError(
                    "a pipe end both read_write and write_end");
              }
              auto rw = std::make_shared<fs::PipeReadWrite>(pipe, r.flags(), fifo);
              if (loc.valid()) rw->set_location(std::move(loc), tell);
              return std::static_pointer_cast<fs::File>(std::move(rw));
            }
            auto end = std::make_shared<fs::PipeEnd>(pipe, r.write_end(),
                                                     r.flags(), fifo);
            if (loc.valid()) end->set_location(std::move(loc), tell);
            if (fifo != nullptr && r.fifo_no_writer_yet()) {
              // Set when the pipe had no writer: none is loaded after.
              end->SuppressHupUntilWriter(pipe->OpenedEnds(true));
            }
            return std::static_pointer_cast<fs::File>(std::move(end));
          }
          case pb::File::kEventfd: {
            return LoadEventFd(rec);
          }
          case pb::File::kTimerfd: {
            return LoadTimerFd(rec);
          }
          case pb::File::kEpoll: {
            return LoadEpoll(l, vfs, rec);
          }
          case pb::File::kInotify: {
            return LoadInotify(l, rec);
          }
          case pb::File::kSignalfd: {
            return LoadSignalFd(l, rec);
          }
          case pb::File::kPtyFile:
            return TtyState::LoadPtyFile(l, vfs, rec.pty_file());
          case pb::File::kConsoleFile:
            return TtyState::LoadConsoleFile(l, rec.console_file());
          case pb::File::kUnixSocket:
            return SocketState::LoadUnixSocket(l, vfs, rec.unix_socket());
          case pb::File::kHostSocket:
            return SocketState::LoadHostSocket(rec.host_socket());
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
      };
  return l.Load<fs::File, pb::File>(
      id, l.state().files(), "file",
      [&](const pb::File& rec) -> absl::StatusOr<std::shared_ptr<fs::File>> {
        ASSIGN_OR_RETURN(std::shared_ptr<fs::File> f, load_kind(rec));
        if (rec.has_async()) RETURN_IF_ERROR(LoadAsync(rec.async(), f));
        return f;
      });
}

}  // namespace sandboxd::state
