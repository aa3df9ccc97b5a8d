# SPDX-License-Identifier: BSD-3-Clause
"""resihp-report on the events of a real lab run with every kind of event
(tests/tools/report/run.events, from make-fixture.sh): the HTML, SVG and
PNG it writes, read back element by element (the SVG's ids, the HTML's
tables), and its refusal of bad, truncated and hostile files. TAP."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

sys.path.insert(0, os.path.join(os.environ["top_srcdir"], "tests", "python"))
from tap import ok, report  # noqa: E402

TOOL = os.path.join(os.environ["top_builddir"], "tools", "resihp-report")
FIXTURE = os.path.join(os.environ["top_srcdir"], "tests", "tools", "report",
                       "run.events")
tmp = tempfile.mkdtemp(prefix="resihp-report-test.")


def run(*args, stdin=None):
    p = subprocess.run([TOOL, *args], capture_output=True, timeout=120,
                       input=stdin)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def svg_ids(svg_text):
    root = ET.fromstring(svg_text)
    return {e.get("id") for e in root.iter() if e.get("id")}


class Tables(HTMLParser):
    """The text of every table cell, by the id of the h2 before it."""

    def __init__(self):
        super().__init__()
        self.section, self.cells, self.cell = None, {}, None
        self.external = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "h2":
            self.section = a.get("id")
        if tag in ("td", "th"):
            self.cell = ""
        for k in ("src", "href"):
            if a.get(k):
                self.external.append(a[k])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.cells.setdefault(self.section, []).append(self.cell)
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


rc, out, err = run("--help")
ok(rc == 0 and b"usage: resihp-report" in out, "--help: usage, exit 0")

# the HTML
html_path = os.path.join(tmp, "run.html")
rc, _, err = run("-o", html_path, FIXTURE)
ok(rc == 0 and os.path.getsize(html_path) > 10000,
   "HTML written from the lab run's events (exit %d %s)" % (rc, err.strip()))
doc = open(html_path, encoding="utf-8").read()
svg = doc[doc.index("<svg"):doc.index("</svg>") + 6]
ids = svg_ids(svg)
want = {
    "the steps per second": r"pace",
    "the active replicas": r"active-replicas",
    "the failure detected": r"failure-0",
    "the failure's replacement (detected to training again)":
        r"replacement-0",
    "the replacement admitted": r"admitted-0",
    "the replacement training again": r"recovered-0",
    "the slow episode": r"slow-0",
    "its action (fewer microbatches)": r"slow-label-0",
    "the swap for a spare": r"swap-0",
    "the swapped replica's replacement training again":
        r"swap-recovered-0",
    "the first coordinator": r"coordinator-0",
    "the successor coordinator": r"coordinator-1",
    "the coordinator failover": r"failover-0",
    "a spare ready": r"spare-\d+-ready",
    "a spare failing its probe": r"spare-\d+-failed-probe",
    "a spare taken": r"spare-\d+-taken",
    "a save": r"save-0",
    "the run's end": r"end-0-done-pace",
}
for what, pat in want.items():
    ok(any(re.fullmatch(pat, i) for i in ids),
       "the HTML's timeline draws %s (svg id %s)" % (what, pat))
SVG_NS = "{http://www.w3.org/2000/svg}"
ok(ET.fromstring(svg).find(".//%sg[@id='slow-label-0']" % SVG_NS)
   is not None and "fewer microbatches" in svg,
   "the slow episode's action is written on the timeline")
t = Tables()
t.feed(doc)
cells = t.cells
summary = " ".join(cells.get("summary", []))
ok("steps completed" in summary and "1200 of 1200" in summary and
   "coordinator failovers" in summary and "survivors' stall" in summary,
   "the summary table is resihp-run's summary (steps, stalls, failovers)")
fails = cells.get("failures", [])
ok("kill-rank" in fails and "150" in fails and "survivors' stall" in fails,
   "the failures table: the kill-rank at step 150, a survivors' stall "
   "column")
ok(fails[fails.index("kill-rank") + 3] ==
   "n/a (before a coordinator failover)",
   "the failure's stall is the summary's (%s)"
   % fails[fails.index("kill-rank") + 3])
slow = " ".join(cells.get("slow", []))
ok("x2.02: fewer microbatches" in slow and "swapped for a spare" in slow,
   "the slow episodes table: x2.02, fewer microbatches, then swapped")
spares = cells.get("spares", [])
ok({"ready", "failed-probe", "taken"} <= set(spares) and "n6" in spares,
   "the spares table: ready, failed-probe (n6), taken")
coords = cells.get("coordinators", [])
ok("failover" in coords and "killed" in coords and "standby" in coords,
   "the coordinators table: the failover (killed) and the standby")
ok(not t.external and "http-equiv=\"Content-Security-Policy\"" in doc and
   "<script" not in doc,
   "self-contained: no src/href, no script, a CSP that forbids loading")

# SVG and PNG
rc, _, err = run("-o", os.path.join(tmp, "run.svg"), FIXTURE)
svg_ids_file = svg_ids(open(os.path.join(tmp, "run.svg"), "rb").read()) \
    if rc == 0 else set()
ok(rc == 0 and {"pace", "failure-0", "swap-0", "failover-0"} <= svg_ids_file,
   "SVG: the timeline alone, a valid XML document with its elements")
rc, _, err = run("-o", os.path.join(tmp, "run.png"), FIXTURE)
png = open(os.path.join(tmp, "run.png"), "rb").read() if rc == 0 else b""
ok(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000, "PNG written")
rc, out, _ = run("-o", "-", FIXTURE)
ok(rc == 0 and out.startswith(b"<!DOCTYPE html>"), "-o -: HTML to stdout")

# bad, truncated, hostile files: exit 1, a message naming the line, no
# traceback, nothing written
good = open(FIXTURE, "rb").read()
first = good.split(b"\n")[0]
bad = {
    "empty": (b"", "no events"),
    "truncated mid-line": (good[:len(good) // 2], "cut short"),
    "not JSON": (first + b"\n{\"time\":\n", "line 2: not JSON"),
    "not an object": (b"[1,2]\n", "line 1: not a JSON object"),
    "no event": (b"{\"time\":1,\"step\":1}\n", "no \"event\" field"),
    "a string for a step": (first.replace(b"\"step\":0", b"\"step\":\"0\"")
                            + b"\n", "field \"step\""),
    "NaN time": (b"{\"time\":NaN,\"event\":\"start\",\"step\":0}\n",
                 "not JSON"),
    "huge number": (b"{\"time\":1e999,\"event\":\"start\",\"step\":0}\n",
                    "field \"time\""),
    "huge integer": (b"{\"time\":1,\"event\":\"start\",\"step\":" +
                     b"9" * 5000 + b"}\n", "line 1"),
    "deep nesting": (b"{\"time\":1,\"event\":\"start\",\"step\":0,\"x\":" +
                     b"[" * 4000 + b"]" * 4000 + b"}\n", "nested too deeply"),
    "an event name with markup": (
        b"{\"time\":1,\"event\":\"<script>\",\"step\":0}\n",
        "field \"event\""),
    "not UTF-8": (first + b"\n\xff\xfe{}\n", "line 2: not UTF-8"),
    "a line of 1 MB": (b"{\"reason\":\"" + b"a" * (1 << 20) + b"\"}\n",
                       "longer than"),
}
for what, (data, needle) in bad.items():
    path = os.path.join(tmp, "bad.events")
    with open(path, "wb") as f:
        f.write(data)
    outp = os.path.join(tmp, "bad.html")
    rc, _, err = run("-o", outp, path)
    ok(rc == 1 and needle in err and "Traceback" not in err and
       err.startswith("resihp-report: ") and not os.path.exists(outp),
       "%s: refused, exit 1: %s" % (what, err.strip()[:120]))
rc, _, err = run(os.path.join(tmp, "absent.events"))
ok(rc == 1 and "No such file" in err, "a missing file: exit 1 (%s)"
   % err.strip())
rc, _, err = run(tmp)
ok(rc == 1 and "Traceback" not in err, "a directory: exit 1 (%s)"
   % err.strip())
# markup in the free text is text, not markup, in the HTML
lines = good.split(b"\n")
evil_lines = [ln.replace(b"\"reason\":\"connection lost\"",
                         b"\"reason\":\"<img src=http://x/>\"")
              for ln in lines]
with open(os.path.join(tmp, "evil.events"), "wb") as f:
    f.write(b"\n".join(evil_lines))
rc, _, err = run("-o", os.path.join(tmp, "evil.html"),
                 os.path.join(tmp, "evil.events"))
d = open(os.path.join(tmp, "evil.html"), encoding="utf-8").read() \
    if rc == 0 else ""
ok(rc == 0 and "&lt;img src=http://x/&gt;" in d and "<img" not in d,
   "a reason holding markup is shown as text")
rc, _, err = run("--bogus", FIXTURE)
ok(rc == 2 and "unknown option" in err, "an unknown option: exit 2")
rc, _, err = run("-o", os.path.join(tmp, "x.pdf"), FIXTURE)
ok(rc == 2 and ".html, .svg or .png" in err, "an unknown format: exit 2")
shutil.rmtree(tmp, ignore_errors=True)
report()
