/* Hardware privilege must never reach the stub: iopl/ioperm (port I/O) and
 * modify_ldt must fail inside the sandbox (natively, as root, they succeed). */
#include "raw.h"

int main(void) {
  long r = raw1(NR_iopl, 3);
  report(r < 0, "iopl(3) fails", r);
  r = raw3(NR_ioperm, 0x80, 1, 1);
  report(r < 0, "ioperm(0x80, 1, 1) fails", r);
  struct {
    unsigned int entry_number, base_addr, limit;
    unsigned int flags;
  } desc = {0, 0, 0xfff, 0x1 | 0x40}; /* seg_32bit, useable */
  r = raw3(NR_modify_ldt, 1, &desc, sizeof desc);
  report(r < 0, "modify_ldt(write) fails", r);
  return done();
}
