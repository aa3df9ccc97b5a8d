/* SPDX-License-Identifier: BSD-3-Clause */
/* Prometheus text-format writer with atomic replacement (see metrics.h). */
#include "config.h"

#include "metrics.h"

#include "../core/errbuf.h"
#include "../core/ownfile.h"

#include <resihp/error.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_FAMILIES 32
#define MAX_SAMPLES 256
#define NAME_MAX_LEN 96
#define LABELS_MAX_LEN 160
#define HELP_MAX_LEN 160

struct family {
  char name[NAME_MAX_LEN];
  char help[HELP_MAX_LEN];
  resihp_metric_type_t type;
};

struct sample {
  int family;
  char labels[LABELS_MAX_LEN];
  double value;
};

struct resihp_metrics {
  struct family fam[MAX_FAMILIES];
  int nfam;
  struct sample smp[MAX_SAMPLES];
  int nsmp;
};

resihp_metrics_t *resihp__metrics_create(void) {
  return calloc(1, sizeof(resihp_metrics_t));
}

void resihp__metrics_destroy(resihp_metrics_t *m) { free(m); }

static int valid_name(const char *n) {
  size_t l = strnlen(n, NAME_MAX_LEN);
  if (l == 0 || l >= NAME_MAX_LEN)
    return 0;
  for (size_t i = 0; i < l; i++) {
    char c = n[i];
    int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
      return 0;
  }
  return 1;
}

/* Label text is ours, but it ends up in a file other tools parse: refuse
 * anything that could break a line or the braces. */
static int valid_labels(const char *l) {
  size_t n = strnlen(l, LABELS_MAX_LEN);
  if (n >= LABELS_MAX_LEN)
    return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)l[i] < ' ' || l[i] == '{' || l[i] == '}' ||
        l[i] == '\\' || (unsigned char)l[i] >= 0x7f)
      return 0;
  return 1;
}

static int find_family(const resihp_metrics_t *m, const char *name) {
  for (int i = 0; i < m->nfam; i++)
    if (!strcmp(m->fam[i].name, name))
      return i;
  return -1;
}

int resihp__metrics_declare(resihp_metrics_t *m, const char *name,
                            resihp_metric_type_t type, const char *help) {
  if (!m || !name || !valid_name(name))
    return RESIHP_EINVAL;
  if (find_family(m, name) >= 0)
    return 0;
  if (m->nfam >= MAX_FAMILIES)
    return RESIHP_ENOMEM;
  struct family *f = &m->fam[m->nfam++];
  snprintf(f->name, sizeof(f->name), "%s", name);
  snprintf(f->help, sizeof(f->help), "%s", help ? help : "");
  for (char *p = f->help; *p; p++)
    if ((unsigned char)*p < ' ')
      *p = ' ';
  f->type = type;
  return 0;
}

static struct sample *find_sample(const resihp_metrics_t *m, int fam,
                                  const char *labels, int create) {
  resihp_metrics_t *mm = (resihp_metrics_t *)m;
  for (int i = 0; i < m->nsmp; i++)
    if (m->smp[i].family == fam && !strcmp(m->smp[i].labels, labels))
      return &mm->smp[i];
  if (!create || m->nsmp >= MAX_SAMPLES)
    return NULL;
  struct sample *s = &mm->smp[mm->nsmp++];
  s->family = fam;
  snprintf(s->labels, sizeof(s->labels), "%s", labels);
  s->value = 0;
  return s;
}

static struct sample *lookup(resihp_metrics_t *m, const char *name,
                             const char *labels) {
  if (!m || !name)
    return NULL;
  if (!labels)
    labels = "";
  if (!valid_labels(labels))
    return NULL;
  int f = find_family(m, name);
  if (f < 0)
    return NULL;
  return find_sample(m, f, labels, 1);
}

int resihp__metrics_add(resihp_metrics_t *m, const char *name,
                        const char *labels, double delta) {
  struct sample *s = lookup(m, name, labels);
  if (!s)
    return RESIHP_EINVAL;
  s->value += delta;
  return 0;
}

int resihp__metrics_set(resihp_metrics_t *m, const char *name,
                        const char *labels, double value) {
  struct sample *s = lookup(m, name, labels);
  if (!s)
    return RESIHP_EINVAL;
  s->value = value;
  return 0;
}

double resihp__metrics_get(const resihp_metrics_t *m, const char *name,
                           const char *labels, double def) {
  if (!m || !name)
    return def;
  int f = find_family(m, name);
  if (f < 0)
    return def;
  struct sample *s = find_sample(m, f, labels ? labels : "", 0);
  return s ? s->value : def;
}

