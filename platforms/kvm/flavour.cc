#include "platforms/kvm/flavour.h"

#include <cpuid.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>


#include "absl/strings/str_format.h"
#include "base/unique_fd.h"
#include "platforms/kvm/kvm_abi.h"

namespace sandboxd::kvm {

const char* FlavourName(Flavour f) {
  switch (f) {
    case Flavour::kNone:
      return "none";
    case Flavour::kHardware:
      return "hardware";
    case Flavour::kPvm:
      return "pvm";
  }
  return "?";
}

FlavourInfo ClassifyFlavour(bool host_vmx, bool host_svm,
                            std::optional<uint64_t> pvm_signature_msr) {
  if (host_vmx || host_svm) {
    return {Flavour::kHardware,
            absl::StrFormat("host CPU has %s", host_vmx ? "vmx" : "svm")};
  }
  if (pvm_signature_msr.has_value() && *pvm_signature_msr == kPvmSignature) {
    return {Flavour::kPvm,
            "no vmx/svm; MSR 0x4b564d11 holds the PVM signature"};
  }
  if (pvm_signature_msr.has_value()) {
    return {Flavour::kNone,
            absl::StrFormat("no vmx/svm, and MSR 0x4b564d11 is %#x, not the "
                            "PVM signature",
                            *pvm_signature_msr)};
  }
  return {Flavour::kNone,
          "no vmx/svm, and KVM knows no PVM signature MSR: an unknown KVM"};
}

namespace {

bool HostHasVmx() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 5));
}

bool HostHasSvm() {
  unsigned a, b, c, d;
  return __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & (1u << 2));
}

std::optional<uint64_t> ReadPvmSignature(int kvm_fd) {
  UniqueFd vm(ioctl(kvm_fd, KVM_CREATE_VM, 0));
  if (!vm.valid()) return std::nullopt;
  UniqueFd vcpu(ioctl(vm.get(), KVM_CREATE_VCPU, 0));
  if (!vcpu.valid()) return std::nullopt;
  KvmMsrsOne msrs;
  msrs.entry.index = kMsrPvmSignature;
  if (ioctl(vcpu.get(), kKvmGetMsrs, &msrs) != 1) return std::nullopt;
  return msrs.entry.data;
}

}  // namespace

FlavourInfo DetectFlavour(int kvm_fd) {
  const bool vmx = HostHasVmx(), svm = HostHasSvm();
  if (vmx || svm) return ClassifyFlavour(vmx, svm, std::nullopt);
  return ClassifyFlavour(false, false, ReadPvmSignature(kvm_fd));
}

}  // namespace sandboxd::kvm
