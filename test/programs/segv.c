/* Must die with SIGSEGV (status 139 through the runner). */
#include <stdio.h>
#include <unistd.h>

int main(void) {
  static const char msg[] = "writing to NULL\n";
  write(1, msg, sizeof msg - 1); /* unbuffered: survives the crash */
  *(volatile int *)0 = 1;
  write(1, "still alive?!\n", 14);
  return 0;
}
