/* SPDX-License-Identifier: BSD-3-Clause */
/* A stand-in for libnvidia-ml.so.1 so that the gpu check's NVML path runs
 * on machines without a GPU. It exports the few calls resihp uses; what they
 * report comes from "<this library's path>.state" (the probe helper clears
 * the environment, so a file next to the library is the only channel): one
 * line of space-separated key=value pairs, in any order, read again at each
 * nvmlInit_v2. Without a key the GPUs answer what an idle H200 answered on
 * driver 580: no ECC errors, retired pages NOT_SUPPORTED (Hopper remaps rows
 * instead), no remap pending, clock event reasons 0x1 (idle), PCIe gen5 x16
 * of gen5 x16, SM 345/1980 MHz, memory 3201/3201 MHz.
 *
 *   count=N       GPUs (1)
 *   init=0|1      nvmlInit_v2 fails with INVALID_ARGUMENT
 *   retired=0|1   retired pages pending on every GPU (makes the query work)
 *   remap=0|1     remapped rows pending on every GPU
 *   throttle=HEX  clock event reasons of every GPU
 *   old_throttle=HEX  what the deprecated ...ThrottleReasons name answers
 *                 (the same as throttle unless given)
 *   gpu=N         the GPU the keys below apply to (0); the others stay healthy
 *   ecc=N         its uncorrected volatile ECC errors
 *   ecc_rc=RC     its ECC query's return (3: ECC disabled, 999: UNKNOWN)
 *   width=N       its current PCIe link width (max stays 16)
 *   gen=N         its current PCIe link generation (max stays 5)
 *   handle_rc=RC  nvmlDeviceGetHandleByIndex_v2's return for it (15: lost)
 *   lost=1        every query about it answers GPU_IS_LOST (15)
 *
 * The first form, "count=N ecc=N retired=0|1 remap=0|1 throttle=HEX init=0|1",
 * still reads the same. */
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *dev_t_;

#define OK 0
#define INVALID_ARGUMENT 2
#define NOT_SUPPORTED 3
#define GPU_IS_LOST 15

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned *n);
int nvmlDeviceGetHandleByIndex_v2(unsigned i, dev_t_ *d);
int nvmlDeviceGetName(dev_t_ d, char *name, unsigned len);
int nvmlDeviceGetTotalEccErrors(dev_t_ d, int type, int counter,
                                unsigned long long *n);
int nvmlDeviceGetRetiredPagesPendingStatus(dev_t_ d, int *pending);
int nvmlDeviceGetRemappedRows(dev_t_ d, unsigned *corr, unsigned *unc,
                              unsigned *pending, unsigned *failed);
int nvmlDeviceGetCurrentClocksEventReasons(dev_t_ d, unsigned long long *why);
int nvmlDeviceGetCurrentClocksThrottleReasons(dev_t_ d,
                                              unsigned long long *why);
int nvmlDeviceGetCurrPcieLinkGeneration(dev_t_ d, unsigned *gen);
int nvmlDeviceGetMaxPcieLinkGeneration(dev_t_ d, unsigned *gen);
int nvmlDeviceGetCurrPcieLinkWidth(dev_t_ d, unsigned *width);
int nvmlDeviceGetMaxPcieLinkWidth(dev_t_ d, unsigned *width);
int nvmlDeviceGetPcieReplayCounter(dev_t_ d, unsigned *value);
int nvmlDeviceGetClockInfo(dev_t_ d, int type, unsigned *mhz);
int nvmlDeviceGetMaxClockInfo(dev_t_ d, int type, unsigned *mhz);
const char *nvmlErrorString(int rc);

static struct state {
  unsigned count, init_fails, gpu, width, gen, lost;
  int retired; /* -1: NOT_SUPPORTED */
  unsigned remap;
  int ecc_rc, handle_rc;
  unsigned long long ecc, throttle, old_throttle;
  int old_throttle_set;
} st;

static const struct state h200 = {
    .count = 1, .width = 16, .gen = 5, .retired = -1, .throttle = 0x1};

static void parse(FILE *f) {
  char key[32];
  char val[32];
  while (fscanf(f, " %31[^= \n]=%31s", key, val) == 2) {
    unsigned long long v = strtoull(val, NULL, 0);
    if (!strcmp(key, "count"))
      st.count = (unsigned)v;
    else if (!strcmp(key, "init"))
      st.init_fails = (unsigned)v;
    else if (!strcmp(key, "retired"))
      st.retired = (int)v;
    else if (!strcmp(key, "remap"))
      st.remap = (unsigned)v;
    else if (!strcmp(key, "throttle"))
      st.throttle = strtoull(val, NULL, 16);
    else if (!strcmp(key, "old_throttle")) {
      st.old_throttle = strtoull(val, NULL, 16);
      st.old_throttle_set = 1;
    } else if (!strcmp(key, "gpu"))
      st.gpu = (unsigned)v;
    else if (!strcmp(key, "ecc"))
      st.ecc = v;
    else if (!strcmp(key, "ecc_rc"))
      st.ecc_rc = (int)v;
    else if (!strcmp(key, "width"))
      st.width = (unsigned)v;
    else if (!strcmp(key, "gen"))
      st.gen = (unsigned)v;
    else if (!strcmp(key, "handle_rc"))
      st.handle_rc = (int)v;
    else if (!strcmp(key, "lost"))
      st.lost = (unsigned)v;
  }
}

