"""up.sh and down.sh, twice in a row, leave the machine as it was.

This test starts and stops a cluster of its own (named ``dkm``, on ports and a subnet of its
own, so another local cluster may run beside it); ``make test`` runs it first, alone
(``pytest -m machine``), so that the machine-wide settings are seen restored too.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest

from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.helpers import Obj, eventually, make_queues, pod_log, pods_of, trainjob

pytestmark = [pytest.mark.machine, pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[2]
NAME = "dkm"
STATE = Path("/var/lib/dispatch-local") / NAME
RUN = Path("/run/dispatch-local") / NAME


def _free_prefix() -> str:
    """A node subnet no address or route of this machine is in: a cluster left running (or
    its bridge left behind) on the first choice must not fail this test (it once did)."""
    taken = subprocess.run(["bash", "-c", "ip -4 -o addr show; ip -4 route show"],
                           capture_output=True, text=True, check=True).stdout
    for second in range(245, 255):
        if f"10.{second}." not in taken:
            return f"10.{second}"
    raise RuntimeError(f"no free 10.245-10.254 subnet on this machine:\n{taken}")


PREFIX = _free_prefix()
# Ports and addresses of its own: see deploy/local/lib.sh.
ENV = {**os.environ, "ETCD_PORT": "32379", "APISERVER_PORT": "36443", "KCM_PORT": "30257",
       "SCHED_PORT": "30259", "JOBSET_WEBHOOK_PORT": "31443", "KUEUE_WEBHOOK_PORT": "32443",
       "TRAINER_WEBHOOK_PORT": "33443", "JOBSET_HEALTH_PORT": "31081",
       "KUEUE_HEALTH_PORT": "32081", "TRAINER_HEALTH_PORT": "33081",
       "TRAINER_STATUS_PORT": "33444", "NODE_SUBNET_PREFIX": PREFIX}


def machine_snapshot() -> dict[str, object]:
    """What a cluster may change: processes, mounts, links, iptables chains, sysctls, dirs."""
    def sh(cmd: str) -> str:
        done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=False)
        return done.stdout

    mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
    bridge = sh(f". {REPO}/deploy/local/lib.sh; bridge_name {NAME} ''").strip()
    return {
        # This cluster's processes: everything that names its directories or ports.
        "processes": sorted(sh(
            f"pgrep -a -f '{STATE}|{RUN}|{PREFIX.replace('.', '[.]')}[.]|:36443' | grep -v pgrep "
            "| awk '{print $2}'").split()),
        "mounts": sorted(m for m in (line.split()[4] for line in mountinfo)
                         if m.startswith((str(STATE), str(RUN), "/run/netns"))),
        "links": sorted(link for link in sh("ip -o link show | awk -F': ' '{print $2}'").split()
                        if link.startswith(bridge)),
        "chains": sorted(sh("for t in filter nat mangle; do iptables -t $t -S 2>/dev/null | "
                            "grep '^-N'; done").splitlines()),
        "sysctls": {k: Path(f"/proc/sys/{k.replace('.', '/')}").read_text().strip()
                    for k in ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops",
                              "net.ipv4.ip_forward")},
        "routes": sorted(line for line in sh("ip -4 route show").splitlines()
                         if f"{PREFIX}." in line),
        "dirs": {d: os.path.exists(d) for d in ("/var/lib/kubelet", "/var/lib/cni",
                                                 "/var/log/containers", "/var/log/pods",
                                                 "/var/lib/dispatch-local", "/run/dispatch-local",
                                                 "/run/netns")},
        "netns": sorted(sh("ip netns list | awk '{print $1}'").split()),
    }


def host_forwarding() -> str:
    return Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()


def listening_outside() -> list[str]:
    """Sockets of this cluster's host processes that listen anywhere but loopback and the
    nodes' bridge (the nodes' own processes are in their namespaces, off the host's)."""
    pids = {p.read_text().strip() for p in (STATE / "pids").iterdir()}
    done = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True)
    bad = []
    for line in done.stdout.splitlines():
        fields = line.split()
        local, users = fields[3], " ".join(fields[5:])
        if not any(f"pid={pid}," in users for pid in pids):
            continue
        if local.rsplit(":", 1)[0] not in ("127.0.0.1", f"{PREFIX}.0.1"):
            bad.append(line)
    return bad


def pod_netns_mounts() -> tuple[list[str], list[str]]:
    """Network-namespace mounts of pods: (this cluster's, the machine's /run/netns cni-*)."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if " nsfs " in line]
    return ([m for m in mounts if m.startswith(f"{RUN}/")],
            [m for m in mounts if m.startswith("/run/netns/cni-")])


async def run_one_job(kubeconfig: str) -> None:
    async with await Kube.connect(kubeconfig=kubeconfig, request_timeout=30) as kube:
        ns = "machine"
        await kube.create(r.NAMESPACE, {"metadata": {"name": ns}})
        await make_queues(kube, ns)
        # Long enough for the pods' sandboxes to be seen.
        await kube.create(r.TRAINJOB, trainjob("m", "sleep 5; echo machine-ok"), ns)

        async def running() -> bool:
            pods = await pods_of(kube, ns, "m")
            return len([p for p in pods if p["status"].get("phase") == "Running"]) == 2

        await eventually(running, 180, "the job's two pods running")
        # Each pod's network namespace lives below this cluster's own run directory, so
        # that down.sh of another cluster on the machine never removes it (it once did).
        own, machine_wide = pod_netns_mounts()
        assert len(own) >= 2, own
        assert machine_wide == []

        async def done() -> list[Obj] | None:
            pods = await pods_of(kube, ns, "m")
            ok = [p for p in pods if p["status"].get("phase") == "Succeeded"]
            return ok if len(ok) == 2 else None

        pods = await eventually(done, 180, "the job's pods succeeded")
        assert await pod_log(kube, ns, pods[0]["metadata"]["name"]) == "machine-ok\n"


@pytest.mark.skipif(bool(os.environ.get("KUBECONFIG")), reason="runs the local cluster itself")
def test_up_run_down_twice_leaves_the_machine_as_it_was(tmp_path: Path) -> None:
    before = machine_snapshot()
    forwarding_before = host_forwarding()
    for round_ in (1, 2):
        kubeconfig = tmp_path / f"{NAME}-{round_}.kubeconfig"
        subprocess.run([str(REPO / "deploy/local/up.sh"), NAME, str(kubeconfig)], check=True,
                       env=ENV)
        try:
            during = machine_snapshot()
            assert during["processes"]
            assert during["links"]
            assert during["mounts"]
            assert during["routes"], "no route to the nodes' pods"
            # The host forwards nothing; the nodes forward in their own namespaces.
            assert host_forwarding() == forwarding_before, "the host's forwarding changed"
            assert listening_outside() == []
            # A second up.sh with the cluster running returns quickly and changes nothing.
            subprocess.run([str(REPO / "deploy/local/up.sh"), NAME, str(kubeconfig)], check=True,
                           timeout=20, env=ENV)
            assert machine_snapshot()["processes"] == during["processes"]
            asyncio.run(run_one_job(str(kubeconfig)))
        finally:
            subprocess.run([str(REPO / "deploy/local/down.sh"), NAME], check=True, env=ENV)
        time.sleep(0.5)
        after = machine_snapshot()
        assert not STATE.exists()
        assert not kubeconfig.exists(), "down.sh left the kubeconfig up.sh wrote"
        assert after == before, f"round {round_}: the machine changed"
