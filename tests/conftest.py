"""Fixtures shared by every test.

Cluster tests (marked ``cluster``) run against the cluster named by ``$KUBECONFIG`` when it
is set, and otherwise against the local cluster, which the session starts with
``deploy/local/up.sh`` (building what is missing) and stops at the end unless it was
already running before the session.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.helpers import STATE_ROOT

REPO = Path(__file__).resolve().parent.parent
LOCAL_CLUSTER = os.environ.get("DISPATCH_TEST_CLUSTER", "dk")
LOCAL_KUBECONFIG = Path(os.environ.get("DISPATCH_TEST_KUBECONFIG",
                                       f"/tmp/{LOCAL_CLUSTER}.kubeconfig"))

pytest_plugins = ["tests.cluster.admission_fixture"]


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