int resihp__metrics_load(resihp_metrics_t *m, const char *path) {
  if (!m || !path)
    return RESIHP_EINVAL;
  /* not through a link, not hanging on a FIFO, only a file of ours */
  int fd = resihp__open_own(path, O_RDONLY, 0, NULL, 0);
  if (fd < 0)
    return fd == RESIHP_ENOENT ? 0 : fd;
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    return RESIHP_EIO;
  }
  char line[512];
  while (fgets(line, sizeof(line), f)) {
    if (line[0] == '#' || line[0] == '\n')
      continue;
    char name[NAME_MAX_LEN], labels[LABELS_MAX_LEN] = "";
    size_t nl = strcspn(line, "{ ");
    if (nl == 0 || nl >= sizeof(name))
      continue;
    memcpy(name, line, nl);
    name[nl] = '\0';
    const char *p = line + nl;
    if (*p == '{') {
      const char *close = strchr(p, '}');
      if (!close || (size_t)(close - p - 1) >= sizeof(labels))
        continue;
      memcpy(labels, p + 1, (size_t)(close - p - 1));
      labels[close - p - 1] = '\0';
      p = close + 1;
    }
    char *end;
    double v = strtod(p, &end);
    if (end == p)
      continue;
    int fam = find_family(m, name);
    if (fam < 0 || !valid_labels(labels))
      continue;
    struct sample *s = find_sample(m, fam, labels, 1);
    if (s)
      s->value = v;
  }
  fclose(f);
  return 0;
}

int resihp__metrics_write(const resihp_metrics_t *m, const char *path) {
  if (!m || !path || !*path)
    return RESIHP_EINVAL;
  char tmp[4096];
  if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >=
      (int)sizeof(tmp))
    return RESIHP_ERANGE;
  /* O_EXCL: a leftover of a killed writer (same pid, a later boot) is
   * removed first; anything else at that name is not written through. */
  (void)unlink(tmp);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                0644);
  if (fd < 0)
    return RESIHP_EIO;
  /* The umask of whoever runs us must not hide the file from the collector. */
  (void)fchmod(fd, 0644);
  FILE *f = fdopen(fd, "w");
  if (!f) {
    close(fd);
    unlink(tmp);
    return RESIHP_EIO;
  }
  for (int i = 0; i < m->nfam; i++) {
    const struct family *fa = &m->fam[i];
    int any = 0;
    for (int k = 0; k < m->nsmp; k++)
      any |= m->smp[k].family == i;
    if (!any)
      continue;
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", fa->name, fa->help, fa->name,
            fa->type == RESIHP_METRIC_COUNTER ? "counter" : "gauge");
    for (int k = 0; k < m->nsmp; k++) {
      const struct sample *s = &m->smp[k];
      if (s->family != i)
        continue;
      if (s->labels[0])
        fprintf(f, "%s{%s} %.17g\n", fa->name, s->labels, s->value);
      else
        fprintf(f, "%s %.17g\n", fa->name, s->value);
    }
  }
  int bad = fflush(f) != 0 || ferror(f) || fsync(fd) != 0;
  if (fclose(f) != 0)
    bad = 1;
  /* what the rename replaces must be ours (a file another user left or
   * planted there is not taken over) */
  if (bad || resihp__own_or_absent(path, NULL, 0) || rename(tmp, path) != 0) {
    unlink(tmp);
    return RESIHP_EIO;
  }
  return 0;
}

/* The lock serialises resihp's own root helpers, which hold it for the
 * milliseconds of one read-modify-write. Anyone else who could open it
 * could also flock() it (a read-only fd is enough) and stall every step
 * start and the drain behind it: so it is 0600 and ours, and a lock file
 * that is not (planted, or left by an older resihp with mode 0644) is
 * refused rather than trusted. */
int resihp__metrics_lock(const char *path, long timeout_ms, char *err,
                         size_t errlen) {
  char lk[4096];
  if (!path || snprintf(lk, sizeof(lk), "%s.lock", path) >= (int)sizeof(lk)) {
    resihp__errf(err, errlen, "metrics path too long");
    return RESIHP_EINVAL;
  }
  int fd = open(lk, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY,
                0600);
  if (fd < 0) {
    resihp__errf(err, errlen, "cannot open the metrics lock %.200s: %s%s", lk,
                 strerror(errno),
                 errno == ELOOP ? " (a symbolic link: remove it)" : "");
    return RESIHP_EIO;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_uid != geteuid() || (st.st_mode & 077) != 0 || st.st_nlink != 1) {
    resihp__errf(err, errlen,
                 "refusing the metrics lock %.200s (owner uid %ld, mode %04o, "
                 "%ld links): it must be a regular file of uid %ld with mode "
                 "0600; remove it and resihp recreates it",
                 lk, (long)st.st_uid, (unsigned)(st.st_mode & 07777),
                 (long)st.st_nlink, (long)geteuid());
    close(fd);
    return RESIHP_EINVAL;
  }
  struct timespec nap = {0, 5 * 1000 * 1000};
  for (long waited = 0;; waited += 5) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
      return fd;
    if (errno != EWOULDBLOCK && errno != EINTR) {
      resihp__errf(err, errlen, "cannot lock %.200s: %s", lk, strerror(errno));
      break;
    }
    if (waited >= timeout_ms) {
      resihp__errf(err, errlen,
                   "metrics lock %.200s still held after %ld ms; metrics of "
                   "this probe run are not written",
                   lk, timeout_ms);
      close(fd);
      return RESIHP_EBUSY;
    }
    nanosleep(&nap, NULL);
  }
  close(fd);
  return RESIHP_EIO;
}
