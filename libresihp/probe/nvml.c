/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU health through NVML, loaded with dlopen so that nothing of the NVIDIA
 * stack is needed to build or to run resihp, and so that it is only ever
 * mapped into the probe helper, never into slurmstepd. The few prototypes
 * used are declared here (there is no NVML header on build hosts).
 *
 * A GPU fails the check when it reports uncorrected (volatile) ECC errors,
 * retired pages or remapped rows pending a reset (or a row-remap failure),
 * or hardware slowdown/thermal/power-brake throttling. Xid events would need
 * an event set held open across the step; they are left to the periodic
 * probe of a future release. */
#include "config.h"

#include "checks.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int nvml_return_t; /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef struct nvml_device *nvml_device_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_VOLATILE_ECC 0
/* nvmlClocksThrottleReasons bits that mean the hardware is protecting
 * itself, not a software policy (idle, app clocks, power cap). */
#define NVML_THROTTLE_HW_SLOWDOWN 0x8ULL
#define NVML_THROTTLE_HW_THERMAL 0x40ULL
#define NVML_THROTTLE_HW_POWER_BRAKE 0x80ULL

struct nvml {
  nvml_return_t (*init)(void);
  nvml_return_t (*shutdown)(void);
  nvml_return_t (*count)(unsigned *);
  nvml_return_t (*handle)(unsigned, nvml_device_t *);
  nvml_return_t (*ecc)(nvml_device_t, int, int, unsigned long long *);
  nvml_return_t (*retired_pending)(nvml_device_t, int *);
  nvml_return_t (*remapped)(nvml_device_t, unsigned *, unsigned *, unsigned *,
                            unsigned *);
  nvml_return_t (*throttle)(nvml_device_t, unsigned long long *);
  const char *(*errstr)(nvml_return_t);
};

/* dlsym returns an object pointer; copying its bytes into the function
 * pointer is the POSIX-sanctioned conversion. */
#define LOAD(field, name)                                                      \
  do {                                                                         \
    void *p_ = dlsym(h, name);                                                 \
    memcpy(&n->field, &p_, sizeof(p_));                                        \
  } while (0)

static int load(void *h, struct nvml *n) {
  memset(n, 0, sizeof(*n));
  LOAD(init, "nvmlInit_v2");
  LOAD(shutdown, "nvmlShutdown");
  LOAD(count, "nvmlDeviceGetCount_v2");
  LOAD(handle, "nvmlDeviceGetHandleByIndex_v2");
  LOAD(ecc, "nvmlDeviceGetTotalEccErrors");
  LOAD(retired_pending, "nvmlDeviceGetRetiredPagesPendingStatus");
  LOAD(remapped, "nvmlDeviceGetRemappedRows");
  LOAD(throttle, "nvmlDeviceGetCurrentClocksThrottleReasons");
  LOAD(errstr, "nvmlErrorString");
  /* The optional ones may be missing on old drivers; these may not. */
  return n->init && n->shutdown && n->count && n->handle ? 0 : -1;
}

static const char *nerr(const struct nvml *n, nvml_return_t rc) {
  return n->errstr ? n->errstr(rc) : "NVML error";
}

void resihp__probe_check_gpu(const resihp_probe_config_t *c,
                             resihp_probe_result_t *r) {
  void *h = dlopen(c->nvml_lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    if (c->expect_gpus > 0)
      resihp__probe_say(r, RESIHP_PROBE_FAIL,
                        "the step asked for %d GPUs but %.60s cannot be "
                        "loaded (driver missing?)",
                        c->expect_gpus, c->nvml_lib);
    else
      resihp__probe_say(r, RESIHP_PROBE_SKIP, "no NVML (%.60s) on this node",
                        c->nvml_lib);
    return;
  }
  struct nvml n;
  if (load(h, &n) != 0) {
    resihp__probe_say(r, RESIHP_PROBE_FAIL,
                      "%.60s lacks nvmlInit_v2/nvmlDeviceGetCount_v2",
                      c->nvml_lib);
    dlclose(h);
    return;
  }
  nvml_return_t rc = n.init();
  if (rc != NVML_SUCCESS) {
    resihp__probe_say(r, RESIHP_PROBE_FAIL, "nvmlInit failed: %.80s",
                      nerr(&n, rc));
    dlclose(h);
    return;
  }
  unsigned count = 0;
  rc = n.count(&count);
  char bad[RESIHP_PROBE_DETAIL_MAX] = "";
  size_t bl = 0;
#define BAD(...)                                                               \
  do {                                                                         \
    if (bl < sizeof(bad))                                                      \
      bl += (size_t)snprintf(bad + bl, sizeof(bad) - bl, __VA_ARGS__);         \
  } while (0)
  if (rc != NVML_SUCCESS)
    BAD("nvmlDeviceGetCount: %.60s; ", nerr(&n, rc));
  else if ((int)count < c->expect_gpus)
    BAD("NVML sees %u GPUs, step asked for %d; ", count, c->expect_gpus);
  for (unsigned i = 0; rc == NVML_SUCCESS && i < count; i++) {
    nvml_device_t d;
    nvml_return_t hr = n.handle(i, &d);
    if (hr != NVML_SUCCESS) {
      BAD("gpu%u: no handle (%.40s); ", i, nerr(&n, hr));
      continue;
    }
    unsigned long long ecc = 0;
    if (n.ecc && n.ecc(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                       NVML_VOLATILE_ECC, &ecc) == NVML_SUCCESS &&
        ecc > 0)
      BAD("gpu%u: %llu uncorrected ECC errors; ", i, ecc);
    int pending = 0;
    if (n.retired_pending && n.retired_pending(d, &pending) == NVML_SUCCESS &&
        pending)
      BAD("gpu%u: retired pages pending reset; ", i);
    unsigned corr = 0, unc = 0, rpend = 0, rfail = 0;
    if (n.remapped && n.remapped(d, &corr, &unc, &rpend, &rfail) ==
                          NVML_SUCCESS &&
        (rpend || rfail))
      BAD("gpu%u: row remap %s; ", i, rfail ? "failed" : "pending reset");
    unsigned long long why = 0;
    if (n.throttle && n.throttle(d, &why) == NVML_SUCCESS &&
        (why & (NVML_THROTTLE_HW_SLOWDOWN | NVML_THROTTLE_HW_THERMAL |
                NVML_THROTTLE_HW_POWER_BRAKE)))
      BAD("gpu%u: hardware throttling (reasons 0x%llx); ", i, why);
  }
#undef BAD
  n.shutdown();
  dlclose(h);
  if (bad[0]) {
    size_t l = strlen(bad);
    if (l >= 2 && bad[l - 2] == ';')
      bad[l - 2] = '\0';
    resihp__probe_say(r, RESIHP_PROBE_FAIL, "%s", bad);
  } else {
    resihp__probe_say(r, RESIHP_PROBE_PASS, "%u GPUs healthy (ECC, row "
                                            "remap, throttle)", count);
  }
}
