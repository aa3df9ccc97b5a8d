/* SPDX-License-Identifier: BSD-3-Clause */
/* GPU health through NVML, loaded with dlopen so that nothing of the NVIDIA
 * stack is needed to build or to run resihp, and so that it is only ever
 * mapped into the probe helper, never into slurmstepd. The few prototypes
 * used are declared here (there is no NVML header on build hosts).
 *
 * A GPU fails the check when it reports uncorrected (volatile) ECC errors,
 * retired pages or remapped rows pending a reset (or a row-remap failure),
 * hardware slowdown/thermal/power-brake throttling, or a PCIe link narrower
 * than the widest the GPU and its slot allow (x8 of x16 is a classic seating
 * or riser fault and halves host<->GPU bandwidth). It also fails when one of
 * those queries answers an error: GPU_IS_LOST is what a GPU that fell off
 * the bus says. A query the GPU does not support (retired pages on Hopper,
 * which remaps rows instead; ECC counts with ECC disabled), or that an old
 * driver lacks, is reported as "n/a" rather than passed off as checked.
 *
 * Reported, never failed: the link generation (GPUs train down to gen1 when
 * idle to save power), the PCIe replay counter (it has no threshold that
 * means the same on every platform) and the SM/memory clocks (idle GPUs
 * clock down). Each is one plain query per GPU; slow ones
 * (nvmlDeviceGetFieldValues, per-GPU process lists) are left out so that the
 * whole check stays within the 50 ms a start-of-step probe may take.
 *
 * Xid events would need an event set held open across the step; they are
 * left to the periodic probe of a future release. */
#include "config.h"

#include "checks.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef int nvml_return_t; /* nvmlReturn_t: 0 = NVML_SUCCESS */
typedef struct nvml_device *nvml_device_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_MEMORY_ERROR_TYPE_UNCORRECTED 1
#define NVML_VOLATILE_ECC 0
#define NVML_CLOCK_SM 1
#define NVML_CLOCK_MEM 2
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
/* nvmlClocksEventReasons (formerly ThrottleReasons) bits that mean the
 * hardware is protecting itself, not a software policy (idle, app clocks,
 * power cap). */
#define NVML_THROTTLE_GPU_IDLE 0x1ULL
#define NVML_THROTTLE_HW_SLOWDOWN 0x8ULL
#define NVML_THROTTLE_HW_THERMAL 0x40ULL
#define NVML_THROTTLE_HW_POWER_BRAKE 0x80ULL
#define NVML_THROTTLE_HW                                                       \
  (NVML_THROTTLE_HW_SLOWDOWN | NVML_THROTTLE_HW_THERMAL |                      \
   NVML_THROTTLE_HW_POWER_BRAKE)

struct nvml {
  nvml_return_t (*init)(void);
  nvml_return_t (*shutdown)(void);
  nvml_return_t (*count)(unsigned *);
  nvml_return_t (*handle)(unsigned, nvml_device_t *);
  nvml_return_t (*name)(nvml_device_t, char *, unsigned);
  nvml_return_t (*ecc)(nvml_device_t, int, int, unsigned long long *);
  nvml_return_t (*retired_pending)(nvml_device_t, int *);
  nvml_return_t (*remapped)(nvml_device_t, unsigned *, unsigned *, unsigned *,
                            unsigned *);
  nvml_return_t (*throttle)(nvml_device_t, unsigned long long *);
  nvml_return_t (*link_gen)(nvml_device_t, unsigned *);
  nvml_return_t (*max_link_gen)(nvml_device_t, unsigned *);
  nvml_return_t (*link_width)(nvml_device_t, unsigned *);
  nvml_return_t (*max_link_width)(nvml_device_t, unsigned *);
  nvml_return_t (*replay)(nvml_device_t, unsigned *);
  nvml_return_t (*clock)(nvml_device_t, int, unsigned *);
  nvml_return_t (*max_clock)(nvml_device_t, int, unsigned *);
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
  LOAD(name, "nvmlDeviceGetName");
  LOAD(ecc, "nvmlDeviceGetTotalEccErrors");
  LOAD(retired_pending, "nvmlDeviceGetRetiredPagesPendingStatus");
  LOAD(remapped, "nvmlDeviceGetRemappedRows");
  /* The "throttle" name is deprecated since driver 535 and may go away;
   * both answer the same bits. */
  LOAD(throttle, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!n->throttle)
    LOAD(throttle, "nvmlDeviceGetCurrentClocksThrottleReasons");
  LOAD(link_gen, "nvmlDeviceGetCurrPcieLinkGeneration");
  LOAD(max_link_gen, "nvmlDeviceGetMaxPcieLinkGeneration");
  LOAD(link_width, "nvmlDeviceGetCurrPcieLinkWidth");
  LOAD(max_link_width, "nvmlDeviceGetMaxPcieLinkWidth");
  LOAD(replay, "nvmlDeviceGetPcieReplayCounter");
  LOAD(clock, "nvmlDeviceGetClockInfo");
  LOAD(max_clock, "nvmlDeviceGetMaxClockInfo");
  LOAD(errstr, "nvmlErrorString");
  /* The optional ones may be missing on old drivers; these may not. */
  return n->init && n->shutdown && n->count && n->handle ? 0 : -1;
}

