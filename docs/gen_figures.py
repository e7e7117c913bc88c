"""The docs' figures, from the results in docs/data/: tables written into the pages, plots
drawn as SVG.

    python docs/gen_figures.py            # rewrite the pages' generated parts, draw the plots
    python docs/gen_figures.py --check    # draw the plots; exit 1 when a page is out of date
    python docs/gen_figures.py --from-runs ID chaos-results/runs.jsonl [...] \\
        [--title T --date D]              # a campaign's figures from the runner's records
    python docs/gen_figures.py --from-bench OUT.txt --id ID --commit C --date D \\
        [--current]                       # a run of bench/scale.py, from what it printed

The data:

- ``docs/data/scale.json``: runs of ``bench/scale.py`` (each phase's figures: the library's,
  ``dispatch``, and the bare script's and minimal approver's, ``floor``), the goals, and
  which run is current for each N (``current``: the library's run and the floor's run, the
  same run when both phases ran together).
- ``docs/data/campaigns.json``: campaigns of the fault suite, newest first (the figures
  ``python -m chaos.campaign --json`` prints), and the properties' names.

A page's generated part sits between ``<!-- gen_figures: NAME -->`` and
``<!-- /gen_figures -->``; everything else on the page is written by hand. The plots go to
docs/figures/ (ignored by git: made at each build, ``make docs``). tests/unit/
test_docs_figures.py fails when a page differs from what the data renders.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
DATA = DOCS / "data"
FIGURES = DOCS / "figures"
SCALE_DATA = DATA / "scale.json"
CAMPAIGN_DATA = DATA / "campaigns.json"
PAGES = ("scale.md", "guarantees.md", "guarantees-history.md")

Json = dict[str, Any]

REGION = re.compile(r"(<!-- gen_figures: (?P<name>[\w:.-]+) -->\n)(?P<body>.*?)"
                    r"(<!-- /gen_figures -->)", re.S)


def load(path: Path) -> Json:
    data: Json = json.loads(path.read_text())
    return data


# --- numbers -----------------------------------------------------------------------------


def num(v: float | int | None, digits: int | None = None) -> str:
    """1,025 / 13.8 / 0.13: thousands with commas, decimals as given (or ``digits``)."""
    if v is None:
        return "–"  # noqa: RUF001 (an en dash: no figure)
    if digits is not None:
        return f"{v:,.{digits}f}"
    if float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:,}"


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def times(r: float | None) -> str:
    return "–" if r is None else f"{r:.2f}x"  # noqa: RUF001


def n_label(n: int | str) -> str:
    return f"N = {int(n):,}"


# --- the scale benchmark -----------------------------------------------------------------


def _runs(data: Json) -> dict[str, Json]:
    return {r["id"]: r for r in data["runs"]}


def current(data: Json) -> list[tuple[int, Json, Json | None, Json, Json]]:
    """(N, the library's phase, the floor's phase, the library's run, the floor's run) of
    each current N, smallest first."""
    runs = _runs(data)
    out = []
    for n, pick in sorted(data["current"].items(), key=lambda kv: int(kv[0])):
        d_run, f_run = runs[pick["dispatch"]], runs[pick["floor"]]
        out.append((int(n), d_run["dispatch"], f_run["floor"], d_run, f_run))
    return out


def _goal_met(ok: list[bool | None]) -> str:
    known = [x for x in ok if x is not None]
    if not known:
        return ""
    return ": **met**" if all(known) else ": **not met**"


def scale_summary(data: Json) -> str:
    cur = current(data)
    goals = data["goals"]
    head = "| | " + " | ".join(n_label(n) for n, *_ in cur) + " | goal |"
    rows = [head, "|---|" + "---:|" * len(cur) + "---|"]

    def row(label: str, cell: Callable[[int, Json, Json | None], str], goal: str = "",
            met: Callable[[int, Json, Json | None], bool | None] | None = None) -> None:
        cells = [cell(n, d, f) for n, d, f, *_ in cur]
        verdict = _goal_met([met(n, d, f) for n, d, f, *_ in cur]) if met else ""
        rows.append(f"| {label} | " + " | ".join(cells) + f" | {goal}{verdict} |")

    def dec(n: int, d: Json, f: Json | None) -> str:
        dm, fm = d["decision_ms"], (f or {}).get("decision_ms") or {}
        return (f"{num(dm['p50'])} / {num(dm['p99'])} ms<br>"
                f"{times(ratio(dm['p50'], fm.get('p50')))} / "
                f"{times(ratio(dm['p99'], fm.get('p99')))} the floor")

    p99_goal = goals["decision_p99_ratio"]
    row("decision latency p50 / p99", dec,
        "p99 " + ", ".join(f"≤ {v:g}x the floor at {n_label(n)}"
                           for n, v in sorted(p99_goal.items(), key=lambda kv: int(kv[0]))),
        lambda n, d, f: None if str(n) not in p99_goal or not f else
        d["decision_ms"]["p99"] / f["decision_ms"]["p99"] <= p99_goal[str(n)])

    def vs(value: Callable[[Json], float | None], unit: str, than: str) -> Callable[
            [int, Json, Json | None], str]:
        def cell(n: int, d: Json, f: Json | None) -> str:
            a = value(d)
            if a is None:
                return "not run"
            b = value(f) if f else None
            return f"{num(a)}{unit}" + (f"<br>{times(ratio(a, b))} {than}" if b else "")
        return cell

    def lifecycle(p: Json) -> float | None:
        return float(p["requests"]["lifecycle"])

    row("requests per job, whole lifecycle", vs(lifecycle, "", "the bare script"),
        f"≤ {goals['lifecycle_ratio']:g}x the bare script",
        lambda n, d, f: None if not f else
        d["requests"]["lifecycle"] / f["requests"]["lifecycle"] <= goals["lifecycle_ratio"])
    def tries(d: Json) -> str:
        # The client's tries that failed (timed out, refused, 429, ...), counted since
        # 2026-12-07 (Kube.transient_failures); issue 28 item 2 asks for none.
        failed = d.get("transient_failures")
        return "" if failed is None else f"<br>{num(failed)} requests failed a try"

    def stops(n: int, d: Json, f: Json | None) -> str:
        wall, p50 = d["stop_all_wall_s"], d.get("stop_per_job_p50_s")
        text = f"{num(wall, 1)} / {num(p50, 1)} s"
        if not f:
            return text + tries(d)
        if not f.get("stops_at_once"):
            # Until 2026-12-06 the floor stopped each job alone as it ended: no crowd.
            return text + "<br>the floor's stops ran alone: no ratio" + tries(d)
        return (text + f"<br>{times(ratio(wall, f['stop_all_wall_s']))} / "
                f"{times(ratio(p50, f.get('stop_per_job_p50_s')))} the floor" + tries(d))

    wall_goal, p50_goal = goals["stop_wall_ratio"], goals["stop_p50_ratio"]
    row("StopJob of all N at once, wall / each stop's p50", stops,
        ", ".join(f"≤ {wall_goal[n]:g}x / {p50_goal[n]:g}x the floor at {n_label(n)}"
                  for n in sorted(wall_goal, key=int)) + ", no request failing a try",
        lambda n, d, f: None if str(n) not in wall_goal or not f
        or not f.get("stops_at_once") or d.get("transient_failures") is None else
        d["stop_all_wall_s"] / f["stop_all_wall_s"] <= wall_goal[str(n)]
        and d["stop_per_job_p50_s"] / f["stop_per_job_p50_s"] <= p50_goal[str(n)]
        and d["transient_failures"] == 0)

    def prompt(p: Json) -> float | None:
        return None if not p.get("prompt_stop") else float(p["prompt_stop"]["seconds_p50"])

    row("StopJob of one job whose objects go promptly, p50", vs(prompt, " s", "the bare script"),
        f"≤ {goals['prompt_stop_ratio']:g}x the bare script",
        lambda n, d, f: None if prompt(d) is None or not f or prompt(f) is None else
        (prompt(d) or 0) / (prompt(f) or 1) <= goals["prompt_stop_ratio"])
    rss_goal = goals["client_rss_mb"]
    row("the client's peak RSS", vs(lambda p: p["client_rss_mb"], " MB", "the bare script"),
        ", ".join(f"≤ {v} MB at {n_label(n)}" for n, v in rss_goal.items()),
        lambda n, d, f: None if str(n) not in rss_goal else
        d["client_rss_mb"] <= rss_goal[str(n)])
    row("a controller replica's peak RSS",
        lambda n, d, f: "not read" if d.get("controller_rss_mb") is None
        else f"{num(d['controller_rss_mb'])} MB",
        f"≤ {goals['controller_rss_mb']} MB",
        lambda n, d, f: None if d.get("controller_rss_mb") is None else
        d["controller_rss_mb"] <= goals["controller_rss_mb"])
    row("jobs lost / failed / with A ≠ 1 / waits ended early",
        lambda n, d, f: " / ".join(num(d[k]) for k in ("lost", "failed", "bad_a", "early")),
        "none",
        lambda n, d, f: not any(d[k] for k in ("lost", "failed", "bad_a", "early")))

    def which(n: int, d: Json, f: Json | None) -> str:
        d_run, f_run = next((dr, fr) for m, _, _, dr, fr in cur if m == n)
        text = f"{d_run['commit']}, {d_run['date']}"
        if f_run is d_run:
            return text + ", the floor in the same run"
        return text + f"; the floor from {f_run['commit']}'s run, {f_run['date']}"

    row("the run", which)
    return "\n".join(rows) + f"\n\nMeasured on {data['machine']}.\n"


# --- the fault suite's campaigns ---------------------------------------------------------


def property_names(data: Json) -> dict[str, str]:
    return {p["key"]: p["name"] for p in data["properties"]}


def full(c: Json) -> bool:
    """A campaign whose tables were printed (faults, operations and verdicts by kind)."""
    return "verdicts" in c


def campaign_faults(c: Json) -> int:
    return sum(v[0] for v in c["faults"].values()) if full(c) else int(c["faults_all"])


def campaign_ops(c: Json) -> int:
    return sum(c["ops"].values()) if full(c) else int(c["ops_all"])


def campaign_bad(c: Json) -> int:
    return len(c["bad"]) if full(c) else int(c["violations"]) + int(c.get("run_errors") or 0)


def campaign_tables(data: Json, cid: str) -> str:
    c = next(c for c in data["campaigns"] if c["id"] == cid)
    names = property_names(data)
    lines = [
        *([c["note"], ""] if c.get("note") else []),
        f"- runs: {num(c['runs'])}; seeds {c['seeds']}",
        f"- runner commits: {', '.join(c['runner_commits'])}",
        f"- duration: {c['hours']:.2f} h in all, median {num(c['median_s'])} s a run, "
        f"longest {num(c['longest_s'])} s",
        f"- executions judged: {num(c['executions'])}; ledger lines: {num(c['ledger_lines'])}",
        "",
        "| fault | injected | its tool failed |",
        "|---|---:|---:|",
        *(f"| {k} | {num(v[0])} | {num(v[1])} |" for k, v in sorted(c["faults"].items())),
        f"| all | {num(campaign_faults(c))} | "
        f"{num(sum(v[1] for v in c['faults'].values()))} |",
        "",
        "| operation | calls |",
        "|---|---:|",
        *(f"| {k} | {num(v)} |" for k, v in sorted(c["ops"].items())),
        f"| all | {num(campaign_ops(c))} |",
        "",
        "| property | passed | failed | not judged |",
        "|---|---:|---:|---:|",
        *(f"| {names[p]} | {num(v[0])} | {num(v[1])} | {num(v[2])} |"
          for p, v in c["verdicts"].items()),
        "",
        f"Runs with a violation or an error: {len(c['bad'])}"
        + "".join(f"\n\n- {b}" for b in c["bad"]),
    ]
    if c.get("empty_seeds") is not None:
        empty = c["empty_seeds"]
        lines += ["", f"Judged runs in which nothing ran: {len(empty)}"
                  + (f" (seeds {', '.join(map(str, empty))})" if empty else "")]
    return "\n".join(lines) + "\n"


def smaller_campaigns(data: Json) -> str:
    rows = ["| campaign | runs, seeds | faults / operations | executions judged | "
            "with a violation |",
            "|---|---|---:|---:|---:|"]
    for c in data["campaigns"]:
        if full(c):
            continue
        when = f", {c['date']}" if c.get("date") else ""
        hours = f" ({c['hours']:.2f} h)" if c.get("hours") else ""
        rows.append(f"| {c['title']}{when} | {num(c['runs'])}, {c['seeds']}{hours} | "
                    f"{num(campaign_faults(c))} / {num(campaign_ops(c))} | "
                    f"{num(c.get('executions'))} | {num(c['violations'])} |")
    return "\n".join(rows) + "\n"


def guarantees_summary(data: Json) -> str:
    latest = data["campaigns"][0]
    names = property_names(data)
    held = [names[p] for p, v in latest["verdicts"].items() if v[1] == 0 and v[2] == 0]
    not_held = [f"{names[p]} ({v[1]} failed, {v[2]} not judged)"
                for p, v in latest["verdicts"].items() if v[1] or v[2]]
    failed_tools = sum(v[1] for v in latest["faults"].values())
    all_runs = sum(int(c["runs"]) for c in data["campaigns"])
    all_bad = sum(campaign_bad(c) for c in data["campaigns"])
    bad_seeds = [b.split(":")[0] for c in data["campaigns"] if full(c) for b in c["bad"]]
    rows = [
        f"| The latest campaign | {latest['title']}, {latest['date']} |",
        "|---|---|",
        f"| runs | {num(latest['runs'])} (seeds {latest['seeds']}) |",
        f"| runs with a violation or an error | **{num(len(latest['bad']))}** |",
        f"| properties that held in every run | {len(held)} of {len(latest['verdicts'])}: "
        f"{', '.join(held)} |",
    ]
    if not_held:
        rows.append(f"| properties that did not | {'; '.join(not_held)} |")
    rows += [
        f"| faults injected | {num(campaign_faults(latest))}, {len(latest['faults'])} kinds; "
        f"{'no tool failed' if not failed_tools else f'{failed_tools} whose tool failed'} |",
        f"| operations | {num(campaign_ops(latest))} calls, {len(latest['ops'])} kinds |",
        f"| executions judged | {num(latest['executions'])} "
        f"({num(latest['ledger_lines'])} ledger lines) |",
        f"| time | {latest['hours']:.2f} h, median {num(latest['median_s'])} s a run |",
        f"| every campaign on these pages | {num(all_runs)} runs in "
        f"{len(data['campaigns'])} campaigns, {num(all_bad)} with a violation or an error"
        + (f" ({', '.join(bad_seeds)}: [what the runs found]"
           f"(guarantees-history.md#what-the-runs-found))" if bad_seeds else "") + " |",
    ]
    return "\n".join(rows) + "\n"


# --- SVG plots ---------------------------------------------------------------------------

DISPATCH, FLOOR, GOAL = "#3f51b5", "#9e9e9e", "#d32f2f"
PASSED, FAILED, NOT_JUDGED = "#43a047", "#d32f2f", "#bdbdbd"
PALETTE = ("#3f51b5", "#00897b", "#f9a825", "#8e24aa", "#ef6c00", "#6d4c41", "#546e7a",
           "#c0ca33")
FONT = 'font-family="Roboto, Helvetica, Arial, sans-serif"'


def _esc(s: str) -> str:
    return html.escape(s, quote=True)


def _nice_max(v: float) -> tuple[float, float]:
    """An axis top at or above v and its tick step: 1, 2 or 5 times a power of ten."""
    if v <= 0:
        return 1.0, 0.25
    raw = v / 4
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return step * math.ceil(v / step), step


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(title)}" {FONT}>',
        f"<title>{_esc(title)}</title>",
        f'<rect x="0.5" y="0.5" width="{width - 1}" height="{height - 1}" rx="6" '
        f'fill="#ffffff" stroke="#dddddd"/>',
        f'<text x="16" y="24" font-size="14" font-weight="bold" fill="#212121">'
        f"{_esc(title)}</text>",
        *body, "</svg>", ""])


def _legend(x: int, y: int, items: Sequence[tuple[str, str]], dashed: str = "") -> list[str]:
    out = []
    for name, color in items:
        if name == dashed:
            out.append(f'<line x1="{x}" y1="{y - 4}" x2="{x + 12}" y2="{y - 4}" '
                       f'stroke="{color}" stroke-width="2" stroke-dasharray="4 2"/>')
        else:
            out.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{color}"/>')
        out.append(f'<text x="{x + 16}" y="{y}" font-size="12" fill="#424242">'
                   f"{_esc(name)}</text>")
        x += 24 + 7 * len(name)
    return out


def bars(title: str, groups: Sequence[str], series: Sequence[tuple[str, str,
         Sequence[float | None]]], unit: str, goal: tuple[float, str] | None = None,
         width: int = 680, height: int = 320) -> str:
    """Grouped vertical bars, each labelled with its value; a dashed goal line if given."""
    left, right, top, bottom = 64, 16, 64, 52
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for _, _, vs in series for v in vs if v is not None]
    ymax, step = _nice_max(max([*values, goal[0] if goal else 0]) * 1.08)
    items = [(n, c) for n, c, _ in series] + ([(goal[1], GOAL)] if goal else [])
    legend_rows = _legend_rows([(n, c, []) for n, c in items], width - left - right)
    top += 18 * (len(legend_rows) - 1)
    plot_h = height - top - bottom

    def y(v: float) -> float:
        return top + plot_h - v / ymax * plot_h

    body: list[str] = []
    for li, row_items in enumerate(legend_rows):
        body += _legend(left, 46 + 18 * li, row_items, dashed=goal[1] if goal else "")
    tick = 0.0
    while tick <= ymax + 1e-9:
        body.append(f'<line x1="{left}" y1="{y(tick):.1f}" x2="{width - right}" '
                    f'y2="{y(tick):.1f}" stroke="#eeeeee"/>')
        body.append(f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" font-size="11" '
                    f'text-anchor="end" fill="#616161">{num(round(tick, 6))}</text>')
        tick += step
    body.append(f'<text x="14" y="{top + plot_h / 2:.1f}" font-size="11" fill="#616161" '
                f'transform="rotate(-90 14 {top + plot_h / 2:.1f})" text-anchor="middle">'
                f"{_esc(unit)}</text>")
    gw = plot_w / len(groups)
    bw = min(40.0, gw * 0.8 / len(series))
    for gi, g in enumerate(groups):
        x0 = left + gi * gw + (gw - bw * len(series)) / 2
        for si, (name, color, vs) in enumerate(series):
            v = vs[gi]
            x = x0 + si * bw
            if v is None:
                body.append(f'<text x="{x + bw / 2:.1f}" y="{y(0) - 4:.1f}" font-size="10" '
                            f'text-anchor="middle" fill="#9e9e9e">n/a</text>')
                continue
            body.append(f'<rect x="{x:.1f}" y="{y(v):.1f}" width="{bw - 2:.1f}" '
                        f'height="{y(0) - y(v):.1f}" fill="{color}">'
                        f"<title>{_esc(f'{name}, {g}: {num(v)} {unit}')}</title></rect>")
            body.append(f'<text x="{x + (bw - 2) / 2:.1f}" y="{y(v) - 4:.1f}" font-size="10" '
                        f'text-anchor="middle" fill="#424242">{num(v)}</text>')
        for li, part in enumerate(g.split("\n")):
            body.append(f'<text x="{left + gi * gw + gw / 2:.1f}" '
                        f'y="{top + plot_h + 16 + 13 * li}" font-size="11" '
                        f'text-anchor="middle" fill="#424242">{_esc(part)}</text>')
    body.append(f'<line x1="{left}" y1="{y(0):.1f}" x2="{width - right}" y2="{y(0):.1f}" '
                f'stroke="#9e9e9e"/>')
    if goal:
        body.append(f'<line x1="{left}" y1="{y(goal[0]):.1f}" x2="{width - right}" '
                    f'y2="{y(goal[0]):.1f}" stroke="{GOAL}" stroke-width="1.5" '
                    f'stroke-dasharray="6 3"/>')
    return _svg(width, height, title, body)


def hbars(title: str, rows: Sequence[str], segments: Sequence[tuple[str, str,
          Sequence[float]]], width: int = 680, label_w: int = 190,
          rest_label: bool = False) -> str:
    """Horizontal stacked bars, one a row, with each row's total at its end."""
    top, row_h, right = 64, 24, 70
    legend_rows = _legend_rows(segments, width - 32)
    top += 18 * (len(legend_rows) - 1)
    height = top + row_h * len(rows) + 16
    totals = [sum(vs[i] for _, _, vs in segments) for i in range(len(rows))]
    xmax = max(totals) or 1
    plot_w = width - label_w - right
    body: list[str] = []
    for li, items in enumerate(legend_rows):
        body += _legend(16, 46 + 18 * li, items)
    for i, r in enumerate(rows):
        y = top + i * row_h
        body.append(f'<text x="{label_w - 8}" y="{y + 15}" font-size="12" text-anchor="end" '
                    f'fill="#424242">{_esc(r)}</text>')
        x = float(label_w)
        for name, color, vs in segments:
            w = vs[i] / xmax * plot_w
            if vs[i]:
                body.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{max(w, 2.0):.1f}" '
                            f'height="{row_h - 6}" fill="{color}"><title>'
                            f"{_esc(f'{r}, {name}: {num(vs[i])}')}</title></rect>")
            x += w
        rest = [f"{num(vs[i])} {name}" for name, _, vs in segments[1:] if vs[i]]
        label = num(totals[i]) + (f" ({', '.join(rest)})" if rest_label and rest else "")
        body.append(f'<text x="{x + 6:.1f}" y="{y + 15}" font-size="11" fill="#424242">'
                    f"{_esc(label)}</text>")
    return _svg(width, height, title, body)


