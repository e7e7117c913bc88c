"""``kubectl dispatch`` against the local cluster: every command, bad input, Ctrl-C, and
what a person sees of ``get -w`` in a terminal (tmux).

Each command runs as its own process (the console script), as a person would run it,
with a settings file written for the test's namespace (Kueue mode, the admission
controller of the ``admission`` fixture).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from dispatch_kubeflow import (
    Backend,
    JobID,
    ObjectRef,
    ObjectState,
    StartRequest,
)
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r
from dispatch_kubeflow.preflight import PROBE_PREFIX
from tests.cluster.helpers import delete_cluster_queue, eventually, make_queues
from tests.cluster.test_adapter_kueue import TALKER, hold_meta, settings, spec

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio]

SCRIPT = Path(sys.executable).parent / "kubectl-dispatch"
CLI = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "dispatch_kubeflow.cli"]


@dataclass
class Ran:
    rc: int
    out: str
    err: str


def _sigint_default() -> None:
    """In the child before exec: SIGINT as at a terminal. A runner started in the background
    of a shell without job control (``cmd &`` in a script) ignores SIGINT, every child
    inherits the ignore, and Python then keeps it: Ctrl-C would reach no CLI under test."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def interruptible(*args: str) -> asyncio.subprocess.Process:
    """The CLI with ``args``, its output piped, to be sent SIGINT as Ctrl-C would."""
    return await asyncio.create_subprocess_exec(
        *CLI, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        preexec_fn=_sigint_default)


async def kd(settings_file: Path | None, *args: str, timeout: float = 180,
             env: dict[str, str] | None = None) -> Ran:
    """Run one command to its end."""
    extra = ["--settings", str(settings_file)] if settings_file else []
    proc = await asyncio.create_subprocess_exec(
        *CLI, *args, *extra, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})})
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return Ran(proc.returncode, out.decode(), err.decode())


@pytest_asyncio.fixture
async def ns(kube: Kube, namespace: str) -> AsyncIterator[str]:
    """A namespace with a queue behind dispatch's AdmissionCheck."""
    await make_queues(kube, namespace, checks=[names.ADMISSION_CHECK], cpu="1", memory="1Gi")
    try:
        yield namespace
    finally:
        await delete_cluster_queue(kube, namespace)


def cli_settings(kubeconfig: str, ns: str) -> dict[str, Any]:
    """The Kueue tests' settings, with the start-gate probe's bound at 60 s. The probe ends
    as soon as Kueue reports it gated (about a second); the bound only matters when Kueue is
    slow, as right after the fault suite's runs, which may have restarted the API server
    under it (CI once saw no Workload for the probe within 5 s there)."""
    s = settings(kubeconfig, ns)
    s["timeouts"]["preflightProbe"] = "60s"
    return s


@pytest_asyncio.fixture
async def lib(kubeconfig: str, ns: str, admission: Any, kube: Kube) -> AsyncIterator[Backend]:
    """The library, beside the plugin, with the admission controller running."""
    await admission.deployed(kube)
    # Right after the fault suite Kueue may take minutes to make Workloads again (CI once
    # saw none for the probe within 60 s, while a preflight a minute later passed): a
    # Backend opened then is observe-only. Up to three preflights, as a user would retry;
    # still observe-only after that, the test fails on it.
    for attempt in range(3):
        b = await Backend.connect(cli_settings(kubeconfig, ns))
        if not b.observe_only or attempt == 2:
            break
        await b.close()
    async with b:
        yield b


@pytest.fixture
def settings_file(lib: Backend, kubeconfig: str, ns: str, tmp_path: Path) -> Path:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(cli_settings(kubeconfig, ns)))
    return path


async def started(lib: Backend, nodes: int = 2) -> tuple[JobID, ObjectRef]:
    job = JobID.new()
    ref = await lib.start(StartRequest(job, 1, 1, spec(nodes, TALKER)))
    return job, ref


async def running_with_pods(lib: Backend, ref: ObjectRef, n: int) -> None:
    async def probe() -> bool:
        obs = await lib.inspect(ref)
        return obs.state is ObjectState.RUNNING and obs.pods_running == n

    await eventually(probe, 180, f"running with {n} pods running", interval=0.5)


def row_of(table: str, job: JobID) -> str:
    rows = [line for line in table.splitlines() if line.startswith(str(job))]
    assert len(rows) == 1, table
    return rows[0]


