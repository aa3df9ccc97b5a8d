/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-plan: read a cluster + model description (resihp-plan(1)) and
 * print the plan resihp's planner chooses for it (DP/PP/TP, layer
 * partition, quotas, predicted iteration time) and, for a `degrade` line,
 * the escalation options with their costs. `--bench` times the planner on
 * synthetic clusters of 256 to 100,000 GPUs. */
#include "config.h"

#include <resihp.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAME_MAX_LEN 64

typedef struct {
  char name[NAME_MAX_LEN];
  int first, gpus, line;
} node_t;

typedef struct {
  double *v;
  int n, line;
} list_t;

typedef struct {
  const char *file;
  int line;
  /* inputs being built */
  resihp_plan_device_t *dev;
  int ndev, cap_dev;
  node_t *nodes;
  int nnodes, cap_nodes;
  int *names; /* open-addressing hash of node indices, by name */
  int cap_names, nnames;
  resihp_plan_cluster_t cluster;
  resihp_plan_model_t model;
  resihp_plan_opts_t opts;
  resihp_escalation_costs_t costs;
  list_t layer_ms, layer_mem;
  int have_layers, have_mb;
  /* degrade NODE:GPU speed=S */
  int deg_dev, deg_line;
  double deg_speed;
} input_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int fail(const input_t *in, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int fail(const input_t *in, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "resihp-plan: %s:%d: ", in->file, in->line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return -1;
}

static int parse_double(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !isfinite(v))
    return -1;
  *out = v;
  return 0;
}

static int parse_int(const char *s, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < -1000000000L || v > 1000000000L)
    return -1;
  *out = (int)v;
  return 0;
}

