/* SPDX-License-Identifier: BSD-3-Clause */
/* Version and build features, fixed at configure time. */
#include "config.h"

#include <resihp.h>

const char *resihp_version(void) { return PACKAGE_VERSION; }

const char *resihp_build_features(void) {
  return "tcp"
#ifdef RESIHP_HAVE_CUDA
         " cuda"
#endif
#ifdef RESIHP_HAVE_NCCL
         " nccl"
#endif
      ;
}
