/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: the launcher an sbatch script calls.
 *
 *   resihp-run --replicas R [--spares S] [--nodes-per-replica K]
 *              [--inject SPEC] [--kill-node-cmd CMD] -- ./train args
 *
 * It runs the job's coordinator, starts one `srun --resilient ...` job step
 * per data-parallel replica inside the allocation (a dead rank under
 * --mpi=pmix takes its whole step down, so a replica is the unit that
 * fails), keeps the remaining nodes as spares, and when the coordinator
 * declares a replica failed (socket error, silence, or left out by the
 * survivors - never srun's exit code, which Slurm often leaves at 0) it
 * cancels that replica's step, marks its nodes bad and starts a replacement
 * step on spare nodes while the other replicas keep training. See
 * resihp-run(1).
 *
 * Spares. Each spare node runs a short check step, `srun --resilient
 * --resilient-role=spare resihp-run --spare-agent`: the plugin probes the
 * node, and the agent registers it with the coordinator with the probe's
 * verdict (one registration per node, so a spare for a replica of K nodes
 * is K registrations). The check is repeated every --spare-recheck
 * seconds while the job runs, on nodes not in use; a check step that ends
 * without registering makes the spare unreachable. Only spares the
 * coordinator holds as registered-healthy are promoted to replacements;
 * a replacement waits while spares are still being checked.
 *
 * Lifetime. SIGINT/SIGTERM (and SIGHUP) stop the training at the next
 * step boundary; with --state-dir one replica first saves the state there
 * (coord_save.c, recovery/job_save.c) and the exit status says it is
 * resumable; --save-every saves while training goes on; --resume starts
 * the coordinator at the saved step after checking every file. Every way
 * the job ends has its own exit status and a one-line outcome in the
 * summary (resihp-run(1), EXIT STATUS).
 *
 * Parts (run.h holds the state they share): this file reads the options,
 * the allocation and the job's secret and starts the keeper; primary.c is
 * the run itself (the main loop, the stop, the summary); launch.c the
 * replicas' steps; spares.c the spares' checks and the diagnosis of a step
 * that never joined; events.c what the coordinator reports; save.c the
 * resumable state; record.c the failover record; standby.c the standby
 * coordinator; cmd.c and slurm.c the commands run without a shell.
 */
#include "config.h"

#include "run.h"
#include "secret.h"
#include "slurm.h"

#include <resihp.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

struct run g = {.standby_opt = 1,
                .secret_fd = -1,
                .standby_node = -1,
                .saved_step = -1,
                .saving_said = -1,
                .kept = {-1, -1},
                .K = 1,
                .S = -1,
                .launch_timeout_s = 60,
                .recheck_s = 30,
                .assign = RESIHP_ASSIGN_COST,
                .swap_cost_s = -2, /* not given: the planner's default */
                .progress_s = 10,
                .hang_ms = 5000};

volatile sig_atomic_t got_signal, nsignals;

void on_signal(int sig) {
  got_signal = sig;
  nsignals++;
}

void say(const char *fmt, ...) {
  if (g.quiet)
    return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "resihp-run: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: resihp-run --replicas R [--spares S] [--nodes-per-replica N]\n"
      "                  [--ranks-per-replica K]\n"
      "                  [--inject SPEC] [--kill-node-cmd CMD] [--mpi TYPE]\n"
      "                  [--port P] [--coordinator-host HOST]\n"
      "                  [--secret-file PATH] [--silence-ms MS]\n"
      "                  [--launch-timeout S] [--no-spare-check]\n"
      "                  [--no-burn-in] [--burn-in-ratio X]\n"
      "                  [--spare-recheck S] [--wait-for-replacements]\n"
      "                  [--ledger FILE] [--events FILE [--report FILE]]\n"
      "                  [--metrics FILE]\n"
      "                  [--assign even|count|cost] [--lockstep]\n"
      "                  [--swap-cost SECONDS|never] [--progress SECONDS]\n"
      "                  [--state-dir DIR [--save-every N]] [--resume DIR]\n"
      "                  [--failover-after-ms MS] [--standby auto|none]\n"
      "                  [--standby-output FILE]\n"
      "                  [--no-job-comment] [--quiet] -- PROGRAM [ARGS...]\n"
      "Run PROGRAM as R data-parallel replicas, one Slurm job step each,\n"
      "inside the current allocation, and replace failed replicas on spare\n"
      "nodes while the others keep training. See resihp-run(1).\n");
}

