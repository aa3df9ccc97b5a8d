/* SPDX-License-Identifier: BSD-3-Clause */
/* Online predictor of microbatch time from its workload.
 *
 * The model is linear in four features, x = (N, sum l_i^2, nseq, 1): the
 * dense layers cost per token, attention per squared sequence length,
 * variable-length kernels a little per sequence, and every microbatch a
 * fixed overhead. It is fitted by exponentially weighted least squares:
 * every sample multiplies the old normal equations by the forgetting factor
 * and adds its own outer product, then the 4x4 system is solved by Cholesky.
 * That is a few hundred flops and no allocation per sample. Keeping the
 * normal equations (rather than the covariance of classic recursive least
 * squares) avoids covariance wind-up: when a feature stops varying (packed
 * microbatches all have N = context length, collinear with the constant),
 * a tiny ridge term keeps the system solvable and the prediction stays
 * right, where the RLS covariance would grow without bound in that
 * direction.
 *
 * Errors are multiplicative (a slow device or a noisy clock scales the
 * time), so each sample is weighted by 1/T^2: the fit minimises relative
 * error, which is what the detector's ratio test and MAPE look at.
 */
#include "config.h"

#include "detector-internal.h"

#include <resihp/error.h>
#include <resihp/log.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NF RESIHP__PRED_NF

/* Index of (i, j), i <= j, in the packed upper triangle. */
#define UT(i, j) ((i)*NF - (i) * ((i) + 1) / 2 + (j))

void resihp__pred_init(struct resihp__pred *p, double forget) {
  memset(p, 0, sizeof(*p));
  p->forget = forget;
}

static void scaled(double n0, double k0, const resihp_workload_t *w,
                   double x[NF]) {
  x[0] = w->tokens / n0;
  x[1] = w->sum_l2 / (n0 * n0);
  x[2] = w->nseq / k0;
  x[3] = 1.0;
}

static void features(const struct resihp__pred *p, const resihp_workload_t *w,
                     double x[NF]) {
  scaled(p->n0, p->k0, w, x);
}

/* The one prediction formula (resihp__pred_predict, resihp_model_predict). */
static double eval(const double theta[NF], double n0, double k0, double t0,
                   const resihp_workload_t *w) {
  double x[NF];
  scaled(n0, k0, w, x);
  double y = 0;
  for (int i = 0; i < NF; i++)
    y += theta[i] * x[i];
  return y * t0;
}

/* Solve (R + ridge I) theta = r by Cholesky. Fails (theta kept) only if the
 * matrix is not positive definite, which the ridge prevents unless the
 * inputs were not finite. */
static void solve(struct resihp__pred *p) {
  double L[NF][NF] = {{0}};
  double tr = 0;
  for (int i = 0; i < NF; i++)
    tr += p->R[UT(i, i)];
  double ridge = 1e-9 * tr + 1e-12;
  for (int j = 0; j < NF; j++) {
    double s = p->R[UT(j, j)] + ridge;
    for (int k = 0; k < j; k++)
      s -= L[j][k] * L[j][k];
    if (!(s > 0))
      return;
    L[j][j] = sqrt(s);
    for (int i = j + 1; i < NF; i++) {
      double t = p->R[UT(j, i)];
      for (int k = 0; k < j; k++)
        t -= L[i][k] * L[j][k];
      L[i][j] = t / L[j][j];
    }
  }
  double z[NF], th[NF];
  for (int i = 0; i < NF; i++) {
    double s = p->r[i];
    for (int k = 0; k < i; k++)
      s -= L[i][k] * z[k];
    z[i] = s / L[i][i];
  }
  for (int i = NF - 1; i >= 0; i--) {
    double s = z[i];
    for (int k = i + 1; k < NF; k++)
      s -= L[k][i] * th[k];
    th[i] = s / L[i][i];
  }
  memcpy(p->theta, th, sizeof(th));
}