async def test_every_command(lib: Backend, settings_file: Path, ns: str) -> None:
    pre = await kd(settings_file, "preflight")
    assert pre.rc == 0, pre
    for cap in ("StartGate", "ReadmissionGate", "AttemptInjection", "HoldCapability"):
        assert re.search(rf"^{cap}\s+yes\s+probed\s+\S", pre.out, re.M), pre.out

    job, ref = await started(lib)
    got = await kd(settings_file, "get")
    assert got.rc == 0, got
    assert got.out.splitlines()[0].split() == ["JOB", "SUB", "ATTEMPT", "STATE", "PODS", "A",
                                               "J", "HOLD", "UNTIL", "AGE", "CAUSE"]
    assert row_of(got.out, job).split()[:9] == [job, "1", "1", "gated", "0/0", "0", "0", "-",
                                                "-"]
    as_json = json.loads((await kd(settings_file, "get", "-o", "json")).out)
    as_yaml = yaml.safe_load((await kd(settings_file, "get", "-o", "yaml")).out)
    for listed in (as_json, as_yaml):
        (item,) = [i for i in listed["items"] if i["job"] == job]
        assert item["state"] == "gated"
        assert item["ref"]["name"] == ref.name
        assert item["ref"]["namespace"] == ns
        assert (item["pods"], item["podsRunning"], item["hold"]["instance"]) == (0, 0, 0)

    opened = await kd(settings_file, "open", ref.id)
    assert opened.rc == 0, opened
    assert opened.out.strip() == f"opened: TrainJob {ref.id}"
    await running_with_pods(lib, ref, 2)
    got = await kd(settings_file, "get")
    assert row_of(got.out, job).split()[3:7] == ["running", "2/2", "1", "0"]

    wide = await kd(settings_file, "get", "-o", "wide", "--no-headers")
    assert row_of(wide.out, job).split()[10:12] == [ref.name, "1000001"], wide.out
    named = await kd(settings_file, "get", job, "-o", "name")
    assert (named.rc, named.out) == (0, f"trainjob.trainer.kubeflow.org/{ref.name}\n")
    every = await kd(settings_file, "get", "-A")
    assert next(ln for ln in every.out.splitlines() if str(job) in ln).split()[:2] == [ns, job]

    described = await kd(settings_file, "describe", job)
    assert described.rc == 0, described
    for expected in (f"Job:         {job}", "  State:     running", "  Pods:      2 running of 2",
                     f"DISPATCH_ATTEMPT={job}.1.1.1.0", "DISPATCH_EPOCH=1000001",
                     "  Hold:      none", f"  TrainJob         {ref.name}",
                     f"  TrainingRuntime  {ref.name}", "  Workload ", "  Pod ", "Events (last"):
        assert expected in described.out, (expected, described.out)

    async def log_has(*args: str, marker: str) -> str | None:
        ran = await kd(settings_file, "logs", job, *args)
        return ran.out if ran.rc == 0 and marker in ran.out else None

    out = await eventually(lambda: log_has(marker="out-2"), 60, "stdout in logs")
    assert "err-" not in out
    assert f"DISPATCH_ATTEMPT={job}.1.1.1.0" in out
    err = await eventually(lambda: log_has("--stderr", marker="err-2"), 60, "stderr in logs")
    assert "out-" not in err
    rank1 = await eventually(lambda: log_has("--rank", "1", marker="out-1"), 60, "rank 1")
    assert "DISPATCH_ATTEMPT" in rank1
    tail = await kd(settings_file, "logs", job, "--tail", "1", "--since", "1h")
    assert tail.rc == 0, tail
    assert len(tail.out.splitlines()) == 1, tail

    follow = await interruptible("logs", job, "-f", "--settings", str(settings_file))
    assert follow.stdout is not None
    seen = 0
    while seen < 3:  # the log goes on arriving while the container runs
        seen += b"out-" in await asyncio.wait_for(follow.stdout.readline(), 30)
    follow.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(follow.wait(), 30) in (0, 130)

    events = await kd(settings_file, "events", job)
    assert events.rc == 0, events
    assert events.out.splitlines()[0].split() == ["TIME", "TYPE", "REASON", "OBJECT", "NOTE"]
    for reason in ("AdmissionCountRaised", "AdmissionCheckReady", "Scheduled", "Started"):
        assert re.search(rf"\s{reason}\s", events.out), (reason, events.out)

    watcher = await interruptible("events", job, "-w", "--settings", str(settings_file))
    assert watcher.stdout is not None
    # No --instance: the plugin takes the next one (1: never held) and says it.
    held = await kd(settings_file, "hold", job, "--until", "1h", "--reason", "the cli test")
    assert held.rc == 0, held
    assert held.out.startswith(f"held: TrainJob {ref.id}, instance 1, until ")
    # The pods' end is reported while following: the kubelet's Killing of a pod.
    lines: list[bytes] = []
    while not any(b" Killing " in line and b"Pod/" in line for line in lines):
        lines.append(await asyncio.wait_for(watcher.stdout.readline(), 60))
    watcher.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(watcher.wait(), 30) == 0

    await lib.wait(ref, ObjectState.HELD)
    got = await kd(settings_file, "get")
    cells = row_of(got.out, job).split()
    assert (cells[3], cells[7]) == ("held", "1"), got.out
    other = await kd(settings_file, "hold", job, "--instance", "2", "--reason", "another")
    assert other.rc == 1
    assert other.err.startswith(f"error: TrainJob {ref.id}: Workload "), other.err
    wrong = await kd(settings_file, "release", job, "--instance", "2")
    assert wrong.rc == 1
    assert f"TrainJob {ref.id}" in wrong.err
    assert "instance 1, not 2" in wrong.err
    released = await kd(settings_file, "release", job, "--instance", "1")
    assert (released.rc, released.out.strip()) == (0, f"released: TrainJob {ref.id}, "
                                                       "instance 1")
    again = await kd(settings_file, "release", job, "--instance", "1")
    assert (again.rc, again.out.strip()) == (0, f"not held: TrainJob {ref.id} has no hold; "
                                                "nothing changed")
    await running_with_pods(lib, ref, 2)
    described = await kd(settings_file, "describe", job)
    assert f"DISPATCH_ATTEMPT={job}.1.1.2.0" in described.out

    stopped = await kd(settings_file, "stop", job, "--reason", "the cli test is over")
    assert stopped.rc == 0, stopped
    assert f"stopped  TrainJob/{ref.name}" in stopped.out
    assert re.search(r"^stopped  Pod/", stopped.out, re.M)
    assert stopped.out.splitlines()[-1].startswith(f"stopped: job {job}, ")
    assert "alive" not in stopped.out
    nothing = await kd(settings_file, "stop", job, "--reason", "again")
    assert (nothing.rc, nothing.out.strip()) == (0, f"nothing of job {job} exists in "
                                                    f"namespace {ns}")
    assert str(job) not in (await kd(settings_file, "get")).out
    stop_events = await kd(settings_file, "events", job)
    assert re.search(r"\sStopJob\s+TrainJob/.*the cli test is over", stop_events.out)


