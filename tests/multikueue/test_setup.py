"""The three local clusters for MultiKueue (deploy/local/multikueue.sh, issue 30 item 1).

``make mk-test`` runs this with every MultiKueue test (about 4.5 minutes warm, 5 GB while
the three are up); ``make test`` runs the flow test alone (a cold CI run stays within its
budget). One test, in order: up (or the clusters
as they are); both workers joined, MultiKueue's check Active; up again changes no token;
each worker's dispatch-admission renews its permit in the manager; dispatch-admission's
identities across clusters have the rights the install page names and no more; a cut of
worker1 makes it unreachable from the manager and the manager from it, while its own API server and
worker2 still answer, the manager's Kueue marks it inactive and the manager's
dispatch-admission revokes its permit (worker2's renewed all along); the heal makes it
Active again and its permit is granted again and renewed; a forwarder-mode cut refuses at
once. The clusters are taken
down at the end unless they were up before, and then nothing of them may be left on the
machine.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pytest

from tests.multikueue.clusters import (
    CLUSTERS,
    STATE,
    active,
    kubectl,
    mk,
    permit,
    renewed,
    until,
)

pytestmark = [pytest.mark.machine]

def can(kubeconfig: str | Path, verb: str, what: str, ns: str | None = None) -> str:
    """``kubectl auth can-i`` as the kubeconfig's user: "yes" or "no" (anything else, such
    as an error reaching the API server, fails the test rather than counting as a no)."""
    where = ["-n", ns] if ns else ["-A"]
    out = kubectl(str(kubeconfig), "auth", "can-i", verb, what, *where)
    answer = out.stdout.strip()
    assert answer in ("yes", "no"), f"can-i {verb} {what}: {out.stdout!r} {out.stderr!r}"
    return answer


def least_privilege() -> None:
    """dispatch-admission's identities across clusters have the rights docs/multikueue.md's
    install steps 3 and 4 name, and none of the neighbouring ones: a worker's agent in the
    manager may renew its own permit only (never the other worker's, nor seize the manager's
    leader Lease) and get Workloads and TrainJobs; the manager's controller in a worker may
    list pods and nothing else."""
    for w, other in (("mk-worker1", "mk-worker2"), ("mk-worker2", "mk-worker1")):
        agent = f"/tmp/{w}-to-manager.kubeconfig"
        expected = {
            ("get", f"leases/dispatch-worker-{w}", "dispatch-system"): "yes",
            ("update", f"leases/dispatch-worker-{w}", "dispatch-system"): "yes",
            ("update", f"leases/dispatch-worker-{other}", "dispatch-system"): "no",
            ("update", "leases/dispatch-admission", "dispatch-system"): "no",
            ("create", "leases", "dispatch-system"): "no",
            ("get", "workloads.kueue.x-k8s.io", None): "yes",
            ("get", "trainjobs.trainer.kubeflow.org", None): "yes",
            ("list", "workloads.kueue.x-k8s.io", None): "no",
            ("patch", "trainjobs.trainer.kubeflow.org", None): "no",
            ("get", "secrets", None): "no",
            ("create", "pods", None): "no",
        }
        got = {k: can(agent, *k) for k in expected}
        assert got == expected, f"{w}'s agent in the manager"
        reader = STATE / "mk-manager" / "multikueue" / f"dispatch-{w}.kubeconfig"
        expected = {
            ("list", "pods", None): "yes",
            ("get", "pods", None): "no",
            ("delete", "pods", None): "no",
            ("list", "secrets", None): "no",
            ("get", "trainjobs.trainer.kubeflow.org", None): "no",
        }
        got = {k: can(reader, *k) for k in expected}
        assert got == expected, f"the manager's controller in {w}"
        clearing_is_limited(w)


def clearing_is_limited(worker: str) -> None:
    """The worker's controller may delete pods (RBAC cannot say which), and its policy
    admits only the delete of a dispatch pod carrying the fence: its own replica's delete,
    tried as a server-side dry run with the controller's identity, is refused by it."""
    cfg = f"/tmp/{worker}.kubeconfig"
    sa = "--as=system:serviceaccount:dispatch-system:dispatch-admission"
    assert kubectl(cfg, sa, "auth", "can-i", "delete", "pods", "-A").stdout.strip() == "yes"
    replica = kubectl(cfg, "-n", "dispatch-system", "get", "pods", "-l",
                      "app.kubernetes.io/name=dispatch-admission", "-o",
                      "jsonpath={.items[0].metadata.name}").stdout.strip()
    assert replica, f"no dispatch-admission replica in {worker}"
    out = kubectl(cfg, sa, "-n", "dispatch-system", "delete", "pod", replica,
                  "--dry-run=server")
    assert out.returncode != 0, f"{worker}: the controller may delete its own replica"
    assert "dispatch-admission-permit-clearing" in out.stderr, out.stderr