void resihp__pred_update(struct resihp__pred *p, const resihp_workload_t *w,
                         double time, double weight) {
  if (p->n == 0) {
    p->n0 = w->tokens;
    p->k0 = w->nseq;
    p->t0 = time;
  }
  double x[NF];
  features(p, w, x);
  double y = time / p->t0;
  double wt = weight / (y * y);
  double lam = p->forget;
  for (int i = 0; i < NF; i++) {
    for (int j = i; j < NF; j++)
      p->R[UT(i, j)] = lam * p->R[UT(i, j)] + wt * x[i] * x[j];
    p->r[i] = lam * p->r[i] + wt * x[i] * y;
  }
  p->n++;
  solve(p);
}

/* theta = R^-1 r with every sample weighted by 1/y^2: multiplying all past
 * times by s divides R by s^2 and r by s, which multiplies theta by s. */
void resihp__pred_scale(struct resihp__pred *p, double s) {
  if (!p->n || !(s > 0) || !isfinite(s))
    return;
  for (int i = 0; i < NF * (NF + 1) / 2; i++)
    p->R[i] /= s * s;
  for (int i = 0; i < NF; i++) {
    p->r[i] /= s;
    p->theta[i] *= s;
  }
}

double resihp__pred_predict(const struct resihp__pred *p,
                            const resihp_workload_t *w) {
  return eval(p->theta, p->n0, p->k0, p->t0, w);
}

void resihp__pred_model(const struct resihp__pred *p, resihp_model_t *m) {
  memcpy(m->theta, p->theta, sizeof(m->theta));
  m->n0 = p->n0;
  m->k0 = p->k0;
  m->t0 = p->t0;
}

int resihp_model_ok(const resihp_model_t *m) {
  if (!m)
    return 0;
  for (int i = 0; i < NF; i++)
    if (!isfinite(m->theta[i]))
      return 0;
  return isfinite(m->n0) && isfinite(m->k0) && isfinite(m->t0) && m->n0 >= 1 &&
         m->k0 >= 1 && m->t0 > 0;
}

/* Quiet checks: a caller of these falls back to equal costs. */
static int workload_ok(const resihp_workload_t *w) {
  if (!w || !isfinite(w->tokens) || !isfinite(w->nseq) ||
      !isfinite(w->sum_l2) || w->tokens < 1 || w->nseq < 1)
    return 0;
  double n2 = w->tokens * w->tokens;
  return !(w->nseq > w->tokens || w->sum_l2 > n2 * (1 + 1e-9) ||
           w->sum_l2 < n2 / w->nseq * (1 - 1e-9));
}

int resihp_model_predict(const resihp_model_t *m, const resihp_workload_t *w,
                         double *time) {
  if (!time || !resihp_model_ok(m) || !workload_ok(w)) {
    resihp_log(RESIHP_LOG_DEBUG, "detector",
               "resihp_model_predict: no model or an impossible workload");
    return RESIHP_EINVAL;
  }
  *time = eval(m->theta, m->n0, m->k0, m->t0, w);
  return 0;
}

int resihp_model_costs(const resihp_model_t *models, int k,
                       const resihp_workload_t *w, int n, double *cost) {
  if (!models || k < 1 || n < 0 || (n > 0 && (!w || !cost)))
    return RESIHP_EINVAL;
  for (int mb = 0; mb < n; mb++) {
    double c = 0;
    for (int i = 0; i < k; i++) {
      double t;
      if (resihp_model_predict(&models[i], &w[mb], &t) || !(t > 0) ||
          !isfinite(t))
        return RESIHP_EINVAL;
      c += t;
    }
    if (!isfinite(c))
      return RESIHP_EINVAL;
    cost[mb] = c;
  }
  return 0;
}

void resihp__pred_coef(const struct resihp__pred *p, double coef[NF]) {
  if (!p->n) {
    memset(coef, 0, NF * sizeof(coef[0]));
    return;
  }
  coef[RESIHP_COEF_TOKEN] = p->theta[0] * p->t0 / p->n0;
  coef[RESIHP_COEF_ATTN] = p->theta[1] * p->t0 / (p->n0 * p->n0);
  coef[RESIHP_COEF_SEQ] = p->theta[2] * p->t0 / p->k0;
  coef[RESIHP_COEF_CONST] = p->theta[3] * p->t0;
}

