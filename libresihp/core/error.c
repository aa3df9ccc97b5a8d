/* SPDX-License-Identifier: BSD-3-Clause */
/* Error codes: messages and names generated from RESIHP_ERROR_MAP. */
#include "config.h"

#include <resihp/error.h>

const char *resihp_strerror(int err) {
  switch (err) {
  case RESIHP_OK:
    return "success";
#define XX(name, value, msg)                                                   \
  case RESIHP_##name:                                                          \
    return msg;
    RESIHP_ERROR_MAP(XX)
#undef XX
  }
  return "unknown error";
}

const char *resihp_err_name(int err) {
  switch (err) {
  case RESIHP_OK:
    return "RESIHP_OK";
#define XX(name, value, msg)                                                   \
  case RESIHP_##name:                                                          \
    return "RESIHP_" #name;
    RESIHP_ERROR_MAP(XX)
#undef XX
  }
  return "RESIHP_UNKNOWN";
}
