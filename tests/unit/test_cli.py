"""The plugin without a cluster: its settings, its tables, and bad input as one line."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import dispatch_kubeflow as dk
from dispatch_kubeflow import errors
from dispatch_kubeflow.cli import config as cli_config
from dispatch_kubeflow.cli import explain, main, render

JOB = dk.JobID("01KQ7ZJ8C5T9W1XG8M2N3P4R5S")
GOOD = {"namespace": "tutorial", "probeRuntime": {"name": "dispatch-kind"},
        "cluster": {"inCluster": True}}


def info(state: dk.ObjectState = dk.ObjectState.RUNNING, **obs: Any) -> dk.JobInfo:
    created = datetime.now(UTC) - timedelta(minutes=5)
    return dk.JobInfo(JOB, 1, 2, dk.Observation(state, **obs),
                      dk.ObjectRef("tutorial", f"dj-{JOB.lower()}-s1", uid="u"), created)


def test_settings_file_and_overrides(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(GOOD))
    target = cli_config.Target(str(path), kubeconfig="/k", context="c", namespace="other")
    got = cli_config.load(target)
    assert (got.namespace, got.cluster.kubeconfig, got.cluster.context) == ("other", "/k", "c")
    assert not got.cluster.in_cluster
    monkeypatch.setenv(cli_config.ENV, str(path))
    assert cli_config.load(cli_config.Target()).namespace == "tutorial"
    monkeypatch.delenv(cli_config.ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert cli_config.default_path() == tmp_path / "dispatch-kubeflow" / "settings.json"
    with pytest.raises(dk.SettingsError, match=r"no settings file at .*the default path"):
        cli_config.load(cli_config.Target())


@pytest.mark.parametrize(("text", "needle"), [
    ('{"namespace": ', "is not valid JSON (line 1, column 15"),
    ("[1]", "must hold a JSON object, got list"),
    (json.dumps({**GOOD, "namespace": "Not_A_Label"}), ": invalid settings: namespace: "),
])
def test_bad_settings_files(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "s.json"
    path.write_text(text)
    with pytest.raises(dk.SettingsError) as err:
        cli_config.load(cli_config.Target(str(path)))
    assert needle in str(err.value)
    assert str(path) in str(err.value)


def test_job_table_lines_up() -> None:
    rows = render.job_table([
        info(pods=2, pods_running=1, admissions=1, cause=dk.Cause("1 of 2 pods running",
                                                                  "Admitted")),
        info(dk.ObjectState.HELD, hold_instance=3,
             hold_until=datetime(2026, 5, 1, 13, tzinfo=UTC), cause=dk.Cause("held", "Held")),
    ]).splitlines()
    header, first, second = rows
    for title in ("STATE", "PODS", "HOLD", "UNTIL", "CAUSE"):
        at = header.index(title)
        assert first[at - 1] == second[at - 1] == " "
    assert first.split()[:9] == [JOB, "1", "2", "running", "1/2", "1", "0", "-", "-"]
    assert second.split()[7:9] == ["3", "2026-05-01T13:00:00Z"]
    assert first.endswith("Admitted: 1 of 2 pods running")
    assert render.age(datetime.now(UTC) - timedelta(seconds=90)) == "90s"
    assert render.age(datetime.now(UTC) - timedelta(hours=3)) == "3h"


def test_job_data_and_identity() -> None:
    j = info(pods=2, pods_running=2, admissions=2, restarts=1)
    data = render.job_data(j)
    assert (data["state"], data["podsRunning"], data["ref"]["name"]) == (
        "running", 2, f"dj-{JOB.lower()}-s1")
    assert json.loads(render.dump({"items": [data]}, "json"))["items"][0] == data
    # Attempt 2: its epochs lie above every one of attempt 1's (core.identity).
    assert render.identity(j) == (f"A=2 J=1 R=3  DISPATCH_ATTEMPT={JOB}.1.2.2.1  "
                                  "DISPATCH_EPOCH=1010003")


def test_report_lines() -> None:
    ref = dk.ObjectRef("tutorial", "dj-x-s1")
    pod = dk.ObjectRef("tutorial", "dj-x-s1-node-0-0-abcde", kind="Pod")
    unread = dk.ObjectRef("tutorial", "", kind="JobSet")
    assert render.report_lines(dk.StopReport((ref,), (pod,), (unread,))) == [
        "stopped  TrainJob/dj-x-s1", "alive    Pod/dj-x-s1-node-0-0-abcde",
        "unproven JobSet/* (not read)"]


@pytest.mark.parametrize(("argv", "rc", "needle"), [
    (["get", "--bogus"], 2, "No such option '--bogus'"),
    (["nope"], 2, "No such command 'nope'"),
    (["describe", "xyz"], 2, "'xyz' is not a job id"),
    (["hold", str(JOB), "--instance", "0", "--reason", "r"], 2, "0 is not in the range x>=1"),
    (["hold", str(JOB), "--instance", "1", "--reason", "r", "--by", "robot:x"], 2,
     "KIND one of human, service, system"),
    (["logs", str(JOB), "--settings", "/nonexistent.json"], 1,
     "no settings file at /nonexistent.json (--settings)"),
])
def test_bad_command_lines_are_one_line(argv: list[str], rc: int, needle: str,
                                        capsys: Any) -> None:
    assert main(argv) == rc
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ")
    assert needle in lines[0]


def test_help_without_arguments(capsys: Any) -> None:
    assert main([]) == 0
    assert "Commands:" in capsys.readouterr().out


def test_explain_unreachable() -> None:
    try:
        raise ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 1)")
    except OSError as os_error:
        err = errors.KubeUnreachable("GET /x: ClientConnectorError(...)", sent=False)
        err.__cause__ = os_error
    line = explain(err)
    assert line.startswith("cannot reach the cluster: [Errno 111] Connect call failed")
    assert "check cluster.kubeconfig" in line


def test_explain_tells_an_unreachable_cluster_by_the_errors_type_not_its_text() -> None:
    # Restated by a caller (find: "cannot list ..."), it is still the unreachable cluster.
    restated = errors.KubeUnreachable("GET /x: refused").restated("find: cannot list pods")
    assert explain(restated).startswith("cannot reach the cluster: ")
    # An answer whose reason happens to read "Unreachable" is the server's, told as it is.
    answered = errors.KubeError("proxy: Unreachable (502)", status=502, reason="Unreachable")
    assert explain(answered) == "proxy: Unreachable (502)"


def test_the_command_line_rides_out_a_dead_server_briefly_unless_told() -> None:
    target = cli_config.Target()
    brief = cli_config.CLI_TRANSIENT
    assert cli_config.overridden({}, target)["timeouts"] == {"transient": brief}
    assert cli_config.overridden({"timeouts": {"request": "5s"}}, target)["timeouts"] == {
        "request": "5s", "transient": brief}
    kept = {"timeouts": {"transient": "1m"}}
    assert cli_config.overridden(kept, target)["timeouts"] == {"transient": "1m"}
