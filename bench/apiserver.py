"""What the API server did during a phase: its requests by verb and resource (from
``apiserver_request_total``, read before and after), and, with ``--apiserver-profile``, a
CPU profile of it taken while the phase's decisions flow (issue 28 item 3: where the
decision's time goes on a saturated API server).

The profile needs the API server's ``--profiling=true`` (the local cluster:
``APISERVER_PROFILING=true make cluster-up``); without it the phase says so and goes on.
It is read by ``go tool pprof`` when ``go`` is on the PATH, else kept for later."""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter
from pathlib import Path

from sampler import LABEL, get_raw


async def request_counts() -> Counter[str]:
    """Every request the API server has served since it started (:func:`parse_counts`)."""
    rc, out, err = await get_raw("/metrics")
    if rc:
        raise RuntimeError(f"kubectl get --raw /metrics: {err.decode().strip()}")
    return parse_counts(out.decode())


def parse_counts(metrics: str) -> Counter[str]:
    """``apiserver_request_total`` of the API server's metrics, by "VERB resource"
    (subresources apart: "PATCH workloads/status"), those it refused apart by their code
    ("POST workloads 409"), dry runs apart ("POST workloads dry-run": Kueue's TrainJob
    integration creates a throwaway Workload so, about 15 a job)."""
    counts: Counter[str] = Counter()
    for line in metrics.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, value = line.rsplit(" ", 1)
        label = dict(LABEL.findall(labels))
        sub = label.get("subresource")
        code = label.get("code", "")
        refused = f" {code}" if code and not code.startswith("2") else ""
        dry = " dry-run" if label.get("dry_run") else ""
        res = label.get("resource", "") + (f"/{sub}" if sub else "")
        counts[f"{label.get('verb', '')} {res}{dry}{refused}"] += int(float(value))
    return counts


async def profile(seconds: int, out: Path) -> str:
    """A CPU profile of the API server over ``seconds``, written to ``out``; its top
    functions by cumulative time (``go tool pprof -top -cum``), or why there is none."""
    rc, data, err = await get_raw(f"/debug/pprof/profile?seconds={seconds}")
    if rc:
        return (f"no profile ({err.decode().strip()}); the API server needs --profiling=true "
                "(APISERVER_PROFILING=true make cluster-up)")
    await asyncio.to_thread(out.write_bytes, data)
    go = shutil.which("go")
    if go is None:
        return f"profile written to {out} (no go on the PATH to read it)"
    proc = await asyncio.create_subprocess_exec(
        go, "tool", "pprof", "-top", "-cum", "-nodecount=40", str(out),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    text, _ = await proc.communicate()
    return f"profile written to {out}\n" + text.decode()