async def snapshot(kube: Kube, namespace: str) -> list[tuple[str, str, str, str]]:
    """What a command could change: which objects exist, and the specs, labels and
    annotations of the TrainJobs and Workloads (controllers keep writing their status)."""
    out = []
    for res in (r.TRAINJOB, r.TRAINING_RUNTIME, r.WORKLOAD, r.JOBSET, r.POD):
        items, _ = await kube.list(res, namespace)
        for i in items:
            m = i["metadata"]
            if PROBE_PREFIX in m["name"]:
                # Every open_backend's preflight makes a probe TrainJob and deletes it; its
                # JobSet and Workload go after it, in the background (CI 2026-12-04 saw the
                # lib fixture's probe Workload in the first snapshot and gone in the second).
                continue
            mine = ({"spec": i.get("spec"), "labels": m.get("labels"),
                     "annotations": m.get("annotations")}
                    if res in (r.TRAINJOB, r.WORKLOAD) else {})
            out.append((res.kind, m["name"], m["uid"], json.dumps(mine, sort_keys=True)))
    return sorted(out)


async def test_bad_input_is_one_line_and_changes_nothing(
        lib: Backend, settings_file: Path, kube: Kube, ns: str, tmp_path: Path) -> None:
    job, ref = await started(lib)
    before = await snapshot(kube, ns)
    unparsable = tmp_path / "unparsable.json"
    unparsable.write_text('{"namespace": ')
    unknown_key = tmp_path / "unknown.json"
    good = json.loads(settings_file.read_text())  # noqa: ASYNC240 - a small local file
    unknown_key.write_text(json.dumps({**good, "nmespace": 1}))
    unreachable = tmp_path / "unreachable.kubeconfig"
    unreachable.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c"}))
    cases: list[tuple[Sequence[str], Path | None, int, str]] = [
        (["get", "--bogus"], settings_file, 2, "No such option '--bogus'"),
        (["frobnicate"], settings_file, 2, "No such command 'frobnicate'"),
        (["hold", job, "--instance", "x", "--reason", "r"], settings_file, 2,
         "'x' is not a valid integer"),
        (["hold", job, "--instance", "1", "--reason", "r", "--until", "soonish"],
         settings_file, 2, "neither an RFC 3339 time"),
        (["stop"], settings_file, 2, "Missing argument 'JOB'"),
        (["stop", "not-a-job", "--reason", "r"], settings_file, 2, "'not-a-job' is not a job id"),
        (["describe", "01ABC"], settings_file, 2, "is not a job id"),
        (["stop", job, "--reason", "r"], unparsable, 1, "is not valid JSON (line 1"),
        (["stop", job, "--reason", "r"], unknown_key, 1, "nmespace: unknown key"),
        (["stop", job, "--reason", "r"], tmp_path / "absent.json", 1,
         "no settings file at"),
        (["stop", job, "--reason", "r", "--kubeconfig", str(tmp_path / "gone.kubeconfig")],
         settings_file, 1, "cluster.kubeconfig: no such file"),
        (["stop", job, "--reason", "r", "--kubeconfig", str(unreachable)], settings_file, 1,
         "cannot reach the cluster: "),
        (["get", "-w", "--kubeconfig", str(unreachable)], settings_file, 1,
         "cannot reach the cluster: "),
        (["hold", job, "--instance", "1", "--reason", "r", "--kubeconfig", str(unreachable)],
         settings_file, 1, "cannot reach the cluster: "),
        (["describe", str(JobID.new())], settings_file, 1, "no TrainJob of it in namespace"),
        (["open", "elsewhere/dj-x-s1"], settings_file, 1, "not in this backend's namespace"),
    ]
    for args, file, rc, needle in cases:
        ran = await kd(file, *args, timeout=60)
        assert ran.rc == rc, (args, ran)
        assert ran.out == "", (args, ran)
        lines = ran.err.splitlines()
        assert len(lines) == 1, (args, ran.err)
        assert lines[0].startswith("error: "), (args, ran.err)
        assert needle in lines[0], (args, needle, ran.err)
    assert await snapshot(kube, ns) == before

    async def probes_gone() -> bool:
        for res in (r.TRAINJOB, r.WORKLOAD, r.JOBSET):
            items, _ = await kube.list(res, ns)
            if any(PROBE_PREFIX in i["metadata"]["name"] for i in items):
                return False
        return True
    await eventually(probes_gone, 60, "the preflight probes' objects gone")
    assert (await lib.inspect(ref)).state is ObjectState.GATED
    await lib.stop_job(job, "done")


