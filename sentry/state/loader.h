// Loader: the reverse of Saver, id -> the rebuilt object.
//
// Every reference in a State is an id in some table; the first Load of an
// id builds the object from its record, every later Load of the same id
// returns the same shared_ptr, so that sharing is restored exactly (two
// descriptors that shared a description share one again; hard links stay
// one inode). Bad ids (beyond the table, or an object that needs itself to
// be built) are errors, never crashes: an image is input.
//
// Besides the tables, the Loader carries what a load needs from outside
// the image: the memory file new data goes to, the saved pages, and the
// host descriptors that stand for the sandbox's inherited stdio.
//
// The Loader keeps every object it built alive (a later reference must find
// it): destroy it once the load is done, or closed files never close.
//
// Not thread-safe: a load runs before the sandbox starts, on one thread.
#ifndef SANDBOXD_SENTRY_STATE_LOADER_H_
#define SANDBOXD_SENTRY_STATE_LOADER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/repeated_field.h"
#include "sentry/state/pages.h"
#include "sentry/state/state.pb.h"

namespace sandboxd::mm {
class MemoryFile;
}
namespace sandboxd::fs {
class FdTable;
class File;
class Inode;
}
namespace sandboxd::socket {
class UnixNamespace;
}
namespace sandboxd::fs::tty {
class DevPts;
class HostTerminal;
}

namespace sandboxd::state {

namespace pb = ::sandboxd::state::v1;

class Loader {
 public:
  // All must outlive the Loader (and `memfile` everything loaded).
  Loader(const pb::State* state, PageReader* pages, mm::MemoryFile* memfile)
      : state_(state), pages_(pages), memfile_(memfile) {}

  const pb::State& state() const { return *state_; }
  PageReader& pages() { return *pages_; }
  mm::MemoryFile* memfile() const { return memfile_; }

  // Host descriptors by the number they had in the saved Sentry (0, 1, 2
  // for stdio): the HostFile loader dups the one given here.
  void set_host_fd(int saved_fd, int fd_now) { host_fds_[saved_fd] = fd_now; }
  // -1 when the caller did not give one.
  int host_fd(int saved_fd) const {
    auto it = host_fds_.find(saved_fd);
    return it == host_fds_.end() ? -1 : it->second;
  }

  // The rootfs directory, reopened by the caller (a hostfs root): the
  // lower layer of a loaded overlay.
  void set_rootfs(std::shared_ptr<fs::Inode> root) { rootfs_ = std::move(root); }
  const std::shared_ptr<fs::Inode>& rootfs() const { return rootfs_; }

  // The root of a bind mount (a hostfs root) by its label, reopened by
  // the caller from the spec: where HostInode records are looked up.
  void set_host_root(const std::string& label, std::shared_ptr<fs::Inode> root) {
    host_roots_[label] = std::move(root);
  }
  std::shared_ptr<fs::Inode> host_root(const std::string& label) const {
    auto it = host_roots_.find(label);
    return it == host_roots_.end() ? nullptr : it->second;
  }

  // The root of a filesystem the caller built anew for the loaded tree,
  // by the fstype its mounts had ("proc", "devtmpfs"): procfs (over the
  // loading Kernel), devfs. Its saved inodes are looked up again by path.
  void set_pseudo_root(const std::string& fstype,
                       std::shared_ptr<fs::Inode> root) {
    pseudo_roots_[fstype] = std::move(root);
  }
  std::shared_ptr<fs::Inode> pseudo_root(const std::string& fstype) const {
    auto it = pseudo_roots_.find(fstype);
    return it == pseudo_roots_.end() ? nullptr : it->second;
  }

  // The devpts (the one inside the devfs given as "devtmpfs") that loaded
  // ptys take their indexes and /dev/pts nodes in; null: an image with
  // ptys fails.
  void set_devpts(std::shared_ptr<fs::tty::DevPts> devpts) {
    devpts_ = std::move(devpts);
  }
  const std::shared_ptr<fs::tty::DevPts>& devpts() const { return devpts_; }

  // The host terminal that stands for the saved console now (as host fds
  // stand for inherited stdio); null: an image with the console fails.
  void set_console(std::shared_ptr<fs::tty::HostTerminal> console) {
    console_ = std::move(console);
  }
  const std::shared_ptr<fs::tty::HostTerminal>& console() const {
    return console_;
  }

  // The namespace loaded AF_UNIX sockets bind their names in and live in
  // (the Sentry's, or a test's); null: an image with sockets fails.
  void set_unix_namespace(socket::UnixNamespace* ns) { unix_ns_ = ns; }
  socket::UnixNamespace* unix_namespace() const { return unix_ns_; }

