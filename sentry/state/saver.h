// Saver: the object table of a save in progress.
//
// Kernel objects are a graph with sharing: one File behind several
// descriptors (dup, fork, SCM_RIGHTS, epoll), one Inode behind several names
// (hard links), dentries and open files, one Pipe behind two ends. The Saver
// writes each shared object once, into its kind's table in the State
// message, and hands out its id (the 1-based index in that table) to every
// later reference, so that the Loader can rebuild exactly the same sharing.
//
// Objects are keyed by (table, address). A kind must therefore always be
// saved through the same static type (Inode*, File*, Pipe*), never once
// through a base and once through a derived pointer: with multiple
// inheritance the two addresses differ.
//
// Not thread-safe: a save runs while the sandbox is stopped, on one thread.
#ifndef SANDBOXD_SENTRY_STATE_SAVER_H_
#define SANDBOXD_SENTRY_STATE_SAVER_H_

#include <cstdint>
#include <map>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/repeated_field.h"
#include "sentry/state/pages.h"
#include "sentry/state/state.pb.h"

namespace sandboxd::state {

namespace pb = ::sandboxd::state::v1;

class Saver {
 public:
  // `pages` receives memory-file data (tmpfs file contents, later
  // anonymous memory); both must outlive the Saver.
  Saver(pb::State* state, PageWriter* pages) : state_(state), pages_(pages) {}

  pb::State& state() { return *state_; }
  PageWriter& pages() { return *pages_; }

  // The rootfs directory (the hostfs root), the one lower layer an
  // overlay may have for now: it is reopened by the loader's caller.
  void set_rootfs(const void* rootfs) { rootfs_ = rootfs; }
  const void* rootfs() const { return rootfs_; }

  // The id of `obj` in `table`. The first time, a record is appended and
  // `fill` writes it; the id is assigned before `fill` runs, so that an
  // object reachable from itself ends the recursion. A null `obj` is id 0.
  // An error from `fill` fails the whole save (the State is then partial
  // and must be thrown away).
  template <typename T, typename Msg>
  absl::StatusOr<uint64_t> Save(const T* obj,
                                google::protobuf::RepeatedPtrField<Msg>* table,
                                absl::FunctionRef<absl::Status(Msg*)> fill) {
    if (obj == nullptr) return 0;
    auto [it, inserted] = ids_.try_emplace(
        Key{table, obj}, static_cast<uint64_t>(table->size()) + 1);
    if (!inserted) return it->second;
    const uint64_t id = it->second;
    Msg* record = table->Add();  // elements never move: the pointer stays valid
    absl::Status s = fill(record);
    if (!s.ok()) return s;
    return id;
  }

  // Whether `obj` was saved into `table` already, and its id (0: not).
  // For references that must not save what they name (a lock's owner).
  bool Saved(const void* table, const void* obj) const {
    return IdOf(table, obj) != 0;
  }
  uint64_t IdOf(const void* table, const void* obj) const {
    auto it = ids_.find(Key{table, obj});
    return it == ids_.end() ? 0 : it->second;
  }

 private:
  using Key = std::pair<const void*, const void*>;  // (table, object)
  pb::State* const state_;
  PageWriter* const pages_;
  const void* rootfs_ = nullptr;
  std::map<Key, uint64_t> ids_;
};

}  // namespace sandboxd::state

#endif  // SANDBOXD_SENTRY_STATE_SAVER_H_
