"""The local MultiKueue clusters (deploy/local/multikueue.sh) as the tests reach them: the
script, the clusters' names and kubeconfigs, kubectl, and a wait."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.cluster.admission_fixture import kubectl_binary
from tests.conftest import REPO

SCRIPT = REPO / "deploy" / "local" / "multikueue.sh"
STATE = Path(os.environ.get("DISPATCH_STATE_ROOT", "/var/lib/dispatch-local"))
CLUSTERS = ("mk-manager", "mk-worker1", "mk-worker2")


def mk(*args: str, env: dict[str, str] | None = None, timeout: float | None = None) -> str:
    # up on a fresh machine builds every component first (about 20 minutes; CI's cluster
    # tests have built them by the time they run this).
    timeout = timeout or (2400 if args[:1] == ("up",) else 900)
    done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    assert done.returncode == 0, f"multikueue.sh {' '.join(args)}:\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def kubectl(kubeconfig: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([kubectl_binary(), "--kubeconfig", kubeconfig,
                           "--request-timeout", "5s", *args], capture_output=True, text=True,
                          timeout=timeout)


def up() -> bool:
    """Whether the three clusters were up before the test."""
    return all((STATE / c / "ready").exists() for c in CLUSTERS)


def kubeconfig(cluster: str) -> str:
    return f"/tmp/{cluster}.kubeconfig"


def until(what: str, check: Callable[[], bool], seconds: float) -> float:
    """Seconds until ``check()`` is true; fails after ``seconds``."""
    began = time.monotonic()
    while not check():
        assert time.monotonic() - began < seconds, f"{what} not within {seconds:.0f} s"
        time.sleep(2)
    return time.monotonic() - began
