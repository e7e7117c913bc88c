"""The cluster's fixtures.

Cluster tests (marked ``cluster``) run against the cluster named by ``$KUBECONFIG`` when it
is set, and otherwise against the local cluster, which the session starts with
``deploy/local/up.sh`` (building what is missing) and stops at the end unless it was
already running before the session. The ``admission`` fixture and its helpers are
tests/cluster/admission_fixture.py's.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.admission_fixture import (  # noqa: F401 (fixtures, found by name)
    _admission_turn,
    _deployment_restored,
    _host_controller_paused,
    a_policy_in_force,
    admission,
    admission_base,
)
from tests.cluster.helpers import STATE_ROOT
from tests.conftest import LOCAL_CLUSTER, LOCAL_KUBECONFIG, REPO


def _local_cluster_up() -> bool:
    state = STATE_ROOT / LOCAL_CLUSTER
    return (state / "ready").exists()


@pytest.fixture(scope="session")
def kubeconfig() -> Iterator[str]:
    """A kubeconfig path: $KUBECONFIG, or the local cluster (started here if needed)."""
    given = os.environ.get("KUBECONFIG")
    if given:
        yield given
        return
    was_up = _local_cluster_up()
    subprocess.run([str(REPO / "deploy/local/up.sh"), LOCAL_CLUSTER, str(LOCAL_KUBECONFIG)],
                   check=True)
    try:
        yield str(LOCAL_KUBECONFIG)
    finally:
        if not was_up and os.environ.get("DISPATCH_KEEP_CLUSTER") != "1":
            subprocess.run([str(REPO / "deploy/local/down.sh"), LOCAL_CLUSTER], check=False)


@pytest_asyncio.fixture(scope="session")
async def kube(kubeconfig: str) -> AsyncIterator[Kube]:
    """An admin connection to the test cluster."""
    k = await Kube.connect(kubeconfig=kubeconfig, request_timeout=30)
    try:
        yield k
    finally:
        await k.close()


@pytest_asyncio.fixture
async def namespace(kube: Kube) -> AsyncIterator[str]:
    """A fresh namespace for one test, deleted (with all it holds) afterwards."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    await kube.create(r.NAMESPACE, {"metadata": {"name": name}})
    try:
        yield name
    finally:
        await kube.delete(r.NAMESPACE, name, propagation="Background")