static const char *nerr(const struct nvml *n, nvml_return_t rc) {
  const char *s = n->errstr ? n->errstr(rc) : NULL;
  return s ? s : "NVML error";
}

/* A list of whole items bounded by cap: an item that does not fit is
 * counted in dropped, never cut, so that the detail an admin reads never
 * ends mid-word however many GPUs the node has. Once one is dropped so are
 * the rest, so that "+N more" always means the last N. */
struct list {
  char s[RESIHP_PROBE_DETAIL_MAX];
  size_t len, cap; /* cap < sizeof(s) */
  unsigned n, dropped;
  const char *sep;
};

static void list_init(struct list *l, size_t cap, const char *sep) {
  l->s[0] = '\0';
  l->len = 0;
  l->cap = cap < sizeof(l->s) ? cap : sizeof(l->s) - 1;
  l->n = l->dropped = 0;
  l->sep = sep;
}

static void list_add(struct list *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void list_add(struct list *l, const char *fmt, ...) {
  if (l->dropped) {
    l->dropped++;
    return;
  }
  char item[RESIHP_PROBE_DETAIL_MAX];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(item, sizeof(item), fmt, ap);
  va_end(ap);
  size_t sl = l->n ? strlen(l->sep) : 0;
  if (k < 0 || (size_t)k >= sizeof(item) || l->len + sl + (size_t)k > l->cap) {
    l->dropped++;
    return;
  }
  memcpy(l->s + l->len, l->sep, sl);
  memcpy(l->s + l->len + sl, item, (size_t)k + 1);
  l->len += sl + (size_t)k;
  l->n++;
}

struct gpu {
  struct list bad;  /* why it fails */
  struct list seen; /* what was read or not available, for the healthy line */
  int lost;         /* GPU_IS_LOST: asking further only costs time */
};

/* Sorts the answer to one query: 1 = a value to use; 0 = none, with "what
 * n/a" noted when the GPU or driver lacks the query, or a failure when a
 * required query errs. GPU_IS_LOST fails even an informational query. */
static int answered(const struct nvml *n, struct gpu *g, nvml_return_t rc,
                    const char *what, int required) {
  if (rc == NVML_SUCCESS)
    return 1;
  if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_FUNCTION_NOT_FOUND) {
    list_add(&g->seen, "%s n/a", what);
  } else if (rc == NVML_ERROR_GPU_IS_LOST || required) {
    g->lost = rc == NVML_ERROR_GPU_IS_LOST;
    list_add(&g->bad, "%s query: %.40s", what, nerr(n, rc));
  } else {
    list_add(&g->seen, "%s n/a (%.30s)", what, nerr(n, rc));
  }
  return 0;
}

/* A missing symbol (an old driver) reads as an unsupported query. */
#define ASK(fn, ...)                                                           \
  (n->fn ? n->fn(__VA_ARGS__) : NVML_ERROR_FUNCTION_NOT_FOUND)

