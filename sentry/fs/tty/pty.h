// Pseudo-terminals (pty(7), Unix98): /dev/ptmx creates a pair, the master
// side for a terminal emulator and the replica /dev/pts/N for the program,
// with the line discipline between them; devpts shows the replicas.
//
//   master write ──► LineDiscipline::Input ──► replica read
//                         │ echo
//   master read  ◄── output queue ◄── Output processing ◄── replica write
//
// As Linux: a new pair is locked (opening /dev/pts/N gives EIO until
// TIOCSPTLCK 0, which unlockpt does); /dev/pts/N is S_IFCHR 136:N, owned
// by the opener, mode 0620 group 5 (Debian's devpts options); it
// disappears when the master closes, and the master's close hangs the
// replica up (reads give EOF, writes EIO; its session leader gets SIGHUP).
// Reading the master gives EIO once every replica is closed; writing it
// works with or without a replica open (the input waits for one). Packet mode (TIOCPKT) prefixes
// each master read with a status byte (data, or TIOCPKT_FLUSHREAD/WRITE
// after TCFLSH).
//
// Lock order: DevPts::mu_ > Pty::mu_ (both leaves otherwise); queues are
// notified and JobControl called with neither held.
#ifndef SANDBOXD_SENTRY_FS_TTY_PTY_H_
#define SANDBOXD_SENTRY_FS_TTY_PTY_H_

#include <sys/ioctl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "sentry/fs/file.h"
#include "sentry/fs/inode.h"
#include "sentry/fs/tty/line_discipline.h"
#include "sentry/fs/tty/terminal.h"
#include "sentry/waiter/event_source.h"

namespace sandboxd::state {
struct TtyState;
}  // namespace sandboxd::state

namespace sandboxd::fs::tty {

class DevPts;
class PtsInode;

// UNIX98_PTY_SLAVE_MAJOR.
inline constexpr uint32_t kPtsMajor = 136;

// One pair: the line discipline, the output queue and the state of both
// sides.
class Pty final : public Terminal {
 public:
  // Bytes the program may have written that the master has not read yet.
  static constexpr size_t kOutputCapacity = 16 * 1024;

  Pty(std::shared_ptr<DevPts> devpts, uint32_t index, JobControl* jc);
  ~Pty() override;

  uint32_t index() const { return index_; }
  dev_t Device() const override { return makedev(kPtsMajor, index_); }

  // The master side.
  int64_t MasterRead(void* buf, uint64_t n, bool nonblock, const IoContext& io);
  int64_t MasterWrite(const void* buf, uint64_t n, bool nonblock,
                      const IoContext& io);
  waiter::EventMask MasterReadiness(waiter::EventMask mask);
  // The master's last description closed: hang up.
  void MasterClosed();
  int64_t SetLocked(bool locked);
  bool locked();
  // FIONREAD on the master: what the replica wrote, not yet read.
  int64_t MasterQueued(int* out);
  int64_t SetPacketMode(bool on);
  bool packet_mode();

  // The replica side.
  int64_t ReplicaRead(void* buf, uint64_t n, bool nonblock,
                      const IoContext& io);
  int64_t ReplicaWrite(const void* buf, uint64_t n, bool nonblock,
                       const IoContext& io);
  waiter::EventMask ReplicaReadiness(waiter::EventMask mask);
  // Opening /dev/pts/N: -EIO while locked or after the master closed.
  int64_t ReplicaOpening();
  void ReplicaClosed();

  const std::shared_ptr<waiter::WaitQueue>& master_queue() const { return master_q_; }
  const std::shared_ptr<waiter::WaitQueue>& replica_queue() const { return replica_q_; }

