/* SPDX-License-Identifier: BSD-3-Clause */
/* Reading the probe results file (see results.h). */
#include "config.h"

#include "results.h"

#include <resihp/error.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A results file holds a handful of blocks of ~1 KiB; a larger append than
 * this is read over several polls. */
#define READ_MAX 65536

int resihp__probe_watch_init(resihp__probe_watch_t *w, const char *path) {
  memset(w, 0, sizeof(*w));
  if (!path || !*path || strlen(path) >= sizeof(w->path))
    return RESIHP_EINVAL;
  snprintf(w->path, sizeof(w->path), "%s", path);
  return 0;
}

void resihp__probe_watch_free(resihp__probe_watch_t *w) {
  if (!w)
    return;
  free(w->pending);
  w->pending = NULL;
  w->npending = w->ppos = 0;
}

/* Read what was appended since w->off, keeping whole blocks only. */
static int refill(resihp__probe_watch_t *w) {
  struct stat st;
  if (stat(w->path, &st) != 0)
    return RESIHP_EIO;
  if (st.st_size <= w->off)
    return 0;
  size_t want = (size_t)(st.st_size - w->off);
  if (want > READ_MAX)
    want = READ_MAX;
  char *buf = malloc(want + 1);
  if (!buf)
    return RESIHP_ENOMEM;
  int fd = open(w->path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? pread(fd, buf, want, w->off) : -1;
  if (fd >= 0)
    close(fd);
  if (n <= 0) {
    free(buf);
    return n < 0 ? RESIHP_EIO : 0;
  }
  buf[n] = '\0';
  /* whole blocks end with "\n\n" */
  size_t end = 0;
  for (ssize_t i = 1; i < n; i++)
    if (buf[i] == '\n' && buf[i - 1] == '\n')
      end = (size_t)i + 1;
  if (!end) {
    free(buf);
    return 0;
  }
  buf[end] = '\0';
  free(w->pending);
  w->pending = buf;
  w->npending = end;
  w->ppos = 0;
  w->off += (off_t)end;
  return 0;
}

static void parse_line(resihp__probe_block_t *b, const char *line) {
  const char *eq = strchr(line, '=');
  if (!eq)
    return;
  size_t kl = (size_t)(eq - line);
  const char *v = eq + 1;
  if (kl == 4 && !strncmp(line, "kind", 4)) {
    snprintf(b->kind, sizeof(b->kind), "%s", v);
  } else if (kl == 7 && !strncmp(line, "healthy", 7)) {
    b->healthy = !strcmp(v, "1");
  } else if (kl == 6 && !strncmp(line, "failed", 6)) {
    snprintf(b->failed, sizeof(b->failed), "%s", v);
  } else if (kl > 13 && !strncmp(line, "check.", 6) &&
             !strncmp(eq - 7, ".detail", 7)) {
    /* check.NAME.detail: only the failed checks' details make the summary */
    char name[32];
    size_t nl = kl - 13;
    if (nl >= sizeof(name))
      return;
    memcpy(name, line + 6, nl);
    name[nl] = '\0';
    char pat[40];
    snprintf(pat, sizeof(pat), ":%s:", name);
    char fl[70];
    snprintf(fl, sizeof(fl), ":%s:", b->failed);
    if (!strstr(fl, pat))
      return;
    size_t off = strlen(b->summary);
    snprintf(b->summary + off, sizeof(b->summary) - off, "%s%s: %s",
             off ? "; " : "", name, v);
  }
}

int resihp__probe_watch_next(resihp__probe_watch_t *w,
                             resihp__probe_block_t *b) {
  if (w->ppos >= w->npending) {
    int rc = refill(w);
    if (rc)
      return rc;
    if (w->ppos >= w->npending)
      return 0;
  }
  memset(b, 0, sizeof(*b));
  b->healthy = -1;
  char *p = w->pending + w->ppos;
  char *stop = strstr(p, "\n\n");
  size_t blen = stop ? (size_t)(stop - p) + 2 : w->npending - w->ppos;
  w->ppos += blen;
  /* failed= precedes the details in the writer's order, but do not rely on
   * it: two passes over the block */
  for (int pass = 0; pass < 2; pass++) {
    char *q = p;
    while (q < p + blen) {
      char *nl = memchr(q, '\n', (size_t)(p + blen - q));
      size_t ll = nl ? (size_t)(nl - q) : (size_t)(p + blen - q);
      char line[512];
      if (ll && ll < sizeof(line)) {
        memcpy(line, q, ll);
        line[ll] = '\0';
        int detail = !strncmp(line, "check.", 6);
        if (pass == detail)
          parse_line(b, line);
      }
      q += ll + 1;
    }
  }
  return 1;
}
