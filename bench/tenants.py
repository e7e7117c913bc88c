"""Other tenants: the controller beside another team's Workloads, side by side with the same
run without them (issue 28, item 1).

Three steps on one cluster, in one run:

1. **alone**: N two-node dispatch jobs through one Backend and the controller (the dispatch
   phase of ``scale.py``), its decisions timed by the observer, the controller's RSS sampled.
2. **foreign**: F Workloads of another team in a namespace and ClusterQueue of their own
   (no dispatch check, no quota: they stay pending forever), each with a 1.5 KB command in
   its pod set, as a batch team's are. Half carry Kueue's ``kueue.x-k8s.io/job-uid`` label
   (as Workloads Kueue makes for batch Jobs do, so they pass the controller's watch and meet
   its index), half are bare. The controller's RSS is read once they are all made and the
   controller had ``--settle`` seconds to take them in.
3. **beside**: the same N dispatch jobs again, with the F foreign Workloads still there.

With ``--floor`` the scale benchmark's floor runs between 1 and 2, before any foreign
Workload exists, and with ``--fenced-floor`` its fenced floor after 3, the foreign Workloads
deleted first; ``scale.py``'s table sets the alone phase beside each. One run then answers
issue 28's items 1 to 3 (the tenants; StopJob of N at once and the client's memory beside
the floor; the decision beside the floor and the fenced floor), where a tenants run and a
scale run took a second alone phase (about 30 minutes at N = 1,000).

Printed: the controller's RSS (both replicas, the larger) idle, after the foreign ones,
and at each phase's peak; the decision latency p50/p90/p99 of both phases and their ratio.
The goals: RSS <= 150 MB beside 10,000 foreign Workloads and 1,000 jobs; p99 beside within
1.2x of p99 alone. Needs what ``scale.py`` needs (``KUBECONFIG``, the local cluster)::

    python bench/tenants.py --jobs 200 --foreign 10000 --cluster dk

Everything it makes (two namespaces a phase, the foreign namespace and ClusterQueue) is
deleted at the end, also when interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
import uuid

from bare import FLOOR_CHECK, FLOOR_CONTROLLER, floor_check
from fenced import FENCED_CHECK, FENCED_CONTROLLER
from phases import Phase, dispatch_phase, floor_phase
from queues import drop_queue
from sampler import Sampler, cluster_pids
from tables import pct, ratio, table

from dispatch_kubeflow.core import names
from dispatch_kubeflow.errors import DispatchError
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

COMMAND = "x" * 1500
"""A batch job's command line, as the issue measured (1.5 KB a Workload)."""


def foreign_workload(i: int, labelled: bool) -> dict[str, object]:
    labels = {names.KUEUE_JOB_UID_LABEL: uuid.uuid4().hex} if labelled else {}
    return {
        "metadata": {"name": f"batch-{i:05d}", "labels": labels},
        "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 1, "template": {
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "registry.example/batch:1",
                "command": ["/bin/sh", "-c", COMMAND],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}}]},
    }


async def make_foreign(kube: Kube, ns: str, count: int) -> float:
    """The other team's namespace, queue (no check, no quota) and ``count`` Workloads;
    seconds it took."""
    began = time.monotonic()
    await kube.create(r.NAMESPACE, {"metadata": {"name": ns, "labels": {"bench": "tenants"}}})
    await kube.create(r.CLUSTER_QUEUE, {"metadata": {"name": ns}, "spec": {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
            "name": "default-flavor", "resources": [
                {"name": "cpu", "nominalQuota": "0"},
                {"name": "memory", "nominalQuota": "0"}]}]}]}})
    await kube.create(r.LOCAL_QUEUE, {"metadata": {"name": "lq"},
                                      "spec": {"clusterQueue": ns}}, ns)
    sem = asyncio.Semaphore(32)

    async def one(i: int) -> None:
        async with sem:
            await kube.create(r.WORKLOAD, foreign_workload(i, labelled=i % 2 == 0), ns)

    await asyncio.gather(*(one(i) for i in range(count)))
    return time.monotonic() - began


def controller_mb(pids: dict[str, list[int]]) -> float:
    """The larger replica's RSS now (MB)."""
    with Sampler({"c": pids.get("controller (per replica)", [])}) as s:
        time.sleep(0.6)
    return s.peak["c"]