  // Terminal.
  int64_t GetTermios(KernelTermios* out) override;
  int64_t SetTermios(const KernelTermios& t, bool flush_input) override;
  int64_t GetWinsize(struct winsize* out) override;
  int64_t SetWinsize(const struct winsize& ws) override;
  int64_t InputQueued(int* out) override;
  int64_t OutputQueued(int* out) override;
  int64_t Flush(int queue) override;
  bool hung_up() const override;
  int64_t OpenProgramSide(int flags, std::shared_ptr<Inode> via,
                          std::shared_ptr<File>* out) override;

  // The replica's inode in devpts (null once the master closed).
  std::shared_ptr<PtsInode> pts_inode();

  // Whether a PtyRelay holds the master (a terminal of sandboxd's, whose
  // master no file of the sandbox has): saved, so that a restore relays
  // the pair again (boot.cc).
  void set_relayed(bool on);
  bool relayed();

 private:
  friend struct ::sandboxd::state::TtyState;  // checkpoint save and load
  friend class DevPts;  // names mu_ in its lock order annotation
  // Master reads under packet mode: a status byte first.
  int64_t TakeMasterOutput(uint8_t* buf, uint64_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<DevPts> devpts_;
  const uint32_t index_;
  const std::shared_ptr<waiter::WaitQueue> master_q_ = std::make_shared<waiter::WaitQueue>();
  const std::shared_ptr<waiter::WaitQueue> replica_q_ = std::make_shared<waiter::WaitQueue>();

  mutable absl::Mutex mu_;
  LineDiscipline ld_ ABSL_GUARDED_BY(mu_);
  std::string output_ ABSL_GUARDED_BY(mu_);  // for the master to read
  struct winsize winsize_ ABSL_GUARDED_BY(mu_) = {};
  bool locked_ ABSL_GUARDED_BY(mu_) = true;
  bool packet_ ABSL_GUARDED_BY(mu_) = false;
  uint8_t packet_status_ ABSL_GUARDED_BY(mu_) = 0;
  bool master_open_ ABSL_GUARDED_BY(mu_) = true;
  int replicas_ ABSL_GUARDED_BY(mu_) = 0;     // open replica descriptions
  bool replica_seen_ ABSL_GUARDED_BY(mu_) = false;
  bool relayed_ ABSL_GUARDED_BY(mu_) = false;
};

// The master side: what opening /dev/ptmx returns. Its inode is /dev/ptmx.
class PtyMasterFile final : public InodeFile, public waiter::EventSource, public TtyFile {
 public:
  PtyMasterFile(std::shared_ptr<Inode> ptmx, int flags, std::shared_ptr<Pty> pty);
  ~PtyMasterFile() override;

  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override;
  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const IoContext& io) override;
  int64_t Seek(int64_t, int) override { return -ESPIPE; }
  int64_t Ioctl(uint64_t request, void* buf) override { return -ENOTTY; }
  waiter::EventMask Readiness(waiter::EventMask mask) override;
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask) override;
  void EventUnregister(waiter::Waiter* w) override;
  std::shared_ptr<waiter::WaitQueue> event_queue() override { return pty_->master_queue(); }
  // tty_fasync: POLL_IN for input (n_tty's write wakeups are not sent).
  waiter::EventMask AsyncEvents() override { return POLLIN | POLLRDNORM | POLLPRI; }
  const std::shared_ptr<Terminal>& terminal() const override { return term_; }
  bool program_side() const override { return false; }

  Pty& pty() { return *pty_; }

 private:
  const std::shared_ptr<Pty> pty_;
  const std::shared_ptr<Terminal> term_;
};

// The replica side: /dev/pts/N (and /dev/tty when it is the controlling
// terminal).
class PtyReplicaFile final : public InodeFile, public waiter::EventSource, public TtyFile {
 public:
  // Preconditions: pty->ReplicaOpening() succeeded.
  PtyReplicaFile(std::shared_ptr<Inode> inode, int flags, std::shared_ptr<Pty> pty);
  ~PtyReplicaFile() override;