async def test_stop_interrupted_says_what_it_deleted(lib: Backend,
                                                     settings_file: Path) -> None:
    job, ref = await started(lib)
    await lib.open(ref)
    await running_with_pods(lib, ref, 2)
    proc = await interruptible("stop", job, "--reason", "interrupted", "--settings",
                               str(settings_file))
    assert proc.stderr is not None
    first = await asyncio.wait_for(proc.stderr.readline(), 60)
    assert first.startswith(f"stopping job {job}: ".encode()), first
    # The pods take 3 s to go after SIGTERM (TALKER's trap): interrupt while they are there.
    await asyncio.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 130, (out, err)
    text = (first + err).decode()
    assert re.search(rf"interrupted: the stop of job {job} was cut short; \d+ of \d+ objects "
                     r"deleted so far, \d+ still there; run the stop again to finish", text), text
    listed = out.decode().splitlines()
    assert listed, text
    assert all(re.match(r"^(deleted  |left     )\w+/", line) for line in listed), listed
    assert f"deleted  TrainJob/{ref.name}" in listed, listed
    report = await lib.stop_job(job, "finish")
    assert report.complete


async def test_without_a_settings_file_as_kubectl(lib: Backend, kubeconfig: str, ns: str,
                                                 tmp_path: Path) -> None:
    """The kubeconfig's context (here -n) says where; the job's TrainJob says Kueue mode;
    what needs the preflight names probeRuntime."""
    none = {"DISPATCH_KUBEFLOW_SETTINGS": "", "XDG_CONFIG_HOME": str(tmp_path)}
    where = ["--kubeconfig", kubeconfig, "-n", ns]
    job, ref = await started(lib)
    await lib.open(ref)
    await running_with_pods(lib, ref, 2)
    got = await kd(None, "get", *where, env=none)
    assert row_of(got.out, job).split()[3] == "running", got
    held = await kd(None, "hold", job, "--reason", "no settings", *where, env=none)
    assert held.out.strip() == f"held: TrainJob {ref.id}, instance 1", held
    assert (await lib.wait(ref, ObjectState.HELD, timeout=120)).hold_instance == 1
    again = await kd(None, "hold", job, "--reason", "again", *where, env=none)
    assert again.rc == 1, again
    assert "release that first" in again.err, again
    refused = await kd(None, "release", job, "--instance", "1", *where, env=none)
    assert refused.rc == 1, refused
    assert refused.err.startswith("error: probeRuntime: "), refused
    stopped = await kd(None, "stop", job, "--reason", "done", "--timeout", "2m", *where,
                       env=none)
    assert stopped.rc == 0, stopped
    assert re.search(r"^stopped  Workload/", stopped.out, re.M), stopped.out