def report(alone: Phase, beside: Phase, idle_mb: float, foreign_mb: float, foreign: int,
           made_s: float) -> None:
    key = "controller (per replica)"
    print(f"\nOther tenants: {foreign:,} foreign Workloads (made in {made_s:.0f} s), "
          f"N = {alone.n} dispatch jobs in each phase\n")
    print("| controller RSS, MB (larger replica) | value |")
    print("|---|---:|")
    print(f"| idle, before anything | {idle_mb:.0f} |")
    print(f"| peak, N jobs alone | {alone.peak_rss.get(key, float('nan')):.0f} |")
    print(f"| after {foreign:,} foreign Workloads | {foreign_mb:.0f} |")
    print(f"| peak, N jobs beside them | {beside.peak_rss.get(key, float('nan')):.0f} |")
    print("\n| decision latency, ms | alone | beside foreign | ratio |")
    print("|---|---:|---:|---:|")
    for p in (50, 90, 99):
        a, b = pct(alone.decisions_ms, p), pct(beside.decisions_ms, p)
        print(f"| p{p} | {a:.0f} | {b:.0f} | {ratio(b, a)} |")
    print(f"| decisions seen | {len(alone.decisions_ms)} | {len(beside.decisions_ms)} | |")
    print(f"| jobs lost / failed | {alone.lost} / {alone.failed} | "
          f"{beside.lost} / {beside.failed} | |")


async def floor_run(kubeconfig: str, admin: Kube, a: argparse.Namespace,
                    pids: dict[str, list[int]], tag: str, *, fenced: bool) -> Phase:
    """One of the scale benchmark's floors over ``a.jobs`` jobs, its AdmissionCheck made for
    it and removed after."""
    check = (FENCED_CHECK, FENCED_CONTROLLER) if fenced else (FLOOR_CHECK, FLOOR_CONTROLLER)
    await floor_check(admin, True, *check)
    try:
        return await floor_phase(kubeconfig, admin, a.jobs, a.quota, pids, tag, fenced=fenced)
    finally:
        await floor_check(admin, False, check[0])


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=200, help="N dispatch jobs in each phase")
    ap.add_argument("--foreign", type=int, default=10_000, help="the other team's Workloads")
    ap.add_argument("--quota", type=int, default=10, help="jobs the ClusterQueue admits at once")
    ap.add_argument("--settle", type=float, default=30.0,
                    help="seconds the controller gets to take the foreign Workloads in")
    ap.add_argument("--cluster", default="dk", help="the local cluster (its processes' figures)")
    ap.add_argument("--floor", action="store_true",
                    help="the scale benchmark's floor after the alone phase, its table beside it")
    ap.add_argument("--fenced-floor", action="store_true",
                    help="last the fenced floor (bench/fenced.py), beside the alone phase")
    a = ap.parse_args()
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        sys.exit("set KUBECONFIG to the cluster to measure")
    tag = uuid.uuid4().hex[:6]
    foreign_ns = f"tenant-{tag}"
    admin = await Kube.connect(kubeconfig=kubeconfig, request_timeout=30)
    try:
        pids = cluster_pids(a.cluster)
        if not pids.get("controller (per replica)"):
            sys.exit(f"no controller process of cluster {a.cluster} found")
        idle = controller_mb(pids)
        alone = await dispatch_phase(kubeconfig, admin, a.jobs, a.quota, pids, f"{tag}a")
        # Each phase's figures as soon as it ends: a later phase that fails loses no run.
        print(f"alone: N = {a.jobs}, decision p50/p99 {pct(alone.decisions_ms, 50):.0f}/"
              f"{pct(alone.decisions_ms, 99):.0f} ms, controller peak "
              f"{alone.peak_rss.get('controller (per replica)', float('nan')):.0f} MB, "
              f"lost/failed {alone.lost}/{alone.failed} (idle before: {idle:.0f} MB)",
              flush=True)
        # The minimal floor before any foreign Workload: it stands beside the alone phase.
        if a.floor:
            table(alone, await floor_run(kubeconfig, admin, a, pids, tag, fenced=False))
        made = await make_foreign(admin, foreign_ns, a.foreign)
        await asyncio.sleep(a.settle)
        after = controller_mb(pids)
        print(f"{a.foreign:,} foreign Workloads made in {made:.0f} s; controller "
              f"{after:.0f} MB {a.settle:.0f} s later", flush=True)
        beside = await dispatch_phase(kubeconfig, admin, a.jobs, a.quota, pids, f"{tag}b")
        report(alone, beside, idle, after, a.foreign, made)
        if a.fenced_floor:
            # Last, with the foreign Workloads gone again: items 1 and 2 come first.
            await drop_queue(admin, foreign_ns)
            table(alone, await floor_run(kubeconfig, admin, a, pids, tag, fenced=True))
    finally:
        with contextlib.suppress(DispatchError):
            await drop_queue(admin, foreign_ns)
        await admin.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
