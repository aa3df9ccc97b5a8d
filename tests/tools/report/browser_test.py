# SPDX-License-Identifier: BSD-3-Clause
"""The report of a real run with every kind of event, opened in a real
headless browser (Debian's chromium) with no network: the DOM it built
holds the timeline's SVG elements and the tables, and its screenshot shows
the drawing (the markers' colours are on the screen, not just in the
file). TAP; the caller checked that chromium is there."""

import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.environ["top_srcdir"], "tests", "python"))
from tap import ok, report  # noqa: E402

TOOL = os.path.join(os.environ["top_builddir"], "tools", "resihp-report")
FIXTURE = os.path.join(os.environ["top_srcdir"], "tests", "tools", "report",
                       "run.events")
CHROMIUM = os.environ["CHROMIUM"]
tmp = tempfile.mkdtemp(prefix="resihp-report-browser.")
page = os.path.join(tmp, "run.html")
p = subprocess.run([TOOL, "-o", page, FIXTURE], capture_output=True,
                   timeout=120)
ok(p.returncode == 0, "the report written (%s)" % p.stderr.decode().strip())


def offline():
    """A command prefix with no network: a network namespace of its own
    where one can be made (root, or user namespaces), else nothing (the
    flags below and the page's CSP still keep it from loading anything)."""
    for pre in (["unshare", "-n"], ["unshare", "-rn"]):
        if subprocess.run(pre + ["true"], capture_output=True).returncode == 0:
            return pre
    return []


def chromium(*args):
    # a profile of its own; no sandbox (root in CI, containers) and no
    # /dev/shm (a container's is small); a proxy that is not there, every
    # host name unresolvable: nothing can be fetched
    cmd = offline() + [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                       "--disable-dev-shm-usage",
                       "--no-first-run", "--hide-scrollbars",
                       "--user-data-dir=" + os.path.join(tmp, "profile"),
                       "--proxy-server=127.0.0.1:9",
                       "--host-resolver-rules=MAP * ~NOTFOUND",
                       *args, "file://" + page]
    return subprocess.run(cmd, capture_output=True, timeout=180)


pre = offline()
ok(True, "network: %s" % (" ".join(pre) + " (a namespace with no network)"
                          if pre else "no namespace; proxy to nowhere, CSP"))
d = chromium("--dump-dom")
dom = d.stdout.decode("utf-8", "replace")
ok(d.returncode == 0 and "<svg" in dom,
   "chromium --dump-dom: the DOM holds the SVG (exit %d)" % d.returncode)
svg = dom[dom.find("<svg"):dom.find("</svg>") + 6] if "<svg" in dom else ""
try:
    ids = {e.get("id") for e in ET.fromstring(svg).iter() if e.get("id")}
except ET.ParseError:
    ids = set()
for i in ("pace", "failure-0", "recovered-0", "slow-0", "swap-0",
          "failover-0", "coordinator-1", "save-0"):
    ok(i in ids, "the browser's DOM has the timeline's %s" % i)
ok("steps completed" in dom and "failed-probe" in dom and "kill-rank" in dom,
   "the browser's DOM has the summary and the tables")

shot = os.path.join(tmp, "shot.png")
s = chromium("--window-size=1200,900", "--screenshot=" + shot)
ok(s.returncode == 0 and os.path.exists(shot),
   "chromium --screenshot (exit %d)" % s.returncode)
from PIL import Image  # noqa: E402  (python3-pil, matplotlib's dependency)

colours = {}
if os.path.exists(shot):
    im = Image.open(shot).convert("RGB")
    colours = {c: n for n, c in im.getcolors(1 << 24)}
    white = colours.get((255, 255, 255), 0)
    ok(white < im.width * im.height * 0.97 and len(colours) > 50,
       "the screenshot is not blank (%d colours, %.0f%% white)"
       % (len(colours), 100.0 * white / (im.width * im.height)))
# the markers' colours as drawn: red failure, green training again, purple
# swap, blue spare taken, navy coordinator; a few pixels each at least
for name, rgb in (("failure (red)", (255, 0, 0)),
                  ("training again (green)", (0, 128, 0)),
                  ("swap (purple)", (128, 0, 128)),
                  ("spare taken (blue)", (0, 0, 255)),
                  ("coordinator (navy)", (0, 0, 128))):
    ok(colours.get(rgb, 0) >= 10, "the screen shows the %s: %d pixels"
       % (name, colours.get(rgb, 0)))
shutil.rmtree(tmp, ignore_errors=True)
report()