def test_three_clusters_join_cut_and_heal() -> None:
    was_up = all((STATE / c / "ready").exists() for c in CLUSTERS)
    try:
        mk("up")
        assert active("mk-worker1") == active("mk-worker2") == "True"
        assert "new token" not in mk("up"), "a second up must keep the workers' tokens"
        # dispatch-admission in its MultiKueue modes: each worker's replicas renew its
        # permit in the manager.
        for w in ("mk-worker1", "mk-worker2"):
            until(f"{w}'s permit renewed", functools.partial(renewed, w), 120)
        least_privilege()

        mk("cut", "worker1")
        to_manager = kubectl("/tmp/mk-worker1-to-manager.kubeconfig", "get", "--raw",
                             "/readyz")
        assert to_manager.returncode != 0, "worker1 still reaches the manager"
        assert kubectl("/tmp/mk-worker1.kubeconfig", "get", "nodes").returncode == 0, \
            "the cut must not touch worker1's own API server"
        assert kubectl("/tmp/mk-worker2-to-manager.kubeconfig", "get", "--raw",
                       "/readyz").returncode == 0, "worker2 was cut too"
        noticed = until("mk-worker1 inactive", lambda: active("mk-worker1") == "False", 240)
        print(f"\nKueue marked mk-worker1 inactive {noticed:.0f} s after the cut")
        # Silent for the manager's wait (61.2 s for a 60 s permit): revoked; worker2's, renewed
        # all along, is not.
        revoked = until("mk-worker1's permit revoked",
                        lambda: permit("mk-worker1")["revoked"] == "True", 180)
        print(f"dispatch-admission revoked mk-worker1's permit {noticed + revoked:.0f} s "
              "after the cut")
        before = permit("mk-worker2")
        assert before["revoked"] == "False"
        until("mk-worker2's permit renewed again",
              lambda: permit("mk-worker2")["version"] != before["version"], 60)

        mk("heal", "worker1")
        until("mk-worker1 Active again", lambda: active("mk-worker1") == "True", 120)
        # No dispatch pod there: granted again, and its replicas renew it again.
        granted = until("mk-worker1's permit granted and renewed",
                        lambda: renewed("mk-worker1"), 120)
        print(f"mk-worker1's permit granted again and renewed {granted:.0f} s after the heal")
        mk("cut", "worker2", env={"MK_CUT_MODE": "forwarder"})
        refused = subprocess.run(["curl", "-sk", "-m", "5", "https://127.0.0.1:17193/readyz"],
                                 capture_output=True, text=True, timeout=30)
        assert refused.returncode == 7, f"curl rc {refused.returncode}: not refused"
        mk("heal", "worker2")
    finally:
        if not was_up:
            mk("down")
    if not was_up:
        firewall = subprocess.run(["iptables", "-S"], capture_output=True, text=True)
        assert "DISPATCH-mk" not in firewall.stdout
        assert not any((STATE / c).exists() for c in CLUSTERS)
        assert not list(Path("/tmp").glob("mk-*.kubeconfig"))
