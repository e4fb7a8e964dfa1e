// SBX_SAVED_SIZE(T, n), at the top of the function that saves T: the build
// fails when T, a type the state code saves field by field, changes size,
// so that a field added to a kernel object cannot be left out of the
// checkpoint unnoticed. Whoever changes T saves and loads the new field in
// that function and its Load counterpart (or, for a field that is rebuilt
// or not state, says so in a comment there), then writes the new size.
// README.md, "Completeness".
//
// The sizes are those of x86-64 with libstdc++, the same under GCC and
// clang (one Itanium C++ ABI, one standard library). Another standard
// library, or libstdc++'s debug mode (other container sizes), skips the
// check rather than fail on sizes that only differ by library.
#ifndef SANDBOXD_SENTRY_STATE_SAVED_SIZE_H_
#define SANDBOXD_SENTRY_STATE_SAVED_SIZE_H_

#include <cstddef>  // defines __GLIBCXX__ under libstdc++

#if defined(__x86_64__) && defined(__GLIBCXX__) && !defined(_GLIBCXX_DEBUG)
#define SBX_SAVED_SIZE(T, n)                                                \
  static_assert(sizeof(T) == (n),                                           \
                #T " changed: save and load the change in this function "   \
                   "and its Load counterpart (sentry/state/README.md, "     \
                   "\"Completeness\"), then update the size here")
#else
#define SBX_SAVED_SIZE(T, n) static_assert(sizeof(T) > 0, #T)
#endif

#endif  // SANDBOXD_SENTRY_STATE_SAVED_SIZE_H_