/* A node name of `scontrol show hostnames` (MAXN at most, each cut to
 * the room of a name). */
static void add_node(const char *name, void *ud) {
  (void)ud;
  if (g.nnodes >= MAXN)
    return;
  node_t *n = &g.nodes[g.nnodes++];
  snprintf(n->name, sizeof(n->name), "%.63s", name);
  n->owner = -1;
  n->gate = -1;
}

static int read_nodes(void) {
  const char *list = getenv("SLURM_JOB_NODELIST");
  const char *jid = getenv("SLURM_JOB_ID");
  if (!list || !*list || !jid || !*jid) {
    fprintf(stderr,
            "resihp-run: not inside a Slurm allocation (no SLURM_JOB_ID / "
            "SLURM_JOB_NODELIST): call it from an sbatch script or salloc\n");
    return -1;
  }
  snprintf(g.jobid, sizeof(g.jobid), "%s", jid);
  char *const argv[] = {"scontrol", "show", "hostnames", (char *)list, NULL};
  if (resihp__slurm_run(argv, 0, add_node, NULL) || g.nnodes <= 0) {
    fprintf(stderr, "resihp-run: 'scontrol show hostnames %s' failed\n", list);
    return -1;
  }
  return 0;
}

/* The job secret (secret.h): a given one is held for as long as this
 * process runs (a standby's, or the user's); a new one, made after the
 * stale ones of this directory are removed, too. */
static int make_secret(void) {
  if (g.secret_file[0]) {
    g.secret_fd = resihp__secret_hold(g.secret_file);
    return 0;
  }
  const char *dir = getenv("RESIHP_SECRET_DIR");
  char cwd[2048];
  if (!dir || !*dir)
    dir = getcwd(cwd, sizeof(cwd)) ? cwd : "/tmp";
  resihp__secret_clean_stale(dir, resihp__slurm_job_active, 4096);
  if (resihp__secret_create(dir, g.jobid, g.secret_file,
                            sizeof(g.secret_file), &g.secret_fd)) {
    fprintf(stderr,
            "resihp-run: cannot create the job secret %s: %s (set "
            "RESIHP_SECRET_DIR to a directory shared by the nodes)\n",
            g.secret_file, strerror(errno));
    return -1;
  }
  g.own_secret = 1;
  return 0;
}

static int read_secret(uint8_t *buf, size_t cap, size_t *len) {
  int fd = open(g.secret_file, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t n = read(fd, buf, cap);
  close(fd);
  if (n <= 0)
    return -1;
  *len = (size_t)n;
  return 0;
}

/* The first IPv4 address of host, as resihp__wire_dial picks it. */
static int resolve_host(const char *host, char *out, size_t len) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
  struct addrinfo *ai = NULL;
  if (getaddrinfo(host, NULL, &hints, &ai) || !ai)
    return -1;
  const struct sockaddr_in *a = (const struct sockaddr_in *)ai->ai_addr;
  int rc = inet_ntop(AF_INET, &a->sin_addr, out, (socklen_t)len) ? 0 : -1;
  freeaddrinfo(ai);
  return rc;
}

/* The coordinator holds a descriptor per replica's link and per pending
 * handshake (up to R + 64), and at set-up one per rank waiting for its
 * leader: past the usual soft limit of 1024 for a large job, where accept
 * would fail and joiners wait. Raise the soft limit as far as that needs
 * (the hard limit at most); refuse a job the hard limit cannot hold. */
static int raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl))
    return 0;
  g.nofile0 = rl;
  rlim_t need = 2 * (rlim_t)g.R + 192; /* links, handshakes, our own */
  rlim_t want = need + (rlim_t)g.R * (rlim_t)g.ranks;
  if (rl.rlim_cur < want) {
    rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
    g.nofile_raised = !setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur < need) {
    fprintf(stderr,
            "resihp-run: %d replicas need at least %llu open files (a link "
            "and a handshake per replica); the limit is %llu (hard %llu): "
            "raise it (ulimit -Hn, or nofile in /etc/security/limits.conf) "
            "and try again\n",
            g.R, (unsigned long long)need, (unsigned long long)rl.rlim_cur,
            (unsigned long long)rl.rlim_max);
    return -1;
  }
  if (rl.rlim_cur < want)
    fprintf(stderr,
            "resihp-run: warning: the open-files limit (%llu) is below the "
            "%llu that %d replicas of %d rank(s) may hold at set-up; ranks "
            "may wait for their leader's address longer (raise ulimit -Hn)\n",
            (unsigned long long)rl.rlim_cur, (unsigned long long)want, g.R,
            g.ranks);
  return 0;
}

