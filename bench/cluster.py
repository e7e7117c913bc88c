"""Benchmark of the local cluster: prints, side by side with the goals,

- the cold build time of each component (recorded by deploy/local/build.sh),
- the warm ``up.sh`` time to ready (the cache warm, the cluster down), the in-cluster
  admission controller rolled out and leading,
- pod create -> Running, over several pods,
- the RSS of each process of the idle cluster (three nodes; the pods' processes, the
  controller's two replicas among them, counted per node), and their sum.

Each figure is printed beside its goal and beside the figure recorded for the previous
layout (two workers on host bridges, the controller a host process; docs/local-cluster.md
at commit 131083c), which can no longer be started from this tree.

Run as root: ``python bench/cluster.py [--name dkb] [--pods 5]``. It starts a cluster of
its own and stops it again; the ports are the defaults, so no other local cluster may run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("DISPATCH_CACHE",
                            Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                            / "dispatch-kubeflow"))
STATE_ROOT = Path(os.environ.get("DISPATCH_STATE_ROOT", "/var/lib/dispatch-local"))
GOAL_WARM_UP_S = 60.0
GOAL_IDLE_RSS_MB = 1800.0
# Recorded by this script for the previous layout (no controller in the cluster).
BEFORE = {"warm": 22.5, "pod_median": 0.67, "pod_max": 0.83, "rss": 1160.0}


def cold_builds() -> None:
    f = CACHE / "build-times.tsv"
    print("cold build (seconds, 2 cores, as recorded when each was built):")
    if not f.exists():
        print("  no record (the binaries came from elsewhere)")
        return
    latest: dict[str, int] = {}
    for line in f.read_text().splitlines():
        name, secs, _ = line.split("\t")
        latest[name] = int(secs)
    for name, seconds in latest.items():
        print(f"  {name:<26}{seconds:>6}")
    print(f"  {'total':<26}{sum(latest.values()):>6}")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cluster_processes(name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for pidfile in sorted((STATE_ROOT / name / "pids").iterdir()):
        try:
            out[pidfile.name] = rss_mb(int(pidfile.read_text()))
        except (OSError, ValueError):
            continue
    shims = subprocess.run(["pgrep", "-f", f"containerd-shim.*/run/dispatch-local/{name}/"],
                           capture_output=True, text=True, check=False).stdout.split()
    out["pod shims"] = sum(rss_mb(int(p)) for p in shims)
    # The pods' own processes: everything in a node's cgroup (the kubelet puts pods there).
    for node in (f"{name}-control-plane", f"{name}-worker", f"{name}-worker2"):
        root = Path(f"/sys/fs/cgroup/memory/dispatch-{node}")
        pids = {int(pid) for procs in root.rglob("cgroup.procs")
                for pid in procs.read_text().split()} if root.exists() else set()
        out[f"pods on {node}"] = sum(rss_mb(pid) for pid in pids if Path(f"/proc/{pid}").exists())
    return out


async def pod_start_times(kubeconfig: str, count: int) -> list[float]:
    times = []
    async with await Kube.connect(kubeconfig=kubeconfig, request_timeout=30) as kube:
        ns = "bench"
        await kube.create(r.NAMESPACE, {"metadata": {"name": ns}})
        # Pods need the namespace's default ServiceAccount, which a controller adds.
        sa = r.SERVICE_ACCOUNT
        async for ev in kube.watch(sa, ns, field_selector="metadata.name=default"):
            if ev.type == "ADDED":
                break
        for i in range(count):
            t0 = time.monotonic()
            await kube.create(r.POD, {"metadata": {"name": f"p{i}"}, "spec": {
                "containers": [{"name": "c", "image": "localhost/dispatch-busybox:kind",
                                "imagePullPolicy": "IfNotPresent",
                                "command": ["/bin/sh", "-c", "sleep 3600"]}],
                "terminationGracePeriodSeconds": 0}}, ns)
            async for ev in kube.watch(r.POD, ns, field_selector=f"metadata.name=p{i}"):
                if ev.object.get("status", {}).get("phase") == "Running":
                    break
            times.append(time.monotonic() - t0)
            await kube.delete(r.POD, f"p{i}", ns, grace_period=0)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="dkb")
    ap.add_argument("--pods", type=int, default=5)
    args = ap.parse_args()
    kubeconfig = f"/tmp/{args.name}.kubeconfig"
    cold_builds()
    subprocess.run([str(REPO / "deploy/local/build.sh")], check=True)
    subprocess.run([str(REPO / "deploy/local/down.sh"), args.name], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    subprocess.run([str(REPO / "deploy/local/up.sh"), args.name, kubeconfig], check=True)
    warm = time.monotonic() - t0
    try:
        starts = asyncio.run(pod_start_times(kubeconfig, args.pods))
        time.sleep(10)  # let the controllers settle to idle
        rss = cluster_processes(args.name)
    finally:
        subprocess.run([str(REPO / "deploy/local/down.sh"), args.name], check=True)
    print(f"\n{'measure':<34}{'now':>10}{'before':>10}{'goal':>12}")
    print(f"{'warm up.sh to ready (s)':<34}{warm:>10.1f}{BEFORE['warm']:>10.1f}"
          f"{'<= ' + str(GOAL_WARM_UP_S):>12}")
    print(f"{'pod create -> Running, median (s)':<34}{statistics.median(starts):>10.2f}"
          f"{BEFORE['pod_median']:>10.2f}")
    print(f"{'pod create -> Running, max (s)':<34}{max(starts):>10.2f}{BEFORE['pod_max']:>10.2f}")
    print("\nidle RSS (MB):")
    for name, mb in rss.items():
        print(f"  {name:<32}{mb:>10.0f}")
    total = sum(rss.values())
    print(f"  {'total':<32}{total:>10.0f}{BEFORE['rss']:>10.0f}"
          f"{'<= ' + str(int(GOAL_IDLE_RSS_MB)):>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