static void check_gpu(const struct nvml *n, nvml_device_t d, struct gpu *g) {
  unsigned long long ecc = 0;
  if (answered(n, g,
               ASK(ecc, d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                   NVML_VOLATILE_ECC, &ecc),
               "ecc", 1)) {
    if (ecc > 0)
      list_add(&g->bad, "%llu uncorrected ECC errors", ecc);
    list_add(&g->seen, "ecc %llu uncorrected", ecc);
  }
  if (g->lost)
    return;
  int pending = 0;
  if (answered(n, g, ASK(retired_pending, d, &pending), "retired-pages", 1)) {
    if (pending)
      list_add(&g->bad, "retired pages pending reset");
    list_add(&g->seen, "retired-pages %s", pending ? "pending" : "ok");
  }
  if (g->lost)
    return;
  unsigned corr = 0, unc = 0, rpend = 0, rfail = 0;
  if (answered(n, g, ASK(remapped, d, &corr, &unc, &rpend, &rfail), "remap",
               1)) {
    if (rpend || rfail)
      list_add(&g->bad, "row remap %s", rfail ? "failed" : "pending reset");
    list_add(&g->seen, "remap %u pending", rpend);
  }
  if (g->lost)
    return;
  unsigned long long why = 0;
  if (answered(n, g, ASK(throttle, d, &why), "throttle", 1)) {
    if (why & NVML_THROTTLE_HW)
      list_add(&g->bad, "hardware throttling (reasons 0x%llx)", why);
    if ((why & ~NVML_THROTTLE_GPU_IDLE) == 0)
      list_add(&g->seen, "throttle none");
    else
      list_add(&g->seen, "throttle 0x%llx", why);
  }
  if (g->lost)
    return;
  /* Width is the health check; the generation only explains the speed. */
  unsigned w = 0, wmax = 0, gen = 0, gmax = 0;
  int have_w = answered(n, g, ASK(link_width, d, &w), "pcie-width", 1);
  if (!g->lost && have_w)
    have_w = answered(n, g, ASK(max_link_width, d, &wmax), "pcie-width", 1);
  if (g->lost)
    return;
  int have_g = answered(n, g, ASK(link_gen, d, &gen), "pcie-gen", 0) &&
               answered(n, g, ASK(max_link_gen, d, &gmax), "pcie-gen", 0);
  if (g->lost)
    return;
  if (have_w && w < wmax)
    list_add(&g->bad, "pcie link x%u of x%u", w, wmax);
  if (have_w && have_g)
    list_add(&g->seen, "pcie gen%u/%u x%u/%u", gen, gmax, w, wmax);
  else if (have_w)
    list_add(&g->seen, "pcie x%u/%u", w, wmax);
  else if (have_g)
    list_add(&g->seen, "pcie gen%u/%u", gen, gmax);
  unsigned replay = 0;
  if (answered(n, g, ASK(replay, d, &replay), "replay", 0))
    list_add(&g->seen, "replay %u", replay);
  if (g->lost)
    return;
  unsigned sm = 0, smmax = 0, mem = 0, memmax = 0;
  if (answered(n, g, ASK(clock, d, NVML_CLOCK_SM, &sm), "sm-clock", 0) &&
      answered(n, g, ASK(max_clock, d, NVML_CLOCK_SM, &smmax), "sm-clock", 0))
    list_add(&g->seen, "sm %u/%u MHz", sm, smmax);
  if (g->lost)
    return;
  if (answered(n, g, ASK(clock, d, NVML_CLOCK_MEM, &mem), "mem-clock", 0) &&
      answered(n, g, ASK(max_clock, d, NVML_CLOCK_MEM, &memmax), "mem-clock",
               0))
    list_add(&g->seen, "mem %u/%u MHz", mem, memmax);
}

/* "NVIDIA H200" -> "H200": the vendor is known, the room is not. */
static const char *short_name(const char *name) {
  if (strncmp(name, "NVIDIA ", 7) == 0)
    name += 7;
  return *name ? name : "?";
}

/* The room a list may fill: the detail less the words that will surround
 * it, measured for this node's GPU count so that they always fit. */
