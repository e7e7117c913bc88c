"""up.sh and down.sh, twice in a row, leave the machine as it was.

This test starts and stops a cluster of its own (named ``dkm``), so it runs alone:
``pytest -m machine`` (``make test`` runs it before the other cluster tests).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.helpers import eventually, make_queues, pod_log, pods_of, trainjob

pytestmark = [pytest.mark.machine, pytest.mark.cluster, pytest.mark.asyncio(loop_scope="session")]

REPO = Path(__file__).resolve().parents[2]
NAME = "dkm"


def machine_snapshot() -> dict[str, object]:
    """What a cluster may change: processes, mounts, links, iptables chains, sysctls, dirs."""
    def sh(cmd: str) -> str:
        return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=False).stdout

    return {
        "processes": sorted(sh(
            "pgrep -a -f 'kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|containerd|"
            "etcd --name|jobset-v|kueue-v|trainer-v' | grep -v pgrep | awk '{print $2}'").split()),
        "mounts": sorted(line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()),
        "links": sorted(sh("ip -o link show | awk -F': ' '{print $2}'").split()),
        "chains": sorted(sh("for t in filter nat mangle; do iptables -t $t -S 2>/dev/null | "
                            "grep '^-N'; done").splitlines()),
        "sysctls": {k: Path(f"/proc/sys/{k.replace('.', '/')}").read_text().strip()
                    for k in ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops")},
        "dirs": {d: os.path.exists(d) for d in ("/var/lib/kubelet", "/var/lib/cni",
                                                 "/var/log/containers", "/var/log/pods",
                                                 "/var/lib/dispatch-local", "/run/dispatch-local")},
        "netns": sorted(sh("ip netns list | awk '{print $1}'").split()),
    }


async def run_one_job(kubeconfig: str) -> None:
    async with await Kube.connect(kubeconfig=kubeconfig, request_timeout=30) as kube:
        ns = "machine"
        await kube.create(r.NAMESPACE, {"metadata": {"name": ns}})
        await make_queues(kube, ns)
        await kube.create(r.TRAINJOB, trainjob("m", "echo machine-ok"), ns)

        async def done() -> list | None:
            pods = await pods_of(kube, ns, "m")
            ok = [p for p in pods if p["status"].get("phase") == "Succeeded"]
            return ok if len(ok) == 2 else None

        pods = await eventually(done, 180, "the job's pods succeeded")
        assert await pod_log(kube, ns, pods[0]["metadata"]["name"]) == "machine-ok\n"


@pytest.mark.skipif(bool(os.environ.get("KUBECONFIG")), reason="runs the local cluster itself")
async def test_up_run_down_twice_leaves_the_machine_as_it_was(tmp_path: Path) -> None:
    before = machine_snapshot()
    state = Path("/var/lib/dispatch-local") / NAME
    for round_ in (1, 2):
        kubeconfig = tmp_path / f"{NAME}-{round_}.kubeconfig"
        subprocess.run([str(REPO / "deploy/local/up.sh"), NAME, str(kubeconfig)], check=True)
        try:
            during = machine_snapshot()
            assert during["sysctls"] != before["sysctls"] or during["processes"] != before["processes"]
            # A second up.sh with the cluster running returns quickly and changes nothing.
            subprocess.run([str(REPO / "deploy/local/up.sh"), NAME, str(kubeconfig)], check=True,
                           timeout=20)
            await run_one_job(str(kubeconfig))
        finally:
            subprocess.run([str(REPO / "deploy/local/down.sh"), NAME], check=True)
        await asyncio.sleep(0.5)
        after = machine_snapshot()
        assert not state.exists()
        assert after == before, f"round {round_}: the machine changed"
