/* SPDX-License-Identifier: BSD-3-Clause */
/* The control plane's wire: newline-terminated text messages
 * ("VERB key=value key=value ...") over TCP, after a mutual
 * challenge-response on the per-job secret (HMAC-SHA-256 from
 * transport/sha256.h), over two connections:
 *
 *   client -> server  "AUTH0 <label>"
 *   server -> client  "AUTH1 <label> C"    and the server closes
 *   client -> server  "AUTH2 C Nc HMAC(K, label|"cli"|C|Nc)"   (a new connection)
 *   server -> client  "AUTH3 HMAC(K, label|"srv"|Nc|C)"   (or it closes)
 *
 * C, the server's challenge, is a cookie (transport/cookie.h): the
 * server's clock, random bytes and the server's MAC of both under a key of
 * its own, valid for 10 seconds; Nc is 16 random bytes of the client's, in
 * hex. The label names
 * the channel ("coord" for the coordinator, "state" for catch-up
 * transfers, "local" for a replica's leader and its other ranks,
 * "standby" for the standby's feed) so that a proof made for one cannot
 * be replayed on another, and the server refuses an Nc it accepted while
 * the cookie could still be valid. The client checks the server's proof
 * before it believes anything it says.
 *
 * Integrity after the handshake. Every later line, both ways, ends with
 * " mac=<32 hex>", a tag from transport/msgauth.h keyed from C and Nc,
 * with a sequence number per direction, over the line's SHA-256 (so that
 * a line sent to many peers is hashed once): a line that was forged, altered,
 * replayed, reordered or dropped fails the check, and the reader refuses it
 * (RESIHP_EAUTH: drop the connection). Raw bytes that follow a line (a
 * state, an accumulator) are followed by a binary tag of their own
 * (resihp__wire_seal/_unseal).
 *
 * Strangers cannot delay anyone, nor keep anyone out. A server never waits
 * for a client's answer: it keeps nothing between AUTH1 and AUTH2 (the
 * cookie says what it needs), so a flood of connections has no table of
 * challenges to fill. What it holds is a connection whose first line has
 * not arrived yet, in a small table of its owner's poll loop
 * (resihp__wire_hs_t), each with an absolute deadline; the oldest makes
 * room for a newcomer, and a genuine client's line comes with its connect
 * and is read at once. A client whose connection was dropped all the same
 * asks again a few times, with a pause that doubles
 * (resihp__wire_auth_client). Before authentication, a line longer than
 * RESIHP__WIRE_PREAUTH_MAX bytes is refused.
 *
 * Lengths. RESIHP__WIRE_LINE_MAX is the limit of every line, for the
 * writer (resihp__wire_send refuses a longer line: RESIHP_ERANGE) and the
 * reader (a connection sending one is refused: RESIHP_EPROTO). A reader
 * may hold a connection to less: a smaller max (RESIHP__WIRE_HELLO_MAX
 * before a connection says who it is), or a limit per kind of message
 * (line_max: RESIHP__WIRE_SHORT_MAX for the messages without lists), so
 * that only the messages whose lists grow with the job may be long. Member
 * lists (one address list per replica) and microbatch lists are the long
 * lines: a job whose member list would not fit (replicas times the length
 * of a joiner's addresses) is refused when it joins, and
 * resihp__wire_max_microbatches() is the largest number of microbatches
 * per step whose every list fits in RESIHP__WIRE_MBS_LINE, a job with more
 * is refused when it joins. Nothing is ever cut short silently.
 *
 * Every blocking call takes an absolute deadline (resihp__now_ms() based)
 * and works on non-blocking sockets.
 */
#ifndef RESIHP_CONTROL_WIRE_H
#define RESIHP_CONTROL_WIRE_H

#include "../transport/msgauth.h"

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* bytes, without the '\n': room for a member list of 100K replicas of
 * several ranks (GO). Buffers grow to the lines actually received. */
#define RESIHP__WIRE_LINE_MAX (16 << 20)
/* The budget of a microbatch list, smaller: it fixes the most
 * microbatches per step (resihp__wire_max_microbatches, a documented
 * number) whatever room the member lists need. */
#define RESIHP__WIRE_MBS_LINE (1 << 20)
#define RESIHP__WIRE_PREAUTH_MAX 256
/* The longest line of a connection that has not yet said who it is
 * (HELLO, SUBHELLO, LEP, SPARE: one replica's addresses at most). */
#define RESIHP__WIRE_HELLO_MAX (64 << 10)
/* The longest line of the messages that carry no list (READY, FAULT,
 * ABORT, ...). */