static size_t room(int k) {
  return k > 0 && (size_t)k < RESIHP_PROBE_DETAIL_MAX
             ? RESIHP_PROBE_DETAIL_MAX - 1 - (size_t)k
             : 0;
}

/* The room one GPU's findings get behind "prefix" in a list, with ", ..."
 * kept free in case some do not fit. Measured against the empty list: the
 * first GPU always fits, a later one fits whole or is counted as more. */
static size_t gpu_room(const struct list *l, const char *prefix) {
  size_t used = strlen(prefix) + 5;
  return l->cap > used ? l->cap - used : 0;
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
  struct nvml nv, *n = &nv;
  if (load(h, n) != 0) {
    resihp__probe_say(r, RESIHP_PROBE_FAIL,
                      "%.60s lacks nvmlInit_v2/nvmlDeviceGetCount_v2",
                      c->nvml_lib);
    dlclose(h);
    return;
  }
  nvml_return_t rc = n->init();
  if (rc != NVML_SUCCESS) {
    resihp__probe_say(r, RESIHP_PROBE_FAIL, "nvmlInit failed: %.80s",
                      nerr(n, rc));
    dlclose(h);
    return;
  }
  unsigned count = 0, healthy = 0;
  rc = n->count(&count);
  if (rc != NVML_SUCCESS)
    count = 0;
  /* The widest words that can surround each list (see the end). */
  struct list bad, ok;
  list_init(&bad,
            room(snprintf(NULL, 0, "; +%u more failing; %u GPUs healthy", count,
                          count)),
            "; ");
  list_init(&ok,
            room(snprintf(NULL, 0, "%u GPUs healthy: ; +%u more healthy", count,
                          count)),
            "; ");
  if (rc != NVML_SUCCESS)
    list_add(&bad, "nvmlDeviceGetCount: %.60s", nerr(n, rc));
  else if ((int)count < c->expect_gpus)
    list_add(&bad, "NVML sees %u GPUs, step asked for %d", count,
             c->expect_gpus);
  for (unsigned i = 0; i < count; i++) {
    nvml_device_t d;
    nvml_return_t hr = n->handle(i, &d);
    if (hr != NVML_SUCCESS) {
      list_add(&bad, "gpu%u: no handle (%.40s)", i, nerr(n, hr));
      continue;
    }
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = "";
    if (ASK(name, d, name, sizeof(name)) != NVML_SUCCESS)
      name[0] = '\0';
    name[sizeof(name) - 1] = '\0';
    char okp[64], badp[32];
    snprintf(okp, sizeof(okp), "gpu%u %.24s: ", i, short_name(name));
    snprintf(badp, sizeof(badp), "gpu%u: ", i);
    struct gpu g;
    list_init(&g.bad, gpu_room(&bad, badp), ", ");
    list_init(&g.seen, gpu_room(&ok, okp), ", ");
    g.lost = 0;
    check_gpu(n, d, &g);
    if (g.bad.n || g.bad.dropped) {
      list_add(&bad, "%s%s%s", badp, g.bad.s, g.bad.dropped ? ", ..." : "");
      continue;
    }
    healthy++;
    list_add(&ok, "%s%s%s", okp, g.seen.s, g.seen.dropped ? ", ..." : "");
  }
  n->shutdown();
  dlclose(h);
  if (bad.n || bad.dropped) {
    char more[48] = "", fine[48] = "";
    if (bad.dropped)
      snprintf(more, sizeof(more), "; +%u more failing", bad.dropped);
    if (healthy)
      snprintf(fine, sizeof(fine), "; %u GPU%s healthy", healthy,
               healthy == 1 ? "" : "s");
    resihp__probe_say(r, RESIHP_PROBE_FAIL, "%s%s%s", bad.s, more, fine);
  } else if (count == 0) {
    resihp__probe_say(r, RESIHP_PROBE_PASS, "NVML sees no GPUs");
  } else {
    char more[48] = "";
    if (ok.dropped)
      snprintf(more, sizeof(more), "; +%u more healthy", ok.dropped);
    resihp__probe_say(r, RESIHP_PROBE_PASS, "%u GPU%s healthy: %s%s", count,
                      count == 1 ? "" : "s", ok.s, more);
  }
}
