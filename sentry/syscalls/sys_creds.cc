// Identity and capabilities: get/set of the real, effective, saved and
// filesystem uids and gids, supplementary groups, capget/capset, and the
// capability prctls (PR_CAP_AMBIENT, PR_CAPBSET_*, PR_*_KEEPCAPS,
// PR_*_SECUREBITS), with Linux's rules (kernel/sys.c, kernel/groups.c,
// kernel/capability.c, security/commoncap.c) for a process of the
// sandbox's user namespace, where every id is mapped.
//
// Each call changes only the calling thread, as on Linux; glibc and musl
// make setuid & co. process-wide by running the call on every thread
// (SIGSETXID / SIGSYNCCALL).
#include <errno.h>
#include <linux/prctl.h>
#include <sys/syscall.h>

#include <algorithm>
#include <vector>

#include "sentry/fs/credentials.h"
#include "sentry/syscalls/args.h"
#include "sentry/syscalls/creds.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {

using fs::Credentials;

namespace {

constexpr uint32_t kNoId = 0xffffffffu;  // (uid_t)-1: leave unchanged

// CAP_FS_SET: what a change of fsuid away from 0 drops (cap_drop_fs_set).
constexpr uint64_t kCapFsSet =
    fs::CapMask(CAP_CHOWN) | fs::CapMask(CAP_DAC_OVERRIDE) |
    fs::CapMask(CAP_DAC_READ_SEARCH) | fs::CapMask(CAP_FOWNER) |
    fs::CapMask(CAP_FSETID) | fs::CapMask(CAP_LINUX_IMMUTABLE) |
    fs::CapMask(CAP_MAC_OVERRIDE);

// cap_emulate_setxuid: capabilities follow a change of uids.
void FixSetuid(const Credentials& old, Credentials* n) {
  if (old.Secure(fs::kSecbitNoSetuidFixup)) return;
  const bool was_root = old.ruid == 0 || old.euid == 0 || old.suid == 0;
  const bool is_root = n->ruid == 0 || n->euid == 0 || n->suid == 0;
  if (was_root && !is_root) {
    if (!old.Secure(fs::kSecbitKeepCaps)) {
      n->cap_permitted = 0;
      n->cap_effective = 0;
    }
    n->cap_ambient = 0;
  }
  if (old.euid == 0 && n->euid != 0) n->cap_effective = 0;
  if (old.euid != 0 && n->euid == 0) n->cap_effective = n->cap_permitted;
}

// The LSM_SETID_FS case: CAP_FS_SET follows fsuid 0.
void FixSetfsuid(const Credentials& old, Credentials* n) {
  if (old.Secure(fs::kSecbitNoSetuidFixup)) return;
  if (old.fsuid == 0 && n->fsuid != 0) n->cap_effective &= ~kCapFsSet;
  if (old.fsuid != 0 && n->fsuid == 0) {
    n->cap_effective |= n->cap_permitted & kCapFsSet;
  }
}

int64_t Commit(Task& t, Credentials n) {
  t.SetCredentials(std::make_shared<const Credentials>(std::move(n)));
  return 0;
}

int64_t SysGetuid(Task& t, const SyscallArgs&) { return t.own_creds().ruid; }
int64_t SysGeteuid(Task& t, const SyscallArgs&) { return t.own_creds().euid; }
int64_t SysGetgid(Task& t, const SyscallArgs&) { return t.own_creds().rgid; }
int64_t SysGetegid(Task& t, const SyscallArgs&) { return t.own_creds().egid; }

int64_t CopyOutIds(Task& t, const SyscallArgs& a, uint32_t r, uint32_t e,
                   uint32_t s) {
  RETURN_IF_ERRNO(CopyOutObj(t, a.a[0], r));
  RETURN_IF_ERRNO(CopyOutObj(t, a.a[1], e));
  return CopyOutObj(t, a.a[2], s);
}
int64_t SysGetresuid(Task& t, const SyscallArgs& a) {
  const Credentials& c = t.own_creds();
  return CopyOutIds(t, a, c.ruid, c.euid, c.suid);
}
int64_t SysGetresgid(Task& t, const SyscallArgs& a) {
  const Credentials& c = t.own_creds();
  return CopyOutIds(t, a, c.rgid, c.egid, c.sgid);
}

int64_t SysSetuid(Task& t, const SyscallArgs& a) {
  const uint32_t uid = static_cast<uint32_t>(a.a[0]);
  if (uid == kNoId) return -EINVAL;
  const Credentials& old = t.own_creds();
  Credentials n = old;
  if (old.HasCap(CAP_SETUID)) {
    n.ruid = n.suid = uid;
  } else if (uid != old.ruid && uid != old.suid) {
    return -EPERM;
  }
  n.euid = n.fsuid = uid;
  FixSetuid(old, &n);
  return Commit(t, std::move(n));
}

int64_t SysSetgid(Task& t, const SyscallArgs& a) {
  const uint32_t gid = static_cast<uint32_t>(a.a[0]);
  if (gid == kNoId) return -EINVAL;
  const Credentials& old = t.own_creds();
  Credentials n = old;
  if (old.HasCap(CAP_SETGID)) {
    n.rgid = n.egid = n.sgid = n.fsgid = gid;
  } else if (gid == old.rgid || gid == old.sgid) {
    n.egid = n.fsgid = gid;
  } else {
    return -EPERM;
  }
  return Commit(t, std::move(n));
}

// setreuid / setregid (kernel/sys.c): the saved id follows the effective
// one when the real one is set or the effective one leaves the real one.
template <bool kUid>
int64_t SetRe(Task& t, const SyscallArgs& a) {
  const uint32_t r = static_cast<uint32_t>(a.a[0]);
  const uint32_t e = static_cast<uint32_t>(a.a[1]);
  const Credentials& old = t.own_creds();
  const bool cap = old.HasCap(kUid ? CAP_SETUID : CAP_SETGID);
  const uint32_t oR = kUid ? old.ruid : old.rgid;
  const uint32_t oE = kUid ? old.euid : old.egid;
  const uint32_t oS = kUid ? old.suid : old.sgid;
  uint32_t nR = oR, nE = oE, nS = oS;
  if (r != kNoId) {
    if (r != oR && r != oE && !cap) return -EPERM;
    nR = r;
  }
  if (e != kNoId) {
    if (e != oR && e != oE && e != oS && !cap) return -EPERM;
    nE = e;
  }
  if (r != kNoId || (e != kNoId && e != oR)) nS = nE;
  Credentials n = old;
  if (kUid) {
    n.ruid = nR, n.euid = nE, n.suid = nS, n.fsuid = nE;
    FixSetuid(old, &n);
  } else {
    n.rgid = nR, n.egid = nE, n.sgid = nS, n.fsgid = nE;
  }
  return Commit(t, std::move(n));
}

template <bool kUid>
int64_t SetRes(Task& t, const SyscallArgs& a) {
  const uint32_t ids[3] = {static_cast<uint32_t>(a.a[0]),
                           static_cast<uint32_t>(a.a[1]),
                           static_cast<uint32_t>(a.a[2])};
  const Credentials& old = t.own_creds();
  const uint32_t cur[3] = {kUid ? old.ruid : old.rgid, kUid ? old.euid : old.egid,
                           kUid ? old.suid : old.sgid};
  if (!old.HasCap(kUid ? CAP_SETUID : CAP_SETGID)) {
    for (uint32_t id : ids) {
      if (id != kNoId && id != cur[0] && id != cur[1] && id != cur[2]) {
        return -EPERM;
      }
    }
  }
  uint32_t next[3];
  for (int i = 0; i < 3; i++) next[i] = ids[i] != kNoId ? ids[i] : cur[i];
  Credentials n = old;
  if (kUid) {
    n.ruid = next[0], n.euid = next[1], n.suid = next[2], n.fsuid = next[1];
    FixSetuid(old, &n);
  } else {
    n.rgid = next[0], n.egid = next[1], n.sgid = next[2], n.fsgid = next[1];
  }
  return Commit(t, std::move(n));
}

// setfsuid/setfsgid return the old value whether or not they changed it.
template <bool kUid>
int64_t SetFs(Task& t, const SyscallArgs& a) {
  const uint32_t id = static_cast<uint32_t>(a.a[0]);
  const Credentials& old = t.own_creds();
  const uint32_t prev = kUid ? old.fsuid : old.fsgid;
  if (id == kNoId) return prev;
  const bool ok =
      kUid ? (id == old.ruid || id == old.euid || id == old.suid ||
              id == old.fsuid || old.HasCap(CAP_SETUID))
           : (id == old.rgid || id == old.egid || id == old.sgid ||
              id == old.fsgid || old.HasCap(CAP_SETGID));
  if (!ok || id == prev) return prev;
  Credentials n = old;
  if (kUid) {
    n.fsuid = id;
    FixSetfsuid(old, &n);
  } else {
    n.fsgid = id;
  }
  Commit(t, std::move(n));
  return prev;
}

int64_t SysGetgroups(Task& t, const SyscallArgs& a) {
  const int size = static_cast<int>(a.a[0]);
  if (size < 0) return -EINVAL;
  const Credentials& c = t.own_creds();
  const int n = static_cast<int>(c.groups.size());
  if (size == 0) return n;
  if (size < n) return -EINVAL;
  RETURN_IF_ERRNO(CopyOutBytes(t, a.a[1], c.groups.data(), n * sizeof(uint32_t)));
  return n;
}

int64_t SysSetgroups(Task& t, const SyscallArgs& a) {
  const int size = static_cast<int>(a.a[0]);
  if (size < 0 || static_cast<size_t>(size) > fs::kNgroupsMax) return -EINVAL;
  const Credentials& old = t.own_creds();
  if (!old.HasCap(CAP_SETGID)) return -EPERM;
  std::vector<uint32_t> groups(size);
  if (size > 0) {
    RETURN_IF_ERRNO(CopyInBytes(t, a.a[1], groups.data(), size * sizeof(uint32_t)));
  }
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  Credentials n = old;
  n.groups = std::move(groups);
  return Commit(t, std::move(n));
}

struct CapHeader {
  uint32_t version;
  int pid;
};
struct CapData {
  uint32_t effective, permitted, inheritable;
};
constexpr uint32_t kCapV1 = 0x19980330, kCapV2 = 0x20071026, kCapV3 = 0x20080522;

// The header's version: 1 or 2 words per set, or a bad version (the
// header is rewritten with the preferred one, as Linux's cap_validate_magic).
int64_t CapWords(Task& t, uint64_t hdr_addr, CapHeader* h, int* words) {
  RETURN_IF_ERRNO(CopyInObj(t, hdr_addr, h));
  if (h->version == kCapV1) {
    *words = 1;
  } else if (h->version == kCapV2 || h->version == kCapV3) {
    *words = 2;
  } else {
    h->version = kCapV3;
    RETURN_IF_ERRNO(CopyOutObj(t, hdr_addr, *h));
    return -EINVAL;
  }
  return 0;
}

int64_t SysCapget(Task& t, const SyscallArgs& a) {
  CapHeader h;
  int words = 0;
  if (int64_t r = CapWords(t, a.a[0], &h, &words); r < 0) {
    // A bad version with no data pointer is how libcap asks for the
    // preferred version: success.
    return (r == -EINVAL && a.a[1] == 0) ? 0 : r;
  }
  if (h.pid < 0) return -EINVAL;
  std::shared_ptr<const Credentials> c;
  if (h.pid == 0 || h.pid == t.tid()) {
    c = t.creds();
  } else {
    std::shared_ptr<kernel::Task> other = t.kernel().FindTask(h.pid);
    if (other == nullptr) return -ESRCH;
    c = other->creds();
  }
  if (a.a[1] == 0) return 0;
  CapData d[2];
  for (int i = 0; i < 2; i++) {
    d[i].effective = static_cast<uint32_t>(c->cap_effective >> (32 * i));
    d[i].permitted = static_cast<uint32_t>(c->cap_permitted >> (32 * i));
    d[i].inheritable = static_cast<uint32_t>(c->cap_inheritable >> (32 * i));
  }
  return CopyOutBytes(t, a.a[1], d, words * sizeof(CapData));
}

int64_t SysCapset(Task& t, const SyscallArgs& a) {
  CapHeader h;
  int words = 0;
  RETURN_IF_ERRNO(CapWords(t, a.a[0], &h, &words));
  // Only the caller's own capabilities may be set.
  if (h.pid != 0 && h.pid != t.tid()) return -EPERM;
  CapData d[2] = {};
  RETURN_IF_ERRNO(CopyInBytes(t, a.a[1], d, words * sizeof(CapData)));
  uint64_t eff = 0, prm = 0, inh = 0;
  for (int i = 0; i < words; i++) {
    eff |= static_cast<uint64_t>(d[i].effective) << (32 * i);
    prm |= static_cast<uint64_t>(d[i].permitted) << (32 * i);
    inh |= static_cast<uint64_t>(d[i].inheritable) << (32 * i);
  }
  eff &= fs::kAllCaps, prm &= fs::kAllCaps, inh &= fs::kAllCaps;
  const Credentials& old = t.own_creds();
  auto subset = [](uint64_t a, uint64_t b) { return (a & ~b) == 0; };
  // cap_capset: without CAP_SETPCAP the inheritable set stays within
  // inheritable | permitted; never beyond inheritable | bounding.
  if (!old.HasCap(CAP_SETPCAP) &&
      !subset(inh, old.cap_inheritable | old.cap_permitted)) {
    return -EPERM;
  }
  if (!subset(inh, old.cap_inheritable | old.cap_bounding)) return -EPERM;
  if (!subset(prm, old.cap_permitted)) return -EPERM;
  if (!subset(eff, prm)) return -EPERM;
  Credentials n = old;
  n.cap_effective = eff;
  n.cap_permitted = prm;
  n.cap_inheritable = inh;
  n.cap_ambient &= prm & inh;
  return Commit(t, std::move(n));
}

}  // namespace

