/* SPDX-License-Identifier: BSD-3-Clause */
/* Authenticated connections waiting for their first line (lobby.h). A
 * lobby holds a few (a standby, a replica's ranks, catch-up sources): a
 * plain array, in arrival order. */
#include "config.h"

#include "lobby.h"

#include "../transport/mesh.h"

#include <resihp/error.h>

#include <stdlib.h>
#include <string.h>

typedef struct {
  resihp__wire_t w;
  int64_t deadline;
} waiting_t;

struct resihp__lobby {
  int max, n, wait_ms;
  size_t line_max;
  waiting_t *q; /* n of max, oldest first */
};

int resihp__lobby_create(int max, int wait_ms, size_t line_max,
                         resihp__lobby_t **out) {
  if (max < 1 || wait_ms < 1 || line_max < 1)
    return RESIHP_EINVAL;
  resihp__lobby_t *l = calloc(1, sizeof(*l));
  if (!l || !(l->q = calloc((size_t)max, sizeof(*l->q)))) {
    free(l);
    return RESIHP_ENOMEM;
  }
  l->max = max;
  l->wait_ms = wait_ms;
  l->line_max = line_max;
  *out = l;
  return 0;
}

static void take_out(resihp__lobby_t *l, int i) {
  memmove(l->q + i, l->q + i + 1, sizeof(*l->q) * (size_t)(l->n - i - 1));
  l->n--;
}

void resihp__lobby_destroy(resihp__lobby_t *l) {
  if (!l)
    return;
  for (int i = 0; i < l->n; i++)
    resihp__wire_free(&l->q[i].w);
  free(l->q);
  free(l);
}

void resihp__lobby_add(resihp__lobby_t *l, resihp__wire_t *w) {
  if (l->n == l->max) {
    resihp__wire_free(&l->q[0].w);
    take_out(l, 0);
  }
  waiting_t *q = &l->q[l->n++];
  q->w = *w;
  q->w.max = l->line_max;
  q->w.line_max = NULL;
  q->deadline = resihp__now_ms() + l->wait_ms;
  resihp__wire_init(w, -1);
}

int resihp__lobby_count(const resihp__lobby_t *l) {
  return l ? l->n : 0;
}

int resihp__lobby_fds(const resihp__lobby_t *l, struct pollfd *p) {
  for (int i = 0; i < l->n; i++)
    p[i] = (struct pollfd){.fd = l->q[i].w.fd, .events = POLLIN};
  return l->n;
}

int resihp__lobby_wait_ms(const resihp__lobby_t *l, int max_ms) {
  int64_t now = resihp__now_ms();
  for (int i = 0; l && i < l->n; i++) {
    int64_t left = l->q[i].deadline - now;
    if (max_ms < 0 || left < max_ms)
      max_ms = left > 0 ? (int)left : 0;
  }
  return max_ms;
}

int resihp__lobby_next(resihp__lobby_t *l, resihp__wire_t *out, char *line,
                       size_t cap) {
  int64_t now = resihp__now_ms();
  for (int i = 0; i < l->n;) {
    waiting_t *q = &l->q[i];
    int rc = resihp__wire_fill(&q->w);
    int t = resihp__wire_take(&q->w, line, cap);
    if (t == 0 && rc == 0 && now < q->deadline) {
      i++;
      continue;
    }
    resihp__wire_t w = q->w;
    take_out(l, i);
    if (t == 1) {
      w.max = RESIHP__WIRE_LINE_MAX; /* its owner's limits from here on */
      *out = w;
      return 1;
    }
    resihp__wire_free(&w); /* late, gone, overlong or forged */
  }
  return 0;
}