def _legend_rows(segments: Sequence[tuple[str, str, Sequence[float]]],
                 width: int) -> list[list[tuple[str, str]]]:
    rows: list[list[tuple[str, str]]] = [[]]
    used = 0
    for name, color, _ in segments:
        w = 24 + 7 * len(name)
        if rows[-1] and used + w > width:
            rows.append([])
            used = 0
        rows[-1].append((name, color))
        used += w
    return rows


def plots(scale: Json, campaigns: Json) -> dict[str, str]:
    cur = current(scale)
    out: dict[str, str] = {}
    pcts = ("p50", "p90", "p99", "max")
    groups = [f"{p}\n{n_label(n)}" for n, *_ in cur for p in pcts]
    out["scale-decision-latency.svg"] = bars(
        "Decision latency: the controller beside the floor's minimal approver", groups,
        [("dispatch-admission", DISPATCH, [d["decision_ms"][p] for _, d, _, _, _ in cur
                                           for p in pcts]),
         ("floor", FLOOR, [None if not f else f["decision_ms"][p] for _, _, f, _, _ in cur
                           for p in pcts])], "ms")
    ns = [n_label(n) for n, *_ in cur]
    out["scale-stopjob.svg"] = bars(
        "StopJob of all N jobs at once, against N", ns,
        [("StopJob", DISPATCH, [d["stop_all_wall_s"] for _, d, _, _, _ in cur]),
         ("floor's bare script", FLOOR, [None if not f else f["stop_all_wall_s"]
                                         for _, _, f, _, _ in cur])], "seconds", width=480)
    rss_goal = scale["goals"]["client_rss_mb"]
    goal_n, goal_mb = next(iter(rss_goal.items()))
    out["scale-client-memory.svg"] = bars(
        "The client's peak RSS, against N", ns,
        [("the library's client", DISPATCH, [d["client_rss_mb"] for _, d, _, _, _ in cur]),
         ("floor's bare script", FLOOR, [None if not f else f["client_rss_mb"]
                                         for _, _, f, _, _ in cur])],
        "MB", goal=(float(goal_mb), f"goal at {n_label(goal_n)}"), width=480)

    done = [c for c in campaigns["campaigns"] if full(c)]
    kinds = sorted({k for c in done for k in c["faults"]})
    out["guarantees-faults.svg"] = hbars(
        "Faults injected, by kind and campaign", kinds,
        [(c["id"] if c["id"] != "mix2" else "mix 2", PALETTE[i % len(PALETTE)],
          [c["faults"].get(k, [0, 0])[0] for k in kinds]) for i, c in enumerate(done)])
    names = property_names(campaigns)
    props = [p["key"] for p in campaigns["properties"]
             if any(p["key"] in c["verdicts"] for c in done)]
    sums = [[sum(c["verdicts"].get(p, [0, 0, 0])[j] for c in done) for p in props]
            for j in range(3)]
    out["guarantees-verdicts.svg"] = hbars(
        f"Verdicts by property, {sum(int(c['runs']) for c in done):,} runs of "
        f"{len(done)} campaigns", [names[p] for p in props],
        [("passed", PASSED, sums[0]), ("failed", FAILED, sums[1]),
         ("not judged", NOT_JUDGED, sums[2])], rest_label=True)
    return out


