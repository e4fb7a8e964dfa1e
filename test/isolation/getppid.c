/* The sandbox is its own pid namespace: the program is pid 1 and has no
 * parent (getppid == 0). Natively getppid is the runner's pid (FAIL). */
#include "raw.h"

int main(void) {
  long ppid = raw0(NR_getppid);
  report(ppid == 0, "getppid() == 0 (pid 1 has no parent in the sandbox)", ppid);
  long pid = raw0(NR_getpid);
  report(pid == 1, "getpid() == 1", pid);
  long tid = raw0(NR_gettid);
  report(tid == 1, "gettid() == 1", tid);
  return done();
}
