# SPDX-License-Identifier: BSD-3-Clause
"""libresihp's negative error codes as Python exceptions."""
from ._lib import lib


class ResihpError(Exception):
    """A libresihp call failed. name is the C name ("RESIHP_EPEER"), code
    the negative value; libresihp has already logged what to do."""

    def __init__(self, code, what=""):
        self.code = code
        self.name = lib.resihp_err_name(code).decode()
        msg = lib.resihp_strerror(code).decode()
        super().__init__("%s%s: %s" % (what + ": " if what else "",
                                       self.name, msg))


class ProgramError(Exception):
    """Bad input or a state that cannot be used: the run was stopped (a spare
    would fail the same way)."""


def check(code, what):
    if code < 0:
        raise ResihpError(code, what)
    return code