  // Descriptors whose procfs file is opened again only once every process
  // and thread is loaded (KernelState::LoadKernel turns this on, and
  // FsState::LoadDeferredFds installs them): a /proc/PID/fd/N or
  // /proc/PID/fdinfo/N looks N up in PID's descriptor table, a
  // /proc/PID/task/TID/... needs TID, and /proc/PID/maps PID's address
  // space, none of which need be loaded when the table that holds the file
  // is. Off, a procfs file is opened as its table loads.
  struct DeferredFd {
    std::shared_ptr<fs::FdTable> table;
    int fd;
    uint64_t file;  // id in State.files
    bool cloexec;
  };
  void set_defer_proc_fds(bool on) { defer_proc_fds_ = on; }
  bool defer_proc_fds() const { return defer_proc_fds_; }
  std::vector<DeferredFd>& deferred_fds() { return deferred_fds_; }
  // The same for a procfs file that something other than a descriptor
  // holds (an epoll interest, an SCM_RIGHTS message in flight): `install`
  // gets it once it is opened again, after the deferred descriptors.
  // `what` names the holder in errors.
  struct DeferredUse {
    uint64_t file;  // id in State.files
    std::string what;
    std::function<absl::Status(std::shared_ptr<fs::File>)> install;
  };
  std::vector<DeferredUse>& deferred_uses() { return deferred_uses_; }
  // Whether file `id` (unchecked) is to be deferred now: defer_proc_fds
  // is on and it is a file on procfs, opened through a procfs mount (its
  // inode saved by path: FsState::SavePseudoInode).
  bool DeferFile(uint64_t id) const {
    if (!defer_proc_fds_) return false;
    const pb::State& st = *state_;
    if (id == 0 || id > static_cast<uint64_t>(st.files_size())) return false;
    const pb::File& f = st.files(static_cast<int>(id - 1));
    if (!f.has_inode_file()) return false;
    const uint64_t inode = f.inode_file().inode();
    if (inode == 0 || inode > static_cast<uint64_t>(st.inodes_size())) return false;
    const pb::Inode& in = st.inodes(static_cast<int>(inode - 1));
    return in.has_pseudo() && in.pseudo().fstype() == "proc";
  }

  // Objects that the loaded graph uses but does not own (an OverlayFs,
  // which its inodes reach by plain pointer): the caller takes them with
  // TakeKept() and keeps them as long as it keeps what it loaded.
  void Keep(std::shared_ptr<void> obj) { kept_.push_back(std::move(obj)); }
  std::vector<std::shared_ptr<void>> TakeKept() { return std::move(kept_); }

  // The object with `id` in `table` (`kind` names it in errors), built by
  // `build` the first time. Id 0 is null.
  template <typename T, typename Msg>
  absl::StatusOr<std::shared_ptr<T>> Load(
      uint64_t id, const google::protobuf::RepeatedPtrField<Msg>& table,
      absl::string_view kind,
      absl::FunctionRef<absl::StatusOr<std::shared_ptr<T>>(const Msg&)>
          build) {
    if (id == 0) return std::shared_ptr<T>();
    if (id > static_cast<uint64_t>(table.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          kind, " ", id, " referenced, but the image has ", table.size()));
    }
    const Key key{&table, id};
    auto it = objects_.find(key);
    if (it != objects_.end()) {
      if (it->second == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(kind, " ", id, " needs itself to be loaded"));
      }
      return std::static_pointer_cast<T>(it->second);
    }
    objects_[key] = nullptr;  // in progress
    absl::StatusOr<std::shared_ptr<T>> obj = build(table.Get(id - 1));
    if (!obj.ok()) {
      objects_.erase(key);
      return absl::Status(obj.status().code(),
                          absl::StrCat(kind, " ", id, ": ",
                                       obj.status().message()));
    }
    if (*obj == nullptr) {
      objects_.erase(key);
      return absl::InternalError(absl::StrCat(kind, " ", id, ": built null"));
    }
    objects_[key] = *obj;
    return obj;
  }

  // Registers an object built before its record is finished (a directory
  // whose children refer to it), so that Load finds it.
  template <typename T, typename Msg>
  void Register(uint64_t id, const google::protobuf::RepeatedPtrField<Msg>& table,
                std::shared_ptr<T> obj) {
    objects_[Key{&table, id}] = std::move(obj);
  }

 private:
  using Key = std::pair<const void*, uint64_t>;  // (table, id)
  const pb::State* const state_;
  PageReader* const pages_;
  mm::MemoryFile* const memfile_;
  std::map<int, int> host_fds_;
  std::shared_ptr<fs::Inode> rootfs_;
  std::map<std::string, std::shared_ptr<fs::Inode>> host_roots_;
  socket::UnixNamespace* unix_ns_ = nullptr;
  std::shared_ptr<fs::tty::DevPts> devpts_;
  std::shared_ptr<fs::tty::HostTerminal> console_;
  std::map<std::string, std::shared_ptr<fs::Inode>> pseudo_roots_;
  std::vector<std::shared_ptr<void>> kept_;
  bool defer_proc_fds_ = false;
  std::vector<DeferredFd> deferred_fds_;
  std::vector<DeferredUse> deferred_uses_;
  // Null while the object is being built.
  std::map<Key, std::shared_ptr<void>> objects_;
};

}  // namespace sandboxd::state

#endif  // SANDBOXD_SENTRY_STATE_LOADER_H_
