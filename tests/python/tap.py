# SPDX-License-Identifier: BSD-3-Clause
"""TAP for the Python test scripts: collect results with ok() and raises(),
print them with report()."""

results = []


def ok(cond, what):
    results.append((bool(cond), what))


def raises(exc, fn, what, needle=""):
    try:
        fn()
    except exc as e:
        ok(needle in str(e), "%s (%s)" % (what, e))
        return
    except Exception as e:  # the wrong kind
        ok(False, "%s: %s instead of %s" % (what, type(e).__name__,
                                              exc.__name__))
        return
    ok(False, "%s: no exception" % what)


def report():
    print("1..%d" % len(results))
    for i, (good, what) in enumerate(results, 1):
        print("%s %d - %s" % ("ok" if good else "not ok", i, what))
