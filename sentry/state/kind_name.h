#ifndef SANDBOXD_SENTRY_STATE_KIND_NAME_H_
#define SANDBOXD_SENTRY_STATE_KIND_NAME_H_

#include <cxxabi.h>

#include <cstdlib>
#include <string>
#include <typeinfo>

namespace sandboxd::state {

// "sandboxd::fs::HostFsInode", for errors about what cannot be saved.
template <typename T>
std::string KindName(const T& obj) {
  const char* mangled = typeid(obj).name();
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string out = status == 0 && d != nullptr ? d : mangled;
  free(d);
  return out;
}

}  // namespace sandboxd::state

#endif  // SANDBOXD_SENTRY_STATE_KIND_NAME_H_
