/* SPDX-License-Identifier: BSD-3-Clause */
/* The layers the example trainers are built of, per sequence (see
 * trainer-common.h). Each sum runs in one fixed order, so a layer gives the
 * same bits wherever it is called from: what lets the pipeline trainer
 * split its model exactly. */
#include "trainer-common.h"

#include <math.h>

void trainer_embed_mean(const float *E, int D, const int *tok, int len,
                        float *x) {
  for (int d = 0; d < D; d++)
    x[d] = 0;
  for (int t = 0; t < len; t++)
    for (int d = 0; d < D; d++)
      x[d] += E[(size_t)tok[t] * D + d];
  for (int d = 0; d < D; d++)
    x[d] /= (float)len;
}

void trainer_embed_mean_bwd(float *gE, int D, const int *tok, int len,
                            const float *dx) {
  for (int t = 0; t < len; t++)
    for (int d = 0; d < D; d++)
      gE[(size_t)tok[t] * D + d] += dx[d] / (float)len;
}

void trainer_dense(const float *W, const float *b, int in, int out,
                   const float *x, float *y, int act_tanh) {
  for (int i = 0; i < out; i++) {
    float a = b[i];
    for (int j = 0; j < in; j++)
      a += W[(size_t)i * in + j] * x[j];
    y[i] = act_tanh ? tanhf(a) : a;
  }
}

void trainer_tanh_bwd(const float *h, const float *dh, int n, float *da) {
  for (int i = 0; i < n; i++)
    da[i] = dh[i] * (1 - h[i] * h[i]);
}

void trainer_dense_bwd(const float *W, int in, int out, const float *x,
                       const float *dy, float *gW, float *gb, float *dx) {
  for (int j = 0; j < in; j++)
    dx[j] = 0;
  for (int i = 0; i < out; i++) {
    gb[i] += dy[i];
    for (int j = 0; j < in; j++) {
      gW[(size_t)i * in + j] += dy[i] * x[j];
      dx[j] += W[(size_t)i * in + j] * dy[i];
    }
  }
}

double trainer_softmax_xent(float *z, int n, int cls) {
  float mx = -1e30f, sum = 0;
  double loss = 0;
  for (int k = 0; k < n; k++)
    if (z[k] > mx)
      mx = z[k];
  for (int k = 0; k < n; k++) {
    z[k] = expf(z[k] - mx);
    sum += z[k];
  }
  for (int k = 0; k < n; k++) {
    float p = z[k] / sum;
    z[k] = p - (k == cls ? 1.0f : 0.0f);
    if (k == cls)
      loss = -log((double)p + 1e-12);
  }
  return loss;
}
