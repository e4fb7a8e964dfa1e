/* Signals must not leave the sandbox. isolation.sh starts a host "canary"
 * process (canary=PID) and checks afterwards that it is still alive.
 * Finally kill(1, SIGKILL): pid 1 is the program itself inside the sandbox, so
 * the program may die with SIGKILL (isolation.sh accepts status 137 once all
 * checks before it passed); it must never reach the host's pid 1.
 * With the argument "no-pid1-kill" (native demonstration runs) the last step
 * only probes with signal 0. */
#include "raw.h"

#define SIGKILL 9
#define SIGSTOP 19

int main(int argc, char **argv) {
  const char *c = arg_value(argc, argv, "canary");
  if (!c) {
    printf("FAIL: no canary=PID argument (run through isolation.sh)\n");
    return 1;
  }
  long canary = atol(c);
  long r = raw2(NR_kill, canary, 0);
  report(r < 0, "kill(canary, 0) does not see the host process", r);
  r = raw2(NR_kill, canary, SIGSTOP);
  report(r < 0, "kill(canary, SIGSTOP) fails", r);
  r = raw2(NR_kill, canary, SIGKILL);
  report(r < 0, "kill(canary, SIGKILL) fails", r);
  r = raw3(NR_tgkill, canary, canary, SIGKILL);
  report(r < 0, "tgkill(canary, canary, SIGKILL) fails", r);
  r = raw2(NR_kill, -canary, SIGKILL);
  report(r < 0, "kill(-canary (process group), SIGKILL) fails", r);
  int dry = 0;
  for (int i = 1; i < argc; i++) dry |= strcmp(argv[i], "no-pid1-kill") == 0;
  printf("about to kill(1, %s)\n", dry ? "0" : "SIGKILL");
  fflush(stdout);
  r = raw2(NR_kill, 1, dry ? 0 : SIGKILL);
  /* Still here: the sandbox refused or does not deliver signals yet. */
  printf("kill(1) returned %ld and the program lives on\n", r);
  report(1, "kill(1) stayed inside the sandbox", r);
  return done();
}
