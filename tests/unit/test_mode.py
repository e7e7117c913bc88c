"""The mode: chosen once from the settings, the only code that knows which mode it is in;
the preflight's probe never claims a proof its watch could not make; inspect only reads."""

from __future__ import annotations

import ast
import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import dispatch_kubeflow
from dispatch_kubeflow import errors, observe
from dispatch_kubeflow.backend import select_mode
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.times import format_time
from dispatch_kubeflow.kube import Resource
from dispatch_kubeflow.kube.resources import (
    CLUSTER_TRAINING_RUNTIME,
    JOBSET,
    POD,
    TRAINJOB,
    WORKLOAD,
)
from dispatch_kubeflow.kube.transport import WatchEvent
from dispatch_kubeflow.mode_kueue import KueueMode
from dispatch_kubeflow.mode_plain import PlainMode
from dispatch_kubeflow.model import Capability, ObjectRef, ObjectState
from dispatch_kubeflow.preflight.start_gate import probe
from dispatch_kubeflow.settings import Settings
from tests.unit.fake_kube import FakeKube

pytestmark = pytest.mark.virtual_time

NS = "ns"
PLAIN = Settings.parse({"namespace": NS, "probeRuntime": {"name": "rt"}})
KUEUE = Settings.parse({"namespace": NS, "probeRuntime": {"name": "rt"},
                        "kueue": {"localQueue": "lq", "priorityClass": "low"}})


def test_the_settings_choose_the_mode() -> None:
    kueue, plain = select_mode(KUEUE), select_mode(PLAIN)
    assert isinstance(kueue, KueueMode)
    assert kueue.name == "kueue"
    assert isinstance(plain, PlainMode)
    assert plain.name == "plain"
    assert kueue.trainjob_labels() == {names.QUEUE_NAME_LABEL: "lq",
                                       names.PRIORITY_CLASS_LABEL: "low"}
    assert kueue.closed_annotations() == {names.ADMISSION_GATED_BY: names.GATE}
    assert plain.trainjob_labels() == {}
    assert plain.closed_annotations() == {}
    assert WORKLOAD in kueue.kinds
    assert WORKLOAD not in plain.kinds
    assert [k for k in kueue.kinds if k is not WORKLOAD] == list(plain.kinds)


def test_only_the_kueue_modes_read_the_kueue_settings() -> None:
    """No module but mode_kueue and mode_multikueue (Kueue mode in a MultiKueue manager)
    reads ``<something>.kueue``: nothing else asks the mode."""
    package = Path(dispatch_kubeflow.__file__).parent
    # Only files where ".kueue" can be an attribute are parsed (parsing all costs 0.6 s).
    sources = {path: text for path in package.rglob("*.py")
               if re.search(r"\.\s*kueue\b", text := path.read_text())}
    readers = sorted(
        f"{path.relative_to(package)}:{node.lineno}"
        for path, text in sources.items()
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Attribute) and node.attr == "kueue")
    assert readers, "the scan found nothing at all: is it still looking at the right code?"
    assert {r.split(":")[0] for r in readers} == {"mode_kueue.py", "mode_multikueue.py"}, \
        readers


# --- the start-gate probe -------------------------------------------------------------------


class WatchingKube(FakeKube):
    """FakeKube with lists and watches (selectors ignored): each kind's watch lists once,
    then stays quiet, except the kinds in ``broken``, whose watch fails."""

    def __init__(self, broken: dict[Resource, errors.KubeError] | None = None) -> None:
        super().__init__()
        self.broken = broken or {}

    async def list(self, res: Resource, namespace: str | None = None,
                   **_: Any) -> tuple[list[dict[str, Any]], str]:
        return self.all(res), str(self.rv)

    async def observe(self, res: Resource, namespace: str | None = None,
                      **_: Any) -> AsyncIterator[WatchEvent]:
        if res in self.broken:
            raise self.broken[res]
        yield WatchEvent("SYNC", {}, tuple(self.all(res)))
        await asyncio.Event().wait()


async def run_probe(kube: WatchingKube, seconds: str = "0.2s") -> dict[Capability, Any]:
    settings = Settings.parse({"namespace": NS, "probeRuntime": {"name": "rt"},
                               "timeouts": {"preflightProbe": seconds}})
    kube.objects[(CLUSTER_TRAINING_RUNTIME.plural, "", "rt")] = {"metadata": {"name": "rt"}}
    caps: dict[Capability, Any] = {}
    await probe(kube, settings, select_mode(settings).proofs(), caps, try_injection=False)
    return caps


@pytest.mark.asyncio
async def test_a_quiet_probe_proves_the_start_gate() -> None:
    caps = await run_probe(WatchingKube({}))
    assert caps[Capability.START_GATE].ok, caps


@pytest.mark.asyncio
async def test_a_probe_whose_watch_died_proves_nothing() -> None:
    kube = WatchingKube({POD: errors.KubeForbidden("pods is forbidden", status=403,
                                                   reason="Forbidden")})
    started = asyncio.get_running_loop().time()
    with pytest.raises(errors.KubeForbidden):
        await run_probe(kube, seconds="30s")
    assert asyncio.get_running_loop().time() - started < 5  # no wait for a dead watch
    assert not kube.all(TRAINJOB), "the probe TrainJob is deleted whatever happened"


