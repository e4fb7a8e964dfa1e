// The probe that decides whether the kvm platform is offered: a real
// round trip, not the presence of /dev/kvm. A tiny guest in user mode
// executes SYSCALL in a loop; each one must come back to the calling
// thread as an exit that the platform decodes as a syscall, with the
// result the host wrote visible to the next iteration. All of it under a
// timeout: a vCPU that spins in KVM_RUN is stopped and reported.
#ifndef SANDBOXD_PLATFORMS_KVM_PROBE_H_
#define SANDBOXD_PLATFORMS_KVM_PROBE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "platforms/kvm/flavour.h"
#include "platforms/kvm/vm.h"

namespace sandboxd::kvm {

struct ProbeReport {
  FlavourInfo flavour;
  VmTimings timings;
  uint64_t private_slot_bytes = 0;
  int round_trips = 0;         // syscalls that came back as expected
  uint64_t first_entry_ns = 0;  // KVM_RUN until the first syscall exit
  uint64_t round_trip_median_ns = 0;
  uint64_t round_trip_min_ns = 0;
};

// Runs the probe on the calling thread, with the flavour's stub (PVM or
// hardware). OK: the flavour works (the report has the figures).
// Otherwise one line saying what failed: no /dev/kvm, an unknown flavour,
// an exit that was not the syscall (with registers), or the timeout.
absl::StatusOr<ProbeReport> RunProbe(int round_trips = 200,
                                     absl::Duration timeout = absl::Seconds(2));

// The same with another application (at most one page of code), for
// tests that check that the probe fails when it should.
absl::StatusOr<ProbeReport> RunProbeWithCode(const uint8_t* code,
                                             size_t code_len, int round_trips,
                                             absl::Duration timeout);

// Makes SIGUSR2 interrupt KVM_RUN in this process (a handler that does
// nothing, installed without SA_RESTART). Idempotent.
void InstallKickHandler();
inline constexpr int kKickSignal = 12;  // SIGUSR2

}  // namespace sandboxd::kvm

#endif  // SANDBOXD_PLATFORMS_KVM_PROBE_H_