#define RESIHP__WIRE_SHORT_MAX 2048
/* Room kept in a line for everything but a microbatch list. */
#define RESIHP__WIRE_LIST_HEADROOM 1024

/* A buffered connection; owned by whoever owns the fd. */
typedef struct {
  int fd;
  char *buf;
  size_t len, cap;
  size_t max; /* longest line accepted now */
  /* NULL, or the longest line accepted of the kind that starts with the
   * len bytes at line (at most max): each message type its own limit,
   * known as soon as its name has come */
  size_t (*line_max)(const char *line, size_t len);
  int sealed; /* lines carry a tag (set by the handshake) */
  resihp__msgauth_t auth;
  /* output not yet taken by the socket: out[out_off, out_len) */
  char *out;
  size_t out_off, out_len, out_cap;
} resihp__wire_t;

void resihp__wire_init(resihp__wire_t *w, int fd);
void resihp__wire_free(resihp__wire_t *w); /* closes the fd too */

/* Read available bytes without blocking. Returns 0, or RESIHP_ECLOSED /
 * RESIHP_EIO when the peer went away, RESIHP_EPROTO for an overlong line. */
int resihp__wire_fill(resihp__wire_t *w);
/* Take the next complete line (without '\n' and without its tag) into out
 * (cap bytes). Returns 1 if one was taken, 0 if none is complete yet,
 * RESIHP_EAUTH for a line whose tag is wrong or missing, RESIHP_ERANGE for
 * a line that does not fit in cap (it is consumed: never truncated). */
int resihp__wire_take(resihp__wire_t *w, char *out, size_t cap);
/* Wait for the next line until deadline. 0, or RESIHP_ETIMEDOUT/ECLOSED/... */
int resihp__wire_recv(resihp__wire_t *w, char *out, size_t cap,
                      int64_t deadline_ms);
/* Send one line (its tag and a '\n' are appended) before the deadline.
 * RESIHP_ERANGE (nothing sent) for a line over RESIHP__WIRE_LINE_MAX. */
int resihp__wire_send(resihp__wire_t *w, const char *line, int64_t deadline_ms);
/* The same without waiting, for a server whose peers may stop reading (a
 * stopped process, a full socket buffer): the line is sealed now, in
 * order, and queued; what the socket takes at once leaves at once, the
 * rest with resihp__wire_flush when the socket is writable again. Later
 * sends and raw writes (blocking ones wait for the queue first) keep the
 * order. 0, RESIHP_ERANGE (nothing queued), RESIHP_ENOMEM, or the socket's
 * error (RESIHP_EPEER: the peer is gone). */
int resihp__wire_queue(resihp__wire_t *w, const char *line);
/* The same with the line's digest (resihp__wire_line_digest) computed
 * once for all its recipients, or NULL. */
int resihp__wire_queue_hashed(resihp__wire_t *w, const char *line,
                              const uint8_t *digest);
void resihp__wire_line_digest(const char *line, size_t n,
                              uint8_t digest[RESIHP__SHA256_LEN]);
/* Write what the queue holds without blocking: the bytes still queued, or
 * the socket's error (negative). */
long resihp__wire_flush(resihp__wire_t *w);

/* Raw bytes after a line: write/read exactly len bytes (read takes what
 * is buffered first). Then seal/unseal: the tag of the bytes given as n
 * parts, sent as RESIHP__MAC_LEN raw bytes; unseal reads and checks it
 * (RESIHP_EAUTH). Both are no-ops on an unsealed wire. */
int resihp__wire_write(resihp__wire_t *w, const void *buf, size_t len,
                       int64_t deadline_ms);
int resihp__wire_read(resihp__wire_t *w, void *buf, size_t len,
                      int64_t deadline_ms);
int resihp__wire_seal(resihp__wire_t *w, const void *const *parts,
                      const size_t *lens, int n, int64_t deadline_ms);
int resihp__wire_unseal(resihp__wire_t *w, const void *const *parts,
                        const size_t *lens, int n, int64_t deadline_ms);
/* write + seal, and read + unseal, of one buffer. */
int resihp__wire_send_data(resihp__wire_t *w, const void *buf, size_t len,
                           int64_t deadline_ms);
int resihp__wire_recv_data(resihp__wire_t *w, void *buf, size_t len,
                           int64_t deadline_ms);

/* Tests only: the client's side waits this long before it answers the
 * server (a round trip of a distant client). 0 in a job. */
extern int resihp__wire_test_rtt_ms;

