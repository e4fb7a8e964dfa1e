// Starting a host thread without an exception. std::thread's constructor
// throws std::system_error when the host refuses a thread (EAGAIN: pids
// or threads limits, memory for the stack); an uncaught throw aborts the
// whole process. Every thread the Sentry and the daemon make is started
// through StartThread, so that a refusal is a Status for the caller to turn
// into an errno (clone: EAGAIN) or a clean failure with its reason.
#ifndef SANDBOXD_BASE_THREAD_H_
#define SANDBOXD_BASE_THREAD_H_

#include <system_error>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"

namespace sandboxd {

// Starts `fn` on a new host thread. `what` names the thread in the error:
// "starting <what>: Resource temporarily unavailable".
template <typename F>
absl::StatusOr<std::thread> StartThread(absl::string_view what, F&& fn) {
  try {
    return std::thread(std::forward<F>(fn));
  } catch (const std::system_error& e) {
    return ErrnoStatus(absl::StrCat("starting ", what), e.code().value());
  }
}

}  // namespace sandboxd

#endif  // SANDBOXD_BASE_THREAD_H_
