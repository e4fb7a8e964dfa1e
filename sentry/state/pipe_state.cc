// FsState: pipes (their buffered data and ends).
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sentry/state/fs_state.h"
#include "sentry/state/saved_size.h"

namespace sandboxd::state {

absl::StatusOr<uint64_t> FsState::SavePipe(Saver& s,
                                           const std::shared_ptr<fs::Pipe>& p) {
  // readers_/writers_ and the opened-ends counters are rebuilt by the
  // loaded ends (a FIFO's opener waiting in open is not an end: it opens
  // again after the load).
  SBX_SAVED_SIZE(fs::Pipe, 160);
  return s.Save<fs::Pipe, pb::Pipe>(
      p.get(), s.state().mutable_pipes(), [&](pb::Pipe* r) {
        absl::MutexLock lock(&p->mu_);
        std::string data;
        data.reserve(p->size_);
        bool first = true;
        for (const auto& c : p->chunks_) {
          const uint64_t skip = first ? p->front_off_ : 0;
          data.append(reinterpret_cast<const char*>(c.data()) + skip,
                      c.size() - skip);
          first = false;
        }
        r->set_data(std::move(data));
        r->set_capacity(p->capacity_);
        return absl::OkStatus();
      });
}

absl::StatusOr<std::shared_ptr<fs::Pipe>> FsState::LoadPipe(Loader& l,
                                                            uint64_t id) {
  return l.Load<fs::Pipe, pb::Pipe>(
      id, l.state().pipes(), "pipe",
      [&](const pb::Pipe& r) -> absl::StatusOr<std::shared_ptr<fs::Pipe>> {
        if (r.data().size() > r.capacity() ||
            r.capacity() > fs::Pipe::kMaxCapacity || r.capacity() == 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "pipe of capacity ", r.capacity(), " holding ", r.data().size()));
        }
        auto p = std::make_shared<fs::Pipe>();
        absl::MutexLock lock(&p->mu_);
        p->capacity_ = r.capacity();
        p->Append(reinterpret_cast<const uint8_t*>(r.data().data()),
                  r.data().size());
        return p;
      });
}

}  // namespace sandboxd::state
