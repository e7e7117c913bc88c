"""The plugin behaves as a kubectl plugin: the kubeconfig's context without a settings
file, -A, -o wide|name, --no-headers, get JOB, logs --tail/--since, version, hold's own
instance, stop --timeout, one-line errors and exit 2 for a bad command line. Each command
runs through ``main`` against the in-memory fake of the cluster (tests/unit/fake_kube.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

import dispatch_kubeflow as dk
from dispatch_kubeflow.cli import app, main
from dispatch_kubeflow.cli import config as cli_config
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube.kubeconfig import current_context
from dispatch_kubeflow.kube.resources import POD, TRAINJOB, WORKLOAD
from tests.unit.fake_kube import FakeKube

JOB = dk.JobID("01KQ7ZJ8C5T9W1XG8M2N3P4R5S")
OTHER = dk.JobID("01KQ7ZJ8C5T9W1XG8M2N3P4R6T")


class Cluster:
    """The fake cluster's state, behind a new FakeKube per command (each command runs its
    own event loop, and a fake's events belong to one)."""

    def __init__(self) -> None:
        self.objects: dict[Any, Any] = {}
        self.logs: dict[Any, list[bytes]] = {}
        self.served: dict[str, list[str]] = {}
        self.log_asked: list[dict[str, Any]] = []
        self.settings: list[dk.Settings] = []
        self.rv = 0

    def kube(self) -> FakeKube:
        k = FakeKube(0)
        k.objects, k.logs, k.served, k.log_asked = (self.objects, self.logs, self.served,
                                                    self.log_asked)
        self.rv += 100_000  # versions never repeat across the fakes
        k.rv = self.rv
        return k

    async def connect(self, settings: dk.Settings) -> FakeKube:
        self.settings.append(settings)
        return self.kube()

    def run(self, fn: Callable[[FakeKube], Coroutine[Any, Any, Any]]) -> Any:
        return asyncio.run(fn(self.kube()))


def trainjob(job: dk.JobID, ns: str, *, queue: str | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {names.JOB_ID_LABEL: str(job), names.SUBMISSION_LABEL: "1",
              names.ATTEMPT_LABEL: "1"}
    if queue:
        labels[names.QUEUE_NAME_LABEL] = queue
    return {"metadata": {"name": f"dj-{job.lower()}-s1", "namespace": ns, "labels": labels,
                         "annotations": annotations or {}},
            "spec": {"suspend": False}}


def write_kubeconfig(path: Path, namespace: str | None = "team-a",
                     current: str | None = "c") -> Path:
    ctx: dict[str, Any] = {"cluster": "k", "user": "u"}
    if namespace:
        ctx["namespace"] = namespace
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "c", "context": ctx}, {"name": "d", "context": {
            "cluster": "k", "user": "u", "namespace": "team-d"}}],
        **({"current-context": current} if current else {})}))
    return path


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Cluster:
    """No settings file anywhere, a kubeconfig in $KUBECONFIG, and the fake behind it."""
    c = Cluster()
    monkeypatch.setattr(app, "connect_kube", c.connect)
    monkeypatch.delenv(cli_config.ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "kubeconfig")))
    return c


def ran(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    got = capsys.readouterr()
    return rc, got.out, got.err


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


# --- where to work: the kubeconfig's context ---------------------------------------------------


def test_without_a_settings_file_the_context_gives_cluster_and_namespace(
        cluster: Cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cluster.run(lambda k: k.create(TRAINJOB, trainjob(JOB, "team-a"), "team-a"))
    cluster.run(lambda k: k.create(TRAINJOB, trainjob(OTHER, "team-d"), "team-d"))
    rc, out, _ = ran(capsys, ["get"])
    assert rc == 0
    assert [line.split()[0] for line in out.splitlines()] == ["JOB", JOB]
    assert cluster.settings[-1].namespace == "team-a"
    assert cluster.settings[-1].cluster.context == "c"
    rc, out, _ = ran(capsys, ["get", "--context", "d"])  # that context's namespace
    assert [line.split()[0] for line in out.splitlines()] == ["JOB", OTHER]
    rc, out, _ = ran(capsys, ["get", "-n", "team-d"])
    assert [line.split()[0] for line in out.splitlines()] == ["JOB", OTHER]
    bare = write_kubeconfig(tmp_path / "bare", namespace=None)
    assert ran(capsys, ["get", "--kubeconfig", str(bare)])[0] == 0
    assert cluster.settings[-1].namespace == "default"  # as kubectl
    assert cluster.settings[-1].cluster.kubeconfig == str(bare)


def test_a_settings_file_still_decides(cluster: Cluster, capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"namespace": "from-file", "probeRuntime": {"name": "r"}}))
    assert ran(capsys, ["get", "--settings", str(path)])[0] == 0
    assert cluster.settings[-1].namespace == "from-file"


