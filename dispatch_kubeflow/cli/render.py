"""How the plugin prints: tables for people (``-o wide`` with more columns, ``-A`` with the
namespace first), plain data for ``-o json`` and ``-o yaml``, kubectl's
``<resource>.<group>/<name>`` for ``-o name``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import yaml

from dispatch_kubeflow.core.identity import epoch
from dispatch_kubeflow.events import JobEvent
from dispatch_kubeflow.jobs import JobInfo
from dispatch_kubeflow.model import CapabilityStatus, ObjectRef, Observation, StopReport

# Fixed widths, so the rows that `get -w` prints later line up under the header.
JOB_COLUMNS: tuple[tuple[str, int], ...] = (
    ("JOB", 26), ("SUB", 3), ("ATTEMPT", 7), ("STATE", 9), ("PODS", 5), ("A", 3), ("J", 3),
    ("HOLD", 4), ("UNTIL", 20), ("AGE", 5), ("CAUSE", 0))
WIDE_COLUMNS: tuple[tuple[str, int], ...] = (("TRAINJOB", 32), ("EPOCH", 8), ("WORKER", 12))
"""What ``-o wide`` adds before CAUSE: the TrainJob, the current execution's epoch, and the
MultiKueue worker it was dispatched to (``-`` in the other modes, or not yet dispatched)."""
NAME_PREFIX = "trainjob.trainer.kubeflow.org/"  # what kubectl get trainjob -o name prints


def when(t: datetime | None) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if t else ""


def age(t: datetime | None, now: datetime | None = None) -> str:
    """kubectl's style: 45s, 12m, 3h, 2d."""
    if t is None:
        return ""
    secs = max(int(((now or datetime.now(UTC)) - t).total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= 2 * size:  # as kubectl: 119s, then 2m
            return f"{secs // size}{unit}"
    return f"{secs}s"


def cause(obs: Observation) -> str:
    if obs.cause.detail and obs.cause.reason:
        return f"{obs.cause.reason}: {obs.cause.detail}"
    return obs.cause.detail or obs.cause.reason


def row(cells: Sequence[str], columns: Sequence[tuple[str, int]] = JOB_COLUMNS) -> str:
    parts = [c.ljust(w) if w else c for c, (_, w) in zip(cells, columns, strict=True)]
    return "   ".join(parts).rstrip()


def header(columns: Sequence[tuple[str, int]] = JOB_COLUMNS) -> str:
    return row([name for name, _ in columns], columns)


def job_columns(*, wide: bool = False, namespace_width: int = 0
                ) -> tuple[tuple[str, int], ...]:
    """The columns of the job table; a NAMESPACE column first when ``namespace_width``."""
    cols = [*JOB_COLUMNS[:-1], *(WIDE_COLUMNS if wide else ()), JOB_COLUMNS[-1]]
    return (("NAMESPACE", namespace_width),) * bool(namespace_width) + tuple(cols)


def job_cells(j: JobInfo, now: datetime | None = None, *, wide: bool = False,
              namespace: bool = False) -> list[str]:
    o = j.observation
    cells = [str(j.job), str(j.submission), str(j.attempt), o.state.value,
             f"{o.pods_running}/{o.pods}", str(o.admissions), str(o.restarts),
             str(o.hold_instance) if o.hold_instance else "-", when(o.hold_until) or "-",
             age(j.created, now), *((j.ref.name, epoch_of(j), o.cluster or "-") if wide else ()),
             cause(o)]
    return [j.ref.namespace, *cells] if namespace else cells


def namespace_width(jobs: Iterable[JobInfo]) -> int:
    return max([len("NAMESPACE"), *(len(j.ref.namespace) for j in jobs)])


def job_table(jobs: Iterable[JobInfo], now: datetime | None = None, *, wide: bool = False,
              all_namespaces: bool = False, headers: bool = True) -> str:
    jobs = list(jobs)
    cols = job_columns(wide=wide,
                       namespace_width=namespace_width(jobs) if all_namespaces else 0)
    lines = [header(cols)] if headers else []
    lines += [row(job_cells(j, now, wide=wide, namespace=all_namespaces), cols) for j in jobs]
    return "\n".join(lines)


def job_name(j: JobInfo) -> str:
    return NAME_PREFIX + j.ref.name


def job_data(j: JobInfo) -> dict[str, Any]:
    """A listed job as plain data (the ``-o json|yaml`` form)."""
    o = j.observation
    return {
        "job": str(j.job), "submission": j.submission, "attempt": j.attempt,
        "ref": ref_data(j.ref), "created": when(j.created) or None,
        "state": o.state.value, "cause": {"reason": o.cause.reason, "detail": o.cause.detail},
        "hold": {"instance": o.hold_instance, "until": when(o.hold_until) or None},
        "admissions": o.admissions, "restarts": o.restarts, "pods": o.pods,
        "podsRunning": o.pods_running, "worker": o.cluster or None,
    }


def ref_data(ref: ObjectRef) -> dict[str, str]:
    return {"kind": ref.kind, "namespace": ref.namespace, "name": ref.name, "uid": ref.uid}


def dump(data: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2)
    return yaml.safe_dump(data, sort_keys=False).rstrip("\n")


EVENT_COLUMNS: tuple[tuple[str, int], ...] = (
    ("TIME", 20), ("TYPE", 7), ("REASON", 26), ("OBJECT", 60), ("NOTE", 0))


def event_row(e: JobEvent) -> str:
    note = " ".join(e.note.split())
    if e.count > 1:
        note += f" (x{e.count})"
    return row([when(e.time), e.type, e.reason, f"{e.regarding.kind}/{e.regarding.name}", note],
               EVENT_COLUMNS)


def capability_table(caps: Mapping[Any, CapabilityStatus]) -> str:
    columns = (("CAPABILITY", 16), ("VALUE", 7), ("SOURCE", 11), ("REASON", 0))
    lines = [header(columns)]
    # A reason may span lines (a server's message): one row each, or the table breaks.
    lines += [row([str(c), s.value.value, s.source.value, " ".join(s.reason.split())], columns)
              for c, s in caps.items()]
    return "\n".join(lines)


def report_lines(report: StopReport) -> list[str]:
    out = []
    for word, refs in (("stopped", report.stopped), ("alive", report.alive),
                       ("unproven", report.unproven)):
        # A nameless reference is a kind StopJob could not read: none of it was seen.
        out += [f"{word:<9}{r.kind}/{r.name or '* (not read)'}" for r in refs]
    return out


def identity(j: JobInfo) -> str:
    """The current execution's identity as its pods see it (A and J as observed)."""
    o = j.observation
    r = o.admissions + o.restarts
    return (f"A={o.admissions} J={o.restarts} R={r}  DISPATCH_ATTEMPT={j.job}.{j.submission}."
            f"{j.attempt}.{o.admissions}.{o.restarts}  DISPATCH_EPOCH={epoch_of(j)}")


def epoch_of(j: JobInfo) -> str:
    """DISPATCH_EPOCH of the current execution (``?`` past the identity's bounds)."""
    o = j.observation
    try:
        return str(epoch(j.submission, o.admissions + o.restarts, j.attempt))
    except ValueError:
        return "?"
