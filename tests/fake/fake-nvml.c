/* SPDX-License-Identifier: BSD-3-Clause */
/* A stand-in for libnvidia-ml.so.1 so that the gpu check's NVML path runs
 * on machines without a GPU. It exports the few calls resihp uses; what they
 * report comes from "<this library's path>.state", one line of
 * "count=N ecc=N retired=0|1 remap=0|1 throttle=HEX init=0|1" (the probe
 * helper clears the environment, so a file next to the library is the only
 * channel). */
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef void *dev_t_;

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned *n);
int nvmlDeviceGetHandleByIndex_v2(unsigned i, dev_t_ *d);
int nvmlDeviceGetTotalEccErrors(dev_t_ d, int type, int counter,
                                unsigned long long *n);
int nvmlDeviceGetRetiredPagesPendingStatus(dev_t_ d, int *pending);
int nvmlDeviceGetRemappedRows(dev_t_ d, unsigned *corr, unsigned *unc,
                              unsigned *pending, unsigned *failed);
int nvmlDeviceGetCurrentClocksThrottleReasons(dev_t_ d,
                                              unsigned long long *why);
const char *nvmlErrorString(int rc);

static struct {
  unsigned count, retired, remap, init_fails;
  unsigned long long ecc, throttle;
} st = {1, 0, 0, 0, 0, 0};

int nvmlInit_v2(void) {
  Dl_info info;
  char path[4200];
  if (dladdr((void *)nvmlInit_v2, &info) && info.dli_fname) {
    snprintf(path, sizeof(path), "%s.state", info.dli_fname);
    FILE *f = fopen(path, "r");
    if (f) {
      if (fscanf(f, "count=%u ecc=%llu retired=%u remap=%u throttle=%llx "
                    "init=%u",
                 &st.count, &st.ecc, &st.retired, &st.remap, &st.throttle,
                 &st.init_fails) < 1)
        st.count = 1;
      fclose(f);
    }
  }
  return st.init_fails ? 2 : 0;
}
int nvmlShutdown(void) { return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) {
  *n = st.count;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, dev_t_ *d) {
  *d = (dev_t_)(size_t)(i + 1);
  return 0;
}
int nvmlDeviceGetTotalEccErrors(dev_t_ d, int type, int counter,
                                unsigned long long *n) {
  *n = (type == 1 && counter == 0 && (size_t)d == 1) ? st.ecc : 0;
  return 0;
}
int nvmlDeviceGetRetiredPagesPendingStatus(dev_t_ d, int *pending) {
  *pending = (int)st.retired;
  return 0;
}
int nvmlDeviceGetRemappedRows(dev_t_ d, unsigned *corr, unsigned *unc,
                              unsigned *pending, unsigned *failed) {
  *corr = *unc = 0;
  *pending = st.remap;
  *failed = 0;
  return 0;
}
int nvmlDeviceGetCurrentClocksThrottleReasons(dev_t_ d,
                                              unsigned long long *why) {
  *why = st.throttle;
  return 0;
}
const char *nvmlErrorString(int rc) {
  return rc == 2 ? "Invalid Argument (fake)" : "fake NVML error";
}