/* Client side of the handshake (blocking until the deadline). */
int resihp__wire_auth_client(resihp__wire_t *w, const uint8_t *secret,
                             size_t secret_len, const char *label,
                             int64_t deadline_ms);
/* The same for a connection another thread may cancel (set *stop, then
 * shut w->fd down): RESIHP_ECLOSED, and no second try, once *stop is set. */
int resihp__wire_auth_client_stoppable(resihp__wire_t *w,
                                       const uint8_t *secret,
                                       size_t secret_len, const char *label,
                                       int64_t deadline_ms, const int *stop);
/* The same without blocking, for a client with many connections (the scale
 * benchmark): s starts zeroed; call resihp__wire_cli_step whenever w's
 * socket is readable. 1 once the session is sealed, 0 while it waits,
 * negative on failure (RESIHP_EAUTH: a bad or missing proof). When a
 * step moves s->stage to 2 (from 1, or from 0 when AUTH1 came at once),
 * w->fd (the same number) is a new connection: a caller that watches it
 * in an epoll set adds it again.
 * resihp__wire_auth_client may reconnect too, under the same number. */
typedef struct {
  int stage;
  char ns[80], nc[40];
  struct sockaddr_storage peer; /* the server, for the second connection */
  socklen_t peerlen;
  int bad_server; /* its proof was wrong */
} resihp__wire_cli_t;
int resihp__wire_cli_step(resihp__wire_t *w, resihp__wire_cli_t *s,
                          const uint8_t *secret, size_t secret_len,
                          const char *label);

/* Server side of the handshake for every connection of a listening
 * socket, without ever blocking. The owner polls resihp__wire_hs_fd (one
 * descriptor, however many are pending) beside its listening socket,
 * calls resihp__wire_hs_accept when that socket is readable, and then
 * resihp__wire_hs_next until it returns 0. */
typedef struct resihp__wire_hs resihp__wire_hs_t;
/* max_pending: cap on handshakes in progress; timeout_ms: each one's
 * deadline from its accept. The secret is copied. */
int resihp__wire_hs_create(const uint8_t *secret, size_t secret_len,
                           const char *label, int max_pending, int timeout_ms,
                           resihp__wire_hs_t **out);
void resihp__wire_hs_destroy(resihp__wire_hs_t *h);
/* Accept what waits on lfd (at most max_pending per call) and greet each. */
void resihp__wire_hs_accept(resihp__wire_hs_t *h, int lfd);
/* Start the handshake on a connected socket (taken over, even on error). */
int resihp__wire_hs_add(resihp__wire_hs_t *h, int fd);
/* Readable (POLLIN) when a pending connection has something to read: an
 * epoll set of them all. resihp__wire_hs_next reads only those, so a
 * round costs O(ready) system calls, not O(pending). */
int resihp__wire_hs_fd(const resihp__wire_hs_t *h);
int resihp__wire_hs_pending(const resihp__wire_hs_t *h);
/* Milliseconds until the nearest pending deadline (0 if one passed), or
 * max_ms if none is nearer (max_ms < 0: no limit of the caller's). */
int resihp__wire_hs_wait_ms(const resihp__wire_hs_t *h, int max_ms);
/* Move the pending handshakes on: read what arrived, drop the expired
 * and the failed. If one completed, it is moved into *out (fd, buffered
 * lines and session keys now the caller's) and 1 is returned; else 0 (the
 * end of a pass: the next call looks at what is ready then). */
int resihp__wire_hs_next(resihp__wire_hs_t *h, resihp__wire_t *out);
/* Connections dropped so far: failed proof, and expired or evicted. */
void resihp__wire_hs_stats(const resihp__wire_hs_t *h, long *refused,
                           long *expired);

/* Non-blocking TCP connect to "host:port" (completes before deadline). */
int resihp__wire_dial(const char *endpoint, int64_t deadline_ms);
/* The same, given up (RESIHP_ECLOSED) within 50 ms once *stop is set by
 * another thread. */
int resihp__wire_dial_stoppable(const char *endpoint, int64_t deadline_ms,
                                const int *stop);
/* The same to an address (a TCP peer's, from getpeername: the
 * handshake's second connection, a retry); RESIHP_EINVAL for anything but
 * an IP address (al 0: a socketpair has none). */
int resihp__wire_dial_addr(const struct sockaddr_storage *a, socklen_t al,
                           int64_t deadline_ms);
/* Listening socket on host (NULL: any) and port (0: ephemeral);
 * *port_out gets the bound port. */
int resihp__wire_listen(const char *host, int port, int *port_out);

