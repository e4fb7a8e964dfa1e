#include "sentry/state/tty_state.h"

#include <fcntl.h>

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sentry/kernel/task.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/saved_size.h"

namespace sandboxd::state {
namespace {

using fs::tty::Pty;

// The thread group with `tgid` among the image's, made already
// (KernelState::NewGroup); null when there is none.
absl::StatusOr<std::shared_ptr<kernel::ThreadGroup>> GroupOf(Loader& l,
                                                            int32_t tgid) {
  const auto& groups = l.state().thread_groups();
  for (int i = 0; i < groups.size(); i++) {
    if (groups.Get(i).tgid() != tgid) continue;
    return l.Load<kernel::ThreadGroup, pb::ThreadGroup>(
        i + 1, groups, "thread group",
        [](const pb::ThreadGroup&)
            -> absl::StatusOr<std::shared_ptr<kernel::ThreadGroup>> {
          return absl::FailedPreconditionError(
              "a terminal's session leader is loaded with the kernel "
              "(KernelState::LoadKernel)");
        });
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<uint64_t> TtyState::SavePty(Saver& s,
                                           const std::shared_ptr<Pty>& pty) {
  SBX_SAVED_SIZE(fs::tty::Pty, 368);
  SBX_SAVED_SIZE(fs::tty::LineDiscipline, 184);
  SBX_SAVED_SIZE(fs::tty::KernelTermios, 36);
  SBX_SAVED_SIZE(fs::tty::PtsInode, 104);
  return s.Save<Pty, pb::Pty>(
      pty.get(), s.state().mutable_ptys(), [&](pb::Pty* r) -> absl::Status {
        r->set_index(pty->index_);
        {
          absl::MutexLock l(&pty->mu_);
          r->set_termios(std::string(
              reinterpret_cast<const char*>(&pty->ld_.termios_),
              sizeof(pty->ld_.termios_)));
          for (const std::string& line : pty->ld_.lines_) r->add_lines(line);
          r->set_edit(pty->ld_.edit_);
          r->set_raw(pty->ld_.raw_);
          r->set_output(pty->output_);
          r->set_ws_row(pty->winsize_.ws_row);
          r->set_ws_col(pty->winsize_.ws_col);
          r->set_ws_xpixel(pty->winsize_.ws_xpixel);
          r->set_ws_ypixel(pty->winsize_.ws_ypixel);
          r->set_locked(pty->locked_);
          r->set_packet(pty->packet_);
          r->set_packet_status(pty->packet_status_);
          r->set_master_open(pty->master_open_);
          r->set_replica_seen(pty->replica_seen_);
          r->set_relayed(pty->relayed_);
        }
        r->set_sid(pty->session());
        r->set_fg_pgid(pty->foreground());
        if (auto leader = pty->session_leader().lock()) {
          r->set_leader_tgid(
              std::static_pointer_cast<kernel::ThreadGroup>(leader)->tgid());
        }
        if (std::shared_ptr<fs::tty::PtsInode> node = pty->pts_inode()) {
          absl::MutexLock l(&node->mu_);
          r->set_node_mode(node->mode_);
          r->set_node_uid(node->uid_);
          r->set_node_gid(node->gid_);
          r->mutable_node_time()->set_sec(node->time_.tv_sec);
          r->mutable_node_time()->set_nsec(node->time_.tv_nsec);
        }
        return absl::OkStatus();
      });
}

absl::Status TtyState::SaveConsole(Saver& s, fs::tty::HostTerminal& t) {
  pb::Console* r = s.state().mutable_console();
  r->set_sid(t.session());
  r->set_fg_pgid(t.foreground());
  r->set_leader_tgid(0);
  if (auto leader = t.session_leader().lock()) {
    r->set_leader_tgid(
        std::static_pointer_cast<kernel::ThreadGroup>(leader)->tgid());
  }
  return absl::OkStatus();
}

absl::Status TtyState::SaveTerminal(Saver& s,
                                    const std::shared_ptr<fs::tty::Terminal>& t,
                                    uint64_t* pty_id, bool* console) {
  SBX_SAVED_SIZE(fs::tty::HostTerminal, 96);
  *pty_id = 0;
  *console = false;
  if (auto pty = std::dynamic_pointer_cast<Pty>(t)) {
    ASSIGN_OR_RETURN(*pty_id, SavePty(s, pty));
    return absl::OkStatus();
  }
  if (auto* host = dynamic_cast<fs::tty::HostTerminal*>(t.get())) {
    *console = true;
    return SaveConsole(s, *host);
  }
  return absl::UnimplementedError(
      "save: a controlling terminal that is neither a pty nor the console");
}

absl::StatusOr<std::shared_ptr<fs::tty::HostTerminal>> TtyState::LoadConsole(
    Loader& l) {
  const std::shared_ptr<fs::tty::HostTerminal>& console = l.console();
  if (console == nullptr) {
    return absl::FailedPreconditionError(
        "the image uses the console, and the loader was given none");
  }
  if (!l.state().has_console()) {
    return absl::InvalidArgumentError("a console reference without a console");
  }
  // Idempotent: every reference sets the same job control.
  const pb::Console& r = l.state().console();
  std::weak_ptr<void> leader;
  if (r.leader_tgid() != 0) {
    ASSIGN_OR_RETURN(auto g, GroupOf(l, r.leader_tgid()));
    leader = g;
  }
  console->SetSession(r.sid(), r.fg_pgid(), std::move(leader));
  return console;
}

absl::Status TtyState::SaveTtyFile(Saver& s, const fs::Vfs& vfs,
                                   const std::shared_ptr<fs::File>& f,
                                   pb::File* rec) {
  SBX_SAVED_SIZE(fs::tty::PtyMasterFile, 176);
  SBX_SAVED_SIZE(fs::tty::PtyReplicaFile, 176);
  SBX_SAVED_SIZE(fs::tty::HostTtyFile, 120);
  std::shared_ptr<Pty> pty;
  bool master = false;
  if (auto* m = dynamic_cast<fs::tty::PtyMasterFile*>(f.get())) {
    pty = std::static_pointer_cast<Pty>(m->terminal());
    master = true;
  } else if (auto* r = dynamic_cast<fs::tty::PtyReplicaFile*>(f.get())) {
    pty = r->pty_;
  } else if (auto* h = dynamic_cast<fs::tty::HostTtyFile*>(f.get())) {
    auto* host = dynamic_cast<fs::tty::HostTerminal*>(h->term_.get());
    if (host == nullptr) {
      return absl::UnimplementedError("save: a host tty file of no console");
    }
    RETURN_IF_ERROR(SaveConsole(s, *host));
    pb::ConsoleFile* r = rec->mutable_console_file();
    r->set_flags(h->StatusFlags() & O_NONBLOCK);
    r->set_via_tty(h->stat_node_ != nullptr && h->stat_node_ != host->node());
    return absl::OkStatus();
  } else {
    return absl::UnimplementedError("save: a terminal file of unknown kind");
  }
  pb::PtyFile* r = rec->mutable_pty_file();
  ASSIGN_OR_RETURN(uint64_t id, SavePty(s, pty));
  r->set_pty(id);
  r->set_master(master);
  auto* in = dynamic_cast<fs::InodeFile*>(f.get());  // both sides are
  r->set_flags(in->StatusFlags());
  const fs::Location& loc = in->location();
  if (loc.valid()) {
    bool reachable = false;
    vfs.PathOf(fs::Location{loc.mount, loc.mount->root}, loc, &reachable);
    if (reachable) {
      ASSIGN_OR_RETURN(*r->mutable_location(), FsState::SaveLocation(s, vfs, loc));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Pty>> TtyState::LoadPty(Loader& l, uint64_t id) {
  return l.Load<Pty, pb::Pty>(
      id, l.state().ptys(), "pty",
      [&](const pb::Pty& r) -> absl::StatusOr<std::shared_ptr<Pty>> {
        const std::shared_ptr<fs::tty::DevPts>& devpts = l.devpts();
        if (devpts == nullptr) {
          return absl::FailedPreconditionError("no devpts to load ptys into");
        }
        if (r.termios().size() != sizeof(fs::tty::KernelTermios) ||
            r.index() > 1u << 20 || r.packet_status() > 0xff) {
          return absl::InvalidArgumentError("bad pty record");
        }
        {
          absl::MutexLock lock(&devpts->mu_);
          if (r.index() < devpts->used_.size() && devpts->used_[r.index()]) {
            return absl::FailedPreconditionError(absl::StrCat(
                "pty ", r.index(), " is in use in the loading devpts"));
          }
          if (r.index() >= devpts->used_.size()) {
            devpts->used_.resize(r.index() + 1, false);
          }
          devpts->used_[r.index()] = true;
        }
        // Its destructor gives the index back.
        auto pty = std::make_shared<Pty>(devpts, r.index(), devpts->jc_);
        {
          absl::MutexLock lock(&pty->mu_);
          fs::tty::LineDiscipline& ld = pty->ld_;
          std::memcpy(&ld.termios_, r.termios().data(), sizeof(ld.termios_));
          ld.lines_.assign(r.lines().begin(), r.lines().end());
          ld.edit_ = r.edit();
          ld.raw_ = r.raw();
          pty->output_ = r.output();
          pty->winsize_.ws_row = static_cast<uint16_t>(r.ws_row());
          pty->winsize_.ws_col = static_cast<uint16_t>(r.ws_col());
          pty->winsize_.ws_xpixel = static_cast<uint16_t>(r.ws_xpixel());
          pty->winsize_.ws_ypixel = static_cast<uint16_t>(r.ws_ypixel());
          pty->locked_ = r.locked();
          pty->packet_ = r.packet();
          pty->packet_status_ = static_cast<uint8_t>(r.packet_status());
          pty->master_open_ = r.master_open();
          pty->replicas_ = 0;  // counted by the loaded replica files
          pty->replica_seen_ = r.replica_seen();
          pty->relayed_ = r.relayed();
        }
        if (r.master_open()) {
          // Inode numbers as DevPts::OpenMaster gives them.
          auto node = std::make_shared<fs::tty::PtsInode>(
              pty, devpts->dev_, r.index() + 3, r.index(), r.node_uid());
          {
            absl::MutexLock lock(&node->mu_);
            node->mode_ = r.node_mode() & 07777;
            node->gid_ = r.node_gid();
            node->time_ = timespec{static_cast<time_t>(r.node_time().sec()),
                                   static_cast<long>(r.node_time().nsec())};
          }
          absl::MutexLock lock(&devpts->mu_);
          devpts->nodes_[r.index()] = std::move(node);
        }
        std::weak_ptr<void> leader;
        if (r.leader_tgid() != 0) {
          ASSIGN_OR_RETURN(auto g, GroupOf(l, r.leader_tgid()));
          leader = g;
        }
        pty->SetSession(r.sid(), r.fg_pgid(), std::move(leader));
        return pty;
      });
}

absl::StatusOr<std::shared_ptr<fs::File>> TtyState::LoadPtyFile(
    Loader& l, fs::Vfs& vfs, const pb::PtyFile& r) {
  ASSIGN_OR_RETURN(std::shared_ptr<Pty> pty, LoadPty(l, r.pty()));
  if (pty == nullptr) return absl::InvalidArgumentError("no pty");
  fs::Location loc;
  if (r.has_location()) {
    ASSIGN_OR_RETURN(loc, FsState::LoadLocation(l, vfs, r.location()));
  }
  std::shared_ptr<fs::InodeFile> f;
  if (r.master()) {
    // Its inode is the ptmx node it was opened by: at its path, else
    // /dev/ptmx, else devpts's own ptmx.
    std::shared_ptr<fs::Inode> ptmx;
    if (loc.valid()) {
      ptmx = loc.dentry->inode();
    } else {
      std::shared_ptr<fs::Inode> dev = l.pseudo_root("devtmpfs");
      if (dev == nullptr || dev->Lookup("ptmx", &ptmx) < 0) {
        l.devpts()->Root()->Lookup("ptmx", &ptmx);
      }
    }
    if (ptmx == nullptr) {
      return absl::FailedPreconditionError("no ptmx node for a pty master");
    }
    f = std::make_shared<fs::tty::PtyMasterFile>(std::move(ptmx), r.flags(), pty);
  } else {
    std::shared_ptr<fs::tty::PtsInode> node = pty->pts_inode();
    if (node == nullptr) {
      // Hung up: its node left /dev/pts with the master; the file keeps one.
      node = std::make_shared<fs::tty::PtsInode>(pty, l.devpts()->dev_,
                                                 pty->index() + 3, pty->index(), 0);
    }
    {
      absl::MutexLock lock(&pty->mu_);
      pty->replicas_++;
    }
    f = std::make_shared<fs::tty::PtyReplicaFile>(std::move(node), r.flags(), pty);
  }
  if (loc.valid()) f->set_location(std::move(loc), &vfs);
  return std::static_pointer_cast<fs::File>(f);
}

}  // namespace sandboxd::state

namespace sandboxd::state {

absl::StatusOr<std::shared_ptr<fs::File>> TtyState::LoadConsoleFile(
    Loader& l, const pb::ConsoleFile& r) {
  ASSIGN_OR_RETURN(std::shared_ptr<fs::tty::HostTerminal> console,
                   LoadConsole(l));
  // /dev/tty's node, for fstat, when it was opened as that.
  std::shared_ptr<fs::Inode> via;
  if (r.via_tty()) {
    if (auto dev = l.pseudo_root("devtmpfs")) dev->Lookup("tty", &via);
  }
  std::shared_ptr<fs::File> f;
  int64_t err = console->OpenProgramSide(O_RDWR | (r.flags() & O_NONBLOCK),
                                         std::move(via), &f);
  if (err < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("opening the console: errno ", -err));
  }
  return f;
}

}  // namespace sandboxd::state
