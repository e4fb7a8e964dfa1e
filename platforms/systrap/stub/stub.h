// Entry points of the systrap stub: freestanding code that lives in the
// section "sbx_stub" of the Sentry binary and is copied, byte for byte, to
// kStubBase in every stub process. It must be position independent and must
// not reference anything outside its own section (no libc, no globals, no
// TLS, no stack protector): see stub.cc and its build flags.
#ifndef SANDBOXD_PLATFORMS_SYSTRAP_STUB_STUB_H_
#define SANDBOXD_PLATFORMS_SYSTRAP_STUB_STUB_H_

#include <stdint.h>

extern "C" {
// Bounds of the section, provided by the linker.
extern const char __start_sbx_stub[];
extern const char __stop_sbx_stub[];

// Switches to `stack_top` and runs the stub's control thread: installs the
// seccomp filter `prog` (a struct sock_fprog*), unmaps everything outside
// the stub region, then serves ControlBlock requests forever.
void sbx_stub_start(const void* prog, uint64_t stack_top);
// The handler for every host signal of a stub thread.
void sbx_stub_signal_handler(int signo, void* info, void* ucontext);
// sa_restorer: calls rt_sigreturn.
void sbx_stub_restorer();
// The common entry of patched syscall sites (patch_entry_amd64.cc), and
// the last instructions of its way back to the application.
void sbx_stub_patch_entry();
// Hidden, so that the stub takes their addresses relative to its own code
// (lea sym(%rip)): with default visibility a -fPIC compile reads them from
// the GOT, which is outside the section, and in a stub process that
// address holds the application's memory. tools/check_stub_section.py
// checks the built binaries for any such reference.
__attribute__((visibility("hidden"))) extern const char sbx_stub_patch_tail[];
__attribute__((visibility("hidden"))) extern const char
    sbx_stub_patch_tail_end[];
}

namespace sandboxd::systrap {

// Address in the stub process of a symbol inside the stub section.
inline uint64_t StubAddress(const void* symbol, uint64_t stub_base) {
  return stub_base + (reinterpret_cast<const char*>(symbol) - __start_sbx_stub);
}

}  // namespace sandboxd::systrap

#endif  // SANDBOXD_PLATFORMS_SYSTRAP_STUB_STUB_H_