int64_t CapabilityPrctl(Task& t, int option, uint64_t arg2, uint64_t arg3,
                        uint64_t arg4, uint64_t arg5) {
  const Credentials& old = t.own_creds();
  const auto valid_cap = [](uint64_t c) { return c <= fs::kCapLastCap; };
  switch (option) {
    case PR_CAPBSET_READ:
      if (!valid_cap(arg2)) return -EINVAL;
      return (old.cap_bounding >> arg2) & 1;
    case PR_CAPBSET_DROP: {
      if (!valid_cap(arg2)) return -EINVAL;
      if (!old.HasCap(CAP_SETPCAP)) return -EPERM;
      Credentials n = old;
      n.cap_bounding &= ~fs::CapMask(static_cast<int>(arg2));
      return Commit(t, std::move(n));
    }
    case PR_GET_KEEPCAPS:
      return old.Secure(fs::kSecbitKeepCaps) ? 1 : 0;
    case PR_SET_KEEPCAPS: {
      if (arg2 > 1) return -EINVAL;
      if (old.Secure(fs::kSecbitKeepCapsLocked)) return -EPERM;
      Credentials n = old;
      if (arg2 != 0) {
        n.securebits |= fs::kSecbitKeepCaps;
      } else {
        n.securebits &= ~fs::kSecbitKeepCaps;
      }
      return Commit(t, std::move(n));
    }
    case PR_GET_SECUREBITS:
      return old.securebits;
    case PR_SET_SECUREBITS: {
      const uint64_t bits = arg2;
      const uint64_t locked = old.securebits & fs::kSecureAllLocks;
      if (((locked >> 1) & (old.securebits ^ bits)) || (locked & ~bits) ||
          (bits & ~static_cast<uint64_t>(fs::kSecureAllLocks | fs::kSecureAllBits)) ||
          !old.HasCap(CAP_SETPCAP)) {
        return -EPERM;
      }
      Credentials n = old;
      n.securebits = static_cast<uint32_t>(bits);
      return Commit(t, std::move(n));
    }
    case PR_CAP_AMBIENT: {
      if (arg2 == PR_CAP_AMBIENT_CLEAR_ALL) {
        if (arg3 | arg4 | arg5) return -EINVAL;
        Credentials n = old;
        n.cap_ambient = 0;
        return Commit(t, std::move(n));
      }
      if (!valid_cap(arg3) || arg4 || arg5) return -EINVAL;
      const uint64_t bit = fs::CapMask(static_cast<int>(arg3));
      if (arg2 == PR_CAP_AMBIENT_IS_SET) return (old.cap_ambient & bit) ? 1 : 0;
      if (arg2 != PR_CAP_AMBIENT_RAISE && arg2 != PR_CAP_AMBIENT_LOWER) {
        return -EINVAL;
      }
      Credentials n = old;
      if (arg2 == PR_CAP_AMBIENT_RAISE) {
        if (!(old.cap_permitted & bit) || !(old.cap_inheritable & bit) ||
            old.Secure(fs::kSecbitNoCapAmbientRaise)) {
          return -EPERM;
        }
        n.cap_ambient |= bit;
      } else {
        n.cap_ambient &= ~bit;
      }
      return Commit(t, std::move(n));
    }
    default:
      return -EINVAL;
  }
}

