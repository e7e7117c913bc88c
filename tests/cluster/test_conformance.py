"""The conformance suite against the test cluster, as a user runs it: the command.

Needs the admission controller (the ``admission`` fixture). Every run names its namespace,
so the test can check that nothing of the suite's own is left afterwards.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from dispatch_kubeflow.conformance import CHECKS
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]

REPO = Path(__file__).resolve().parents[2]


async def conformance(kubeconfig: str, *args: str, limit: float = 900) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dispatch_kubeflow.conformance", "--kubeconfig", kubeconfig,
        *args, cwd=REPO, env=os.environ.copy(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), limit)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def left_behind(kube: Kube, name: str) -> list[str]:
    left = []
    if await kube.get_or_none(r.NAMESPACE, name) is not None:
        left.append(f"Namespace/{name}")
    if await kube.get_or_none(r.CLUSTER_QUEUE, name) is not None:
        left.append(f"ClusterQueue/{name}")
    return left


async def test_suite_passes_and_leaves_nothing(kubeconfig: str, kube: Kube,
                                               admission: Any) -> None:
    await admission.deployed(kube)
    ns = f"dk-conf-{uuid.uuid4().hex[:8]}"
    rc, out = await conformance(kubeconfig, "--namespace", ns)
    assert rc == 0, out
    for name, _ in CHECKS:
        assert f"\nPASS {name}: " in out, out
    assert out.rstrip().endswith(f"{len(CHECKS)} passed, 0 failed"), out
    assert await left_behind(kube, ns) == [], out


async def test_a_failing_check_still_cleans_up(kubeconfig: str, kube: Kube,
                                               admission: Any) -> None:
    """A runtime that does not exist: preflight fails, the rest is not run, nothing is left."""
    await admission.deployed(kube)
    ns = f"dk-conf-{uuid.uuid4().hex[:8]}"
    rc, out = await conformance(kubeconfig, "--namespace", ns, "--runtime", "no-such-runtime")
    assert rc == 1, out
    assert "\nFAIL preflight: " in out, out
    assert "StartGate: unknown" in out or "probeRuntime" in out, out
    assert f"0 passed, 1 failed, {len(CHECKS) - 1} not run" in out, out
    assert await left_behind(kube, ns) == [], out


async def test_an_existing_namespace_is_refused_and_kept(kubeconfig: str, kube: Kube,
                                                         namespace: str) -> None:
    rc, out = await conformance(kubeconfig, "--namespace", namespace, limit=120)
    assert rc == 3, out  # a setup failure: one line, no check run
    assert f"FAIL setup: namespace {namespace} exists already" in out, out
    assert out.count("FAIL") == 1, out
    assert f"0 passed, 0 failed, {len(CHECKS)} not run" in out, out
    assert await kube.get_or_none(r.NAMESPACE, namespace) is not None
