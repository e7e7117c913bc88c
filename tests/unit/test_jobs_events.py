"""Listing jobs and reading their Events, on objects as the API server sends them."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from dispatch_kubeflow import Backend, HoldError, JobID, ObjectRef, ObjectState, SettingsError
from dispatch_kubeflow import backend as backend_mod
from dispatch_kubeflow.core import names
from dispatch_kubeflow.events import job_event, name_pattern, of_job
from dispatch_kubeflow.jobs import list_jobs, listing
from dispatch_kubeflow.kube import Resource
from dispatch_kubeflow.kube import resources as r
from dispatch_kubeflow.mode_kueue import KueueMode
from dispatch_kubeflow.mode_plain import PlainMode
from dispatch_kubeflow.settings import Settings

JOB = JobID("01KQ7ZJ8C5T9W1XG8M2N3P4R5S")
OTHER = JobID("01KQ7ZJ8C5T9W1XG8M2N3P4R5T")
NS = "tutorial"


def trainjob(job: JobID, sub: int = 1, uid: str = "u1", **ann: str) -> dict[str, Any]:
    return {"metadata": {"name": names.trainjob_name(job, sub), "namespace": NS, "uid": uid,
                         "creationTimestamp": "2026-05-01T12:00:00Z",
                         "labels": {names.JOB_ID_LABEL: str(job),
                                    names.SUBMISSION_LABEL: str(sub),
                                    names.ATTEMPT_LABEL: "2",
                                    names.QUEUE_NAME_LABEL: "lq"},
                         "annotations": {names.ADMISSION_COUNT: "1", **ann}},
            "spec": {"suspend": False}}


def workload(uid: str, *conds: str) -> dict[str, Any]:
    return {"metadata": {"name": f"trainjob-{uid}", "namespace": NS,
                         "labels": {names.KUEUE_JOB_UID_LABEL: uid}},
            "spec": {"active": True},
            "status": {"conditions": [{"type": c, "status": "True"} for c in conds]}}


def pod(trainjob_name: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"name": f"{trainjob_name}-node-0-0-x", "namespace": NS,
                         "labels": {names.JOBSET_NAME_LABEL: trainjob_name}},
            "status": {"phase": phase}}


class ListingKube:
    """Answers LISTs from fixed items and counts them (nothing else is allowed)."""

    def __init__(self, items: dict[Resource, list[dict[str, Any]]]) -> None:
        self.items = items
        self.lists: list[tuple[str, str | None]] = []

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None,
                   field_selector: str | None = None) -> tuple[list[dict[str, Any]], str]:
        self.lists.append((res.plural, label_selector))
        await asyncio.sleep(0)
        return self.items.get(res, []), "7"


def test_listing_observes_each_job_with_its_own_objects() -> None:
    a, b = trainjob(JOB, 1, "u1"), trainjob(OTHER, 1, "u2")
    stranger = {"metadata": {"name": "x", "labels": {names.JOB_ID_LABEL: "nope"}}}
    out = listing([b, a, stranger], [workload("u1", "QuotaReserved", "Admitted"),
                                     workload("u2", "QuotaReserved")],
                  [pod(a["metadata"]["name"], "Running"), pod(b["metadata"]["name"], "Pending")])
    assert [(j.job, j.submission, j.attempt) for j in out] == [(JOB, 1, 2), (OTHER, 1, 2)]
    first, second = out
    assert first.observation.state is ObjectState.RUNNING
    assert (first.observation.pods, first.observation.pods_running) == (1, 1)
    assert first.observation.admissions == 1
    assert second.observation.state is ObjectState.ADMITTING
    assert first.ref == ObjectRef(NS, names.trainjob_name(JOB, 1), "TrainJob",
                                  "trainer.kubeflow.org/v1alpha1", "u1")
    assert first.created is not None


@pytest.mark.asyncio
async def test_list_jobs_is_one_list_per_kind() -> None:
    many = [trainjob(JobID.new(), 1, f"u{i}") for i in range(50)]
    kube = ListingKube({r.TRAINJOB: many, r.WORKLOAD: [workload("u3", "QuotaReserved")]})
    out = await list_jobs(kube, NS, KueueMode.listed)  # type: ignore[arg-type]
    assert len(out) == 50
    assert sorted(kube.lists) == [("pods", names.JOBSET_NAME_LABEL),
                                  ("trainjobs", names.JOB_ID_LABEL),
                                  ("workloads", names.KUEUE_JOB_UID_LABEL)]
    plain = ListingKube({r.TRAINJOB: many})
    await list_jobs(plain, NS, PlainMode.listed)  # type: ignore[arg-type]
    assert [p for p, _ in plain.lists] == ["trainjobs", "pods"]


def event(name: str, kind: str, regarding: str, reason: str, **more: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "uid": name, "resourceVersion": "1",
                         "creationTimestamp": more.pop("created", "2026-05-01T12:00:00Z")},
            "regarding": {"kind": kind, "name": regarding, "namespace": NS, "uid": "x"},
            "reason": reason, "type": "Normal", **more}


def test_events_of_a_job_in_time_order() -> None:
    tj = names.trainjob_name(JOB, 1)
    items = [
        event("e3", "Pod", f"{tj}-node-0-0-abcde", "Started",
              deprecatedLastTimestamp="2026-05-01T12:00:03Z", deprecatedCount=2,
              deprecatedSource={"component": "kubelet"}),
        event("e1", "TrainJob", tj, "AdmissionCountRaised",
              eventTime="2026-05-01T12:00:01.000000Z",
              reportingController="dispatch.phpboyscout.uk/admission", note="A is 1"),
        event("e2", "Workload", f"trainjob-{tj}-1a2b3", "QuotaReserved",
              series={"count": 3, "lastObservedTime": "2026-05-01T12:00:02.5Z"}),
        event("x1", "TrainJob", names.trainjob_name(OTHER, 1), "Created"),
        event("x2", "Pod", "unrelated", "Started"),
        event("e4", "JobSet", names.trainjob_name(JOB, 2), "Created",
              created="2026-05-01T12:00:04Z"),
    ]
    mine = [job_event(e) for e in of_job(items, JOB)]
    assert [e.reason for e in mine] == ["AdmissionCountRaised", "QuotaReserved", "Started",
                                        "Created"]
    assert mine[0].reporter == "dispatch.phpboyscout.uk/admission"
    assert mine[0].note == "A is 1"
    assert mine[1].count == 3
    assert (mine[2].count, mine[2].reporter, mine[2].regarding.kind) == (2, "kubelet", "Pod")
    assert name_pattern(JOB).search(f"trainjob-{tj}-1a2b3")
    assert not name_pattern(JOB).search(f"x{tj}")


def test_connect_names_a_missing_kubeconfig(tmp_path: Path, monkeypatch: Any) -> None:
    base = {"namespace": NS, "probeRuntime": {"name": "dispatch-kind"}}
    missing = tmp_path / "nope.kubeconfig"
    with pytest.raises(SettingsError) as err:
        backend_mod.require_kubeconfig(Settings.parse(
            {**base, "cluster": {"kubeconfig": str(missing)}}))
    assert err.value.field == "cluster.kubeconfig"
    assert str(err.value).startswith(f"cluster.kubeconfig: no such file {missing}; ")
    monkeypatch.setenv("KUBECONFIG", str(missing))
    with pytest.raises(SettingsError,
                       match=r"cluster.kubeconfig: not set, and no such file in \$KUBECONFIG"):
        backend_mod.require_kubeconfig(Settings.parse(base))
    there = tmp_path / "there"
    there.write_text("{}")
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(missing), str(there)]))
    backend_mod.require_kubeconfig(Settings.parse(base))  # one of them is enough
    backend_mod.require_kubeconfig(Settings.parse({**base, "cluster": {"inCluster": True}}))


@pytest.mark.asyncio
async def test_connect_without_preflight_is_observe_only() -> None:
    settings = {"namespace": NS, "probeRuntime": {"name": "dispatch-kind"}}
    b = await Backend.connect(settings, kube=ListingKube({}), preflight=False)  # type: ignore[arg-type]
    assert b.observe_only
    assert all("without the preflight" in reason for reason in b.observe_only_reasons)


def test_hold_errors_name_the_trainjob() -> None:
    ref = ObjectRef(NS, "dj-x-s1")
    workload = "Workload tutorial/trainjob-dj-x-s1-1a2b3"
    with pytest.raises(HoldError, match=rf"^TrainJob tutorial/dj-x-s1: {workload} is held"), \
            backend_mod._naming(ref):
        raise HoldError(f"{workload} is held as instance 2, not 1; the hold stays")
    with pytest.raises(HoldError, match=r"^TrainJob tutorial/dj-x-s1 is held"), \
            backend_mod._naming(ref):
        raise HoldError("TrainJob tutorial/dj-x-s1 is held")  # named already: as it is
