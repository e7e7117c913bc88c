"""The scale benchmark's figures of processes: peak RSS and CPU seconds from /proc, sampled
on a thread, and the API server's open watches from its metrics."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import resource
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

STATE_ROOT = Path(os.environ.get("DISPATCH_STATE_ROOT", "/var/lib/dispatch-local"))


def peak_rss_mb() -> float:
    """This process's peak RSS so far, MB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cgroup(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return ""


def cluster_pids(cluster: str | None) -> dict[str, list[int]]:
    """name -> pids: this process (the observer and the floor's approver; the clients run in
    processes of their own, :func:`in_own_process`), the controller's replicas, and the local
    cluster's kube-apiserver, etcd and Kueue (from its pid files)."""
    out: dict[str, list[int]] = {"bench (observer, approver)": [os.getpid()]}
    ctl = subprocess.run(["pgrep", "-f", "bin/dispatch-admission --namespace"],
                         capture_output=True, text=True, check=False).stdout.split()
    # Both replicas (pods), on this cluster's nodes only: their cgroups name the node.
    out["controller (per replica)"] = [
        int(p) for p in ctl if not cluster or f"/dispatch-{cluster}-" in _cgroup(int(p))]
    if cluster:
        for name in ("kube-apiserver", "etcd", "kueue"):
            f = STATE_ROOT / cluster / "pids" / name
            with contextlib.suppress(OSError, ValueError):
                out[name] = [int(f.read_text())]
    return out


class Sampler:
    """Peak RSS (of the largest process of each name) and CPU seconds used (all of its
    processes), sampled from /proc on a thread so a busy event loop cannot skew it."""

    def __init__(self, pids: Mapping[str, list[int]]) -> None:
        self.pids = pids
        self.peak: dict[str, float] = dict.fromkeys(pids, 0.0)
        self._cpu0 = {n: self._cpu(ps) for n, ps in pids.items()}
        self.cpu: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _cpu(pids: list[int]) -> float:
        total = 0.0
        for p in pids:
            with contextlib.suppress(OSError):
                total += _cpu_s(p)
        return total

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            for name, pids in self.pids.items():
                for p in pids:
                    with contextlib.suppress(OSError):
                        self.peak[name] = max(self.peak[name], _rss_mb(p))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.cpu = {n: self._cpu(ps) - self._cpu0[n] for n, ps in self.pids.items()}


def kubectl() -> str:
    found = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if found:
        return found
    bins = sorted((Path.home() / ".cache/dispatch-kubeflow/bin").glob("kubectl-*"))
    if not bins:
        sys.exit("no kubectl: set KUBECTL")
    return str(bins[-1])


async def get_raw(path: str) -> tuple[int, bytes, bytes]:
    """``kubectl get --raw PATH``: its exit code, output and error."""
    proc = await asyncio.create_subprocess_exec(
        kubectl(), "get", "--raw", path, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    return proc.returncode or 0, out, err


LABEL = re.compile(r'(\w+)="([^"]*)"')
"""One label of a metric's line: name="value"."""


async def watch_count() -> dict[str, int]:
    """The API server's open watches by resource (its long-running WATCH requests)."""
    _, out, _ = await get_raw("/metrics")
    counts: dict[str, int] = {}
    for line in out.decode().splitlines():
        if not line.startswith("apiserver_longrunning_requests{"):
            continue
        labels, value = line.rsplit(" ", 1)
        label = dict(LABEL.findall(labels))
        if label.get("verb") == "WATCH":
            res = label.get("resource", "")
            counts[res] = counts.get(res, 0) + int(float(value))
    return counts


WATCH_PERIOD_S = 5.0
"""How often :class:`WatchPeak` reads the API server's metrics. Each read costs the API
server a render of all its metrics (about 55 ms of its CPU at N = 1,000, 10 % of it when
read every second, in its profile of 2026-12-07) and the machine a kubectl: a load the
phases must share alike, and small."""


class WatchPeak:
    """Peak open watches, read from the metrics every ``period`` seconds while running."""

    def __init__(self, period: float = WATCH_PERIOD_S) -> None:
        self.peak: dict[str, int] = {}
        self.period = period
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            for res, n in (await watch_count()).items():
                self.peak[res] = max(self.peak.get(res, 0), n)
            await asyncio.sleep(self.period)

    def __enter__(self) -> WatchPeak:
        self._task = asyncio.create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
