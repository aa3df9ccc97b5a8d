/* SPDX-License-Identifier: BSD-3-Clause */
/* The node checks that need no vendor library: hwloc topology, available
 * memory, scratch writability, NIC/IB links. Each fills one result with a
 * verdict and a one-line detail an admin can act on. They run inside the
 * probe helper, so they may block: the deadline is enforced outside. */
#include "config.h"

#include "checks.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hwloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

void resihp__probe_say(resihp_probe_result_t *r, int status, const char *fmt,
                       ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->detail, sizeof(r->detail), fmt, ap);
  va_end(ap);
  r->status = status;
}

#define say resihp__probe_say

/* ---- topo ---------------------------------------------------------------- */

/* NVIDIA/AMD display or 3D controllers on the PCI bus: what a GPU job needs
 * whatever driver stack is (or is not) loaded. */
static int count_pci_gpus(hwloc_topology_t t) {
  int n = 0;
  for (hwloc_obj_t o = NULL;
       (o = hwloc_get_next_pcidev(t, o)) != NULL;) {
    unsigned cls = o->attr->pcidev.class_id;
    unsigned vendor = o->attr->pcidev.vendor_id;
    if ((cls == 0x0300 || cls == 0x0302) &&
        (vendor == 0x10de || vendor == 0x1002))
      n++;
  }
  return n;
}

void resihp__probe_check_topo(const resihp_probe_config_t *c,
                              resihp_probe_result_t *r) {
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0) {
    say(r, RESIHP_PROBE_FAIL, "hwloc_topology_init failed");
    return;
  }
  if (c->expect_gpus > 0)
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(t) != 0) {
    hwloc_topology_destroy(t);
    say(r, RESIHP_PROBE_FAIL, "hwloc cannot load the topology: %s",
        strerror(errno));
    return;
  }
  int pus = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  int cores = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE);
  int numa = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  int gpus = c->expect_gpus > 0 ? count_pci_gpus(t) : -1;
  hwloc_topology_destroy(t);

  char gtxt[48] = "";
  if (gpus >= 0)
    snprintf(gtxt, sizeof(gtxt), " gpus=%d/%d", gpus, c->expect_gpus);
  if (pus < 1 || numa < 1)
    say(r, RESIHP_PROBE_FAIL, "no usable PU or NUMA node (pus=%d numa=%d)",
        pus, numa);
  else if (c->expect_cpus > 0 && pus < c->expect_cpus)
    say(r, RESIHP_PROBE_FAIL,
        "only %d PUs usable but the step needs %d here (cores=%d numa=%d)",
        pus, c->expect_cpus, cores, numa);
  else if (gpus >= 0 && gpus < c->expect_gpus)
    say(r, RESIHP_PROBE_FAIL, "only %d GPUs on the PCI bus but the step "
                              "asked for %d (a GPU fell off the bus?)",
        gpus, c->expect_gpus);
  else
    say(r, RESIHP_PROBE_PASS, "pus=%d cores=%d numa=%d step-needs=%d", pus,
        cores, numa, c->expect_cpus);
  if (r->status == RESIHP_PROBE_PASS && gtxt[0]) {
    size_t l = strlen(r->detail);
    snprintf(r->detail + l, sizeof(r->detail) - l, "%s", gtxt);
  }
}

/* ---- mem ----------------------------------------------------------------- */

void resihp__probe_check_mem(const resihp_probe_config_t *c,
                             resihp_probe_result_t *r) {
  char path[RESIHP_PROBE_PATH_MAX + 16];
  snprintf(path, sizeof(path), "%s/meminfo", c->proc_root);
  FILE *f = fopen(path, "re");
  if (!f) {
    say(r, RESIHP_PROBE_FAIL, "cannot read %s: %s", path, strerror(errno));
    return;
  }
  char line[256];
  long long avail_kb = -1, total_kb = -1;
  while (fgets(line, sizeof(line), f)) {
    long long v;
    if (sscanf(line, "MemAvailable: %lld kB", &v) == 1)
      avail_kb = v;
    else if (sscanf(line, "MemTotal: %lld kB", &v) == 1)
      total_kb = v;
  }
  fclose(f);
  if (avail_kb < 0) {
    say(r, RESIHP_PROBE_FAIL, "no MemAvailable in %s", path);
    return;
  }
  long long avail = avail_kb * 1024, need = c->min_free_mem;
  if (avail < need)
    say(r, RESIHP_PROBE_FAIL,
        "available %lld MiB < required %lld MiB (total %lld MiB)",
        avail >> 20, need >> 20, total_kb >> 10);
  else
    say(r, RESIHP_PROBE_PASS, "available %lld MiB of %lld MiB (min %lld MiB)",
        avail >> 20, total_kb >> 10, need >> 20);
}

