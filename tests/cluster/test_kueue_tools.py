"""Kueue's own tools on a running dispatch job (issue 29, item 8).

An operator stops a Workload with ``kueuectl stop workload`` (built from the pinned Kueue
module by ``deploy/local/build.sh kueuectl``) or with a plain ``kubectl patch`` of
``spec.active``, and resumes it the same way. Neither passes through dispatch: the promise
must still hold (no pod of the new execution runs while an old one lives; the new one runs
at a higher A), and Inspect and ``kubectl dispatch get`` must say that someone other than
dispatch stopped the job, and how to resume it. Pods are judged from a watch, as in
test_pod_paths.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from dispatch_kubeflow import Backend, JobID, ObjectRef, ObjectState
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from tests.cluster.admission_fixture import kubectl_binary
from tests.cluster.helpers import eventually, pods_of
from tests.cluster.test_adapter_kueue import (  # noqa: F401  (fixtures)
    backend,
    deadline,
    hold_meta,
    queued,
    settings,
)
from tests.cluster.test_admission_cluster import workload
from tests.cluster.test_cli import kd, row_of
from tests.cluster.test_pod_paths import (
    LINGER,
    LINGERING,
    SCRIPT_READY,
    attempt_of,
    running,
    running_pods,
    runs_again_at_a_two,
    watching,
)
from tests.conftest import REPO

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]


@pytest.fixture(scope="session")
def kueuectl() -> str:
    """Kueue's CLI at the pinned Kueue version (cached beside the cluster's binaries)."""
    subprocess.run([str(REPO / "deploy/local/build.sh"), "kueuectl"], check=True, timeout=900)
    path = subprocess.run(
        ["bash", "-c", f'. "{REPO}/deploy/local/lib.sh"; bin_path kueuectl'],
        check=True, capture_output=True, text=True).stdout.strip()
    assert Path(path).is_file(), path
    return path


def run(*args: str) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{args}: {done.stderr}"
    return done.stdout


async def stopped_outside(b: Backend, job: JobID, ref: ObjectRef, settings_file: Path,
                          wl: str, want: ObjectState) -> None:
    """Inspect and ``kubectl dispatch get`` both say who stopped it and how to resume."""
    obs = await b.wait(ref, want, deadline=deadline(120))
    assert obs.hold_instance == 0, "not dispatch's hold"
    assert obs.cause.reason == "Deactivated"
    assert obs.cause.detail.startswith(
        f"stopped outside dispatch: Workload {wl} has spec.active=false; "
        f"kueuectl resume workload {wl} runs it again"), obs.cause.detail
    got = await kd(settings_file, "get", str(job))
    assert got.rc == 0, got.err
    row = row_of(got.out, job)
    assert "Deactivated: stopped outside dispatch" in row, got.out


async def a_higher_execution(b: Backend, kube: Kube, ref: ObjectRef,
                             old: set[str]) -> set[str]:
    """The resumed job runs at A = 2, every old pod gone before a new one ran."""
    obs = await b.wait(ref, ObjectState.RUNNING, deadline=deadline(LINGER + 150))
    assert obs.admissions == 2

    async def new_running() -> list[dict[str, Any]] | None:
        pods = await running_pods(kube, ref, 2)
        return pods if pods and not {attempt_of(p) for p in pods} & old else None

    new = await eventually(new_running, LINGER + 150, "the resumed job's pods running")
    return {attempt_of(p) for p in new}


def settings_file_for(kubeconfig: str, queued: str, tmp_path: Path) -> Path:  # noqa: F811
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(settings(kubeconfig, queued)))
    return path


async def test_kueuectl_stop_and_resume_keep_the_promise(
        backend: Backend, kube: Kube, queued: str, kubeconfig: str,  # noqa: F811
        kueuectl: str, tmp_path: Path) -> None:
    """``kueuectl stop workload``: the job is reported stopped outside dispatch (holding
    while its ranks spend 20 s in their TERM handler, then held); ``kueuectl resume
    workload`` runs it again at A = 2, after the old pods."""
    job, ref = await running(backend, LINGERING)
    old = await eventually(lambda: running_pods(kube, ref, 2), 120, "2 pods running")
    assert {attempt_of(p) for p in old} == {f"{job}.1.1.1.0"}
    wl = (await workload(kube, queued, ref.name) or {})["metadata"]["name"]
    sf = settings_file_for(kubeconfig, queued, tmp_path)
    async with watching(kube, ref) as log:
        out = run(kueuectl, "--kubeconfig", kubeconfig, "-n", queued, "stop", "workload", wl)
        assert wl in out
        await stopped_outside(backend, job, ref, sf, wl, ObjectState.HOLDING)
        await stopped_outside(backend, job, ref, sf, wl, ObjectState.HELD)
        run(kueuectl, "--kubeconfig", kubeconfig, "-n", queued, "resume", "workload", wl)
        assert await a_higher_execution(backend, kube, ref, {f"{job}.1.1.1.0"}) \
            == {f"{job}.1.1.2.0"}
    assert log.overlaps() == []
    assert not (await backend.stop_job(job, "done")).alive


async def test_a_kubectl_patch_resumed_at_once_waits_for_the_old_pods(
        backend: Backend, kube: Kube, queued: str, kubeconfig: str,  # noqa: F811
        tmp_path: Path) -> None:
    """``kubectl patch`` of ``spec.active`` false, then true again at once while the old
    ranks still run their 20 s TERM handler: Kueue admits again at once, and the readmission
    gate holds the new execution until the old pods are gone."""
    job, ref = await running(backend, LINGERING)
    await eventually(lambda: running_pods(kube, ref, 2), 120, "2 pods running")
    wl = (await workload(kube, queued, ref.name) or {})["metadata"]["name"]
    kubectl = [kubectl_binary(), "--kubeconfig", kubeconfig, "-n", queued]
    async with watching(kube, ref) as log:
        run(*kubectl, "patch", "workload", wl, "--type=merge", "-p",
            '{"spec":{"active":false}}')
        await stopped_outside(backend, job, ref, settings_file_for(kubeconfig, queued, tmp_path),
                              wl, ObjectState.HOLDING)

        async def terminating() -> bool:
            return any(p["metadata"].get("deletionTimestamp")
                       for p in await pods_of(kube, queued, ref.name))

        await eventually(terminating, 60, "the old ranks in their TERM handler")
        run(*kubectl, "patch", "workload", wl, "--type=merge", "-p",
            '{"spec":{"active":true}}')
        assert await a_higher_execution(backend, kube, ref, {f"{job}.1.1.1.0"}) \
            == {f"{job}.1.1.2.0"}
    assert log.overlaps() == []
    assert log.terminating(f"{job}.1.1.1.0"), \
        "no old pod was seen terminating: the test tried nothing"
    assert not (await backend.stop_job(job, "done")).alive


async def test_kueuectl_resume_does_not_end_a_dispatch_hold(
        backend: Backend, kube: Kube, queued: str, kubeconfig: str,  # noqa: F811
        kueuectl: str) -> None:
    """A job dispatch holds, resumed with ``kueuectl resume workload``: the controller
    deactivates the Workload again (Event ``HoldKept``, saying who may release it), no pod
    runs, Inspect still says held; dispatch's Release then runs it at A = 2."""
    job, ref = await running(backend, SCRIPT_READY)
    await backend.hold(ref, hold_meta(1))
    await backend.wait(ref, ObjectState.HELD, deadline=deadline())
    wl = (await workload(kube, queued, ref.name) or {})["metadata"]["name"]
    async with watching(kube, ref) as log:
        run(kueuectl, "--kubeconfig", kubeconfig, "-n", queued, "resume", "workload", wl)

        async def kept() -> dict[str, Any] | None:
            events, _ = await kube.list(r.EVENT, queued)
            return next((e for e in events if e.get("reason") == "HoldKept"
                         and (e.get("regarding") or {}).get("name") == wl), None)

        event = await eventually(kept, 30, "the controller's HoldKept Event")
        assert "resumed outside dispatch" in event["note"], event
        held = await kube.get(r.WORKLOAD, wl, queued)
        assert held["spec"]["active"] is False
        await asyncio.sleep(20)  # nothing may run meanwhile
        inspected = await backend.inspect(ref)
    before = {p["metadata"]["uid"] for p in log.synced}
    ran = [p["metadata"]["name"] for _, p in log.events if p["metadata"]["uid"] not in before
           or (p.get("status") or {}).get("phase") == "Running"]
    assert not ran, f"pods of a held job ran after kueuectl resume: {ran}"
    assert (inspected.state, inspected.hold_instance) == (ObjectState.HELD, 1), inspected
    await backend.release(ref, hold_meta(1))
    await runs_again_at_a_two(backend, ref, job)