static int parse_list(input_t *in, const char *s, list_t *l, const char *key) {
  free(l->v);
  l->v = NULL;
  l->n = 0;
  l->line = in->line;
  int cap = 1;
  for (const char *p = s; *p; p++)
    cap += *p == ',';
  l->v = malloc((size_t)cap * sizeof(double));
  if (!l->v)
    return fail(in, "out of memory");
  char *copy = strdup(s), *save = NULL;
  if (!copy)
    return fail(in, "out of memory");
  for (char *tok = strtok_r(copy, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    if (parse_double(tok, &l->v[l->n])) {
      fail(in, "%s: '%s' is not a number", key, tok);
      free(copy);
      return -1;
    }
    l->n++;
  }
  free(copy);
  if (l->n != cap)
    return fail(in, "%s: empty element in list '%s'", key, s);
  return 0;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t')
    s++;
  char *e = s + strlen(s);
  while (e > s &&
         (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
    *--e = 0;
  return s;
}

/* `key = value` settings: name, where it goes, integer or not, bounds. */
typedef struct {
  const char *key;
  int is_int;
  double min, max;
  size_t off;
  int which; /* 0 model, 1 cluster, 2 opts, 3 costs */
} keydef_t;

#define KM(k, i, lo, hi)                                                       \
  { #k, i, lo, hi, offsetof(resihp_plan_model_t, k), 0 }
#define KC(k, i, lo, hi)                                                       \
  { #k, i, lo, hi, offsetof(resihp_plan_cluster_t, k), 1 }
#define KO(k, i, lo, hi)                                                       \
  { #k, i, lo, hi, offsetof(resihp_plan_opts_t, k), 2 }
#define KE(k, i, lo, hi)                                                       \
  { #k, i, lo, hi, offsetof(resihp_escalation_costs_t, k), 3 }
static const keydef_t keys[] = {
    KM(layers, 1, 1, 100000),
    KM(microbatches, 1, 1, 100000000),
    KM(act_gb, 0, 0, 1e6),
    KM(boundary_mb, 0, 0, 1e9),
    KM(tp_mb, 0, 0, 1e9),
    KM(grad_fraction, 0, 0, 100),
    KC(spare_nodes, 1, 0, 100000000),
    KC(nvlink_gbs, 0, 1e-6, 1e9),
    KC(net_gbs, 0, 1e-6, 1e9),
    KC(nvlink_lat_us, 0, 0, 1e9),
    KC(net_lat_us, 0, 0, 1e9),
    KO(max_tp, 1, 0, 1024),
    KO(max_pp, 1, 0, 100000),
    KO(tp, 1, 0, 1024),
    KO(pp, 1, 0, 100000),
    KE(horizon_iters, 0, 1, 1e12),
    KE(quota_switch_s, 0, 0, 1e9),
    KE(repartition_s, 0, 0, 1e9),
    KE(regroup_s, 0, 0, 1e9),
    KE(spare_swap_s, 0, 0, 1e9),
    KE(relaunch_s, 0, 0, 1e9),
    KE(relaunch_cure, 0, 0, 1),
};

static int set_key(input_t *in, const char *key, const char *val) {
  if (!strcmp(key, "layer_ms"))
    return parse_list(in, val, &in->layer_ms, key);
  if (!strcmp(key, "layer_mem_gb"))
    return parse_list(in, val, &in->layer_mem, key);
  for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
    const keydef_t *k = &keys[i];
    if (strcmp(key, k->key))
      continue;
    char *base = k->which == 0   ? (char *)&in->model
                 : k->which == 1 ? (char *)&in->cluster
                 : k->which == 2 ? (char *)&in->opts
                                 : (char *)&in->costs;
    double v;
    int iv = 0;
    if (k->is_int ? parse_int(val, &iv) : parse_double(val, &v))
      return fail(in, "%s: '%s' is not %s", key, val,
                  k->is_int ? "an integer" : "a number");
    if (k->is_int)
      v = iv;
    if (v < k->min || v > k->max)
      return fail(in, "%s = %s is out of range [%g, %g]", key, val, k->min,
                  k->max);
    if (k->is_int)
      *(int *)(base + k->off) = iv;
    else
      *(double *)(base + k->off) = v;
    if (!strcmp(key, "layers"))
      in->have_layers = 1;
    if (!strcmp(key, "microbatches"))
      in->have_mb = 1;
    return 0;
  }
  return fail(in, "unknown key '%s' (see resihp-plan(1))", key);
}

static unsigned long name_hash(const char *s) {
  unsigned long h = 5381;
  while (*s)
    h = h * 33 + (unsigned char)*s++;
  return h;
}

/* Index of the node called name, or -1. */
static int find_node(const input_t *in, const char *name) {
  if (!in->cap_names)
    return -1;
  for (unsigned long i = name_hash(name) & (unsigned long)(in->cap_names - 1);;
       i = (i + 1) & (unsigned long)(in->cap_names - 1)) {
    int k = in->names[i];
    if (k < 0)
      return -1;
    if (!strcmp(in->nodes[k].name, name))
      return k;
  }
}

static int index_node(input_t *in, int k) {
  if (2 * (in->nnames + 1) > in->cap_names) {
    int nc = in->cap_names ? 2 * in->cap_names : 1024;
    int *t = malloc((size_t)nc * sizeof(int));
    if (!t)
      return fail(in, "out of memory");
    for (int i = 0; i < nc; i++)
      t[i] = -1;
    int *old = in->names, oc = in->cap_names;
    in->names = t;
    in->cap_names = nc;
    in->nnames = 0;
    for (int i = 0; i < oc; i++)
      if (old[i] >= 0)
        index_node(in, old[i]);
    free(old);
  }
  unsigned long i =
      name_hash(in->nodes[k].name) & (unsigned long)(in->cap_names - 1);
  while (in->names[i] >= 0)
    i = (i + 1) & (unsigned long)(in->cap_names - 1);
  in->names[i] = k;
  in->nnames++;
  return 0;
}

static int add_node(input_t *in, const char *name, int gpus, double mem,
                    const list_t *speed) {
  if (in->nnodes == in->cap_nodes) {
    int nc = in->cap_nodes ? 2 * in->cap_nodes : 64;
    node_t *n = realloc(in->nodes, (size_t)nc * sizeof(*n));
    if (!n)
      return fail(in, "out of memory");
    in->nodes = n;
    in->cap_nodes = nc;
  }
  if (gpus > 10000000 - in->ndev)
    return fail(in, "more than 10,000,000 GPUs in all");
  if (in->ndev + gpus > in->cap_dev) {
    int nc = in->cap_dev ? 2 * in->cap_dev : 512;
    while (nc < in->ndev + gpus)
      nc *= 2;
    resihp_plan_device_t *d = realloc(in->dev, (size_t)nc * sizeof(*d));
    if (!d)
      return fail(in, "out of memory");
    in->dev = d;
    in->cap_dev = nc;
  }
  node_t *n = &in->nodes[in->nnodes];
  snprintf(n->name, sizeof(n->name), "%s", name);
  n->first = in->ndev;
  n->gpus = gpus;
  n->line = in->line;
  for (int g = 0; g < gpus; g++)
    in->dev[in->ndev++] = (resihp_plan_device_t){
        in->nnodes, speed->n ? speed->v[speed->n == 1 ? 0 : g] : 1.0, mem};
  in->nnodes++;
  return 0;
}

/* node NAME gpus=N mem_gb=M [speed=S|S,S,...]
 * nodes COUNT gpus=N mem_gb=M [speed=...] */
static int parse_node(input_t *in, char *rest, int many) {
  char *save = NULL, *first = strtok_r(rest, " \t", &save);
  if (!first)
    return fail(in, "%s: missing %s", many ? "nodes" : "node",
                many ? "count" : "name");
  int count = 1;
  if (many) {
    if (parse_int(first, &count) || count < 1 || count > 10000000)
      return fail(in, "nodes: count '%s' must be an integer >= 1", first);
  } else {
    if (strlen(first) >= NAME_MAX_LEN || strchr(first, ':') ||
        strchr(first, '='))
      return fail(in, "node: bad name '%s' (< 64 characters, no ':' or '=')",
                  first);
    int k = find_node(in, first);
    if (k >= 0)
      return fail(in, "node %s: already declared on line %d", first,
                  in->nodes[k].line);
  }
  int gpus = -1;
  double mem = -1;
  list_t speed = {0};
  int rc = -1;
  for (char *tok; (tok = strtok_r(NULL, " \t", &save));) {
    char *eq = strchr(tok, '=');
    if (!eq) {
      fail(in, "expected key=value, got '%s'", tok);
      goto out;
    }
    *eq = 0;
    const char *v = eq + 1;
    if (!strcmp(tok, "gpus")) {
      if (parse_int(v, &gpus) || gpus < 1 || gpus > 1024) {
        fail(in, "gpus=%s: must be an integer in [1, 1024]", v);
        goto out;
      }
    } else if (!strcmp(tok, "mem_gb")) {
      if (parse_double(v, &mem) || !(mem > 0)) {
        fail(in, "mem_gb=%s: must be a number > 0", v);
        goto out;
      }
    } else if (!strcmp(tok, "speed")) {
      if (parse_list(in, v, &speed, "speed"))
        goto out;
    } else {
      fail(in, "unknown node attribute '%s' (gpus, mem_gb, speed)", tok);
      goto out;
    }
  }
  if (gpus < 0 || mem < 0) {
    fail(in, "%s needs gpus= and mem_gb=", many ? "nodes" : "node");
    goto out;
  }
  if (speed.n != 0 && speed.n != 1 && speed.n != gpus) {
    fail(in, "speed has %d values for gpus=%d (give 1 or %d)", speed.n, gpus,
         gpus);
    goto out;
  }
  for (int i = 0; i < speed.n; i++)
    if (speed.v[i] < 0 || speed.v[i] > 100) {
      fail(in, "speed %g out of range [0, 100] (1 healthy, 0 failed)",
           speed.v[i]);
      goto out;
    }
  for (int k = 0; k < count; k++) {
    char name[NAME_MAX_LEN];
    if (many)
      snprintf(name, sizeof(name), "@%d.%d", in->line, k);
    else
      snprintf(name, sizeof(name), "%s", first);
    if (add_node(in, name, gpus, mem, &speed) ||
        (!many && index_node(in, in->nnodes - 1)))
      goto out;
  }
  rc = 0;
out:
  free(speed.v);
  return rc;
}

/* degrade NODE:GPU speed=S */
static int parse_degrade(input_t *in, char *rest) {
  char *save = NULL, *where = strtok_r(rest, " \t", &save);
  char *sp = strtok_r(NULL, " \t", &save);
  if (!where || !sp || strtok_r(NULL, " \t", &save) || strncmp(sp, "speed=", 6))
    return fail(in, "usage: degrade NODE:GPU speed=S");
  if (in->deg_line)
    return fail(in, "only one degrade line (first on line %d)", in->deg_line);
  char *colon = strrchr(where, ':');
  int gpu;
  if (!colon || parse_int(colon + 1, &gpu) || gpu < 0)
    return fail(in, "degrade: '%s' is not NODE:GPU", where);
  *colon = 0;
  if (parse_double(sp + 6, &in->deg_speed) || in->deg_speed < 0 ||
      in->deg_speed > 100)
    return fail(in, "degrade: speed '%s' must be a number >= 0", sp + 6);
  int i = find_node(in, where);
  if (i < 0)
    return fail(in, "degrade: unknown node '%s' (declare it first)", where);
  if (gpu >= in->nodes[i].gpus)
    return fail(in, "degrade: node %s has %d GPUs, no GPU %d", where,
                in->nodes[i].gpus, gpu);
  in->deg_dev = in->nodes[i].first + gpu;
  in->deg_line = in->line;
  return 0;
}

static int resolve_list(input_t *in, list_t *l, const char *key, double **out) {
  int L = in->model.layers;
  *out = malloc((size_t)L * sizeof(double));
  if (!*out)
    return fail(in, "out of memory");
  if (l->n != 1 && l->n != L) {
    in->line = l->line;
    return fail(in, "%s has %d values for layers = %d (give 1 or %d)", key,
                l->n, L, L);
  }
  for (int i = 0; i < L; i++)
    (*out)[i] = l->v[l->n == 1 ? 0 : i];
  return 0;
}

static int read_input(input_t *in, FILE *f, double **lms, double **lmem) {
  char buf[1 << 16];
  while (fgets(buf, sizeof(buf), f)) {
    in->line++;
    if (!strchr(buf, '\n') && !feof(f))
      return fail(in, "line longer than %zu characters", sizeof(buf) - 1);
    char *hash = strchr(buf, '#');
    if (hash)
      *hash = 0;
    char *s = trim(buf);
    if (!*s)
      continue;
    if (!strncmp(s, "node ", 5) || !strncmp(s, "node\t", 5)) {
      if (parse_node(in, s + 5, 0))
        return -1;
    } else if (!strncmp(s, "nodes ", 6) || !strncmp(s, "nodes\t", 6)) {
      if (parse_node(in, s + 6, 1))
        return -1;
    } else if (!strncmp(s, "degrade ", 8)) {
      if (parse_degrade(in, s + 8))
        return -1;
    } else {
      char *eq = strchr(s, '=');
      if (!eq)
        return fail(in,
                    "expected 'key = value', 'node ...', 'nodes ...' or "
                    "'degrade ...', got '%s'",
                    s);
      *eq = 0;
      char *k = trim(s), *v = trim(eq + 1);
      if (!*k || !*v)
        return fail(in, "empty key or value");
      if (set_key(in, k, v))
        return -1;
    }
  }
  if (ferror(f))
    return fail(in, "read error: %s", strerror(errno));
  in->line++; /* errors about what is missing point past the end */
  if (!in->nnodes)
    return fail(in, "no node declared (add 'node NAME gpus=N mem_gb=M')");
  if (!in->have_layers)
    return fail(in, "missing 'layers = N'");
  if (!in->have_mb)
    return fail(in, "missing 'microbatches = N'");
  if (!in->layer_ms.n)
    return fail(in, "missing 'layer_ms = ...'");
  if (!in->layer_mem.n)
    return fail(in, "missing 'layer_mem_gb = ...'");
  if (resolve_list(in, &in->layer_ms, "layer_ms", lms) ||
      resolve_list(in, &in->layer_mem, "layer_mem_gb", lmem))
    return -1;
  for (int i = 0; i < in->model.layers; i++)
    if (!((*lms)[i] > 0) || (*lmem)[i] < 0) {
      in->line = !((*lms)[i] > 0) ? in->layer_ms.line : in->layer_mem.line;
      return fail(in, "layer %d: layer_ms must be > 0 and layer_mem_gb >= 0",
                  i);
    }
  if (in->opts.tp & (in->opts.tp - 1)) {
    in->line--;
    return fail(in, "tp = %d is not a power of two", in->opts.tp);
  }
  return 0;
}

static const char *dev_name(const input_t *in, int d, char *buf, size_t n) {
  const node_t *nd = &in->nodes[in->dev[d].node];
  snprintf(buf, n, "%s:%d", nd->name, d - nd->first);
  return buf;
}

static void print_replica(const resihp_plan_t *p, int r) {
  int pp = resihp_plan_pp(p);
  double maxmem = 0, cap = 0;
  printf("replica %d: quota %d, %.3f ms, layers ", r, resihp_plan_quota(p, r),
         resihp_plan_replica_ms(p, r));
  for (int s = 0; s < pp; s++) {
    printf("%s%d", s ? "," : "", resihp_plan_stage_layers(p, r, s));
    double m = resihp_plan_stage_mem_gb(p, r, s);
    if (m > maxmem) {
      maxmem = m;
      cap = resihp_plan_stage_cap_gb(p, r, s);
    }
  }
  printf(", stage speeds ");
  for (int s = 0; s < pp; s++)
    printf("%s%g", s ? "," : "", resihp_plan_stage_speed(p, r, s));
  printf(", peak mem %.2f/%.0f GB\n", maxmem, cap);
}

static int replica_degraded(const resihp_plan_t *p, int r) {
  for (int s = 0; s < resihp_plan_pp(p); s++)
    if (resihp_plan_stage_speed(p, r, s) != 1.0)
      return 1;
  return 0;
}

static void print_plan(const input_t *in, const resihp_plan_t *p, int devices,
                       double plan_ms) {
  int failed = 0, slow = 0, used = 0;
  for (int i = 0; i < in->ndev; i++) {
    failed += in->dev[i].speed == 0;
    slow += in->dev[i].speed > 0 && in->dev[i].speed < 1;
    used += resihp_plan_device_slot(p, i, NULL, NULL, NULL) == 0;
  }
  printf("cluster: %d devices on %d nodes (%d failed, %d slow), %d spare "
         "node(s)\n",
         in->ndev, in->nnodes, failed, slow, in->cluster.spare_nodes);
  printf("model: %d layers, %d microbatches per iteration\n", in->model.layers,
         in->model.microbatches);
  printf("layout: dp %d pp %d tp %d (%d devices used, %d idle)\n",
         resihp_plan_dp(p), resihp_plan_pp(p), resihp_plan_tp(p), used,
         in->ndev - used);
  printf("predicted iteration: %.3f ms (dp all-reduce %.3f ms)\n",
         resihp_plan_iter_ms(p), resihp_plan_dp_ms(p));
  printf("planned in %.1f ms\n", plan_ms);
  int dp = resihp_plan_dp(p), shown = 0, hidden = 0;
  long sum = 0;
  for (int r = 0; r < dp; r++) {
    sum += resihp_plan_quota(p, r);
    if (r < 8 || replica_degraded(p, r) || dp <= 16) {
      print_replica(p, r);
      shown++;
    } else
      hidden++;
  }
  if (hidden)
    printf("(%d more healthy replicas like replica 0)\n", hidden);
  printf("quotas sum: %ld\n", sum);
  if (devices) {
    char nb[NAME_MAX_LEN + 16];
    for (int i = 0; i < in->ndev; i++) {
      int r, s, q;
      if (resihp_plan_device_slot(p, i, &r, &s, &q))
        printf("device %s speed %g: idle\n", dev_name(in, i, nb, sizeof(nb)),
               in->dev[i].speed);
      else
        printf("device %s speed %g: replica %d stage %d tp-rank %d\n",
               dev_name(in, i, nb, sizeof(nb)), in->dev[i].speed, r, s, q);
    }
  }
}

static void print_escalation(const input_t *in, const resihp_plan_t *p) {
  resihp_escalation_option_t opt[RESIHP_ESC__COUNT];
  resihp_escalation_t best;
  char nb[NAME_MAX_LEN + 16];
  if (resihp_plan_escalate(p, in->deg_dev, in->deg_speed, &in->costs, opt,
                           &best))
    return;
  int r = -1, s = -1;
  resihp_plan_device_slot(p, in->deg_dev, &r, &s, NULL);
  printf("escalation: device %s speed %g -> %g",
         dev_name(in, in->deg_dev, nb, sizeof(nb)), in->dev[in->deg_dev].speed,
         in->deg_speed);
  if (r >= 0)
    printf(" (replica %d stage %d)", r, s);
  else
    printf(" (idle in this plan: nothing to do)");
  printf(", horizon %g iterations\n", in->costs.horizon_iters);
  printf("  %-12s %-8s %10s %10s %12s %12s %12s\n", "option", "feasible",
         "switch_s", "offline_s", "during_ms", "iter_ms", "total_s");
  for (int k = 0; k < RESIHP_ESC__COUNT; k++) {
    if (!opt[k].feasible) {
      printf("  %-12s %-8s\n", resihp_escalation_name(opt[k].kind), "no");
      continue;
    }
    printf("  %-12s %-8s %10.1f %10.1f %12.3f %12.3f %12.1f\n",
           resihp_escalation_name(opt[k].kind), "yes", opt[k].switch_s,
           opt[k].offline_s, opt[k].during_ms, opt[k].iter_ms, opt[k].total_s);
  }
  printf("best: %s\n", resihp_escalation_name(best));
}

/* Synthetic 70B-class model on 8-GPU nodes: the planner's time as the
 * cluster grows, with two kinds of degradation: "few speeds" (0.5 % of the
 * GPUs at 0.6, 0.1 % failed) and "random" (1 % of the GPUs at speeds drawn
 * from [0.3, 0.95], every one different, the worst case for the search). */
static int bench(void) {
  static const int sizes[] = {256, 1024, 4096, 16384, 65536, 100000};
  enum { L = 80 };
  double lms[L], lmem[L];
  for (int l = 0; l < L; l++) {
    lms[l] = 107; /* 6 * 0.875e9 params * 8192 tokens at 400 TFLOP/s */
    lmem[l] = 14; /* 0.875e9 params * 16 bytes */
  }
  printf("%8s %-10s %8s %6s %4s %4s %12s %10s\n", "gpus", "degraded", "mb",
         "dp", "pp", "tp", "iter_ms", "plan_ms");
  for (size_t i = 0; i < 2 * sizeof(sizes) / sizeof(sizes[0]); i++) {
    int n = sizes[i / 2], random = i % 2;
    unsigned long long lcg = 12345;
    resihp_plan_device_t *dev = malloc((size_t)n * sizeof(*dev));
    if (!dev)
      return 1;
    for (int d = 0; d < n; d++) {
      dev[d] = (resihp_plan_device_t){d / 8,
                                      d % 997 == 5   ? 0.0
                                      : d % 211 == 7 ? 0.6
                                                     : 1.0,
                                      80};
      if (random) {
        lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
        double u = (double)(lcg >> 11) / 9007199254740992.0;
        dev[d].speed = u < 0.01 ? 0.3 + 0.65 * (u / 0.01) : 1.0;
      }
    }
    resihp_plan_cluster_t c;
    resihp_plan_cluster_init(&c);
    c.ndevices = n;
    c.devices = dev;
    resihp_plan_model_t m;
    resihp_plan_model_init(&m);
    m.layers = L;
    m.layer_ms = lms;
    m.layer_mem_gb = lmem;
    m.act_gb = 0.5;
    m.boundary_mb = 134;
    m.tp_mb = 536;
    m.microbatches = n / 4;
    double best = INFINITY;
    resihp_plan_t *p = NULL;
    for (int rep = 0; rep < 3; rep++) {
      resihp_plan_destroy(p);
      p = NULL;
      double t0 = now_s();
      int rc = resihp_plan_create(&c, &m, NULL, &p);
      double t1 = now_s();
      if (rc) {
        fprintf(stderr, "resihp-plan: bench at %d GPUs: %s\n", n,
                resihp_strerror(rc));
        free(dev);
        return 1;
      }
      if (t1 - t0 < best)
        best = t1 - t0;
    }
    printf("%8d %-10s %8d %6d %4d %4d %12.1f %10.2f\n", n,
           random ? "random" : "few speeds", m.microbatches, resihp_plan_dp(p),
           resihp_plan_pp(p), resihp_plan_tp(p), resihp_plan_iter_ms(p),
           best * 1000);
    resihp_plan_destroy(p);
    free(dev);
  }
  return 0;
}

static void usage(FILE *f) {
  fprintf(f, "usage: resihp-plan [--devices] FILE|-\n"
             "       resihp-plan --bench\n"
             "Print the hybrid-parallel plan for a cluster + model description "
             "(see resihp-plan(1)).\n");
}

int main(int argc, char **argv) {
  const char *path = NULL;
  int devices = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--bench"))
      return bench();
    if (!strcmp(argv[i], "--devices"))
      devices = 1;
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "resihp-plan: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    } else if (path) {
      fprintf(stderr, "resihp-plan: more than one input file\n");
      return 2;
    } else
      path = argv[i];
  }
  if (!path) {
    usage(stderr);
    return 2;
  }
  FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
  if (!f) {
    fprintf(stderr, "resihp-plan: cannot open %s: %s\n", path, strerror(errno));
    return 2;
  }
  input_t in = {.file = strcmp(path, "-") ? path : "<stdin>"};
  resihp_plan_cluster_init(&in.cluster);
  resihp_plan_model_init(&in.model);
  resihp_plan_opts_init(&in.opts);
  resihp_escalation_costs_init(&in.costs);
  double *lms = NULL, *lmem = NULL;
  int rc = read_input(&in, f, &lms, &lmem) ? 2 : 0;
  if (f != stdin)
    fclose(f);
  resihp_plan_t *p = NULL;
  if (!rc) {
    in.cluster.ndevices = in.ndev;
    in.cluster.devices = in.dev;
    in.model.layer_ms = lms;
    in.model.layer_mem_gb = lmem;
    double t0 = now_s();
    int err = resihp_plan_create(&in.cluster, &in.model, &in.opts, &p);
    double plan_ms = (now_s() - t0) * 1000;
    if (err) {
      fprintf(stderr, "resihp-plan: %s: %s%s\n", in.file, resihp_strerror(err),
              err == RESIHP_EINFEASIBLE
                  ? " (too few healthy devices or memory for the model, or "
                    "fixed tp/pp impossible)"
                  : "");
      rc = 1;
    } else {
      print_plan(&in, p, devices, plan_ms);
      if (in.deg_line)
        print_escalation(&in, p);
    }
  }
  resihp_plan_destroy(p);
  free(lms);
  free(lmem);
  free(in.layer_ms.v);
  free(in.layer_mem.v);
  free(in.dev);
  free(in.nodes);
  free(in.names);
  return rc;
}