int resihp__check_sample(const char *who, const resihp_workload_t *w,
                         double time) {
  if (!w) {
    resihp_log(RESIHP_LOG_ERROR, "detector", "%s: workload is NULL", who);
    return RESIHP_EINVAL;
  }
  if (!isfinite(time) || time <= 0) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "%s: time %g rejected; give the measured microbatch time, a "
               "finite number > 0",
               who, time);
    return RESIHP_EINVAL;
  }
  if (!isfinite(w->tokens) || !isfinite(w->nseq) || !isfinite(w->sum_l2) ||
      w->tokens < 1 || w->nseq < 1) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "%s: empty or invalid batch (tokens %g, sequences %g) "
               "rejected; a microbatch has at least one sequence of at least "
               "one token",
               who, w->tokens, w->nseq);
    return RESIHP_EINVAL;
  }
  double n2 = w->tokens * w->tokens;
  /* Any split of N tokens into nseq sequences has N^2/nseq <= sum l^2 <=
   * N^2; outside that the columns were swapped or mis-computed. */
  if (w->nseq > w->tokens || w->sum_l2 > n2 * (1 + 1e-9) ||
      w->sum_l2 < n2 / w->nseq * (1 - 1e-9)) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "%s: inconsistent workload (tokens %g, sum_l2 %g, sequences "
               "%g): need sequences <= tokens and tokens^2/sequences <= "
               "sum_l2 <= tokens^2",
               who, w->tokens, w->sum_l2, w->nseq);
    return RESIHP_EINVAL;
  }
  return 0;
}

/* ---- Public wrapper ---- */

struct resihp_predictor {
  struct resihp__pred p;
};

int resihp_predictor_create(resihp_predictor_t **out, double forget) {
  if (!out) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_predictor_create: out is NULL");
    return RESIHP_EINVAL;
  }
  *out = NULL;
  if (forget == 0)
    forget = 0.998;
  if (!(forget >= 0.9 && forget <= 1.0)) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_predictor_create: forgetting factor %g out of range; "
               "use 0.9..1 (or 0 for the default 0.998)",
               forget);
    return RESIHP_EINVAL;
  }
  resihp_predictor_t *p = malloc(sizeof(*p));
  if (!p) {
    resihp_log(RESIHP_LOG_ERROR, "detector", "predictor: out of memory");
    return RESIHP_ENOMEM;
  }
  resihp__pred_init(&p->p, forget);
  *out = p;
  return 0;
}

void resihp_predictor_destroy(resihp_predictor_t *p) {
  free(p);
}

int resihp_predictor_update(resihp_predictor_t *p, const resihp_workload_t *w,
                            double time, double weight) {
  if (!p) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_predictor_update: predictor is NULL");
    return RESIHP_EINVAL;
  }
  int rc = resihp__check_sample("resihp_predictor_update", w, time);
  if (rc)
    return rc;
  if (!(weight > 0 && weight <= 1)) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_predictor_update: weight %g rejected; use (0, 1]",
               weight);
    return RESIHP_EINVAL;
  }
  resihp__pred_update(&p->p, w, time, weight);
  return 0;
}

int resihp_predictor_predict(const resihp_predictor_t *p,
                             const resihp_workload_t *w, double *time) {
  if (!p || !time) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_predictor_predict: NULL argument");
    return RESIHP_EINVAL;
  }
  int rc = resihp__check_sample("resihp_predictor_predict", w, 1.0);
  if (rc)
    return rc;
  if (!p->p.n) {
    resihp_log(RESIHP_LOG_DEBUG, "detector",
               "resihp_predictor_predict: no sample fitted yet");
    return RESIHP_ESTATE;
  }
  *time = resihp__pred_predict(&p->p, w);
  return 0;
}

int resihp_predictor_coef(const resihp_predictor_t *p,
                          double coef[RESIHP_COEF__COUNT]) {
  if (!p || !coef) {
    resihp_log(RESIHP_LOG_ERROR, "detector",
               "resihp_predictor_coef: NULL argument");
    return RESIHP_EINVAL;
  }
  resihp__pred_coef(&p->p, coef);
  return 0;
}

uint64_t resihp_predictor_samples(const resihp_predictor_t *p) {
  return p ? p->p.n : 0;
}