# --- what a person sees: get -w in a terminal ----------------------------------------------------


def tmux(socket: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", socket, *args], check=True, capture_output=True,
                          text=True, timeout=30).stdout


@pytest.fixture
def terminal() -> Any:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install -y tmux)")
    socket = f"dk-test-{uuid.uuid4().hex[:8]}"
    try:
        yield socket
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], check=False, capture_output=True)


def screen(socket: str) -> list[str]:
    """Everything the pane showed (its history too), joined where it wrapped."""
    return tmux(socket, "capture-pane", "-p", "-J", "-S", "-", "-t", "get").splitlines()


async def test_get_watch_in_a_terminal(lib: Backend, settings_file: Path,
                                       terminal: str) -> None:
    cmd = " ".join([*CLI, "get", "-w", "--settings", str(settings_file)])
    tmux(terminal, "new-session", "-d", "-s", "get", "-x", "220", "-y", "50",
         f"{cmd}; echo EXITED $?; sleep 600")

    async def shown(job: JobID, state: str, count: int = 1) -> list[str] | None:
        rows = [line for line in screen(terminal) if line.startswith(str(job))]
        states = [row.split()[3] for row in rows]
        return rows if states.count(state) >= count else None

    await eventually(lambda: asyncio.sleep(0, [ln for ln in screen(terminal)
                                               if ln.startswith("JOB ")]), 60, "the header")
    job, ref = await started(lib)
    await eventually(lambda: shown(job, "gated"), 60, "gated")
    await lib.open(ref)
    await running_with_pods(lib, ref, 2)
    await eventually(lambda: shown(job, "running"), 60, "running")
    await lib.hold(ref, hold_meta(1))
    await eventually(lambda: shown(job, "held"), 120, "held")
    await lib.release(ref, hold_meta(1))
    await running_with_pods(lib, ref, 2)
    await eventually(lambda: shown(job, "running", 2), 60, "running again")
    await lib.stop_job(job, "the terminal test is over")
    rows = await eventually(lambda: shown(job, "gone"), 60, "gone")

    lines = screen(terminal)
    header = next(line for line in lines if line.startswith("JOB "))
    assert lines.index(header) < lines.index(rows[0])
    assert not any(line.startswith("EXITED") for line in lines), lines
    assert not any("error" in line.lower() for line in lines), lines
    # The rows line up under the header: each column starts where its title does.
    for title in ("STATE", "PODS", "HOLD", "CAUSE"):
        at = header.index(title)
        for row in rows:
            assert row[at - 1] == " ", (title, header, row)
            assert row[at] != " ", (title, header, row)
    states = [row.split()[3] for row in rows]
    wanted = iter(["gated", "running", "held", "running", "gone"])
    want = next(wanted)
    for st in states:
        if st == want:
            want = next(wanted, "")
    assert want == "", f"the rows went {states}, not gated → running → held → running → gone"
    held = next(row for row in rows if row.split()[3] == "held")
    assert held.split()[7] == "1", held  # the hold's instance
    running = [row for row in rows if row.split()[3] == "running"]
    assert running[-1].split()[4] == "2/2", running
    gone = rows[-1].split()
    assert gone[3:5] == ["gone", "0/0"], rows


