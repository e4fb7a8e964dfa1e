/* `int $0x80` from 64-bit code: Linux serves it with the i386 table. A
 * sandbox may do the same or refuse it with ENOSYS, but must never serve
 * it with the x86-64 numbers. Each line says which of the two it got, as
 * "i386 or refused", so that native and sandboxed runs print the same. */
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static long int80(long nr, long ebx, long ecx, long edx, long rdi, long rsi,
                  long rdx_for_x86_64) {
  long ret;
  /* The i386 arguments are ebx, ecx, edx; rdi/rsi/rdx are what an x86-64
   * reading of the same call would take. */
  (void)edx;
  __asm__ volatile("int $0x80"
                   : "=a"(ret)
                   : "a"(nr), "b"(ebx), "c"(ecx), "D"(rdi), "S"(rsi),
                     "d"(rdx_for_x86_64)
                   : "memory");
  return ret;
}

static int checks(void) {
  static char x[] = "X";
  static struct iovec iov = {x, 1};
  /* i386 20 is getpid; x86-64 20 is writev(rdi, rsi, rdx). */
  long r = int80(20, 0, 0, 0, 1, (long)&iov, 1);
  CHECK("int80 20: i386 getpid or ENOSYS, not x86-64 writev",
        r == getpid() || r == -38);
  /* i386 39 is mkdir(ebx=NULL): EFAULT; x86-64 39 is getpid. */
  r = int80(39, 0, 0755, 0, 0, 0, 0);
  CHECK("int80 39: i386 mkdir(NULL) or ENOSYS, not x86-64 getpid",
        r == -14 || r == -38);
  /* i386 224 is gettid; x86-64 224 is timer_gettime(rdi=-1): EINVAL. */
  r = int80(224, 0, 0, 0, -1, 0, 0);
  CHECK("int80 224: i386 gettid or ENOSYS, not x86-64 timer_gettime",
        r == syscall(SYS_gettid) || r == -38);
  /* Registers other than eax are kept. */
  long rbx = 0x1234, rdi = 0x5678, kept_b, kept_d;
  __asm__ volatile("int $0x80"
                   : "=b"(kept_b), "=D"(kept_d)
                   : "a"(20L), "b"(rbx), "D"(rdi)
                   : "rcx", "r11", "memory");
  CHECK("int80 keeps rbx and rdi", kept_b == rbx && kept_d == rdi);
  return finish();
}

int main(void) {
  /* In a child: a sandbox's init is pid 1, which a one-byte writev's
   * result would match. */
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) _exit(checks());
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return 1;
  return WEXITSTATUS(st);
}