/* ---- disk (scratch dir) -------------------------------------------------------- */

#define SCRATCH_BYTES 65536

void resihp__probe_check_disk(const resihp_probe_config_t *c,
                                 resihp_probe_result_t *r) {
  const char *dir = c->scratch_dir;
  if (!resihp__probe_valid_dir(dir)) {
    say(r, RESIHP_PROBE_FAIL, "scratch dir '%.80s' is not a usable absolute "
                              "path", dir);
    return;
  }
  char path[RESIHP_PROBE_PATH_MAX + 64];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(path, sizeof(path), "%s/.resihp-probe.%ld.%ld", dir, (long)getpid(),
           (long)ts.tv_nsec);
  /* O_EXCL|O_NOFOLLOW: a name planted by someone else (a symlink to a file
   * we must not touch) makes the check fail instead of writing through it. */
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                0600);
  if (fd < 0) {
    int e = errno;
    say(r, RESIHP_PROBE_FAIL, "cannot create a file in %.120s: %s%s", dir,
        strerror(e),
        e == ENOSPC || e == EDQUOT ? " (disk full)"
        : e == EROFS               ? " (read-only file system)"
                                   : "");
    return;
  }
  static char buf[SCRATCH_BYTES];
  memset(buf, 0x5a, sizeof(buf));
  const char *what = NULL;
  int e = 0;
  size_t off = 0;
  while (off < sizeof(buf)) {
    ssize_t w = write(fd, buf + off, sizeof(buf) - off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      what = "write";
      e = w < 0 ? errno : ENOSPC;
      break;
    }
    off += (size_t)w;
  }
  if (!what && fsync(fd) != 0) {
    what = "fsync";
    e = errno;
  }
  if (close(fd) != 0 && !what) {
    what = "close";
    e = errno;
  }
  int ue = unlink(path) != 0 ? errno : 0;
  if (what) {
    say(r, RESIHP_PROBE_FAIL, "%s of %d KiB in %.120s failed: %s%s", what,
        SCRATCH_BYTES / 1024, dir, strerror(e),
        e == ENOSPC || e == EDQUOT ? " (disk full)" : "");
    return;
  }
  if (ue) {
    say(r, RESIHP_PROBE_FAIL, "cannot unlink the probe file in %.120s: %s",
        dir, strerror(ue));
    return;
  }
  struct statvfs sv;
  long long free_mib = -1;
  if (statvfs(dir, &sv) == 0)
    free_mib = (long long)sv.f_bavail * (long long)sv.f_frsize >> 20;
  say(r, RESIHP_PROBE_PASS, "%.120s writable (%d KiB write+fsync), %lld MiB "
                            "free",
      dir, SCRATCH_BYTES / 1024, free_mib);
}

/* ---- net ----------------------------------------------------------------- */

static int read_line(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "re");
  if (!f)
    return -1;
  if (!fgets(buf, (int)len, f)) {
    fclose(f);
    return -1;
  }
  fclose(f);
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}

static void append(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...) {
  size_t l = strnlen(buf, len);
  if (l + 1 >= len)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + l, len - l, fmt, ap);
  va_end(ap);
}

/* Ethernet: interfaces backed by a device (physical NICs); virtual ones
 * (bridges, veth, bonds' slaves are physical) are ignored. The node is
 * unhealthy when it has physical NICs and none is up at an acceptable rate:
 * an unplugged spare port alone must not fail a node. */