int nvmlInit_v2(void) {
  Dl_info info;
  char path[4200];
  /* Each run starts from the defaults, even if the library stayed mapped. */
  st = h200;
  if (dladdr((void *)nvmlInit_v2, &info) && info.dli_fname) {
    snprintf(path, sizeof(path), "%s.state", info.dli_fname);
    FILE *f = fopen(path, "r");
    if (f) {
      parse(f);
      fclose(f);
    }
  }
  if (!st.old_throttle_set)
    st.old_throttle = st.throttle;
  return st.init_fails ? INVALID_ARGUMENT : OK;
}
int nvmlShutdown(void) {
  return OK;
}
int nvmlDeviceGetCount_v2(unsigned *n) {
  *n = st.count;
  return OK;
}
/* Handles are index + 1, so that none is NULL. */
static unsigned idx(dev_t_ d) {
  return (unsigned)((size_t)d - 1);
}
static int target(dev_t_ d) {
  return idx(d) == st.gpu;
}
#define LOST_GUARD(d)                                                          \
  do {                                                                         \
    if (target(d) && st.lost)                                                  \
      return GPU_IS_LOST;                                                      \
  } while (0)

int nvmlDeviceGetHandleByIndex_v2(unsigned i, dev_t_ *d) {
  if (i >= st.count)
    return INVALID_ARGUMENT;
  if (i == st.gpu && st.handle_rc)
    return st.handle_rc;
  *d = (dev_t_)(size_t)(i + 1);
  return OK;
}
int nvmlDeviceGetName(dev_t_ d, char *name, unsigned len) {
  LOST_GUARD(d);
  snprintf(name, len, "NVIDIA H200");
  return OK;
}
int nvmlDeviceGetTotalEccErrors(dev_t_ d, int type, int counter,
                                unsigned long long *n) {
  LOST_GUARD(d);
  if (target(d) && st.ecc_rc)
    return st.ecc_rc;
  *n = (type == 1 && counter == 0 && target(d)) ? st.ecc : 0;
  return OK;
}
int nvmlDeviceGetRetiredPagesPendingStatus(dev_t_ d, int *pending) {
  LOST_GUARD(d);
  if (st.retired < 0)
    return NOT_SUPPORTED;
  *pending = st.retired;
  return OK;
}
int nvmlDeviceGetRemappedRows(dev_t_ d, unsigned *corr, unsigned *unc,
                              unsigned *pending, unsigned *failed) {
  LOST_GUARD(d);
  *corr = *unc = 0;
  *pending = st.remap;
  *failed = 0;
  return OK;
}
int nvmlDeviceGetCurrentClocksEventReasons(dev_t_ d, unsigned long long *why) {
  LOST_GUARD(d);
  *why = st.throttle;
  return OK;
}
int nvmlDeviceGetCurrentClocksThrottleReasons(dev_t_ d,
                                              unsigned long long *why) {
  LOST_GUARD(d);
  *why = st.old_throttle;
  return OK;
}
int nvmlDeviceGetCurrPcieLinkGeneration(dev_t_ d, unsigned *gen) {
  LOST_GUARD(d);
  *gen = target(d) ? st.gen : 5;
  return OK;
}
int nvmlDeviceGetMaxPcieLinkGeneration(dev_t_ d, unsigned *gen) {
  LOST_GUARD(d);
  *gen = 5;
  return OK;
}
int nvmlDeviceGetCurrPcieLinkWidth(dev_t_ d, unsigned *width) {
  LOST_GUARD(d);
  *width = target(d) ? st.width : 16;
  return OK;
}
int nvmlDeviceGetMaxPcieLinkWidth(dev_t_ d, unsigned *width) {
  LOST_GUARD(d);
  *width = 16;
  return OK;
}
int nvmlDeviceGetPcieReplayCounter(dev_t_ d, unsigned *value) {
  LOST_GUARD(d);
  *value = 0;
  return OK;
}
int nvmlDeviceGetClockInfo(dev_t_ d, int type, unsigned *mhz) {
  LOST_GUARD(d);
  *mhz = type == 1 ? 345 : 3201;
  return OK;
}
int nvmlDeviceGetMaxClockInfo(dev_t_ d, int type, unsigned *mhz) {
  LOST_GUARD(d);
  *mhz = type == 1 ? 1980 : 3201;
  return OK;
}
/* The driver's own wording for the codes the fake returns. */
const char *nvmlErrorString(int rc) {
  switch (rc) {
  case INVALID_ARGUMENT:
    return "Invalid Argument (fake)";
  case NOT_SUPPORTED:
    return "Not Supported";
  case GPU_IS_LOST:
    return "GPU is lost";
  case 999:
    return "Unknown Error";
  default:
    return "fake NVML error";
  }
}
