#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""resihp-report: a run's report from resihp-run's events (--events FILE).

One self-contained file, drawn with matplotlib (Debian's python3-matplotlib):
HTML (the timeline as inline SVG, then the summary and the tables of
failures, slow episodes, spares, coordinators and all events), SVG (the
timeline alone) or PNG. The HTML loads nothing: no script, no font, no
image from elsewhere, and its Content-Security-Policy forbids it.

The events file is input from the replicas, the network and whoever can
write the file: every line is checked (JSON object, known field types,
bounded sizes) and anything else is refused with the line's number and what
is wrong, never a traceback. parse_events() is that parser (the fuzz test
tests/fuzz/fuzz_report.py drives it); render() draws.
"""

import html
import json
import math
import os
import re
import sys
import tempfile

USAGE = """usage: resihp-report [-o OUT.html|OUT.svg|OUT.png] [--title TEXT] EVENTS

Draw the report of a resihp-run job from its events file (resihp-run
--events EVENTS): a timeline of the steps per second and the active
replicas; each failure (detected, the replacement admitted, training
again), slow episodes and what was done (fewer microbatches, a swap for a
spare), the spares (ready, failed probe, suspect, taken, none left), saves, the
coordinators started and their failovers; then the run's summary and
tables of each.

  -o FILE       where to write it; its suffix says the format: .html (the
                default; one self-contained file, opens offline), .svg (the
                timeline alone) or .png. Default: EVENTS.html; "-" writes
                HTML to stdout.
  --title TEXT  the report's title (default: "resihp-run job JOB")
  -h, --help    this text

Exit status: 0 written; 1 the events file is unreadable or malformed (the
message names the line); 2 a usage error. See resihp-report(1)."""

# how a run ends (resihp-run(1), --events); events of other names than
# resihp-run's are listed in the table of all events, not drawn (a newer
# resihp-run may add some)
ENDS = ("done", "stop", "abort", "lost")

MAX_BYTES = 1 << 30      # a file larger than this is refused, not read
MAX_LINE = 8192          # resihp-run writes lines under 1 KiB
MAX_EVENTS = 5_000_000
DETAIL = 300             # events drawn one by one (with texts) up to this
PACE_POINTS = 3000       # segments of the steps/s line at most
MAX_ROWS = 20000         # rows of a table at most (the file has them all)
MAX_INT = 1 << 53        # steps, epochs, replicas: exact in a double
NAME = re.compile(r"[a-z][a-z0-9-]{0,31}\Z")
FIELDS = {  # field: (type, required)
    "time": ("number", True), "job": ("text", False),
    "event": ("name", True), "step": ("int", True),
    "replica": ("int", False), "epoch": ("int", False),
    "kind": ("text", False), "reason": ("text", False),
    "seconds": ("number", False), "replicas": ("int", False),
}


class ReportError(Exception):
    """A message for the user: what is wrong, where."""


def _no_constant(name):
    raise ValueError("%s is not a number JSON allows" % name)


def _check(obj, where):
    if not isinstance(obj, dict):
        raise ReportError("%s: not a JSON object" % where)
    ev = {}
    for key, (kind, required) in FIELDS.items():
        if key not in obj:
            if required:
                raise ReportError("%s: no \"%s\" field" % (where, key))
            continue
        v = obj[key]
        if kind == "number":
            # an int beyond a double's range would overflow isfinite()
            ok = (isinstance(v, (int, float)) and not isinstance(v, bool)
                  and 0 <= v < 1e12 and math.isfinite(v))
        elif kind == "int":
            ok = (isinstance(v, int) and not isinstance(v, bool)
                  and -1 <= v < MAX_INT)
        elif kind == "name":
            ok = isinstance(v, str) and NAME.match(v) is not None
        else:
            ok = isinstance(v, str) and len(v) <= 1024
        if not ok:
            raise ReportError("%s: field \"%s\" is not a valid %s: %.60r"
                              % (where, key, kind, v))
        ev[key] = v
    ev["time"] = float(ev["time"])
    return ev


def parse_events(data, name="events"):
    """The events of data (bytes, the whole file) as a list of dicts, in
    the file's order; ReportError for anything resihp-run does not write."""
    if len(data) > MAX_BYTES:
        raise ReportError("%s: larger than %d bytes: not an events file of "
                          "one job?" % (name, MAX_BYTES))
    if not data.strip():
        raise ReportError("%s: no events (empty file)" % name)
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    elif lines[-1].strip():
        raise ReportError("%s: line %d: cut short (no end of line): the file "
                          "was truncated" % (name, len(lines)))
    events = []
    for n, raw in enumerate(lines, 1):
        where = "%s: line %d" % (name, n)
        if not raw.strip():
            continue
        if len(raw) > MAX_LINE:
            raise ReportError("%s: longer than %d bytes" % (where, MAX_LINE))
        if len(events) >= MAX_EVENTS:
            raise ReportError("%s: more than %d events" % (where, MAX_EVENTS))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ReportError("%s: not UTF-8 text (byte %d)"
                              % (where, e.start)) from None
        try:
            obj = json.loads(text, parse_constant=_no_constant)
        except RecursionError:
            raise ReportError("%s: nested too deeply" % where) from None
        except ValueError as e:  # JSONDecodeError, huge integers, NaN
            raise ReportError("%s: not JSON: %s" % (where, e)) from None
        events.append(_check(obj, where))
    if not events:
        raise ReportError("%s: no events (blank lines only)" % name)
    return events


# ---- what the events say, paired up -------------------------------------

def analyse(events):
    """Failures with their admission and recovery, slow episodes with how
    they ended, the steps' pace, spares, coordinators. One pass, whatever
    the number of events and replicas: each replica's open replacement
    and open slow episode are looked up by replica."""
    t0 = min(e["time"] for e in events)
    t_end = max(e["time"] for e in events)
    a = {"t0": t0, "span": max(t_end - t0, 1e-3), "failures": [],
         "slow": [], "spares": [], "coords": [], "failovers": [],
         "saves": [], "ends": [], "pace": [], "active": [], "summary": [],
         "swaps": [],
         "jobs": sorted({e.get("job", "") for e in events}) or [""]}
    replacing = {}  # replica: its failure or swap, until training again
    slow = {}       # replica: its slow episode, until it ends
    for e in events:
        ev, t = e["event"], e["time"] - t0
        r = e.get("replica")
        if ev in ("healthy", "swap", "failure") and r in slow:
            slow.pop(r)["end"] = e
        if ev in ("failure", "swap"):
            # a second failure before the first's replacement trained: the
            # first was never recovered
            x = {"t": t, "e": e, "admitted": None, "recovered": None}
            a["failures" if ev == "failure" else "swaps"].append(x)
            replacing[r] = x
        elif ev == "admitted" and r in replacing:
            replacing[r]["admitted"] = replacing[r]["admitted"] or e
        elif ev == "recovered" and r in replacing:
            replacing.pop(r)["recovered"] = e
        elif ev == "slow":
            if r not in slow:  # a new episode, not a worse factor
                slow[r] = {"t": t, "e": e, "end": None}
                a["slow"].append(slow[r])
        elif ev == "spare":
            a["spares"].append((t, e))
        elif ev == "coordinator":
            a["coords"].append((t, e))
        elif ev == "failover":
            a["failovers"].append((t, e))
        elif ev == "save":
            a["saves"].append((t, e))
        elif ev in ENDS:
            a["ends"].append((t, e))
        elif ev == "summary":
            a["summary"].append(e.get("reason", ""))
        if ev == "progress" and "replicas" in e:
            a["active"].append((t, e["replicas"]))
    # steps per second between consecutive progress points (and the run's
    # start and end, which carry steps too); a stall shows as a dip
    pts = [(e["time"] - t0, e["step"]) for e in events
           if e["event"] in ("progress", "start", "resume") + ENDS
           and e["step"] >= 0]
    for (ta, sa), (tb, sb) in zip(pts, pts[1:]):
        if tb > ta and sb >= sa:
            a["pace"].append((ta, tb, (sb - sa) / (tb - ta)))
    return a


# ---- the drawing ----------------------------------------------------------

def _rel(a, e):
    return e["time"] - a["t0"] if e else None


class Marks:
    """What the timeline draws, each with an SVG id: one artist per event
    (id KIND-N) while there are at most DETAIL of them, else one artist
    per kind (id KIND: a collection), so that a long run with thousands of
    failures draws in seconds, not hours. Texts only in detail."""

    def __init__(self, detail, end):
        # a span this short still shows; an open one lasts to the end
        self.detail, self.end, self.least = detail, end, end / 250
        self.groups = {}

    def _add(self, what, ax, base, n, item, style, group=None):
        key = (what, id(ax), base, group)
        g = self.groups.setdefault(key, {"ax": ax, "base": base,
                                         "style": style, "items": [],
                                         "group": group})
        g["items"].append(("%s-%s" % (base, n), item))

    def point(self, ax, base, n, x, y, group=None, **style):
        self._add("point", ax, base, n, (x, y), style, group)

    def span(self, ax, base, n, y, t0, t1, height, **style):
        t1 = self.end if t1 is None else t1
        self._add("span", ax, base, n,
                  (y, t0, max(t1 - t0, self.least), height), style)

    def vline(self, ax, base, n, x, detail_only=False, **style):
        if self.detail or not detail_only:
            self._add("vline", ax, base, n, x, style)

    def text(self, ax, base, n, x, y, text, **style):
        if self.detail:
            ax.annotate(text, (x, y), fontsize=7, gid="%s-%s" % (base, n),
                        **style)

    def draw(self):
        from matplotlib.collections import PolyCollection
        for (what, _, base, group), g in self.groups.items():
            ax, st, items = g["ax"], g["style"], g["items"]
            if self.detail:
                for gid, it in items:
                    if what == "point":
                        ax.plot([it[0]], [it[1]], ls="", gid=gid, **st)
                    elif what == "span":
                        y, x, w, h = it
                        ax.barh(y, w, left=x, height=h, gid=gid, **st)
                    else:
                        ax.axvline(it, gid=gid, **st)
                continue
            gid = base if group is None else "%s-%s" % (base, group)
            if what == "point":
                st = dict(st, ms=min(st.get("ms", 4), 4))
                ax.plot([it[0] for _, it in items], [it[1] for _, it in items],
                        ls="", gid=gid, **st)
            elif what == "span":
                boxes = [[(x, y - h / 2), (x + w, y - h / 2),
                          (x + w, y + h / 2), (x, y + h / 2)]
                         for _, (y, x, w, h) in items]
                pc = PolyCollection(boxes, facecolors=st["color"],
                                    alpha=st.get("alpha"), linewidths=0)
                pc.set_gid(gid)
                ax.add_collection(pc)
            else:
                ax.vlines([it for _, it in items], 0, 1, gid=gid,
                          transform=ax.get_xaxis_transform(),
                          colors=st["color"], linewidths=st.get("lw", 1),
                          linestyles=st.get("ls", "-"))


def draw(a, title):
    """The timeline as a matplotlib figure; every element drawn for an
    event carries an SVG id (gid) saying what it is, for tests and for
    readers of the SVG."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.fonttype": "none",
                                "svg.hashsalt": "resihp-report",
                                "font.size": 9})
    import matplotlib.pyplot as plt

    # a lane per replica that had something happen to it, not per replica
    # of the job (thousands of them trained on without a word)
    lane = {r: i for i, r in enumerate(sorted(
        {x["e"].get("replica", -1) for x in
         a["failures"] + a["slow"] + a["swaps"]} or {0}))}
    nrep = len(lane)
    fig, (ax_p, ax_r, ax_c) = plt.subplots(
        3, 1, sharex=True, figsize=(11, 3.2 + 0.3 * min(nrep, 24) + 2.4),
        gridspec_kw={"height_ratios": [3, max(1.2, 0.3 * min(nrep, 24)),
                                       2.2]})
    fig.suptitle(title)
    end = a["span"]
    n_items = sum(len(a[k]) for k in ("failures", "slow", "swaps", "spares",
                                      "saves", "coords", "failovers"))
    m = Marks(n_items <= DETAIL, end)

    # 1. pace (at most PACE_POINTS segments: a long run's are merged)
    pace = a["pace"]
    if len(pace) > PACE_POINTS:
        k = -(-len(pace) // PACE_POINTS)
        merged = []
        for j in range(0, len(pace), k):
            part = pace[j:j + k]
            ta, tb = part[0][0], part[-1][1]
            steps = sum((y - x) * rate for x, y, rate in part)
            merged.append((ta, tb, steps / (tb - ta)))
        pace = merged
    if pace:
        xs, ys = [], []
        for ta, tb, rate in pace:
            xs += [ta, tb]
            ys += [rate, rate]
        ax_p.plot(xs, ys, color="tab:blue", lw=1.2, gid="pace",
                  label="steps/s")
    ax_p.set_ylabel("steps/s")
    ax_p.set_ylim(0, max([r for _, _, r in pace] + [1e-3]) * 1.15)
    if a["active"]:
        act = a["active"][::-(-len(a["active"]) // PACE_POINTS)]
        tw = ax_p.twinx()
        tw.step([t for t, _ in act], [n for _, n in act],
                where="post", color="tab:gray", lw=0.8, ls=":",
                gid="active-replicas")
        tw.set_ylabel("active replicas", color="tab:gray")
        tw.set_ylim(0, max(n for _, n in a["active"]) * 1.15 + 1)

    # 2. replicas: failures to training again, slow episodes
    for i, f in enumerate(a["failures"]):
        r, e = lane[f["e"].get("replica", -1)], f["e"]
        t_rec = _rel(a, f["recovered"])
        m.span(ax_r, "replacement", i, r, f["t"], t_rec, 0.6,
               color="salmon", alpha=0.6)
        m.point(ax_r, "failure", i, f["t"], r, marker="X", color="red", ms=9)
        m.text(ax_r, "failure-label", i, f["t"], r + 0.45,
               e.get("kind", "failure"), color="darkred")
        if f["admitted"]:
            m.point(ax_r, "admitted", i, _rel(a, f["admitted"]), r,
                    marker="o", color="orange", ms=5)
        if t_rec is not None:
            m.point(ax_r, "recovered", i, t_rec, r, marker="^",
                    color="green", ms=8)
        # thousands of them would hide the pace: drawn only in detail
        m.vline(ax_p, "failure-line", "%d-pace" % i, f["t"], color="red",
                lw=0.6, ls="--", detail_only=True)
        m.vline(ax_c, "failure-line", "%d-control" % i, f["t"], color="red",
                lw=0.6, ls="--", detail_only=True)
    for i, s in enumerate(a["slow"]):
        r, e = lane[s["e"].get("replica", -1)], s["e"]
        m.span(ax_r, "slow", i, r, s["t"], _rel(a, s["end"]), 0.35,
               color="gold", alpha=0.8)
        m.text(ax_r, "slow-label", i, s["t"], r - 0.45,
               e.get("reason", "slow"), color="darkgoldenrod")
    for i, w in enumerate(a["swaps"]):
        r, t_rec = lane[w["e"].get("replica", -1)], _rel(a, w["recovered"])
        m.span(ax_r, "swap-replacement", i, r, w["t"], t_rec, 0.6,
               color="plum", alpha=0.6)
        m.point(ax_r, "swap", i, w["t"], r, marker="s", color="purple", ms=7)
        if t_rec is not None:
            m.point(ax_r, "swap-recovered", i, t_rec, r, marker="^",
                    color="green", ms=8)
    ax_r.set_ylim(-0.8, nrep - 0.2)
    if nrep <= 24:
        ax_r.set_yticks(range(nrep))
        ax_r.set_yticklabels(["replica %d" % r if r >= 0 else "replica ?"
                              for r in lane])
    else:
        ax_r.set_yticks([])
        ax_r.set_ylabel("%d replicas\n(by number)" % nrep)
    ax_r.invert_yaxis()

    # 3. the control plane: coordinators, failovers, spares, saves
    lanes = {"coordinator": 0, "spare ready": 1,
             "spare failed probe\nor suspect": 2, "spare taken": 3,
             "save": 4}
    spare_lane = {"ready": 1, "failed-probe": 2, "suspect": 2, "taken": 3,
                  "none-left": 3}
    for i, (t, e) in enumerate(a["coords"]):
        m.point(ax_c, "coordinator", i, t, 0, marker="D", ms=6,
                color="navy" if e.get("kind") != "standby" else "teal")
    for i, (t, e) in enumerate(a["failovers"]):
        d = e.get("seconds", 0.0)
        m.span(ax_c, "failover", i, 0, t - d, t, 0.6, color="crimson",
               alpha=0.7)
        m.text(ax_c, "failover-label", i, t, -0.4,
               "failover (%s)" % e.get("kind", "?"), color="crimson")
    colours = {"ready": "green", "failed-probe": "red", "taken": "blue",
               "suspect": "darkorange", "none-left": "black"}
    for i, (t, e) in enumerate(a["spares"]):
        k = e.get("kind", "?")
        k = k if NAME.match(k) else "other"
        m.point(ax_c, "spare", "%d-%s" % (i, k), t, spare_lane.get(k, 3),
                marker="o", ms=6, color=colours.get(k, "gray"), group=k)
    for i, (t, e) in enumerate(a["saves"]):
        m.point(ax_c, "save", i, t, 4, marker="v", ms=5, color="slategray")
    for i, (t, e) in enumerate(a["ends"]):
        for ax, part in ((ax_p, "pace"), (ax_r, "replicas"),
                         (ax_c, "control")):
            m.vline(ax, "end", "%d-%s-%s" % (i, e["event"], part), t,
                    color="black", lw=0.8)
    m.draw()
    ax_c.set_ylim(-0.8, len(lanes) - 0.2)
    ax_c.set_yticks(list(lanes.values()))
    ax_c.set_yticklabels(list(lanes))
    ax_c.invert_yaxis()
    ax_c.set_xlabel("seconds since the first event")
    ax_c.set_xlim(0, end * 1.02)

    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    legend = [
        Line2D([], [], color="tab:blue", label="steps/s"),
        Line2D([], [], color="tab:gray", ls=":", label="active replicas"),
        Line2D([], [], marker="X", color="red", ls="", label="failure"),
        Line2D([], [], marker="o", color="orange", ls="", label="admitted"),
        Line2D([], [], marker="^", color="green", ls="",
               label="training again"),
        Patch(color="salmon", alpha=0.6, label="replacing"),
        Patch(color="gold", label="slow"),
        Line2D([], [], marker="s", color="purple", ls="", label="swap"),
        Patch(color="plum", alpha=0.6, label="swapping"),
        Line2D([], [], marker="D", color="navy", ls="",
               label="coordinator started"),
        Patch(color="crimson", alpha=0.7, label="failover"),
        Line2D([], [], marker="o", color="green", ls="", label="spare ready"),
        Line2D([], [], marker="o", color="red", ls="",
               label="spare failed probe"),
        Line2D([], [], marker="o", color="darkorange", ls="",
               label="spare suspect (burn-in)"),
        Line2D([], [], marker="o", color="blue", ls="", label="spare taken"),
    ]
    fig.legend(handles=legend, loc="lower center", ncol=7, fontsize=7,
               frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


# ---- HTML ---------------------------------------------------------------

def _table(head, rows):
    out = ["<table><tr>"]
    out += ["<th>%s</th>" % html.escape(h) for h in head]
    out.append("</tr>")
    for row in rows[:MAX_ROWS]:
        out.append("<tr>" + "".join("<td>%s</td>" % html.escape(str(c))
                                    for c in row) + "</tr>")
    out.append("</table>")
    if len(rows) > MAX_ROWS:
        out.append("<p>The first %d rows of %d.</p>" % (MAX_ROWS, len(rows)))
    return "".join(out)


def _s(x):
    return "%.2f" % x if x is not None else "-"


STALL = re.compile(
    r"\s*failure \d+: replica (\d+),.*survivors' stall ([^;]*);")


def _stalls(lines):
    """The survivors' stall of each failure, by replica in order, from
    resihp-run's summary (the coordinator measured it from the steps'
    starts; the events do not say)."""
    out = {}
    for ln in lines:
        m = STALL.match(ln)
        if m:
            out.setdefault(int(m.group(1)), []).append(m.group(2).strip())
    return out


def _summary_rows(lines):
    rows = []
    for ln in lines:
        if ln.strip() == "resihp-run summary":
            continue  # its heading
        key, sep, val = ln.strip().partition(":")
        if sep and 0 < len(key) <= 40:
            rows.append((key, val.strip()))
        else:
            rows.append(("", ln.strip()))
    return rows


CSS = """body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left;
vertical-align:top;font-size:90%}th{background:#eee}
svg{max-width:100%;height:auto}h2{margin-top:1.2em}"""


def render_html(a, events, svg, title):
    fail_rows = []
    stalls = _stalls(a["summary"])
    seen = {}
    for i, f in enumerate(a["failures"]):
        e = f["e"]
        rec = f["recovered"]
        # the k-th failure of a replica is its k-th in the summary
        r = e.get("replica", -1)
        k = seen[r] = seen.get(r, -1) + 1
        st = stalls.get(r, [])
        fail_rows.append((
            i + 1, e.get("replica", "-"), e.get("kind", "-"), e["step"],
            _s(f["t"]), st[k] if k < len(st) else "-",
            _s(f["admitted"]["seconds"]) if f["admitted"] and
            "seconds" in f["admitted"] else "-",
            _s(rec["seconds"]) if rec and "seconds" in rec else
            ("not training again" if not rec else "-"),
            e.get("reason", "")))
    slow_rows = []
    swap_of = {id(w["e"]): w for w in a["swaps"]}
    for i, s in enumerate(a["slow"]):
        e, end = s["e"], s["end"]
        swap = swap_of.get(id(end))
        how = ("swapped for a spare" + (
            ", training again after %.2f s" % swap["recovered"]["seconds"]
            if swap and swap["recovered"] and "seconds" in swap["recovered"]
            else "") if end and end["event"] == "swap" else
               "healthy again" if end and end["event"] == "healthy" else
               "failed" if end else "slow to the end")
        slow_rows.append((i + 1, e.get("replica", "-"), e["step"],
                          _s(s["t"]), e.get("reason", ""), how,
                          _s(_rel(a, end) - s["t"]) if end else "-"))
    spare_rows = [(_s(t), e.get("kind", "-"), e.get("reason", ""),
                   e.get("replica", "-")) for t, e in a["spares"]]
    coord_rows = [(_s(t), e["event"], e.get("kind", "-"),
                   _s(e.get("seconds")), e.get("reason", ""))
                  for t, e in sorted(a["coords"] + a["failovers"],
                                     key=lambda x: x[0])]
    all_rows = [(_s(e["time"] - a["t0"]), e["event"], e["step"],
                 e.get("replica", ""), e.get("epoch", ""), e.get("kind", ""),
                 _s(e.get("seconds")) if "seconds" in e else "",
                 e.get("reason", ""))
                for e in events if e["event"] not in ("progress", "summary")]
    # the SVG as drawn, without its XML prologue (inline in HTML5)
    svg = svg[svg.index("<svg"):]
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src "
        "'none'; style-src 'unsafe-inline'\">",
        "<title>%s</title><style>%s</style></head><body>"
        % (html.escape(title), CSS),
        "<h1>%s</h1>" % html.escape(title),
        "<p>job %s; %d events over %.1f s.</p>"
        % (html.escape(", ".join(a["jobs"])), len(events), a["span"]),
        "<div id=\"timeline\">%s</div>" % svg,
        "<h2 id=\"summary\">Summary</h2>",
        _table(("", "resihp-run's summary"), _summary_rows(a["summary"]))
        if a["summary"] else
        "<p>No summary: the run did not end (or was killed) before "
        "resihp-run wrote it.</p>",
        "<h2 id=\"failures\">Failures</h2>",
        _table(("#", "replica", "kind", "step", "detected at (s)",
                "survivors' stall", "admitted after (s)",
                "training again after (s)", "reason"),
               fail_rows) if fail_rows else "<p>None.</p>",
        "<h2 id=\"slow\">Slow episodes</h2>",
        _table(("#", "replica", "step", "at (s)", "factor: action",
                "ended", "lasted (s)"), slow_rows)
        if slow_rows else "<p>None.</p>",
        "<h2 id=\"spares\">Spares</h2>",
        _table(("at (s)", "state", "node(s)", "for replica"), spare_rows)
        if spare_rows else "<p>No spare events.</p>",
        "<h2 id=\"coordinators\">Coordinators</h2>",
        _table(("at (s)", "event", "kind", "seconds", "reason"), coord_rows)
        if coord_rows else "<p>No coordinator events.</p>",
        "<h2 id=\"events\">All events</h2><details><summary>%d events "
        "(progress and summary lines left out)</summary>" % len(all_rows),
        _table(("at (s)", "event", "step", "replica", "epoch", "kind",
                "seconds", "reason"), all_rows),
        "</details></body></html>\n"]
    return "".join(parts)


def render(events, fmt, title=None):
    """The report of events (from parse_events) as bytes in fmt: "html",
    "svg" or "png"."""
    import io
    a = analyse(events)
    if title is None:
        title = "resihp-run job %s" % ", ".join(j or "?" for j in a["jobs"])
    fig = draw(a, title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png" if fmt == "png" else "svg",
                metadata={"Date": None} if fmt == "svg" or fmt == "html"
                else None)
    import matplotlib.pyplot as plt
    plt.close(fig)
    if fmt != "html":
        return buf.getvalue()
    return render_html(a, events, buf.getvalue().decode("utf-8"),
                       title).encode("utf-8")


def _write(path, data):
    if path == "-":
        sys.stdout.buffer.write(data)
        return
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".resihp-report.", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv):
    out, title, src = None, None, None
    args = list(argv)
    while args:
        a = args.pop(0)
        if a in ("-h", "--help"):
            print(USAGE)
            return 0
        if a in ("-o", "--output", "--title"):
            if not args:
                print("resihp-report: %s needs a value\n%s" % (a, USAGE),
                      file=sys.stderr)
                return 2
            if a == "--title":
                title = args.pop(0)
            else:
                out = args.pop(0)
        elif a.startswith("-") and a != "-":
            print("resihp-report: unknown option %s\n%s" % (a, USAGE),
                  file=sys.stderr)
            return 2
        elif src is None:
            src = a
        else:
            print("resihp-report: one events file only\n%s" % USAGE,
                  file=sys.stderr)
            return 2
    if src is None:
        print(USAGE, file=sys.stderr)
        return 2
    if out is None:
        out = src + ".html"
    fmt = "html" if out == "-" else os.path.splitext(out)[1][1:].lower()
    if fmt == "htm":
        fmt = "html"
    if fmt not in ("html", "svg", "png"):
        print("resihp-report: %s: the output's suffix must be .html, .svg or "
              ".png" % out, file=sys.stderr)
        return 2
    try:
        with open(src, "rb") as f:
            data = f.read(MAX_BYTES + 1)
        events = parse_events(data, src)
        _write(out, render(events, fmt, title))
    except ReportError as e:
        print("resihp-report: %s" % e, file=sys.stderr)
        return 1
    except OSError as e:
        print("resihp-report: %s: %s" % (e.filename or src, e.strerror),
              file=sys.stderr)
        return 1
    except ImportError as e:
        print("resihp-report: %s (install Debian's python3-matplotlib)" % e,
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