# --- the page docs/kubectl.md, captured ----------------------------------------------------------

CAPTURE = os.environ.get("DISPATCH_CAPTURE_DOCS") == "1"


def capture_module() -> Any:
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "docs" / "capture_kubectl.py"
    spec = importlib.util.spec_from_file_location("capture_kubectl", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest_asyncio.fixture
async def docs_ns(kube: Kube) -> AsyncIterator[str]:
    """The capture's namespace: a fixed name when writing the page (it shows in it)."""
    name = "kubectl-demo" if CAPTURE else f"t-{uuid.uuid4().hex[:10]}"

    async def gone() -> bool:
        return await kube.get_or_none(r.NAMESPACE, name) is None

    if not await gone():  # left by an interrupted capture
        await kube.delete(r.NAMESPACE, name, propagation="Background")
        await eventually(gone, 120, f"namespace {name} gone")
    await kube.create(r.NAMESPACE, {"metadata": {"name": name}})
    await make_queues(kube, name, checks=[names.ADMISSION_CHECK], cpu="1", memory="1Gi")
    try:
        yield name
    finally:
        await delete_cluster_queue(kube, name)
        await kube.delete(r.NAMESPACE, name, propagation="Background")


async def test_the_docs_page_captures(kubeconfig: str, docs_ns: str, admission: Any,
                                      kube: Kube, tmp_path: Path) -> None:
    await admission.deployed(kube)
    cap = capture_module()
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(settings(kubeconfig, docs_ns)))
    page = cap.PAGE if CAPTURE else tmp_path / "kubectl.md"
    text = await cap.capture(path, CLI)
    page.write_text(text)
    assert cap.check(page) == []
    for seen in ("gated", "released: TrainJob", "not held: TrainJob", "stopped: job",
                 "error: Invalid value for 'JOB'", "cluster.kubeconfig: no such file"):
        assert seen in text, seen


async def test_a_long_wait_shows_a_spinner_in_a_terminal(settings_file: Path,
                                                        terminal: str, tmp_path: Path) -> None:
    # The seed's full 10 s probe window ("window"): proven positively, the preflight is
    # over in well under the second after which the spinner shows.
    slow = tmp_path / "window.json"
    good = json.loads(settings_file.read_text())  # noqa: ASYNC240 - a small local file
    slow.write_text(json.dumps({**good, "probeWatch": "window"}))
    cmd = " ".join([*CLI, "preflight", "--settings", str(slow)])
    tmux(terminal, "new-session", "-d", "-s", "get", "-x", "200", "-y", "30",
         f"{cmd}; echo EXITED $?; sleep 600")

    async def spinning() -> bool:
        return any(re.search(r"^[|/\\-] running the preflight \(\d+s\)", ln)
                   for ln in screen(terminal))

    await eventually(spinning, 60, "the spinner", interval=0.2)
    done = await eventually(lambda: asyncio.sleep(0, [ln for ln in screen(terminal)
                                                      if ln.startswith("EXITED")]), 120,
                            "the end")
    assert done == ["EXITED 0"]
    lines = screen(terminal)
    assert not any("running the preflight" in ln for ln in lines), lines  # cleared
    assert lines[0].startswith("CAPABILITY"), lines


async def test_preflight_exits_3_when_observe_only(lib: Backend, kubeconfig: str, ns: str,
                                                   tmp_path: Path) -> None:
    path = tmp_path / "other-check.json"
    path.write_text(json.dumps(settings(kubeconfig, ns, admissionCheck="not-listed-here")))
    ran = await kd(path, "preflight")
    assert ran.rc == 3, ran
    assert re.search(r"^ReadmissionGate\s+no\s+probed\s+\S", ran.out, re.M), ran.out
    assert ran.err.startswith("observe-only: ReadmissionGate: no"), ran.err
    job, _ = await started(lib)
    refused = await kd(path, "release", job, "--instance", "1")
    assert refused.rc == 1
    assert refused.err.startswith("error: Release refused: the backend is observe-only: "
                                  "ReadmissionGate: no"), refused.err
    assert refused.err.rstrip().endswith("'kubectl dispatch preflight' shows every capability")
    await lib.stop_job(job, "done")