  int64_t Read(void* buf, uint64_t n, int64_t offset,
               const IoContext& io) override;
  int64_t Write(const void* buf, uint64_t n, int64_t offset,
                const IoContext& io) override;
  int64_t Seek(int64_t, int) override { return -ESPIPE; }
  int64_t Ioctl(uint64_t request, void* buf) override { return -ENOTTY; }
  waiter::EventMask Readiness(waiter::EventMask mask) override;
  void EventRegister(waiter::Waiter* w, waiter::EventMask mask) override;
  void EventUnregister(waiter::Waiter* w) override;
  std::shared_ptr<waiter::WaitQueue> event_queue() override { return pty_->replica_queue(); }
  waiter::EventMask AsyncEvents() override { return POLLIN | POLLRDNORM | POLLPRI; }
  const std::shared_ptr<Terminal>& terminal() const override { return term_; }

 private:
  friend struct ::sandboxd::state::TtyState;  // checkpoint save and load
  const std::shared_ptr<Pty> pty_;
  const std::shared_ptr<Terminal> term_;
};

// /dev/pts/N.
class PtsInode final : public Inode {
 public:
  PtsInode(std::weak_ptr<Pty> pty, uint64_t dev, uint64_t ino, uint32_t index,
           uint32_t uid);
  uint32_t Type() const override { return S_IFCHR; }
  int GetAttr(Attr* out) override;
  int SetAttr(const SetAttrRequest& req) override;
  int Open(int flags, std::shared_ptr<File>* out) override;
  uint64_t ino() const { return ino_; }
  std::shared_ptr<Pty> pty() const { return pty_.lock(); }

 private:
  friend struct ::sandboxd::state::TtyState;  // checkpoint save and load
  const std::weak_ptr<Pty> pty_;
  const uint64_t dev_;
  const uint64_t ino_;
  const uint32_t index_;
  absl::Mutex mu_;
  uint32_t mode_ ABSL_GUARDED_BY(mu_) = 0620;
  uint32_t uid_ ABSL_GUARDED_BY(mu_);
  uint32_t gid_ ABSL_GUARDED_BY(mu_) = 5;  // tty
  struct timespec time_ ABSL_GUARDED_BY(mu_);
};

// The devpts filesystem: its root directory and the pair allocator.
class DevPts : public std::enable_shared_from_this<DevPts> {
 public:
  // `dev`: st_dev of devpts's inodes; `jc`: the kernel's job control.
  static std::shared_ptr<DevPts> Create(uint64_t dev, JobControl* jc);

  std::shared_ptr<Inode> Root() const { return root_; }
  // Opening /dev/ptmx (`ptmx` is its inode): a new pair, its master file.
  int64_t OpenMaster(std::shared_ptr<Inode> ptmx, int flags,
                     std::shared_ptr<File>* out);

  // The pair a PtyRelay held when the sandbox was saved (Pty::relayed),
  // or null.
  std::shared_ptr<Pty> FindRelayed();

  // For the root directory.
  int Lookup(const std::string& name, std::shared_ptr<Inode>* out);
  int ReadDir(std::vector<DirEntry>* out);
  // Called by Pty.
  void RemoveNode(uint32_t index);
  void FreeIndex(uint32_t index);

 private:
  friend struct ::sandboxd::state::TtyState;  // checkpoint save and load
  DevPts(uint64_t dev, JobControl* jc) : dev_(dev), jc_(jc) {}

  const uint64_t dev_;
  JobControl* const jc_;
  std::shared_ptr<Inode> root_;
  std::shared_ptr<Inode> ptmx_node_;  // /dev/pts/ptmx, mode 0000

  absl::Mutex mu_ ABSL_ACQUIRED_BEFORE(Pty::mu_);
  std::map<uint32_t, std::shared_ptr<PtsInode>> nodes_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> used_ ABSL_GUARDED_BY(mu_);  // index allocation
};

}  // namespace sandboxd::fs::tty

#endif  // SANDBOXD_SENTRY_FS_TTY_PTY_H_
