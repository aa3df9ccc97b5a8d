// SPDX-License-Identifier: BSD-3-Clause
// The GPU part of a spare's burn-in (burnin_gpu.c): a tiled GEMM of two
// matrices of small integers (every sum exact in float, so a product can
// be checked entry by entry against the CPU), and the fill of a device
// all-reduce's buffer. Built by nvcc into a fatbin embedded in the
// library, as the deterministic-mode kernels are (fixed_point_gpu.mk).
#define TILE 16

// a[i][k] = (i + k) % 7, b[k][j] = (3k + j) % 5 - 2: written on the device
// (no host copy to time), checked on the host from the same formula.
extern "C" __global__ void resihp_burnin_init_kernel(float *a, float *b,
                                                     int n) {
  long idx = (long)blockIdx.x * blockDim.x + threadIdx.x;
  long nn = (long)n * n;
  for (; idx < nn; idx += (long)gridDim.x * blockDim.x) {
    int i = (int)(idx / n), k = (int)(idx % n);
    a[idx] = (float)((i + k) % 7);
    b[idx] = (float)((i * 3 + k) % 5 - 2);
  }
}

// c = a b, n a multiple of TILE.
extern "C" __global__ void resihp_burnin_gemm_kernel(const float *a,
                                                     const float *b, float *c,
                                                     int n) {
  __shared__ float ta[TILE][TILE], tb[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  float sum = 0.0f;
  for (int t = 0; t < n; t += TILE) {
    ta[threadIdx.y][threadIdx.x] = a[(long)row * n + t + threadIdx.x];
    tb[threadIdx.y][threadIdx.x] = b[(long)(t + threadIdx.y) * n + col];
    __syncthreads();
    for (int k = 0; k < TILE; k++)
      sum += ta[threadIdx.y][k] * tb[k][threadIdx.x];
    __syncthreads();
  }
  c[(long)row * n + col] = sum;
}

// x[0..n) = v
extern "C" __global__ void resihp_burnin_fill_kernel(float *x, long n,
                                                     float v) {
  for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x)
    x[i] = v;
}
