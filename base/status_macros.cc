#include "base/status_macros.h"

#include <errno.h>
#include <string.h>

namespace sandboxd {

absl::Status ErrnoStatus(absl::string_view what, int err) {
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (err) {
    case ENOENT: code = absl::StatusCode::kNotFound; break;
    case EACCES:
    case EPERM: code = absl::StatusCode::kPermissionDenied; break;
    case EINVAL: code = absl::StatusCode::kInvalidArgument; break;
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EAGAIN: code = absl::StatusCode::kResourceExhausted; break;
    case ENOSYS: code = absl::StatusCode::kUnimplemented; break;
    default: break;
  }
  return absl::Status(code, absl::StrCat(what, ": ", strerror(err)));
}

}  // namespace sandboxd
