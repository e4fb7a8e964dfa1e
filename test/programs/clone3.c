/* clone3(2) as fork (exit_signal SIGCHLD, CLONE_PARENT_SETTID,
 * CLONE_CHILD_SETTID) and its argument checks: a size below
 * CLONE_ARGS_SIZE_VER0, an exit signal above 64, CSIGNAL bits in flags,
 * stack without stack_size, non-zero bytes past the known struct (E2BIG).
 * pthread_create in glibc >= 2.34 uses clone3 too (threads.c covers that). */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

#ifndef SYS_clone3
#define SYS_clone3 435
#endif

struct clone_args_v2 {
  uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack,
      stack_size, tls, set_tid, set_tid_size, cgroup;
};

static long clone3_raw(struct clone_args_v2 *a, size_t size) {
  return syscall(SYS_clone3, a, size);
}

int main(void) {
  struct clone_args_v2 ca;
  pid_t ptid = 0, ctid = 0;
  memset(&ca, 0, sizeof ca);
  ca.flags = CLONE_PARENT_SETTID | CLONE_CHILD_SETTID;
  ca.parent_tid = (uintptr_t)&ptid;
  ca.child_tid = (uintptr_t)&ctid;
  ca.exit_signal = SIGCHLD;
  long pid = clone3_raw(&ca, 64);
  if (pid == 0) _exit(ctid == getpid() ? 7 : 8);
  CHECK("clone3 as fork returns a pid", pid > 0);
  int st = 0;
  CHECK("waitpid sees the child", waitpid((pid_t)pid, &st, 0) == pid);
  CHECK("the child saw its CLONE_CHILD_SETTID", WIFEXITED(st) && WEXITSTATUS(st) == 7);
  CHECK("CLONE_PARENT_SETTID", ptid == pid);

  memset(&ca, 0, sizeof ca);
  ca.exit_signal = SIGCHLD;
  pid = clone3_raw(&ca, sizeof ca);
  if (pid == 0) _exit(3);
  CHECK("clone3 with the whole v2 struct", pid > 0 && waitpid((pid_t)pid, &st, 0) == pid &&
                                              WEXITSTATUS(st) == 3);

  memset(&ca, 0, sizeof ca);
  CHECK_ERRNO("size below VER0: EINVAL", clone3_raw(&ca, 32), EINVAL);
  ca.exit_signal = 65;
  CHECK_ERRNO("exit_signal 65: EINVAL", clone3_raw(&ca, 64), EINVAL);
  ca.exit_signal = SIGCHLD;
  ca.flags = SIGCHLD; /* CSIGNAL bits belong in exit_signal */
  CHECK_ERRNO("CSIGNAL bits in flags: EINVAL", clone3_raw(&ca, 64), EINVAL);
  ca.flags = 0;
  ca.stack = 0x10000;
  CHECK_ERRNO("stack without stack_size: EINVAL", clone3_raw(&ca, 64), EINVAL);
  ca.stack = 0;
  struct {
    struct clone_args_v2 a;
    uint64_t extra[4];
  } big;
  memset(&big, 0, sizeof big);
  big.a.exit_signal = SIGCHLD;
  big.extra[3] = 1;
  CHECK_ERRNO("non-zero bytes past the struct: E2BIG", clone3_raw(&big.a, sizeof big), E2BIG);
  big.extra[3] = 0;
  pid = clone3_raw(&big.a, sizeof big);
  if (pid == 0) _exit(4);
  CHECK("zero bytes past the struct are fine",
        pid > 0 && waitpid((pid_t)pid, &st, 0) == pid && WEXITSTATUS(st) == 4);
  CHECK_ERRNO("a bad pointer: EFAULT", clone3_raw((void *)8, 64), EFAULT);
  return finish();
}