std::shared_ptr<const Credentials> ExecCredentials(const Credentials& old,
                                                   const fs::Attr& file,
                                                   bool nosuid,
                                                   bool no_new_privs) {
  Credentials n = old;
  // bprm_fill_uid: the set-user-ID and set-group-ID (with group exec) bits.
  if (!nosuid && !no_new_privs) {
    if (file.mode & S_ISUID) n.euid = file.uid;
    if ((file.mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP)) {
      n.egid = file.gid;
    }
  }
  // cap_bprm_creds_from_file, for a file without file capabilities: root
  // (real or effective) gets the bounding and inheritable sets, the
  // effective set only when the effective uid is 0.
  n.cap_permitted = 0;
  bool effective = false;
  if (!old.Secure(fs::kSecbitNoroot) && (n.euid == 0 || n.ruid == 0)) {
    n.cap_permitted = old.cap_bounding | old.cap_inheritable;
    effective = n.euid == 0;
  }
  const bool is_setid = n.euid != old.ruid || n.egid != old.rgid;
  const bool gained = (n.cap_permitted & ~old.cap_permitted) != 0;
  if ((is_setid || gained) && no_new_privs) {
    // They get no more than they had.
    n.euid = n.ruid;
    n.egid = n.rgid;
    n.cap_permitted &= old.cap_permitted;
  }
  n.suid = n.fsuid = n.euid;
  n.sgid = n.fsgid = n.egid;
  if (is_setid) n.cap_ambient = 0;
  n.cap_permitted |= n.cap_ambient;
  n.cap_effective = effective ? n.cap_permitted : n.cap_ambient;
  n.securebits &= ~fs::kSecbitKeepCaps;
  return std::make_shared<const Credentials>(std::move(n));
}

