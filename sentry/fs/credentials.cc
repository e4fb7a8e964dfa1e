#include "sentry/fs/credentials.h"

#include <errno.h>
#include <sys/stat.h>

#include <algorithm>

#include "sentry/fs/inode.h"

namespace sandboxd::fs {
namespace {
thread_local const Credentials* current_credentials = nullptr;
}  // namespace

bool Credentials::InGroup(uint32_t gid) const {
  if (gid == fsgid) return true;
  return std::binary_search(groups.begin(), groups.end(), gid);
}

std::shared_ptr<const Credentials> Credentials::Root() {
  static const std::shared_ptr<const Credentials> root =
      std::make_shared<const Credentials>();
  return root;
}

std::shared_ptr<const Credentials> Credentials::ForUser(
    uint32_t uid, uint32_t gid, std::vector<uint32_t> groups) {
  auto c = std::make_shared<Credentials>();
  c->ruid = c->euid = c->suid = c->fsuid = uid;
  c->rgid = c->egid = c->sgid = c->fsgid = gid;
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  c->groups = std::move(groups);
  if (uid != 0) {
    // What execve gives a non-root uid without file capabilities.
    c->cap_permitted = c->cap_effective = 0;
  }
  return c;
}

int CheckPermission(const Credentials& c, const Attr& a, int mask) {
  mask &= kMayRead | kMayWrite | kMayExec;
  uint32_t mode = a.mode;
  if (c.fsuid == a.uid) {
    mode >>= 6;
  } else if (c.InGroup(a.gid)) {
    mode >>= 3;
  }
  if ((mask & ~mode & 7) == 0) return 0;
  if (S_ISDIR(a.mode)) {
    if (!(mask & kMayWrite) && c.HasCap(CAP_DAC_READ_SEARCH)) return 0;
    if (c.HasCap(CAP_DAC_OVERRIDE)) return 0;
    return -EACCES;
  }
  if (mask == kMayRead && c.HasCap(CAP_DAC_READ_SEARCH)) return 0;
  // Root may not execute a file that no one may execute.
  if ((!(mask & kMayExec) || (a.mode & 0111)) && c.HasCap(CAP_DAC_OVERRIDE)) {
    return 0;
  }
  return -EACCES;
}

int CheckInodePermission(const Credentials& c, Inode& inode, int mask) {
  // With CAP_DAC_OVERRIDE only exec of a non-directory depends on the mode.
  if (c.HasCap(CAP_DAC_OVERRIDE) &&
      (!(mask & kMayExec) || inode.Type() == S_IFDIR)) {
    return 0;
  }
  Attr a;
  if (int r = inode.GetAttr(&a); r < 0) return r;
  return CheckPermission(c, a, mask);
}

const Credentials* CurrentCredentials() { return current_credentials; }
void SetCurrentCredentials(const Credentials* c) { current_credentials = c; }

}  // namespace sandboxd::fs