def test_the_context_merges_kubeconfig_files_as_kubectl(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    first = tmp_path / "first"
    first.write_text(yaml.safe_dump({"current-context": "d"}))
    second = write_kubeconfig(tmp_path / "second")
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'absent'}:{second}")
    assert current_context() == current_context(str(second), "d")
    assert current_context().namespace == "team-d"


@pytest.mark.parametrize(("text", "needle"), [
    ("clusters: [\n  - foo: : bar\n", "cluster.kubeconfig: cannot load "),
    ("- a\n- b\n", "expected a mapping (a kubeconfig), got list"),
    ("contexts: 7\ncurrent-context: c\n", "contexts is not a list"),
    ("contexts: []\n", "names no current-context; pass --context NAME"),
    ("contexts: []\ncurrent-context: c\n", "no context c in "),
    ("\x00\xff", "cluster.kubeconfig: cannot load "),
])
def test_a_malformed_kubeconfig_is_one_line(cluster: Cluster, tmp_path: Path, text: str,
                                            needle: str, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    bad = tmp_path / "bad"
    bad.write_text(text, encoding="latin-1")
    rc, out, err = ran(capsys, ["get", "--kubeconfig", str(bad)])
    assert (rc, out) == (1, "")
    assert needle in one_error_line(err)
    assert cluster.settings == []  # nothing connected


@pytest.mark.parametrize("argv", [["preflight"], ["open", f"team-a/dj-{JOB.lower()}-s1"],
                                  ["open", str(JOB)], ["release", str(JOB), "--instance", "1"]])
def test_what_needs_the_preflight_names_the_settings_key(
        cluster: Cluster, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = ran(capsys, argv)
    assert (rc, out) == (1, "")
    line = one_error_line(err)
    assert line.startswith("error: probeRuntime: 'kubectl dispatch ")
    assert "runs the preflight" in line
    assert "pass --settings FILE" in line
    assert cluster.settings == []  # refused before connecting


# --- get ---------------------------------------------------------------------------------------


def test_get_all_namespaces_wide_name_and_no_headers(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.run(lambda k: k.create(TRAINJOB, trainjob(JOB, "team-a"), "team-a"))
    cluster.run(lambda k: k.create(TRAINJOB, trainjob(OTHER, "a-much-longer-namespace"),
                                   "a-much-longer-namespace"))
    rc, out, _ = ran(capsys, ["get", "-A"])
    assert rc == 0
    header, *rows = out.splitlines()
    assert header.split()[:2] == ["NAMESPACE", "JOB"]
    assert sorted((r.split()[0], r.split()[1]) for r in rows) == [
        ("a-much-longer-namespace", OTHER), ("team-a", JOB)]
    assert all(r.index(r.split()[1]) == header.index("JOB") for r in rows)  # lined up
    assert {s.namespace for s in cluster.settings} == {"team-a"}  # one connection

    rc, out, _ = ran(capsys, ["get", "-A", "-o", "name"])
    assert sorted(out.splitlines()) == sorted(
        f"trainjob.trainer.kubeflow.org/dj-{j.lower()}-s1" for j in (JOB, OTHER))
    data = json.loads(ran(capsys, ["get", "--all-namespaces", "-o", "json"])[1])
    assert {i["ref"]["namespace"] for i in data["items"]} == {"team-a",
                                                              "a-much-longer-namespace"}
    rc, out, _ = ran(capsys, ["get", "-o", "wide"])
    header, row = out.splitlines()
    assert header.split() == ["JOB", "SUB", "ATTEMPT", "STATE", "PODS", "A", "J", "HOLD",
                              "UNTIL", "AGE", "TRAINJOB", "EPOCH", "WORKER", "CAUSE"]
    # No MultiKueue worker: "-", as kubectl's NODE of an unscheduled pod says none.
    assert row.split()[10:13] == [f"dj-{JOB.lower()}-s1", "1000000", "-"]
    rc, out, _ = ran(capsys, ["get", "--no-headers"])
    assert [line.split()[0] for line in out.splitlines()] == [JOB]


def test_get_one_job(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.run(lambda k: k.create(TRAINJOB, trainjob(JOB, "team-a"), "team-a"))
    cluster.run(lambda k: k.create(TRAINJOB, trainjob(OTHER, "team-a"), "team-a"))
    rc, out, _ = ran(capsys, ["get", str(JOB).lower(), "-o", "name"])
    assert (rc, out) == (0, f"trainjob.trainer.kubeflow.org/dj-{JOB.lower()}-s1\n")
    absent = dk.JobID.new()
    rc, out, err = ran(capsys, ["get", str(absent)])
    assert (rc, out) == (1, "")
    assert f"job {absent}: no TrainJob of it in namespace team-a" in one_error_line(err)


# --- logs --------------------------------------------------------------------------------------


def rank_zero(job: dk.JobID) -> dict[str, Any]:
    return {"metadata": {"name": "p0", "labels": {
        names.JOB_ID_LABEL: str(job), names.COMPLETION_INDEX_LABEL: "0",
        names.SUBMISSION_LABEL: "1"}},
        "spec": {"nodeName": "n", "containers": [{"name": names.TRAINER_CONTAINER}]}}


def test_logs_tail_and_since(cluster: Cluster,
                             capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    cluster.run(lambda k: k.create(TRAINJOB, trainjob(JOB, "team-a"), "team-a"))
    cluster.run(lambda k: k.create(POD, rank_zero(JOB), "team-a"))
    cluster.logs[("team-a", "p0", "Stdout")] = [b"one\ntwo\n", b"three\n"]
    assert main(["logs", str(JOB), "--tail", "2", "--since", "90s"]) == 0
    assert capfdbinary.readouterr().out == b"two\nthree\n"
    # One stream's last lines are kept by the library (the API server refuses tailLines
    # beside a stream).
    assert cluster.log_asked[-1] == {"follow": False, "stream": "Stdout", "tail_lines": None,
                                     "since_seconds": 90}
    # Followed, one stream cannot be tailed: one line, exit 1.
    assert main(["logs", str(JOB), "--tail", "2", "-f"]) == 1
    assert b"follow All" in capfdbinary.readouterr().err


# --- hold and stop -----------------------------------------------------------------------------


def test_hold_takes_the_next_instance_and_says_it(cluster: Cluster,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cluster.run(lambda k: k.create(TRAINJOB, trainjob(JOB, "team-a"), "team-a"))
    rc, out, _ = ran(capsys, ["hold", str(JOB), "--reason", "r"])
    assert (rc, out) == (0, f"held: TrainJob team-a/dj-{JOB.lower()}-s1, instance 1\n")
    (tj,) = cluster.objects.values()
    assert tj["metadata"]["annotations"][names.HOLD_INSTANCE] == "1"
    assert tj["spec"]["suspend"] is True  # no queue label: plain mode's hold
    # Held as 1: the next is 2, which the library refuses, naming the hold to release.
    rc, out, err = ran(capsys, ["hold", str(JOB), "--reason", "again"])
    assert (rc, out) == (1, "")
    assert "already held as instance 1; release that first" in one_error_line(err)


def test_hold_acts_in_the_mode_the_trainjob_shows(cluster: Cluster,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    async def arrange(k: FakeKube) -> None:
        tj = await k.create(TRAINJOB, trainjob(JOB, "team-a", queue="lq"), "team-a")
        await k.create(WORKLOAD, {"metadata": {"name": "wl", "labels": {
            names.KUEUE_JOB_UID_LABEL: tj["metadata"]["uid"]}}, "spec": {"active": True}},
            "team-a")
    cluster.run(arrange)
    rc, out, _ = ran(capsys, ["hold", str(JOB), "--instance", "4", "--reason", "r"])
    assert (rc, out.split(", ")[-1]) == (0, "instance 4\n")
    wl = next(o for o in cluster.objects.values() if o["kind"] == "Workload")
    assert wl["spec"]["active"] is False  # Kueue mode: the Workload is deactivated
    assert wl["metadata"]["annotations"][names.HOLD_INSTANCE] == "4"
    tj = next(o for o in cluster.objects.values() if o["kind"] == "TrainJob")
    assert tj["spec"]["suspend"] is False  # Kueue suspends it, not dispatch
    assert cluster.settings[-1].kueue is None  # the file-less settings; the mode came later


def test_stop_timeout_bounds_the_stop(cluster: Cluster, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[timedelta] = []

    async def stop_job(self: dk.Backend, job: dk.JobID, reason: str) -> dk.StopReport:
        seen.append(self.settings.timeouts.stop_job)
        return dk.StopReport((dk.ObjectRef("team-a", f"dj-{job.lower()}-s1"),))
    monkeypatch.setattr(dk.Backend, "stop_job", stop_job)
    cluster.run(lambda k: k.create(TRAINJOB, trainjob(JOB, "team-a"), "team-a"))
    rc, out, _ = ran(capsys, ["stop", str(JOB), "--reason", "r", "--timeout", "45s"])
    assert rc == 0, out
    assert seen == [timedelta(seconds=45)]
    assert ran(capsys, ["stop", str(JOB), "--reason", "r"])[0] == 0
    assert seen[-1] == timedelta(minutes=3)  # the settings' timeouts.stopJob
    rc, out, err = ran(capsys, ["stop", str(JOB), "--reason", "r", "--timeout", "25h"])
    assert (rc, out) == (2, "")
    assert "expected at most 1 day" in one_error_line(err)


# --- the command line itself -------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert ran(capsys, ["--version"]) == (0, f"kubectl-dispatch {dk.__version__}\n", "")
    assert ran(capsys, ["version"]) == (0, f"kubectl-dispatch {dk.__version__}\n", "")


@pytest.mark.parametrize(("argv", "needle"), [
    (["open", "foo/bar/baz"], "'foo/bar/baz' is neither a job id nor <namespace>/<TrainJob>"),
    (["open", "Foo/x"], "is neither a job id nor"),
    (["open", "nope"], "'nope' is not a job id"),
    (["get", "-A", "-w"], "-w cannot be combined with -A"),
    (["get", "-o", "jsonpath"], "'jsonpath' is not one of"),
    (["logs", str(JOB), "--tail", "-1"], "-1 is not in the range x>=0"),
    (["logs", str(JOB), "--since", "soon"], "expected a positive duration"),
    (["completion", "tcsh"], "'tcsh' is not one of 'bash', 'zsh', 'fish'"),
])
def test_a_malformed_command_line_exits_2(argv: list[str], needle: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = ran(capsys, argv)
    assert (rc, out) == (2, "")
    assert needle in one_error_line(err)


def test_a_reason_over_lines_stays_in_its_row() -> None:
    from dispatch_kubeflow.cli import render

    status = dk.CapabilityStatus(dk.CapabilityValue.YES, dk.CapabilitySource.PROBED,
                                 "first line\nsecond line")
    table = render.capability_table({dk.Capability.START_GATE: status})
    assert table.splitlines()[1].split()[-4:] == ["first", "line", "second", "line"]
    assert len(table.splitlines()) == 2


def test_the_completion_variable_is_one_a_shell_can_set(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("_KUBECTL_DISPATCH_COMPLETE", "bash_complete")
    monkeypatch.setenv("COMP_WORDS", "kubectl-dispatch ge")
    monkeypatch.setenv("COMP_CWORD", "1")
    assert main([]) == 0
    assert capsys.readouterr().out.splitlines() == ["plain,get"]


def plugin_on_path(tmp_path: Path) -> str:
    """A kubectl-dispatch on PATH running this checkout's plugin (as the installed one)."""
    import os
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "kubectl-dispatch"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} -m dispatch_kubeflow.cli "$@"\n')
    exe.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def completes(shell: str, script: str, env: dict[str, str]) -> list[str]:
    import shutil
    import subprocess

    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    ran = subprocess.run([shell, "-c", script], capture_output=True, text=True, env=env,
                         timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.split()


BASH = """
source <(kubectl-dispatch completion bash)
COMP_WORDS=(kubectl-dispatch {words}); COMP_CWORD={cword}
_kubectl_dispatch_completion kubectl-dispatch  # as bash calls it: $1 is the command
printf '%s\\n' "${{COMPREPLY[@]}}"
"""

# As bash runs it on TAB: the function registered with `complete -F`, $1 the command.

# zsh: the script defines _kubectl_dispatch_completion and registers it with compdef;
# compadd and _describe, which only a completion widget may call, are replaced to print
# the arrays the script hands them.
ZSH = """
autoload -U compinit && compinit -u -D
source <(kubectl-dispatch completion zsh)
compadd() {{ print -rl -- "${{completions[@]}}" }}
_describe() {{ local a; for a in "${{completions_with_descriptions[@]}}"; do
  print -r -- "${{a%%:*}}"; done }}
words=(kubectl-dispatch {words}); CURRENT={current}
_kubectl_dispatch_completion
"""


def test_completion_in_bash(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "PATH": plugin_on_path(tmp_path)}
    env.pop("_KUBECTL_DISPATCH_COMPLETE", None)
    got = completes("bash", BASH.format(words="ge", cword=1), env)
    assert got == ["get"]
    got = completes("bash", BASH.format(words="get --no", cword=2), env)
    assert got == ["--no-headers"]
    got = completes("bash", BASH.format(words="", cword=1), env)
    assert {"get", "describe", "hold", "logs", "version", "completion"} <= set(got)


def test_completion_in_zsh(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "PATH": plugin_on_path(tmp_path), "HOME": str(tmp_path)}
    got = completes("zsh", ZSH.format(words="ge", current=2), env)
    assert "get" in got
    assert "describe" not in got