int main(int argc, char **argv) {
  /* The program of a spare's check step (see the top comment). */
  if (argc == 2 && !strcmp(argv[1], "--spare-agent"))
    return resihp__spare_agent_run(10000);
  static const struct option lo[] = {
      {"replicas", required_argument, 0, 'r'},
      {"spares", required_argument, 0, 's'},
      {"nodes-per-replica", required_argument, 0, 'k'},
      {"ranks-per-replica", required_argument, 0, 'K'},
      {"inject", required_argument, 0, 'i'},
      {"kill-node-cmd", required_argument, 0, 'c'},
      {"mpi", required_argument, 0, 'm'},
      {"port", required_argument, 0, 'p'},
      {"coordinator-host", required_argument, 0, 'H'},
      {"secret-file", required_argument, 0, 'f'},
      {"silence-ms", required_argument, 0, 'S'},
      {"launch-timeout", required_argument, 0, 'T'},
      {"quiet", no_argument, 0, 'q'},
      {"no-job-comment", no_argument, 0, 'J'},
      {"no-spare-check", no_argument, 0, 'n'},
      {"no-burn-in", no_argument, 0, 'b'},
      {"burn-in-ratio", required_argument, 0, 'U'},
      {"ledger", required_argument, 0, 'L'},
      {"spare-recheck", required_argument, 0, 'C'},
      {"wait-for-replacements", no_argument, 0, 'W'},
      {"assign", required_argument, 0, 'A'},
      {"lockstep", no_argument, 0, 'l'},
      {"swap-cost", required_argument, 0, 'w'},
      {"progress", required_argument, 0, 'P'},
      {"state-dir", required_argument, 0, 'D'},
      {"save-every", required_argument, 0, 'E'},
      {"resume", required_argument, 0, 'R'},
      {"events", required_argument, 0, 'V'},
      {"metrics", required_argument, 0, 'M'},
      {"report", required_argument, 0, 'X'},
      {"failover-after-ms", required_argument, 0, 'F'},
      {"standby", required_argument, 0, 'B'},
      {"standby-output", required_argument, 0, 'O'},
      /* internal: how a primary starts its standby */
      {"standby-of", required_argument, 0, 'Y'},
      {"primary-node", required_argument, 0, 'Z'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  int o;
  char *end;
  g.argc0 = argc;
  g.argv0 = argv;
  while ((o = getopt_long(argc, argv,
                          "+r:s:k:K:i:c:m:p:H:f:S:T:qJnbU:L:C:WA:lw:P:D:E:R:V:M:F:"
                          "B:O:Y:Z:X:h",
                          lo, NULL)) != -1) {
    long v = 0;
    if (strchr("rskKpSTCPEF", o)) {
      errno = 0;
      v = strtol(optarg, &end, 10);
      if (errno || end == optarg || *end || v < 0 || v > 100000) {
        fprintf(stderr, "resihp-run: --%s wants a number, not '%s'\n",
                o == 'r'   ? "replicas"
                : o == 's' ? "spares"
                : o == 'k' ? "nodes-per-replica"
                : o == 'K' ? "ranks-per-replica"
                : o == 'p' ? "port"
                : o == 'S' ? "silence-ms"
                : o == 'C' ? "spare-recheck"
                : o == 'P' ? "progress"
                : o == 'E' ? "save-every"
                : o == 'F' ? "failover-after-ms"
                           : "launch-timeout",
                optarg);
        return EXIT_USAGE;
      }
    }
    switch (o) {
    case 'r':
      g.R = (int)v;
      break;
    case 's':
      g.S = (int)v;
      break;
    case 'k':
      g.K = (int)v;
      break;
    case 'K':
      g.ranks = (int)v;
      break;
    case 'i':
      g.inject = optarg;
      break;
    case 'c': {
      char cerr[300];
      resihp__cmd_free(&g.kill_cmd);
      if (resihp__cmd_parse(optarg, &g.kill_cmd, cerr, sizeof(cerr))) {
        fprintf(stderr, "resihp-run: --kill-node-cmd: %s\n", cerr);
        return EXIT_USAGE;
      }
      break;
    }
    case 'm':
      g.mpi = optarg;
      break;
    case 'p':
      g.port = (int)v;
      break;
    case 'H':
      g.coord_host = optarg;
      break;
    case 'f':
      snprintf(g.secret_file, sizeof(g.secret_file), "%s", optarg);
      break;
    case 'S':
      g.silence_ms = (int)v;
      break;
    case 'T':
      g.launch_timeout_s = (int)v;
      break;
    case 'F':
      g.hang_ms = (int)v;
      break;
    case 'B':
      if (strcmp(optarg, "auto") && strcmp(optarg, "none")) {
        fprintf(stderr,
                "resihp-run: --standby wants auto (a standby coordinator on "
                "another node of the allocation, the default) or none, not "
                "'%s'\n",
                optarg);
        return EXIT_USAGE;
      }
      g.standby_opt = !strcmp(optarg, "auto");
      break;
    case 'O':
      g.standby_out = optarg;
      break;
    case 'Y':
      g.standby_of = optarg;
      break;
    case 'Z':
      g.primary_node = optarg;
      break;
    case 'q':
      g.quiet = 1;
      break;
    case 'J':
      g.no_job_comment = 1;
      break;
    case 'n':
      g.no_spare_check = 1;
      break;
    case 'b':
      g.no_burn_in = 1;
      break;
    case 'U':
      errno = 0;
      g.burnin_ratio = strtod(optarg, &end);
      if (errno || end == optarg || *end || !(g.burnin_ratio >= 1) ||
          g.burnin_ratio > 1000) {
        fprintf(stderr,
                "resihp-run: --burn-in-ratio wants how many times slower "
                "than the replicas a spare's burn-in may be (1 to 1000, "
                "e.g. 3), not '%s'\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'L':
      g.ledger = optarg;
      break;
    case 'V':
      g.events = optarg;
      break;
    case 'M':
      g.metrics = optarg;
      break;
    case 'X':
      g.report = optarg;
      break;
    case 'C':
      g.recheck_s = (int)v;
      break;
    case 'W':
      g.hold = 1;
      break;
    case 'l':
      g.lockstep = 1;
      break;
    case 'A':
      if ((g.assign = resihp_assign_mode_lookup(optarg)) < 0) {
        fprintf(stderr,
                "resihp-run: --assign wants even (equal counts, no "
                "adaptation), count (counts by speed) or cost (by predicted "
                "cost, the default), not '%s'\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'w':
      errno = 0;
      g.swap_cost_s = strtod(optarg, &end);
      if (!strcmp(optarg, "never")) {
        g.swap_cost_s = -1;
      } else if (errno || end == optarg || *end || !(g.swap_cost_s >= 0) ||
                 g.swap_cost_s > 1e7) {
        fprintf(stderr,
                "resihp-run: --swap-cost wants the seconds a replica is out "
                "while a spare takes its place (e.g. 60), or 'never', not "
                "'%s'\n",
                optarg);
        return EXIT_USAGE;
      }
      break;
    case 'P':
      g.progress_s = (int)v;
      break;
    case 'D':
      if (!*optarg || (mkdir(optarg, 0700) && errno != EEXIST) ||
          !realpath(optarg, g.state_dir)) {
        fprintf(stderr,
                "resihp-run: --state-dir %s: cannot create or find it: %s "
                "(give a directory on a file system that the nodes share)\n",
                optarg, strerror(errno));
        return EXIT_USAGE;
      }
      break;
    case 'E':
      g.save_every = v;
      break;
    case 'R':
      g.resume_arg = optarg;
      break;
    case 'h':
      usage(stdout);
      return EXIT_OK;
    default:
      usage(stderr);
      return EXIT_USAGE;
    }
  }
  if (optind >= argc) {
    fprintf(stderr, "resihp-run: no program given (put it after --)\n");
    usage(stderr);
    return EXIT_USAGE;
  }
  g.prog = argv + optind;
  /* A program that cannot start would fail on every node: say so now
   * rather than burn the nodes and spares one by one. (Checked on this
   * host; the nodes see the same file system as a rule, and a failure
   * there is caught when the step ends before joining.) */
  int perr = resihp__prog_check(g.prog[0], g.prog_path, sizeof(g.prog_path));
  if (perr) {
    fprintf(stderr,
            "resihp-run: %s: cannot execute (%s) - the program, not the "
            "node, failed; no spare used\n",
            g.prog[0], strerror(perr));
    return EXIT_PROGRAM;
  }
  if (g.R < 1 || g.R > MAXR || g.K < 1 || g.K > 64) {
    fprintf(stderr,
            "resihp-run: --replicas must be 1..%d and --nodes-per-replica "
            "1..64\n",
            MAXR);
    return EXIT_USAGE;
  }
  g.reps = calloc((size_t)g.R, sizeof(*g.reps));
  if (!g.reps) {
    fprintf(stderr, "resihp-run: out of memory for %d replicas\n", g.R);
    return EXIT_USAGE;
  }
  for (int r = 0; r < g.R; r++)
    g.reps[r].gate = -1;
  if (!g.ranks)
    g.ranks = g.K;
  if (g.ranks < g.K || g.ranks > 64 || g.ranks % g.K) {
    fprintf(stderr,
            "resihp-run: --ranks-per-replica %d does not fit replicas of %d "
            "node(s): it must be a multiple of --nodes-per-replica (the same "
            "number of ranks on each node of a replica), at most 64\n",
            g.ranks, g.K);
    return EXIT_USAGE;
  }
  if (raise_nofile())
    return EXIT_USAGE;
  if (g.save_every && !g.state_dir[0] && !g.resume_arg) {
    fprintf(stderr, "resihp-run: --save-every needs --state-dir DIR (where "
                    "the states go)\n");
    return EXIT_USAGE;
  }
  if (g.resume_arg && check_resume())
    return EXIT_USAGE;
  if (g.report && report_check())
    return EXIT_USAGE;
  /* a resumed run saves into the directory it resumed from unless told */
  if (g.resuming && !g.state_dir[0] && !realpath(g.resume_arg, g.state_dir)) {
    fprintf(stderr, "resihp-run: --resume %s: %s\n", g.resume_arg,
            strerror(errno));
    return EXIT_USAGE;
  }
  char err[512];
  /* --no-burn-in from the environment too (the lab tests: their nodes
   * share one machine's CPUs, so a spare measured while the job trains is
   * slowed by the job itself, not by its node) */
  const char *nb = getenv("RESIHP_NO_BURN_IN");
  if (nb && nb[0] && strcmp(nb, "0"))
    g.no_burn_in = 1;
  const char *spec = g.inject ? g.inject : getenv("RESIHP_INJECT");
  if (resihp__inject_parse(spec, g.inj, RESIHP__INJECT_MAX, &g.ninj, err,
                           sizeof(err))) {
    fprintf(stderr, "resihp-run: %s\n", err);
    return EXIT_USAGE;
  }
  for (int i = 0; i < g.ninj; i++)
    if (g.inj[i].replica >= g.R) {
      fprintf(stderr,
              "resihp-run: bad fault injection: replica %d does not exist "
              "(--replicas %d: 0..%d)\n",
              g.inj[i].replica, g.R, g.R - 1);
      return EXIT_USAGE;
    }
  if (read_nodes())
    return EXIT_USAGE;
  int avail_spares = (g.nnodes - g.R * g.K) / g.K;
  if (g.nnodes < g.R * g.K || (g.S >= 0 && g.S > avail_spares)) {
    fprintf(stderr,
            "resihp-run: the allocation has %d nodes; %d replicas of %d "
            "node(s) and %d spare(s) need %d (ask sbatch/salloc for more "
            "with -N)\n",
            g.nnodes, g.R, g.K, g.S < 0 ? 0 : g.S,
            (g.R + (g.S < 0 ? 0 : g.S)) * g.K);
    return EXIT_USAGE;
  }
  if (g.S >= 0) /* nodes beyond R+S replicas' worth are left alone */
    for (int i = (g.R + g.S) * g.K; i < g.nnodes; i++)
      g.nodes[i].bad = 1;
  /* Replicas take the first nodes in order. */
  for (int r = 0; r < g.R; r++)
    g.reps[r].relaunch = 0;
  if (make_secret())
    return EXIT_USAGE;
  uint8_t secret[4096];
  size_t slen = 0;
  if (read_secret(secret, sizeof(secret), &slen)) {
    fprintf(stderr, "resihp-run: cannot read the secret file %s\n",
            g.secret_file);
    if (g.own_secret)
      unlink(g.secret_file);
    return EXIT_USAGE;
  }
  /* The ranks reach the coordinator under this host's name (or
   * --coordinator-host): listen on the address that name resolves to, as
   * the ranks will resolve it, and on no other interface. */
  char host[256], bind_addr[INET_ADDRSTRLEN];
  if (g.standby_of) /* the address is this node's, not the primary's */
    g.coord_host = NULL;
  if (g.coord_host)
    snprintf(host, sizeof(host), "%s", g.coord_host);
  else if (gethostname(host, sizeof(host)))
    snprintf(host, sizeof(host), "127.0.0.1");
  host[sizeof(host) - 1] = '\0';
  if (resolve_host(host, bind_addr, sizeof(bind_addr))) {
    fprintf(stderr,
            "resihp-run: cannot resolve '%s' to an IPv4 address for the "
            "coordinator (give --coordinator-host NAME-OR-ADDRESS that the "
            "nodes reach this host by)\n",
            host);
    memset(secret, 0, sizeof(secret));
    if (g.own_secret)
      unlink(g.secret_file);
    return EXIT_USAGE;
  }
  g.co = (resihp__coord_opts_t){
      .replicas = g.R,
      .burnin_ratio = g.burnin_ratio,
      .bind_host = bind_addr,
      .hold_for_replacements = g.hold,
      .lockstep = g.lockstep,
      .port = g.port,
      .secret = secret,
      .secret_len = slen,
      .silence_ms =
          g.silence_ms ? g.silence_ms
                       : (int)resihp_settings_get(resihp_settings_global(),
                                                  RESIHP_SETTING_COORD_TIMEOUT),
      .may_decide = may_decide,
      .on_failed = on_failed,
      .on_swapped = on_swapped,
      .on_spare = on_spare,
      .on_fault = on_fault,
      .assign = g.assign,
      .on_health = on_health,
      .swap_cost_s = g.swap_cost_s,
      /* a slowdown lasts a second before it counts: not the turns that
       * ranks sharing CPUs take (29 slow episodes in a failure-free
       * lockstep run of 3 compute-bound replicas on 2 cores before) */
      .confirm_slow_ms = 1000,
      .spare_free = spare_free,
      .start_step = g.resuming ? g.resume.step : 0,
      .save_on_stop = g.state_dir[0] != '\0',
      .save_every = g.save_every,
      .on_saved = on_saved,
      .on_mirror = on_mirror};
  if (g.swap_cost_s == -2) {
    resihp_escalation_costs_t ec;
    resihp_escalation_costs_init(&ec);
    g.co.swap_cost_s = ec.spare_swap_s;
  }
  /* The listening socket is the keeper's: the port outlives any one
   * coordinator, and what waits in its backlog during a failover is
   * accepted by the next one. Sized for every rank at once: at set-up
   * each one connects (the leaders, and the others for their leader's
   * address). */
  resihp__wire_listener_t lis;
  if (resihp__wire_listener_open(bind_addr, g.port, g.R * g.ranks, &lis)) {
    fprintf(stderr, "resihp-run: cannot listen on %s:%d: %s\n", bind_addr,
            g.port, strerror(errno));
    memset(secret, 0, sizeof(secret));
    if (g.own_secret)
      unlink(g.secret_file);
    return EXIT_USAGE;
  }
  int port = lis.port;
  g.co.listener = &lis;
  /* A standby on another node (standby.h), when this process runs on a
   * node of the allocation (sbatch: the batch host). Under salloc it runs
   * outside, on a login node: the allocation does not outlive that host's
   * salloc anyway, so there is nothing a standby could save. */
  const char *me = getenv("SLURMD_NODENAME");
  snprintf(g.node_self, sizeof(g.node_self), "%s", me ? me : "");
  int inside = 0;
  for (int i = 0; me && i < g.nnodes; i++)
    inside |= !strcmp(g.nodes[i].name, me);
  g.standby_on = g.standby_opt && inside && g.nnodes >= 2;
  if (g.standby_opt && !g.standby_on && !g.standby_of)
    say("no standby coordinator: %s",
        !inside ? "resihp-run runs outside the allocation (salloc: the "
                  "allocation ends with its host anyway)"
                : "the allocation has a single node");
  if (g.standby_on &&
      resihp__wire_listener_open(bind_addr, 0, 4, &g.feed_lis)) {
    say("warning: cannot listen for a standby coordinator: %s; the job goes "
        "on without one",
        strerror(errno));
    g.standby_on = 0;
  }
  if (g.standby_on)
    snprintf(g.feed_ep, sizeof(g.feed_ep), "%s:%d", host, g.feed_lis.port);
  /* It bounds a standby's wait and a shrink's wait for Slurm's verdict:
   * asked now, not in the loop, which is the coordinator's too */
  g.slurmd_timeout_s = resihp__slurm_slurmd_timeout_s();
  resihp__verdict_init(&g.verdict);
  static char sout[4200];
  char cwd[4096];
  if (!g.standby_out) /* the same in the primary and in its standby */
    snprintf(sout, sizeof(sout), "%s/resihp-standby-%s",
             getcwd(cwd, sizeof(cwd)) ? cwd : "/tmp", g.jobid);
  g.standby_out = g.standby_out ? g.standby_out : sout;
  snprintf(g.host, sizeof(g.host), "%s", host);
  snprintf(g.coord_ep, sizeof(g.coord_ep), "%s:%d", host, port);
  ssize_t sl = readlink("/proc/self/exe", g.self, sizeof(g.self) - 1);
  if (sl > 0)
    g.self[sl] = '\0';
  else
    snprintf(g.self, sizeof(g.self), "%s", argv[0]);
  g.t0 = resihp__now_ms();
  /* This process becomes the keeper; the primary does the work. A
   * standby first follows the primary's feed, and becomes the keeper of
   * a primary restored from the last record when the primary's node is
   * lost. */
  resihp__keeper_opts_t ko = {
      .hang_ms = g.hang_ms, .lost_status = EXIT_LOST, .primary = primary_main};
  char *rec = NULL;
  int ret = -1;
  if (g.standby_of) {
    /* the token the primary handed this standby (its hello says it); not
     * passed on to the steps it may launch one day */
    const char *tok = getenv("RESIHP_STANDBY_TOKEN");
    snprintf(g.standby_token, sizeof(g.standby_token), "%s", tok ? tok : "");
    unsetenv("RESIHP_STANDBY_TOKEN");
    /* its output goes straight to a file of its own: srun's forwarding
     * runs on the primary's node and dies with it */
    char path[4300];
    snprintf(path, sizeof(path), "%s.%s", g.standby_out, g.node_self);
    int ofd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (ofd >= 0) {
      fflush(stdout);
      fflush(stderr);
      dup2(ofd, 1);
      dup2(ofd, 2);
      close(ofd);
      setvbuf(stdout, NULL, _IOLBF, 0);
    } else {
      say("cannot write %s: %s; the standby's output goes to its srun", path,
          strerror(errno));
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    size_t rlen = 0;
    int fr = standby_follow(secret, slen, &rec, &rlen);
    if (fr == 1) {
      ko.snap = rec;
      ko.snaplen = rlen;
      ko.first_why = g.vouched ? "cut off from its replicas and standby"
                               : "lost with its node";
      got_signal = nsignals = 0;
    } else {
      ret = fr == 0 || got_signal ? EXIT_OK : EXIT_LOST;
      if (fr == 0)
        say("the job is over: the standby leaves");
    }
  }
  if (ret < 0)
    ret = resihp__keeper_run(&ko);
  if (ko.snap) {
    g.own_secret = 1; /* the job's now: removed below */
    end_job();
  }
  free(rec);
  resihp__wire_listener_close(&g.feed_lis);
  resihp__wire_listener_close(&lis);
  memset(secret, 0, sizeof(secret));
  resihp__cmd_free(&g.kill_cmd);
  if (g.own_secret)
    unlink(g.secret_file);
  return ret;
}
