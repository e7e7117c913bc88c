"""Settings: the seed's JSON keys, durations, unknown keys, and errors naming the field."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from dispatch_kubeflow.backend import select_mode
from dispatch_kubeflow.errors import SettingsError
from dispatch_kubeflow.settings import Settings, parse_duration

SEED: dict[str, Any] = {
    "cluster": {"kubeconfig": "/tmp/dkkind.kubeconfig"},
    "namespace": "tutorial",
    "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
    "kueue": {"localQueue": "lq", "priorityClass": "low", "admissionCheck": "dispatch-admission"},
    "timeouts": {"request": "10s", "stopJob": "3m"},
}


def with_(path: str, value: object) -> dict[str, object]:
    doc: dict[str, Any] = json.loads(json.dumps(SEED))
    *parents, last = path.split(".")
    node = doc
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return doc


def test_seed_section_parses_from_bytes() -> None:
    s = Settings.parse(json.dumps(SEED).encode())
    assert s.namespace == "tutorial"
    assert s.kueue is not None
    assert s.kueue.local_queue == "lq"
    assert s.kueue.priority_class == "low"
    assert s.probe_runtime.name == "dispatch-kind"
    assert s.timeouts.request == timedelta(seconds=10)
    assert s.timeouts.stop_job == timedelta(minutes=3)
    assert s.timeouts.preflight_probe == timedelta(seconds=10)
    assert select_mode(s).name == "kueue"


def test_no_kueue_is_plain_mode() -> None:
    doc = dict(SEED)
    del doc["kueue"]
    assert select_mode(Settings.parse(doc)).name == "plain"


@pytest.mark.parametrize(("text", "seconds"), [
    ("10s", 10), ("3m", 180), ("1h30m", 5400), ("1.5s", 1.5), ("500ms", 0.5), ("2h", 7200),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == pytest.approx(seconds)


@pytest.mark.parametrize(("path", "value", "field", "says"), [
    ("timeouts.stopjob", "3m", "timeouts.stopjob", "unknown key"),
    ("timeouts.stop_job", "3m", "timeouts.stop_job", "unknown key"),
    ("colour", "red", "colour", "unknown key"),
    ("kueue.queue", "lq", "kueue.queue", "localQueue"),
    ("timeouts.stopJob", "3 minutes", "timeouts.stopJob", '"1h30m"'),
    ("timeouts.request", "0s", "timeouts.request", "positive duration"),
    ("timeouts.request", 10, "timeouts.request", "duration"),
    ("timeouts.request", "10h", "timeouts.request", "at most 5m"),
    ("timeouts.stopJob", "25h", "timeouts.stopJob", "at most 24h"),
    ("timeouts.preflightProbe", "11m", "timeouts.preflightProbe", "at most 10m"),
    ("timeouts.start", "2h", "timeouts.start", "at most 1h"),
    ("timeouts.transient", "999999999999999999h", "timeouts.transient", "far past"),
    ("namespace", "Tutorial", "namespace", "DNS label"),
    ("probeRuntime.kind", "Runtime", "probeRuntime.kind", "TrainingRuntime"),
    ("probeRuntime.name", "", "probeRuntime.name", "Kubernetes name"),
    ("kueue.localQueue", "LQ!", "kueue.localQueue", "Kubernetes name"),
    ("cluster.inCluster", True, "cluster.inCluster", "cannot be combined"),
    ("cluster.inCluster", "maybe", "cluster.inCluster", "boolean"),
    ("kueue", "lq", "kueue", "object"),
])
def test_problems_name_the_field(path: str, value: object, field: str, says: str) -> None:
    with pytest.raises(SettingsError) as err:
        Settings.parse(with_(path, value))
    assert err.value.field == field
    assert says in str(err.value)
    assert field in str(err.value)


def test_missing_required_keys() -> None:
    with pytest.raises(SettingsError) as err:
        Settings.parse({"namespace": "x"})
    assert err.value.field == "probeRuntime"
    assert "is required" in str(err.value)
    with pytest.raises(SettingsError) as err:
        Settings.parse(with_("kueue", {}))
    assert err.value.field == "kueue.localQueue"


def test_every_problem_is_listed() -> None:
    with pytest.raises(SettingsError) as err:
        Settings.parse(with_("timeouts", {"request": "x", "bogus": "1s"}))
    fields = {p.split(":")[0] for p in err.value.problems}
    assert fields == {"timeouts.request", "timeouts.bogus"}


@pytest.mark.parametrize("raw", [b"not json", "[1, 2]", "null"])
def test_not_an_object(raw: bytes | str) -> None:
    with pytest.raises(SettingsError) as err:
        Settings.parse(raw)
    assert err.value.field == ""
