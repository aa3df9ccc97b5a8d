# SPDX-License-Identifier: BSD-3-Clause
"""Mutation fuzzing of resihp-report's events parser (parse_events, then
render on some of what it accepts): the events file is written by
resihp-run from what replicas and the network said, and by whoever can
write the file. Whatever the input, the parser either returns events or
raises ReportError (a message for the user); any other exception, or a
render that fails on accepted events, is a bug. Inputs: windows of 1-6
lines of the lab run's events (tests/tools/report/run.events) mutated by
byte flips, cuts, splices, duplicated lines and atoms that break parsers
(NaN, 1e999, deep nesting, huge integers, bad UTF-8, wrong types).
RESIHP_FUZZ_RUNS inputs (default 20000), seed RESIHP_FUZZ_SEED; prints
TAP. A failing input is written to $TMPDIR/fuzz_report-crash.events."""

import importlib.util
import os
import random
import sys
import tempfile
import traceback

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
src = os.environ["top_srcdir"]
sys.path.insert(0, os.path.join(src, "tests", "python"))
from tap import ok, report  # noqa: E402

spec = importlib.util.spec_from_file_location(
    "resihp_report", os.path.join(src, "tools", "report", "resihp_report.py"))
rr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rr)

runs = int(os.environ.get("RESIHP_FUZZ_RUNS", "20000"))
seed = int(os.environ.get("RESIHP_FUZZ_SEED", "1"))
renders = int(os.environ.get("RESIHP_FUZZ_RENDERS", "8"))
rng = random.Random(seed)
lines = open(os.path.join(src, "tests", "tools", "report", "run.events"),
             "rb").read().split(b"\n")[:-1]
ATOMS = [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1", b"-2", b"0",
         b"null", b"true", b"[]", b"{}", b"\"\"", b"9" * 400, b"9" * 5000,
         b"[" * 3000, b"{\"a\":" * 3000, b"\xff", b"\xc3", b"\xed\xa0\x80",
         b"\x00", b"\\u0000", b"\\ud800", b"\"", b"\\", b",", b":", b"}",
         b"\n", b"\r\n", b"<script>", b"\"event\":\"failure\"",
         b"\"replica\":99999", b"\"step\":-7", b"\"time\":1e11",
         b"\"seconds\":-1", b"\"kind\":\"taken\"", b"\"event\":\"progress\"",
         b"\"replicas\":1e3", b"a" * 9000]


def mutate(data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        pos = rng.randint(0, len(data))
        if op == 0 and data:  # flip a byte
            i = rng.randrange(len(data))
            data[i] = rng.randrange(256)
        elif op == 1:  # insert an atom
            data[pos:pos] = rng.choice(ATOMS)
        elif op == 2:  # cut
            data[pos:pos + rng.randint(1, 40)] = b""
        elif op == 3:  # replace a value after a colon by an atom
            j = data.find(b":", pos)
            if j >= 0:
                k = j + 1
                while k < len(data) and data[k] not in b",}":
                    k += 1
                data[j + 1:k] = rng.choice(ATOMS)
        elif op == 4:  # truncate
            del data[pos:]
        else:  # splice another line in
            data[pos:pos] = rng.choice(lines) + b"\n"
    return bytes(data)


bad = None
accepted = rendered = 0
for n in range(runs):
    start = rng.randrange(len(lines))
    window = b"\n".join(lines[start:start + rng.randint(1, 6)]) + b"\n"
    data = mutate(window) if n % 10 else window
    try:
        events = rr.parse_events(data, "fuzz")
    except rr.ReportError:
        continue
    except Exception:  # the bug this looks for
        bad = (data, traceback.format_exc())
        break
    accepted += 1
    if rendered < renders and rng.random() < 0.02:
        try:
            rr.render(events, "html")
            rendered += 1
        except Exception:
            bad = (data, traceback.format_exc())
            break

if bad:
    path = os.path.join(tempfile.gettempdir(), "fuzz_report-crash.events")
    with open(path, "wb") as f:
        f.write(bad[0])
    print("# input kept in %s\n# %s" % (path, bad[1].replace("\n", "\n# ")))
ok(bad is None, "%d inputs (seed %d): the parser returned events or a "
   "ReportError for each; %d accepted, %d of them drawn" %
   (runs if not bad else n + 1, seed, accepted, rendered))
report()