void RegisterCreds(Entry* table) {
  table[SYS_getuid] = {SysGetuid, "getuid"};
  table[SYS_geteuid] = {SysGeteuid, "geteuid"};
  table[SYS_getgid] = {SysGetgid, "getgid"};
  table[SYS_getegid] = {SysGetegid, "getegid"};
  table[SYS_getresuid] = {SysGetresuid, "getresuid"};
  table[SYS_getresgid] = {SysGetresgid, "getresgid"};
  table[SYS_getgroups] = {SysGetgroups, "getgroups"};
  table[SYS_setgroups] = {SysSetgroups, "setgroups"};
  table[SYS_setuid] = {SysSetuid, "setuid"};
  table[SYS_setgid] = {SysSetgid, "setgid"};
  table[SYS_setreuid] = {SetRe<true>, "setreuid"};
  table[SYS_setregid] = {SetRe<false>, "setregid"};
  table[SYS_setresuid] = {SetRes<true>, "setresuid"};
  table[SYS_setresgid] = {SetRes<false>, "setresgid"};
  table[SYS_setfsuid] = {SetFs<true>, "setfsuid"};
  table[SYS_setfsgid] = {SetFs<false>, "setfsgid"};
  table[SYS_capget] = {SysCapget, "capget"};
  table[SYS_capset] = {SysCapset, "capset"};
}

}  // namespace sandboxd::syscalls