static void check_eth(const resihp_probe_config_t *c, int *phys, int *good,
                      char *info, size_t len) {
  char dpath[RESIHP_PROBE_PATH_MAX + 32];
  snprintf(dpath, sizeof(dpath), "%s/class/net", c->sysfs_root);
  DIR *d = opendir(dpath);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || !strcmp(e->d_name, "lo"))
      continue;
    char p[RESIHP_PROBE_PATH_MAX + 600], state[64] = "?", speed[32] = "";
    snprintf(p, sizeof(p), "%s/%s/device", dpath, e->d_name);
    if (access(p, F_OK) != 0)
      continue;
    (*phys)++;
    snprintf(p, sizeof(p), "%s/%s/operstate", dpath, e->d_name);
    read_line(p, state, sizeof(state));
    snprintf(p, sizeof(p), "%s/%s/speed", dpath, e->d_name);
    long mbps = -1;
    if (read_line(p, speed, sizeof(speed)) == 0)
      mbps = strtol(speed, NULL, 10);
    int up = !strcmp(state, "up");
    int fast = c->min_link_mbps <= 0 || mbps >= c->min_link_mbps;
    if (up && fast)
      (*good)++;
    append(info, len, "%s%.16s=%s", info[0] ? " " : "", e->d_name, state);
    if (mbps > 0)
      append(info, len, "/%ldMb", mbps);
  }
  closedir(d);
}

/* InfiniBand: /sys/class/infiniband/DEV/ports/N/{state,rate}, e.g.
 * "4: ACTIVE" and "200 Gb/sec (4X HDR)". No IB at all is fine. */
static void check_ib(const resihp_probe_config_t *c, int *ports, int *good,
                     char *info, size_t len) {
  char dpath[RESIHP_PROBE_PATH_MAX + 32];
  snprintf(dpath, sizeof(dpath), "%s/class/infiniband", c->sysfs_root);
  DIR *d = opendir(dpath);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char pdir[RESIHP_PROBE_PATH_MAX + 300];
    snprintf(pdir, sizeof(pdir), "%s/%s/ports", dpath, e->d_name);
    DIR *pd = opendir(pdir);
    if (!pd)
      continue;
    struct dirent *pe;
    while ((pe = readdir(pd)) != NULL) {
      if (pe->d_name[0] == '.')
        continue;
      char p[RESIHP_PROBE_PATH_MAX + 600], state[64] = "?", rate[64] = "";
      (*ports)++;
      snprintf(p, sizeof(p), "%s/%s/state", pdir, pe->d_name);
      read_line(p, state, sizeof(state));
      snprintf(p, sizeof(p), "%s/%s/rate", pdir, pe->d_name);
      read_line(p, rate, sizeof(rate));
      long gbps = strtol(rate, NULL, 10);
      int active = strstr(state, "ACTIVE") != NULL;
      int fast = c->min_link_mbps <= 0 || gbps * 1000 >= c->min_link_mbps;
      if (active && fast)
        (*good)++;
      const char *st = strchr(state, ' ');
      append(info, len, "%s%.16s/%.4s=%s/%ldGb", info[0] ? " " : "",
             e->d_name, pe->d_name, st ? st + 1 : state, gbps);
    }
    closedir(pd);
  }
  closedir(d);
}

void resihp__probe_check_net(const resihp_probe_config_t *c,
                             resihp_probe_result_t *r) {
  char eth[120] = "", ib[120] = "";
  int phys = 0, eth_good = 0, ports = 0, ib_good = 0;
  check_eth(c, &phys, &eth_good, eth, sizeof(eth));
  check_ib(c, &ports, &ib_good, ib, sizeof(ib));
  const char *min = c->min_link_mbps > 0 ? " at the minimum rate" : "";
  if (phys > 0 && eth_good == 0)
    say(r, RESIHP_PROBE_FAIL, "no physical NIC up%s: %s", min, eth);
  else if (ports > 0 && ib_good == 0)
    say(r, RESIHP_PROBE_FAIL, "no InfiniBand port ACTIVE%s: %s", min, ib);
  else
    say(r, RESIHP_PROBE_PASS, "nic %d/%d up [%s] ib %d/%d active [%s]",
        eth_good, phys, phys ? eth : "virtual only", ib_good, ports,
        ports ? ib : "none");
}
