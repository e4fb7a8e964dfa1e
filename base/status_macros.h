// Small macros for absl::Status propagation. The Abseil in Debian 12 ships
// no ABSL_RETURN_IF_ERROR / ASSIGN_OR_RETURN, so the project keeps its own.
#ifndef SANDBOXD_BASE_STATUS_MACROS_H_
#define SANDBOXD_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define SBX_CONCAT_INNER(a, b) a##b
#define SBX_CONCAT(a, b) SBX_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` yields a non-OK status.
#define RETURN_IF_ERROR(expr)                         \
  do {                                                \
    ::absl::Status sbx_status_ = (expr);              \
    if (!sbx_status_.ok()) return sbx_status_;        \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (a StatusOr<T>); on error
// returns its status, otherwise assigns the value to `lhs`.
#define ASSIGN_OR_RETURN(lhs, expr) \
  SBX_ASSIGN_OR_RETURN_IMPL(SBX_CONCAT(sbx_statusor_, __LINE__), lhs, expr)
#define SBX_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

namespace sandboxd {

// Prefixes `s` with what was being done: "loading /bin/true: ...".
inline absl::Status Annotate(const absl::Status& s, absl::string_view what) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

// The same for a value or its error.
template <typename T>
absl::StatusOr<T> Annotate(absl::StatusOr<T> s, absl::string_view what) {
  if (s.ok()) return s;
  return Annotate(s.status(), what);
}

// An absl::Status for a failed host call, with errno's text.
absl::Status ErrnoStatus(absl::string_view what, int err);

}  // namespace sandboxd

#endif  // SANDBOXD_BASE_STATUS_MACROS_H_