/* A port for `expect` clients that may connect at once (a job's replicas
 * coming back after a failover): one socket or more on the same port. */
typedef struct {
  int n;    /* sockets, >= 1 once open */
  int *fds; /* n listening sockets, non-blocking */
  int port;
} resihp__wire_listener_t;
/* Open it on host (NULL: any) and port (0: ephemeral); 0 or an error
 * (RESIHP_ESYS with errno, RESIHP_EINVAL, RESIHP_ENOMEM). */
int resihp__wire_listener_open(const char *host, int port, int expect,
                               resihp__wire_listener_t *l);
/* Sockets needed for expect clients at once when one socket queues at
 * most somaxconn of them (exposed for the tests). */
int resihp__wire_listener_count(int expect, int somaxconn);
void resihp__wire_listener_close(resihp__wire_listener_t *l);

/* Value of key in a message ("VERB k=v k2=v2"), copied into out; returns 0
 * or RESIHP_ENOENT, RESIHP_ERANGE if it does not fit in cap. */
int resihp__wire_get(const char *msg, const char *key, char *out, size_t cap);
/* A decimal value in [lo, hi]: 0, RESIHP_ENOENT, or RESIHP_EPROTO. */
int resihp__wire_get_long(const char *msg, const char *key, long *out);
int resihp__wire_get_range(const char *msg, const char *key, long lo, long hi,
                           long *out);
/* Value of key taken to the end of the line: for a last key whose value is
 * free text with spaces (a probe summary). 0 or RESIHP_ENOENT/ERANGE. */
int resihp__wire_get_rest(const char *msg, const char *key, char *out,
                          size_t cap);
/* Parse a ':'-separated list of ints, each in [0, max) ("3:5:9", "" is
 * empty), into a malloc'ed array. RESIHP_EPROTO for anything else. */
int resihp__wire_parse_ints(const char *s, int max, int **out, int *n);
/* Parse a ','-separated list of tuples of `arity` ':'-separated decimal
 * integers, each in [0, max] ("3:150:7,4:90:2"; "" is empty), into out
 * (room for max_items tuples, arity values each, row by row); *n gets the
 * number of tuples. RESIHP_EPROTO for anything else (a sign, a missing
 * or extra field, an empty item, a value past max), RESIHP_ERANGE for more
 * than max_items tuples; out is then not to be used. */
int resihp__wire_parse_tuples(const char *s, int arity, long long max,
                              long long *out, int max_items, int *n);
/* Element k (0-based) of a list "a/b/c" (a sharded replica's addresses)
 * into out; RESIHP_EPROTO if there is none or it is empty or too long. */
int resihp__wire_list_item(const char *list, int k, char *out, size_t cap);
/* 1 if list has exactly n elements separated by '/', each a plain token
 * (resihp__wire_token_ok) shorter than item_cap. */
int resihp__wire_list_ok(const char *list, int n, size_t item_cap);
/* 1 if s is a plausible token for a name or an endpoint: 1..cap-1 bytes of
 * [A-Za-z0-9._:-] (so it cannot break a list such as "r@host:port,..."). */
int resihp__wire_token_ok(const char *s, size_t cap);

/* A line built piece by piece, grown as needed up to
 * RESIHP__WIRE_LINE_MAX; an error (no memory, too long) sticks in err and
 * makes resihp__wire_send_buf refuse it. */
typedef struct {
  char *s;
  size_t len, cap;
  int err;
} resihp__wire_buf_t;
void resihp__wire_buf_init(resihp__wire_buf_t *b);
void resihp__wire_buf_free(resihp__wire_buf_t *b);
void resihp__wire_buf_printf(resihp__wire_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Append n bytes of p; a number in decimal; "a:b:c". */
void resihp__wire_buf_put(resihp__wire_buf_t *b, const char *p, size_t n);
void resihp__wire_buf_long(resihp__wire_buf_t *b, long v);
void resihp__wire_buf_ints(resihp__wire_buf_t *b, const int *v, int n);
int resihp__wire_send_buf(resihp__wire_t *w, const resihp__wire_buf_t *b,
                          int64_t deadline_ms);

/* The most microbatches per step a job may have: every list of distinct
 * ids below it fits in a line, with RESIHP__WIRE_LIST_HEADROOM to spare. */
int resihp__wire_max_microbatches(void);

/* Read the secret file (at most 4096 bytes) into a malloc'ed buffer. The
 * file must be a regular file owned by this user and closed to everyone
 * else (chmod 600); a symlink is not followed. */
int resihp__wire_read_secret(const char *path, uint8_t **out, size_t *len);

#endif
