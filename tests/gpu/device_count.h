/* SPDX-License-Identifier: BSD-3-Clause */
/* How many CUDA devices, asked in a child: CUDA initialised in a parent
 * does not work in the ranks it forks afterwards (cudaErrorInitialization
 * Error), so GPU tests ask before forking without initialising CUDA. */
#ifndef RESIHP_TESTS_GPU_DEVICE_COUNT_H
#define RESIHP_TESTS_GPU_DEVICE_COUNT_H

#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

static inline int gpu_device_count(void) {
  pid_t p = fork();
  if (p == 0) {
    int n = 0;
    _exit(cudaGetDeviceCount(&n) == cudaSuccess ? (n > 100 ? 100 : n) : 0);
  }
  int st = 0;
  if (p < 0 || waitpid(p, &st, 0) != p)
    return 0;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 0;
}

#endif
