/* get_mempolicy(2) and set_mempolicy(2) as Linux answers them on a host
 * with one memory node: the validation, the policy each thread keeps,
 * what fork inherits. (libnuma, which ps and top load, probes exactly
 * this: a wrong answer makes them print "set_mempolicy: Invalid argument".)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

enum {
  DEFAULT = 0, PREFERRED = 1, BIND = 2, INTERLEAVE = 3, LOCAL = 4,
  PREFERRED_MANY = 5,
  STATIC_NODES = 1 << 15, RELATIVE_NODES = 1 << 14, NUMA_BALANCING = 1 << 13,
  F_NODE = 1, F_ADDR = 2, F_MEMS_ALLOWED = 4,
};

static long getp(int* mode, unsigned long* mask, unsigned long maxnode,
                 void* addr, unsigned long flags) {
  return syscall(SYS_get_mempolicy, mode, mask, maxnode, addr, flags);
}
static long setp(int mode, const unsigned long* mask, unsigned long maxnode) {
  return syscall(SYS_set_mempolicy, mode, mask, maxnode);
}

/* The thread's policy as "mode mask". */
static int mode_is(int want_mode, unsigned long want_mask) {
  int mode = -1;
  unsigned long mask[2] = {~0ul, ~0ul};
  if (getp(&mode, mask, 128, NULL, 0) != 0) return 0;
  return mode == want_mode && mask[0] == want_mask && mask[1] == 0;
}

static void* thread_main(void* arg) {
  (void)arg;
  /* A new thread starts with its creator's policy and keeps its own. */
  int inherited = mode_is(PREFERRED_MANY, 1);
  setp(DEFAULT, NULL, 0);
  return (void*)(intptr_t)(inherited && mode_is(DEFAULT, 0));
}

int main(void) {
  int mode = -1;
  unsigned long mask[4] = {~0ul, ~0ul, ~0ul, ~0ul};
  unsigned long one = 1, two = 2, three = 3, zero = 0;

  CHECK("get: default", getp(&mode, mask, 256, NULL, 0) == 0 && mode == DEFAULT &&
                            mask[0] == 0 && mask[1] == 0 && mask[3] == 0);
  mask[0] = 0;
  CHECK("get: mems allowed is node 0",
        getp(&mode, mask, 64, NULL, F_MEMS_ALLOWED) == 0 && mask[0] == 1);
  CHECK_ERRNO("get: mems allowed with F_NODE",
              getp(&mode, mask, 64, NULL, F_MEMS_ALLOWED | F_NODE), EINVAL);
  CHECK_ERRNO("get: unknown flag", getp(&mode, mask, 64, NULL, 8), EINVAL);
  CHECK_ERRNO("get: maxnode 0 with a mask", getp(&mode, mask, 0, NULL, 0), EINVAL);
  CHECK("get: maxnode 0 without a mask", getp(&mode, NULL, 0, NULL, 0) == 0);
  CHECK_ERRNO("get: addr without F_ADDR", getp(&mode, NULL, 0, &mode, 0), EINVAL);
  CHECK_ERRNO("get: F_NODE with the default policy",
              getp(&mode, NULL, 0, NULL, F_NODE), EINVAL);

  CHECK("set: default, no mask", setp(DEFAULT, NULL, 0) == 0);
  CHECK("set: default, an empty mask", setp(DEFAULT, &zero, 64) == 0);
  CHECK_ERRNO("set: default with node 0", setp(DEFAULT, &one, 64), EINVAL);
  CHECK_ERRNO("set: bind with no nodes", setp(BIND, NULL, 0), EINVAL);
  CHECK_ERRNO("set: bind to node 1 only", setp(BIND, &two, 64), EINVAL);
  CHECK_ERRNO("set: local with a node", setp(LOCAL, &one, 64), EINVAL);
  CHECK_ERRNO("set: static and relative",
              setp(BIND | STATIC_NODES | RELATIVE_NODES, &one, 64), EINVAL);
  CHECK_ERRNO("set: balancing with interleave",
              setp(INTERLEAVE | NUMA_BALANCING, &one, 64), EINVAL);
  CHECK_ERRNO("set: unknown mode", setp(42, &one, 64), EINVAL);
  CHECK_ERRNO("set: maxnode 0 with a mask", setp(BIND, &one, 0), EINVAL);
  CHECK_ERRNO("set: maxnode 1 reads no bit", setp(BIND, &one, 1), EINVAL);
  CHECK_ERRNO("set: preferred, static, no nodes",
              setp(PREFERRED | STATIC_NODES, NULL, 0), EINVAL);
  CHECK_ERRNO("set: mask not readable", setp(BIND, (unsigned long*)8, 64), EFAULT);

  CHECK("set: preferred, no nodes", setp(PREFERRED, NULL, 0) == 0);
  CHECK("get: it became local", mode_is(LOCAL, 0));
  CHECK("set: interleave over node 0", setp(INTERLEAVE, &one, 64) == 0);
  CHECK("get: interleave, node 0", mode_is(INTERLEAVE, 1));
  mode = -1;
  CHECK("get: F_NODE gives the next interleave node",
        getp(&mode, NULL, 0, NULL, F_NODE) == 0 && mode == 0);
  CHECK("set: bind, static nodes 0 and 1", setp(BIND | STATIC_NODES, &three, 64) == 0);
  CHECK("get: the mask as given", mode_is(BIND | STATIC_NODES, 3));
  CHECK("set: bind, nodes 0 and 1", setp(BIND, &three, 64) == 0);
  CHECK("get: the nodes that exist", mode_is(BIND, 1));
  CHECK("set: relative node 1", setp(PREFERRED | RELATIVE_NODES, &two, 64) == 0);
  CHECK("get: relative, as given", mode_is(PREFERRED | RELATIVE_NODES, 2));
  CHECK("set: bind with balancing", setp(BIND | NUMA_BALANCING, &one, 64) == 0);
  CHECK("get: bind with balancing", mode_is(BIND | NUMA_BALANCING, 1));

  /* MPOL_F_ADDR: the mapping's policy (the default: no mbind), and the
   * node of its page. */
  char* page = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  page[0] = 1;
  mode = -1;
  CHECK("get: F_ADDR gives the mapping's policy",
        getp(&mode, NULL, 0, page, F_ADDR) == 0 && mode == DEFAULT);
  mode = -1;
  CHECK("get: F_ADDR|F_NODE gives node 0",
        getp(&mode, NULL, 0, page, F_ADDR | F_NODE) == 0 && mode == 0);
  munmap(page, 4096);
  CHECK_ERRNO("get: F_ADDR of an unmapped address",
              getp(&mode, NULL, 0, page, F_ADDR), EFAULT);

  setp(PREFERRED_MANY, &one, 64);
  pthread_t th;
  void* ok = NULL;
  pthread_create(&th, NULL, thread_main, NULL);
  pthread_join(th, &ok);
  CHECK("thread: inherits, then keeps its own", ok != NULL);
  CHECK("thread: the creator's is unchanged", mode_is(PREFERRED_MANY, 1));

  pid_t pid = fork();
  if (pid == 0) _exit(mode_is(PREFERRED_MANY, 1) ? 0 : 1);
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK("fork: the child inherits", WIFEXITED(st) && WEXITSTATUS(st) == 0);
  return finish();
}
