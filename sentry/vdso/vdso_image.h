// The vDSO image (vdso.cc linked with vdso.lds), embedded into the Sentry by
// the build (embed_image.py writes the array; it has checked that the image
// is a relocation-free x86-64 shared object exporting the symbols below).
#ifndef SANDBOXD_SENTRY_VDSO_VDSO_IMAGE_H_
#define SANDBOXD_SENTRY_VDSO_VDSO_IMAGE_H_

#include <cstddef>

namespace sandboxd::vdso {

extern const unsigned char kVdsoImage[];  // page-aligned
extern const size_t kVdsoImageSize;

}  // namespace sandboxd::vdso

#endif  // SANDBOXD_SENTRY_VDSO_VDSO_IMAGE_H_
