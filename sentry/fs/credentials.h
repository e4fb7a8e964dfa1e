// Credentials: who a task is (Linux's struct cred) and the permission
// checks the VFS and the syscalls make with them.
//
// Every task holds an immutable Credentials (kernel/task.h); a change
// (setuid, capset, execve) builds a new one and swaps it in, so a reader on
// another thread (kill's permission check, /proc/PID/status) sees either
// the old set or the new one whole. The sandbox is one user namespace whose
// every id is mapped: uid 0 there is "root in its own namespace", with
// Linux's rules for it (capabilities follow uid changes unless
// SECBIT_NO_SETUID_FIXUP or SECBIT_KEEP_CAPS say otherwise).
//
// The VFS checks search permission while it walks a path, with the
// credentials of the task whose host thread calls (CurrentCredentials: a
// thread-local the kernel sets for each task's thread; a thread that is not
// a task's acts with every capability).
#ifndef SANDBOXD_SENTRY_FS_CREDENTIALS_H_
#define SANDBOXD_SENTRY_FS_CREDENTIALS_H_

#include <linux/capability.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace sandboxd::fs {

struct Attr;
class Inode;

// CAP_LAST_CAP of the Linux the sandbox presents (6.1: CAP_CHECKPOINT_RESTORE).
inline constexpr int kCapLastCap = 40;
inline constexpr uint64_t kAllCaps = (1ull << (kCapLastCap + 1)) - 1;
inline constexpr uint64_t CapMask(int cap) { return 1ull << cap; }

// securebits (include/uapi/linux/securebits.h): each bit and its lock.
inline constexpr uint32_t kSecbitNoroot = 1u << 0;
inline constexpr uint32_t kSecbitNoSetuidFixup = 1u << 2;
inline constexpr uint32_t kSecbitKeepCaps = 1u << 4;
inline constexpr uint32_t kSecbitKeepCapsLocked = 1u << 5;
inline constexpr uint32_t kSecbitNoCapAmbientRaise = 1u << 6;
inline constexpr uint32_t kSecureAllBits = 0x55;
inline constexpr uint32_t kSecureAllLocks = 0xaa;

// Access wanted of an inode (Linux's MAY_*).
inline constexpr int kMayExec = 1;
inline constexpr int kMayWrite = 2;
inline constexpr int kMayRead = 4;

// The largest supplementary group list (NGROUPS_MAX).
inline constexpr size_t kNgroupsMax = 65536;

struct Credentials {
  uint32_t ruid = 0, euid = 0, suid = 0, fsuid = 0;
  uint32_t rgid = 0, egid = 0, sgid = 0, fsgid = 0;
  std::vector<uint32_t> groups;  // supplementary groups, sorted, no duplicates
  uint64_t cap_inheritable = 0;
  uint64_t cap_permitted = kAllCaps;
  uint64_t cap_effective = kAllCaps;
  uint64_t cap_bounding = kAllCaps;
  uint64_t cap_ambient = 0;
  uint32_t securebits = 0;

  bool HasCap(int cap) const { return (cap_effective & CapMask(cap)) != 0; }
  // fsgid or a supplementary group (Linux's in_group_p).
  bool InGroup(uint32_t gid) const;
  // Whether a securebit (kSecbit*) is set.
  bool Secure(uint32_t bit) const { return (securebits & bit) != 0; }

  // Root with every capability: the sandbox's first process.
  static std::shared_ptr<const Credentials> Root();
  // The spec's user: uid and gid with the given supplementary groups, and
  // capabilities as Linux gives a process of that uid (all for 0, none
  // otherwise).
  static std::shared_ptr<const Credentials> ForUser(
      uint32_t uid, uint32_t gid, std::vector<uint32_t> groups);
};

// generic_permission: `mask` (kMay*) on a file with these attributes.
// 0 or -EACCES.
int CheckPermission(const Credentials& c, const Attr& a, int mask);
// The same for an inode (its GetAttr first). Skips the inode entirely when
// the credentials' capabilities grant the access whatever the mode is.
int CheckInodePermission(const Credentials& c, Inode& inode, int mask);

// Whether `c` owns a file of owner `uid` or may act as if it did
// (inode_owner_or_capable: fsuid or CAP_FOWNER).
inline bool OwnerOrCapable(const Credentials& c, uint32_t uid) {
  return c.fsuid == uid || c.HasCap(CAP_FOWNER);
}

// kill_ok_by_cred: the sender's real or effective uid is the target's real
// or saved uid, or the sender has CAP_KILL.
inline bool MaySignal(const Credentials& sender, const Credentials& target) {
  return sender.euid == target.suid || sender.euid == target.ruid ||
         sender.ruid == target.suid || sender.ruid == target.ruid ||
         sender.HasCap(CAP_KILL);
}

// The credentials of the task whose host thread calls, or null for a
// thread that is not a task's (boot, tests): such callers act as root with
// every capability. Set by the kernel (kernel/task.cc).
const Credentials* CurrentCredentials();
void SetCurrentCredentials(const Credentials* c);

}  // namespace sandboxd::fs

#endif  // SANDBOXD_SENTRY_FS_CREDENTIALS_H_
