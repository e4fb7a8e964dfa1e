// Test helper: waiter::FakeBlocker (sentry/waiter/testing/fake_blocker.h)
// with the IoContext that file operations take.
#ifndef SANDBOXD_SENTRY_FS_TESTING_FAKE_BLOCKER_H_
#define SANDBOXD_SENTRY_FS_TESTING_FAKE_BLOCKER_H_

#include "sentry/fs/file.h"
#include "sentry/waiter/testing/fake_blocker.h"

namespace sandboxd::fs {

class FakeBlocker : public waiter::FakeBlocker {
 public:
  IoContext io() { return IoContext{-1, this}; }
};

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_TESTING_FAKE_BLOCKER_H_
