// The NUMA memory policy calls, get_mempolicy(2) and set_mempolicy(2), as
// Linux answers them on a host with one memory node (node 0): each thread
// keeps the policy it set (Task::mempolicy; inherited by clone and fork,
// kept by execve, saved with the task), and every validation Linux does is
// done here, so a program probing the policy (libnuma, which procps's ps
// and top load) sees Linux's answers. The placement itself changes nothing:
// there is one node.
//
// mbind(2) is not implemented (ENOSYS, counted): no mapping has its own
// policy, so get_mempolicy with MPOL_F_ADDR reports the default policy.
#include <errno.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "sentry/syscalls/args.h"
#include "sentry/syscalls/syscalls.h"

namespace sandboxd::syscalls {
namespace {

// include/uapi/linux/mempolicy.h
constexpr int kMpolDefault = 0;
constexpr int kMpolPreferred = 1;
constexpr int kMpolBind = 2;
constexpr int kMpolInterleave = 3;
constexpr int kMpolLocal = 4;
constexpr int kMpolPreferredMany = 5;
constexpr int kMpolWeightedInterleave = 6;
constexpr int kMpolMax = 7;
constexpr int kMpolFStaticNodes = 1 << 15;
constexpr int kMpolFRelativeNodes = 1 << 14;
constexpr int kMpolFNumaBalancing = 1 << 13;
constexpr int kMpolModeFlags =
    kMpolFStaticNodes | kMpolFRelativeNodes | kMpolFNumaBalancing;
constexpr uint64_t kMpolFNode = 1, kMpolFAddr = 2, kMpolFMemsAllowed = 4;

// Debian's kernels: CONFIG_NODES_SHIFT=10.
constexpr uint64_t kMaxNumNodes = 1024;
constexpr uint64_t kPageBits = 4096 * 8;

// Linux's get_nodes(): the first maxnode-1 bits of the user's mask. Bits at
// or above MAX_NUMNODES must be zero. Keeps the first 64 bits (one node
// exists; a mask reported back by MPOL_F_STATIC_NODES/RELATIVE_NODES keeps
// no more than that) and whether any bit is set.
int64_t GetNodes(Task& t, uint64_t addr, uint64_t maxnode, uint64_t* first,
                 bool* any) {
  *first = 0;
  *any = false;
  --maxnode;
  if (maxnode == 0 || addr == 0) return 0;
  if (maxnode > kPageBits) return -EINVAL;
  std::vector<uint64_t> words((maxnode + 63) / 64);
  RETURN_IF_ERRNO(CopyInBytes(t, addr, words.data(), words.size() * 8));
  if (maxnode % 64 != 0) words.back() &= (1ull << (maxnode % 64)) - 1;
  for (size_t i = 0; i < words.size(); i++) {
    uint64_t w = words[i];
    if (i * 64 >= kMaxNumNodes) {
      if (w != 0) return -EINVAL;
      continue;
    }
    if (w != 0) *any = true;
  }
  *first = words[0];
  return 0;
}

// Linux's copy_nodes_to_user() for a one-node system (nr_node_ids 1).
int64_t PutNodes(Task& t, uint64_t addr, uint64_t maxnode, uint64_t nodes) {
  uint64_t copy = ((maxnode - 1 + 63) / 64) * 8;
  if (copy > 8) {
    if (copy > 4096) return -EINVAL;
    std::vector<uint8_t> zeros(copy - 8, 0);
    RETURN_IF_ERRNO(CopyOutBytes(t, addr + 8, zeros.data(), zeros.size()));
    copy = 8;
    maxnode = 1;
  }
  if (copy == 0) return 0;
  // Only the bits below maxnode (Linux copies whole longs of a mask that
  // has nothing above nr_node_ids set; a user mask kept for STATIC_NODES
  // may).
  return CopyOutBytes(t, addr, &nodes, copy);
}

bool InVma(Task& t, uint64_t addr) {
  for (const mm::VmaInfo& v : t.mm().Vmas()) {
    if (addr >= v.start && addr < v.end) return true;
  }
  return false;
}

int64_t SysGetMempolicy(Task& t, const SyscallArgs& a) {
  const uint64_t policy_addr = a.a[0], nmask = a.a[1], maxnode = a.a[2];
  const uint64_t addr = a.a[3], flags = a.a[4];
  if (nmask != 0 && maxnode < 1) return -EINVAL;  // maxnode < nr_node_ids
  if (flags & ~(kMpolFNode | kMpolFAddr | kMpolFMemsAllowed)) return -EINVAL;
  int policy = 0;
  uint64_t nodes = 0;
  if (flags & kMpolFMemsAllowed) {
    if (flags & (kMpolFNode | kMpolFAddr)) return -EINVAL;
    nodes = 1;  // the nodes this thread may use: node 0
  } else {
    // The policy asked about: the thread's, or with MPOL_F_ADDR the
    // mapping's, which is always the default here (no mbind).
    Task::MemPolicy pol;
    if (flags & kMpolFAddr) {
      if (!InVma(t, addr)) return -EFAULT;
    } else {
      if (addr != 0) return -EINVAL;
      pol = t.mempolicy;
    }
    if (flags & kMpolFNode) {
      if (flags & kMpolFAddr) {
        policy = 0;  // the node of the page at addr
      } else if (pol.mode == kMpolInterleave ||
                 pol.mode == kMpolWeightedInterleave) {
        policy = 0;  // the next node of the interleave
      } else {
        return -EINVAL;
      }
    } else {
      policy = pol.mode | (pol.flags & kMpolModeFlags);
    }
    if (pol.flags & (kMpolFStaticNodes | kMpolFRelativeNodes)) {
      nodes = pol.nodes;
    } else if (pol.mode != kMpolDefault && pol.mode != kMpolLocal) {
      nodes = 1;
    }
  }
  if (policy_addr != 0) RETURN_IF_ERRNO(CopyOutObj(t, policy_addr, policy));
  if (nmask != 0) return PutNodes(t, nmask, maxnode, nodes);
  return 0;
}

int64_t SysSetMempolicy(Task& t, const SyscallArgs& a) {
  int mode = static_cast<int>(a.a[0]);
  int flags = mode & kMpolModeFlags;
  mode &= ~kMpolModeFlags;
  if (static_cast<unsigned>(mode) >= kMpolMax) return -EINVAL;
  if ((flags & kMpolFStaticNodes) && (flags & kMpolFRelativeNodes)) {
    return -EINVAL;
  }
  if ((flags & kMpolFNumaBalancing) && mode != kMpolBind &&
      mode != kMpolPreferredMany) {
    return -EINVAL;
  }
  uint64_t nodes = 0;
  bool any = false;
  RETURN_IF_ERRNO(GetNodes(t, a.a[1], a.a[2], &nodes, &any));
  // mpol_new()
  if (mode == kMpolDefault) {
    if (any) return -EINVAL;
    t.mempolicy = {};
    return 0;
  }
  if (mode == kMpolPreferred) {
    if (!any) {
      if (flags & (kMpolFStaticNodes | kMpolFRelativeNodes)) return -EINVAL;
      mode = kMpolLocal;
    }
  } else if (mode == kMpolLocal) {
    if (any || (flags & (kMpolFStaticNodes | kMpolFRelativeNodes))) {
      return -EINVAL;
    }
  } else if (!any) {
    return -EINVAL;
  }
  // mpol_set_nodemask(): the nodes allowed ({0}) must remain. A relative
  // mask folds onto the allowed nodes, so any bit will do.
  if (mode != kMpolLocal && !(flags & kMpolFRelativeNodes) && (nodes & 1) == 0) {
    return -EINVAL;
  }
  t.mempolicy = {mode, flags, nodes};
  return 0;
}

}  // namespace

void RegisterMempolicy(Entry* table) {
  table[SYS_get_mempolicy] = {SysGetMempolicy, "get_mempolicy"};
  table[SYS_set_mempolicy] = {SysSetMempolicy, "set_mempolicy"};
}

}  // namespace sandboxd::syscalls