async def gated_probe(probe_watch: str, *, gate: str = names.GATE,
                      window: str = "30s") -> tuple[Any, float]:
    """Probe in Kueue mode; the test writes what Kueue would (a Workload for the probe,
    QuotaReserved False AdmissionGated by ``gate``). The start gate's status, and seconds."""
    kube = FakeKube()
    settings = Settings.parse({"namespace": NS, "probeRuntime": {"name": "rt"},
                               "kueue": {"localQueue": "lq"}, "probeWatch": probe_watch,
                               "timeouts": {"preflightProbe": window}})
    await kube.create(CLUSTER_TRAINING_RUNTIME, {"metadata": {"name": "rt"}})

    async def workload_reported_gated() -> None:
        async for ev in kube.observe(TRAINJOB, NS):  # the probe's TrainJob appears
            tjs = ev.items if ev.type == "SYNC" else (ev.object,)
            if tjs:
                break
        await kube.create(WORKLOAD, {
            "metadata": {"name": "wl", "labels": {
                names.KUEUE_JOB_UID_LABEL: tjs[0]["metadata"]["uid"]},
                "annotations": {names.ADMISSION_GATED_BY: gate}},
            "status": {"conditions": [{"type": "QuotaReserved", "status": "False",
                                       "reason": "AdmissionGated"}]}}, NS)

    kueue = asyncio.create_task(workload_reported_gated())
    caps: dict[Capability, Any] = {}
    began = asyncio.get_running_loop().time()
    await probe(kube, settings, select_mode(settings).proofs(), caps, try_injection=False)
    await kueue
    return caps[Capability.START_GATE], asyncio.get_running_loop().time() - began


@pytest.mark.asyncio
async def test_kueue_s_own_admission_gated_proves_the_gate_at_once() -> None:
    status, took = await gated_probe("proof")
    assert status.ok, status
    assert f"AdmissionGated by {names.GATE}, with no pod" in status.reason
    assert took < 5  # not the 30 s window


@pytest.mark.asyncio
async def test_probe_watch_window_watches_the_whole_window() -> None:
    status, took = await gated_probe("window", window="0.3s")
    assert status.ok, status
    assert "stayed gated for 0.3s" in status.reason
    assert took >= 0.3


@pytest.mark.asyncio
async def test_another_controller_s_gate_proves_nothing() -> None:
    status, took = await gated_probe("proof", gate="example.com/other", window="0.3s")
    assert not status.ok, status
    assert "did not report" in status.reason
    assert took >= 0.3


# --- inspect only reads -----------------------------------------------------------------------


async def held_trainjob(kube: FakeKube, until: datetime) -> tuple[dict[str, Any], ObjectRef]:
    """A plain-mode TrainJob opened once (A = 1), then held until ``until``; no pod left."""
    tj = await kube.create(TRAINJOB, {"metadata": {"name": "tj", "annotations": {
        names.HOLD_INSTANCE: "1", names.HOLD_UNTIL: format_time(until),
        names.ADMISSION_COUNT: "1"}}, "spec": {"suspend": True}}, NS)
    # Trainer's JobSet, which a release's approval names.
    await kube.create(JOBSET, {"metadata": {"name": "tj"}, "spec": {"suspend": True}}, NS)
    return tj, ObjectRef(NS, "tj", "TrainJob", TRAINJOB.api_version, tj["metadata"]["uid"])


@pytest.mark.asyncio
async def test_inspect_never_releases_an_expired_plain_hold() -> None:
    kube = WatchingKube()
    tj, ref = await held_trainjob(kube, datetime.now(UTC) - timedelta(minutes=1))
    mode = select_mode(PLAIN)
    requests = kube.requests
    obs = await observe.inspect(kube, mode, ref)
    assert obs.state is ObjectState.HELD
    assert obs.hold_instance == 1
    assert kube.all(TRAINJOB)[0]["metadata"]["resourceVersion"] == tj["metadata"][
        "resourceVersion"]
    assert kube.requests - requests == 1  # the get (the fake does not count lists)
    # Plain mode says the hold is its to release, and since when.
    assert mode.hold_expiry(kube.all(TRAINJOB)[0], []) is not None
    assert select_mode(KUEUE).hold_expiry(kube.all(TRAINJOB)[0], []) is None


@pytest.mark.asyncio
@pytest.mark.wall_clock  # the hold's expiry is a timestamp
async def test_a_plain_wait_releases_the_hold_when_it_expires() -> None:
    """No event marks a hold's expiry: the wait wakes at hold-until by itself, releases the
    hold (raising A, unsuspending) and sees the job run again."""
    kube = WatchingKube()
    _, ref = await held_trainjob(kube, datetime.now(UTC) + timedelta(seconds=0.3))
    async with asyncio.timeout(5):
        obs = await observe.wait(kube, select_mode(PLAIN), ref,
                                 frozenset({ObjectState.RUNNING}))
    assert obs.state is ObjectState.RUNNING
    assert obs.admissions == 2
    ann = kube.all(TRAINJOB)[0]["metadata"]["annotations"]
    assert names.HOLD_INSTANCE not in ann
