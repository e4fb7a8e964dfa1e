// The project's version, which `sandboxd --version`, `sentry --version`,
// `sandboxctl version` and CapabilitiesResponse.version report. The CMake
// lane reads it from here for project(VERSION) and the pkg-config file.
#ifndef SANDBOXD_BASE_VERSION_H_
#define SANDBOXD_BASE_VERSION_H_

namespace sandboxd {

inline constexpr char kVersion[] = "0.1.0";

}  // namespace sandboxd

#endif  // SANDBOXD_BASE_VERSION_H_
