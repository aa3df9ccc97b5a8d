/* SPDX-License-Identifier: BSD-3-Clause */
/* The coordinator's wire: newline-terminated text messages
 * ("VERB key=value key=value ...") over TCP, after a mutual
 * challenge-response on the per-job secret (HMAC-SHA-256 from
 * transport/sha256.h):
 *
 *   server -> client  "AUTH1 <label> Ns"
 *   client -> server  "AUTH2 Nc HMAC(K, label|"cli"|Ns|Nc)"
 *   server -> client  "AUTH3 HMAC(K, label|"srv"|Nc|Ns)"   (or it closes)
 *
 * Nonces are 16 random bytes in hex; the label names the channel
 * ("coord" for the coordinator, "state" for catch-up transfers) so that a
 * proof made for one cannot be replayed on the other. The client checks
 * the server's proof before it believes anything it says.
 *
 * Every call takes an absolute deadline (resihp__now_ms() based) and works
 * on non-blocking sockets. Lines are at most RESIHP__WIRE_LINE_MAX bytes.
 */
#ifndef RESIHP_CONTROL_WIRE_H
#define RESIHP_CONTROL_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define RESIHP__WIRE_LINE_MAX 65536

/* A buffered reader for one connection; owned by whoever owns the fd. */
typedef struct {
  int fd;
  char *buf;
  size_t len, cap;
} resihp__wire_t;

void resihp__wire_init(resihp__wire_t *w, int fd);
void resihp__wire_free(resihp__wire_t *w); /* closes the fd too */

/* Read available bytes without blocking. Returns 0, or RESIHP_ECLOSED /
 * RESIHP_EIO when the peer went away, RESIHP_EPROTO for an overlong line. */
int resihp__wire_fill(resihp__wire_t *w);
/* Take the next complete line (without '\n') into out (cap bytes).
 * Returns 1 if one was taken, 0 if none is complete yet. */
int resihp__wire_take(resihp__wire_t *w, char *out, size_t cap);
/* Wait for the next line until deadline. 0, or RESIHP_ETIMEDOUT/ECLOSED/... */
int resihp__wire_recv(resihp__wire_t *w, char *out, size_t cap,
                      int64_t deadline_ms);
/* Send one line (a '\n' is appended) before the deadline. */
int resihp__wire_send(int fd, const char *line, int64_t deadline_ms);

int resihp__wire_auth_server(resihp__wire_t *w, const uint8_t *secret,
                             size_t secret_len, const char *label,
                             int64_t deadline_ms);
int resihp__wire_auth_client(resihp__wire_t *w, const uint8_t *secret,
                             size_t secret_len, const char *label,
                             int64_t deadline_ms);

/* Non-blocking TCP connect to "host:port" (completes before deadline). */
int resihp__wire_dial(const char *endpoint, int64_t deadline_ms);
/* Listening socket on host (NULL: any) and port (0: ephemeral);
 * *port_out gets the bound port. */
int resihp__wire_listen(const char *host, int port, int *port_out);

/* Value of key in a message ("VERB k=v k2=v2"), copied into out; returns 0
 * or RESIHP_ENOENT. */
int resihp__wire_get(const char *msg, const char *key, char *out, size_t cap);
int resihp__wire_get_long(const char *msg, const char *key, long *out);
/* Value of key taken to the end of the line: for a last key whose value is
 * free text with spaces (a probe summary). 0 or RESIHP_ENOENT/ERANGE. */
int resihp__wire_get_rest(const char *msg, const char *key, char *out,
                          size_t cap);
/* Parse a ':'-separated list of ints ("3:5:9", "" is empty) into a
 * malloc'ed array. */
int resihp__wire_parse_ints(const char *s, int **out, int *n);

/* Read the whole secret file (at most 4096 bytes) into a malloc'ed buffer. */
int resihp__wire_read_secret(const char *path, uint8_t **out, size_t *len);

#endif