# --- the pages ---------------------------------------------------------------------------


def regions(scale: Json, campaigns: Json) -> dict[str, str]:
    out = {"scale-summary": scale_summary(scale),
           "guarantees-summary": guarantees_summary(campaigns),
           "smaller-campaigns": smaller_campaigns(campaigns)}
    for c in campaigns["campaigns"]:
        if full(c):
            out[f"campaign:{c['id']}"] = campaign_tables(campaigns, c["id"])
    return out


def render(text: str, parts: dict[str, str], page: str) -> str:
    def fill(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in parts:
            raise SystemExit(f"gen_figures: {page} has a region {name!r} the data does not "
                             f"render (known: {', '.join(sorted(parts))})")
        return m.group(1) + parts[name] + m.group(4)
    return REGION.sub(fill, text)


def pages() -> dict[Path, str]:
    """Each page with generated parts, as the data renders it."""
    parts = regions(load(SCALE_DATA), load(CAMPAIGN_DATA))
    return {DOCS / p: render((DOCS / p).read_text(), parts, p) for p in PAGES}


def draw() -> list[Path]:
    FIGURES.mkdir(exist_ok=True)
    written = []
    for name, svg in plots(load(SCALE_DATA), load(CAMPAIGN_DATA)).items():
        path = FIGURES / name
        if not path.exists() or path.read_text() != svg:
            path.write_text(svg)
        written.append(path)
    return written


# --- importing results -------------------------------------------------------------------


def from_runs(cid: str, files: Sequence[Path], title: str | None, date: str | None) -> None:
    """Set campaign ``cid``'s figures from runner records (a new campaign goes first)."""
    sys.path.insert(0, str(DOCS.parent))
    from chaos import campaign

    data = load(CAMPAIGN_DATA)
    figures = campaign.summary(campaign.load(files))
    old = next((c for c in data["campaigns"] if c["id"] == cid), None)
    if old is None:
        if not title or not date:
            raise SystemExit(f"gen_figures: campaign {cid!r} is new: give --title and --date")
        old = {"id": cid}
        data["campaigns"].insert(0, old)
    old.update({"title": title or old["title"], "date": date or old.get("date"), **figures})
    for k in ("faults_all", "ops_all", "violations", "run_errors"):
        old.pop(k, None)
    CAMPAIGN_DATA.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


_BENCH_ROWS: dict[str, tuple[str, ...]] = {
    "decisions seen": ("decisions_seen",),
    "requests per job: whole lifecycle": ("requests", "lifecycle"),
    "StopJob of all at once, wall s": ("stop_all_wall_s",),
    "StopJob per job p10, s": ("stop_per_job_p10_s",),
    "StopJob per job p50, s": ("stop_per_job_p50_s",),
    "StopJob per job max, s": ("stop_per_job_max_s",),
    "jobs lost": ("lost",),
    "requests failed a try (timeout, 429, ...)": ("transient_failures",),
    "jobs failed": ("failed",),
    "jobs with A != 1": ("bad_a",),
    "waits ended early (DeadlineExceeded)": ("early",),
    "peak RSS MB: client (own process)": ("client_rss_mb",),
    "peak RSS MB: controller (per replica)": ("controller_rss_mb",),
    "CPU s: controller (per replica)": ("controller_cpu_s",),
    "CPU s: client (own process)": ("cpu_s", "client"),
}


def _bench_key(label: str) -> tuple[str, ...] | None:
    if label in _BENCH_ROWS:
        return _BENCH_ROWS[label]
    if m := re.fullmatch(r"decision latency (p\d+|max), ms", label):
        return ("decision_ms", m.group(1))
    if m := re.fullmatch(r"requests per job: (\w+)", label):
        return ("requests", m.group(1))
    if m := re.fullmatch(r"peak RSS MB: client, (\w+) done", label):
        return ("client_rss_after_mb", m.group(1))
    if m := re.fullmatch(r"CPU s: (kube-apiserver|etcd|kueue)", label):
        return ("cpu_s", m.group(1))
    return None


def parse_bench(text: str) -> Json:
    """The figures of bench/scale.py's printed tables (bench/tables.py): the N, and for
    each phase that ran a dict as in docs/data/scale.json; the last N's table wins."""
    run: Json = {}
    section = ""
    for line in text.splitlines():
        if m := re.match(r"N = (\d+) two-node jobs", line):
            if " s fenced" in line:
                # The fenced floor's table (--fenced-floor, after the minimal floor's): its
                # floor is another approver's, not a figure of scale.json's floors; cited in
                # docs/scale-history.md.
                section = "fenced"
                continue
            run = {"n": int(m.group(1)), "dispatch": {}, "floor": {}}
            section = "phase"
            continue
        if line.startswith("StopJob of a job whose objects go promptly"):
            section = "prompt"
            continue
        if section == "fenced":
            continue
        if not line.startswith("  ") or not run or len(line) < 46:
            if line and not line.startswith(" "):
                section = "" if section != "phase" or line.startswith("P4") else section
            continue
        label, cells = line[2:46].strip(), line[46:].split()
        if len(cells) != 3:
            continue
        try:
            values = [None if c in ("-", "nan") else float(c) for c in cells[:2]]
        except ValueError:  # a header: dispatch, floor, ratio
            continue
        key = (("prompt_stop", {"requests p50": "requests_p50", "seconds p50":
                                "seconds_p50"}.get(label, "")) if section == "prompt"
               else _bench_key(label))
        if not key or not key[-1]:
            continue
        for phase, v in zip(("dispatch", "floor"), values, strict=True):
            if v is None:
                continue
            node = run[phase]
            for k in key[:-1]:
                node = node.setdefault(k, {})
            node[key[-1]] = int(v) if v.is_integer() and key[0] != "requests" else v
    if not run:
        raise SystemExit("gen_figures: no 'N = … two-node jobs' table in the bench output")
    return run


def from_bench(path: Path, rid: str, commit: str, date: str, make_current: bool) -> None:
    data = load(SCALE_DATA)
    parsed = parse_bench(path.read_text())
    run = {"id": rid, "n": parsed["n"], "date": date, "commit": commit,
           "command": "bench/scale.py", "history": "",
           "dispatch": parsed["dispatch"] or None, "floor": parsed["floor"] or None}
    if run["floor"]:
        # Since 2026-12-06 bench/scale.py's floor stops its N at once, as dispatch does.
        run["floor"]["stops_at_once"] = True
    data["runs"] = [r for r in data["runs"] if r["id"] != rid] + [run]
    if make_current:
        pick = data["current"].setdefault(str(parsed["n"]), {})
        if run["dispatch"]:
            pick["dispatch"] = rid
        if run["floor"]:
            pick["floor"] = rid
    SCALE_DATA.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true",
                    help="draw the plots; exit 1 when a page's generated part is out of date")
    ap.add_argument("--from-runs", nargs="+", metavar=("ID", "RUNS_JSONL"),
                    help="set campaign ID's figures from the runner's runs.jsonl files")
    ap.add_argument("--from-bench", type=Path, metavar="OUT",
                    help="add a run from bench/scale.py's printed output")
    ap.add_argument("--id")
    ap.add_argument("--commit")
    ap.add_argument("--title")
    ap.add_argument("--date")
    ap.add_argument("--current", action="store_true",
                    help="with --from-bench: make the run the current one for its N")
    a = ap.parse_args(argv)
    if a.from_runs:
        if len(a.from_runs) < 2:
            ap.error("--from-runs needs a campaign id and at least one runs.jsonl")
        from_runs(a.from_runs[0], [Path(p) for p in a.from_runs[1:]], a.title, a.date)
    if a.from_bench:
        if not (a.id and a.commit and a.date):
            ap.error("--from-bench needs --id, --commit and --date")
        from_bench(a.from_bench, a.id, a.commit, a.date, a.current)
    draw()
    stale = [p for p, text in pages().items() if p.read_text() != text]
    if a.check:
        for p in stale:
            print(f"{p.relative_to(DOCS.parent)} is out of date with docs/data/: run "
                  "python docs/gen_figures.py", file=sys.stderr)
        return 1 if stale else 0
    for p, text in pages().items():
        if p in stale:
            p.write_text(text)
            print(f"wrote {p.relative_to(DOCS.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
