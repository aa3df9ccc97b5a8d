/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-bench-mpi: the MPI twin of resihp-bench-allreduce. Same sizes,
 * same iteration counts, same output format, with MPI_Allreduce (float sum,
 * separate send and receive buffers), so tools/resihp-bench.sh can put both side by side:
 *
 *   mpi LABEL RANKS BYTES USEC_PER_OP ALGBW_GBPS BUSBW_GBPS
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int iters_for(long bytes, int scale) {
  long it = (64L << 20) * scale / bytes; /* as resihp-bench-allreduce */
  if (it < 2)
    it = 2;
  if (it > 100)
    it = 100;
  return (int)it;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  long min_bytes = 4096, max_bytes = 16L << 20;
  int scale = 1, reps = 3;
  const char *label = "mpi";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--full")) {
      max_bytes = 256L << 20;
      scale = 2;
      reps = 5;
    } else if (!strcmp(argv[i], "--quick")) {
      max_bytes = 16L << 20;
    } else if (!strcmp(argv[i], "--max") && i + 1 < argc) {
      max_bytes = atol(argv[++i]);
    } else if (!strcmp(argv[i], "--min") && i + 1 < argc) {
      min_bytes = atol(argv[++i]);
    } else if (!strcmp(argv[i], "--label") && i + 1 < argc) {
      label = argv[++i];
    }
  }
  size_t maxn = (size_t)max_bytes / sizeof(float);
  float *src = malloc(maxn * sizeof(float)), *buf = malloc(maxn * sizeof(float));
  for (size_t i = 0; i < maxn; i++)
    src[i] = buf[i] = (float)(i % 17) * 0.25f;
  for (long bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    int cnt = (int)(bytes / (long)sizeof(float));
    int iters = iters_for(bytes, scale);
    for (int w = 0; w < 2; w++)
      MPI_Allreduce(src, buf, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double dt = 1e30;
    for (int r = 0; r < reps; r++) { /* best of reps, as resihp's bench */
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int k = 0; k < iters; k++)
        MPI_Allreduce(src, buf, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double t = (MPI_Wtime() - t0) / iters;
      if (t < dt)
        dt = t;
    }
    if (rank == 0) {
      double alg = (double)bytes / dt / 1e9;
      printf("mpi %s %d %ld %.1f %.3f %.3f\n", label, n, bytes, dt * 1e6, alg,
             alg * 2.0 * (n - 1) / n);
      fflush(stdout);
    }
  }
  free(buf);
  free(src);
  MPI_Finalize();
  return 0;
}
