/* SPDX-License-Identifier: BSD-3-Clause */
/* See shrink_pick.h. */
#include "config.h"

#include "shrink_pick.h"

int resihp__run_shrink_pick(int nn, int rpn, const int *down,
                            unsigned long long *dead) {
  if (nn < 2 || rpn < 1 || nn > 64 / rpn)
    return -1;
  unsigned long long d = 0;
  int left = 0;
  for (int i = 0; i < nn; i++) {
    if (!down[i]) {
      left++;
      continue;
    }
    for (int k = i * rpn; k < (i + 1) * rpn; k++)
      d |= 1ULL << k;
  }
  if (!d || !left)
    return -1;
  *dead = d;
  return left;
}
