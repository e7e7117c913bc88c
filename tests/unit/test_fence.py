"""admission.fence (a pod's own fence): the share runs from before each question; the pod's
processes stop when the share runs out, whether the agent answers, refuses, fails or hangs;
the workload starts only after a positive answer."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from admission import fence as fence_module
from admission.fence import (
    AUDIENCE,
    Fence,
    Placement,
    claims_the_fence,
    fence_parts,
    sidecar_patch,
    stop_processes,
)
from admission.tls import generate
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube.resources import POD
from tests.unit.fake_kube import json_patch

pytestmark = pytest.mark.asyncio


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


async def test_a_share_runs_from_before_the_question_not_from_the_answer() -> None:
    clock = Clock()

    async def slow_agent() -> float:
        clock.now += 7  # the answer arrives 7 s after the question was sent
        return 30.0
    fence = Fence(slow_agent, lambda: None, length=30.0, clock=clock)
    assert await fence.question()
    assert fence.share.until == 50.0 + 30.0


async def test_refusals_and_failures_extend_nothing() -> None:
    clock = Clock()
    answers: list[float | Exception] = [10.0, 0.0, ConnectionRefusedError("agent down")]

    async def agent() -> float:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a
    fence = Fence(agent, lambda: None, length=30.0, clock=clock)
    assert await fence.question()
    clock.now += 5
    assert not await fence.question()
    assert not await fence.question()
    assert fence.share.until == 60.0
    assert fence.share.expired(60.0)


async def run_until_stopped(fence: Fence, stopped: asyncio.Event, limit: float) -> None:
    task = asyncio.create_task(fence.run())
    try:
        await asyncio.wait_for(stopped.wait(), limit)
        await asyncio.wait_for(task, 1.0)
    finally:
        task.cancel()


async def test_a_hanging_agent_stops_the_pod_when_the_share_runs_out() -> None:
    stopped, stops = asyncio.Event(), []
    first = True

    async def agent() -> float:
        nonlocal first
        if first:
            first = False
            return 0.6
        await asyncio.Event().wait()  # never answers again
        return 0.0

    def stop() -> None:
        stops.append(time.monotonic())
        stopped.set()
    fence = Fence(agent, stop, length=0.6)
    await run_until_stopped(fence, stopped, 5.0)
    assert fence.started.is_set()
    assert len(stops) == 1
    # Never before the share's end; soon after it.
    assert stops[0] >= fence.share.until
    assert stops[0] - fence.share.until < 0.5


async def test_an_answering_agent_keeps_the_pod_running_until_it_refuses() -> None:
    stopped, stops = asyncio.Event(), []
    grant = 0.6
    asked = 0

    async def agent() -> float:
        nonlocal asked
        asked += 1
        return grant

    def stop() -> None:
        stops.append(time.monotonic())
        stopped.set()
    fence = Fence(agent, stop, length=0.6)
    task = asyncio.create_task(fence.run())
    await asyncio.sleep(2.0)  # more than three shares: renewed all along
    assert stops == []
    assert asked >= 6
    grant = 0.0  # the permit is gone: every answer now refuses
    try:
        await asyncio.wait_for(stopped.wait(), 2.0)
    finally:
        task.cancel()
    assert stops[0] >= fence.share.until


async def test_a_share_running_short_is_asked_sooner_and_a_late_renewal_keeps_the_pod() -> None:
    # The worker's permit was last renewed so that the pod's share ends 5.2 s after its first
    # question; the next renewal lands at 4.2 s (a worker back from a cut). Asked a period
    # (2 s) apart, the pod would miss it (questions at 2 and 4 s, the next at 6 s, after its
    # share ended); asked ever sooner as the share runs short, it sees it at 4.4 s.
    start = time.monotonic()
    permit = start + 5.2
    stopped, stops = asyncio.Event(), []

    async def agent() -> float:
        return max(0.0, permit - time.monotonic())  # what is left of the worker's permit

    def stop() -> None:
        stops.append(time.monotonic() - start)
        stopped.set()
    fence = Fence(agent, stop, length=6.0, retry=0.05)
    task = asyncio.create_task(fence.run())
    try:
        await asyncio.sleep(4.2)
        permit = time.monotonic() + 6.0  # the renewal lands
        await asyncio.sleep(1.8)  # to 6 s: past the first share's end
        assert stops == []
        assert fence.share.until > start + 6.0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_steady_shares_are_asked_a_period_apart_and_short_ones_sooner() -> None:
    clock = Clock()

    async def agent() -> float:
        return 60.0
    fence = Fence(agent, lambda: None, length=60.0, clock=clock,
                  retry=1.0)
    fence.share.granted(clock.now, 60.0)
    assert fence.next_question_in() == 20.0
    clock.now += 19.0  # 41 s left: a steady share (the permit renewed every 16 to 20 s)
    assert fence.next_question_in() == 20.0
    clock.now += 11.0  # 30 s left
    assert fence.next_question_in() == 15.0
    clock.now += 28.0  # 2 s left
    assert fence.next_question_in() == 1.0
    clock.now += 5.0  # run out
    assert fence.next_question_in() == 1.0


async def test_the_workload_waits_for_a_positive_first_answer() -> None:
    answers = [0.0, 0.0, 5.0]
    stops: list[float] = []

    async def agent() -> float:
        return answers.pop(0) if answers else 5.0
    fence = Fence(agent, lambda: stops.append(1.0), length=5.0, retry=0.05)
    task = asyncio.create_task(fence.run())
    try:
        await asyncio.wait_for(fence.started.wait(), 2.0)
        assert answers == []  # started only with the third, positive, answer
        assert stops == []
    finally:
        task.cancel()


async def test_a_fence_that_fails_stops_the_processes_it_measured() -> None:
    stops: list[float] = []
    calls = 0

    async def agent() -> float:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise ValueError("a bug in the question")
        return 30.0
    fence = Fence(agent, lambda: stops.append(1.0), length=0.3)
    with pytest.raises(ExceptionGroup):
        await asyncio.wait_for(fence.run(), 2.0)
    assert stops == [1.0]  # long before the 30 s share ran out


# --- its place in a pod, and the stop ------------------------------------------------------

PLACE = Placement(image="dispatch-admission:dev", agent="https://agent.invalid", length=60,
                  ca="-----BEGIN CERTIFICATE-----\n")


def patched(pod: dict[str, Any]) -> dict[str, Any]:
    json_patch(pod, sidecar_patch(pod, PLACE), POD, "p")
    return pod


@pytest.mark.parametrize("init", [[], [{"name": "setup", "image": "busybox"}]])
@pytest.mark.parametrize("volumes", [[], [{"name": "data", "emptyDir": {}}]])
async def test_the_fence_is_the_first_container_and_holds_the_others_back(
        init: list[dict[str, Any]], volumes: list[dict[str, Any]]) -> None:
    pod = patched({"spec": {"initContainers": list(init), "volumes": list(volumes),
                            "containers": [{"name": "node", "image": "x"}]}})
    spec = pod["spec"]
    fence = spec["initContainers"][0]
    assert fence["name"] == names.FENCE_CONTAINER
    assert fence["restartPolicy"] == "Always"  # a native sidecar: runs beside the others
    assert "startupProbe" in fence  # ...which start only after its first answer
    assert spec["initContainers"][1:] == init
    assert spec["shareProcessNamespace"] is True  # so that it can stop their processes
    assert [v["name"] for v in spec["volumes"]] == [v["name"] for v in volumes] + [
        names.FENCE_CONTAINER]
    token = spec["volumes"][-1]["projected"]["sources"][0]["serviceAccountToken"]
    assert token["audience"] == AUDIENCE
    env = {e["name"]: e["value"] for e in fence["env"]}
    assert env == {"DISPATCH_FENCE_AGENT": PLACE.agent, "DISPATCH_FENCE_LENGTH": "60",
                   "DISPATCH_FENCE_CA": PLACE.ca}
    assert not claims_the_fence({"spec": {"initContainers": init, "volumes": volumes}})
    assert claims_the_fence(pod)


async def test_a_pod_naming_its_own_fence_is_claimed() -> None:
    assert claims_the_fence({"spec": {"containers": [{"name": names.FENCE_CONTAINER}]}})
    assert claims_the_fence({"spec": {"volumes": [{"name": names.FENCE_CONTAINER}]}})


async def test_the_stop_kills_every_process_but_the_fence_and_the_pause() -> None:
    sent: list[tuple[int, int]] = []

    def kill(pid: int, sig: int) -> None:
        if pid == 40:
            raise ProcessLookupError(pid)  # ended meanwhile
        sent.append((pid, sig))
    killed = stop_processes(lambda: [1, 7, 23, 40, 41], kill, me=7)
    assert killed == [23, 41]
    assert sent == [(23, signal.SIGKILL), (41, signal.SIGKILL)]


async def test_a_process_the_fence_may_not_signal_does_not_stop_the_stop(
        caplog: pytest.LogCaptureFixture) -> None:
    """Seen on the local MultiKueue clusters: the fence, as user 65532, could not kill the
    workload's processes (root's); the PermissionError ended the fence, which crash-looped,
    and the cut-off worker's pod ran on for minutes past its share. A refusal is logged and
    the other processes are killed; the fence keeps trying."""
    sent: list[int] = []

    def kill(pid: int, sig: int) -> None:
        if pid == 23:
            raise PermissionError(1, "Operation not permitted")
        sent.append(pid)
    with caplog.at_level("ERROR"):
        killed = stop_processes(lambda: [1, 7, 23, 41], kill, me=7)
    assert killed == [41]
    assert sent == [41]
    assert "may not signal process 23" in caplog.text


async def test_the_fence_may_signal_every_process_of_the_pod_and_nothing_more() -> None:
    """The fence must be able to kill whatever user the pod's own containers run as: root
    with the one capability to signal (CAP_KILL), nothing else, no escalation; a pod
    running as non-root keeps its own containers so."""
    fence, _ = fence_parts(PLACE)
    assert fence["securityContext"] == {
        "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,
        "allowPrivilegeEscalation": False, "privileged": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": ["KILL"]}}


async def test_a_fence_that_fails_says_why_before_it_stops_the_pod(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Seen on the local MultiKueue clusters: the fence (user 65532) could not write its
    startup marker under /run, failed, and kept the pod's processes stopped forever without
    a line in its log. Now the failure is logged first."""
    # A marker it cannot write (here: in a directory that does not exist; root, as the
    # tests run, may write anywhere else).
    monkeypatch.setattr(fence_module, "STARTED", str(tmp_path / "missing" / "started"))

    async def agent() -> float:
        return 30.0
    fence = Fence(agent, lambda: None, length=30.0)
    with caplog.at_level("ERROR", logger=fence_module.__name__):
        await asyncio.to_thread(fence_module.serve_once, fence)
    assert fence.stopped
    assert [r.getMessage() for r in caplog.records] == [
        "the fence failed; the pod's processes stay stopped"]
    assert caplog.records[0].exc_info is not None


async def test_the_startup_marker_is_where_any_user_may_write() -> None:
    """The fence runs as the image's user (65532), in a pod that may make its root
    filesystem read-only: /dev/shm, the pod's own tmpfs, is writable by all."""
    assert Path(fence_module.STARTED).parent == Path("/dev/shm")
    probe = next(c for c in fence_module.fence_parts(PLACE)[0]["startupProbe"]["exec"][
        "command"] if "exists" in c)
    assert fence_module.STARTED in probe


# --- the question over HTTPS ----------------------------------------------------------------

async def agent_server(handler: Any) -> tuple[web.AppRunner, str, str]:
    material = generate(["localhost", "127.0.0.1"])
    app = web.Application()
    app.router.add_post("/fence", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=material.ssl_context())
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"https://127.0.0.1:{port}", material.ca.decode()


async def test_a_question_shows_the_pods_token_and_reads_the_seconds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("tok-1\n")
    monkeypatch.setattr(fence_module, "TOKEN_DIR", str(tmp_path))
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if len(seen) > 1:
            return web.Response(status=403, text="not a dispatch pod")
        return web.json_response({"seconds": 42.5})
    runner, url, ca = await agent_server(handler)
    try:
        assert await fence_module._ask_agent(url, ca, 5) == 42.5
        assert seen == ["Bearer tok-1"]
        with pytest.raises(OSError, match="403"):
            await fence_module._ask_agent(url, ca, 5)
        # Another CA: the agent's certificate is not trusted, the question not sent.
        other = generate(["localhost"]).ca.decode()
        with pytest.raises(OSError, match="cannot reach the agent"):
            await fence_module._ask_agent(url, other, 5)
        assert len(seen) == 2
    finally:
        await runner.cleanup()
    with pytest.raises(OSError, match="cannot reach the agent"):
        await fence_module._ask_agent(url, ca, 5)


async def test_the_fence_says_why_the_agent_said_no_once_a_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A fence the agent keeps refusing asks every second; its log (kubectl logs -c
    dispatch-fence) must say why, but not every second. On the local MultiKueue clusters
    a refused fence logged nothing at all, and the pod waited with no word why."""
    (tmp_path / "token").write_text("tok-1\n")
    monkeypatch.setattr(fence_module, "TOKEN_DIR", str(tmp_path))
    reasons = ["worker w1 holds no permit", "worker w1 holds no permit", "not current"]

    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"seconds": 0, "reason": reasons.pop(0)})
    runner, url, ca = await agent_server(handler)
    try:
        with caplog.at_level("INFO", logger=fence_module.__name__):
            for _ in range(3):
                assert await fence_module._ask_agent(url, ca, 5) == 0.0
    finally:
        await runner.cleanup()
    said = [r.getMessage() for r in caplog.records if "said no" in r.getMessage()]
    assert said == ["the agent said no: worker w1 holds no permit",
                    "the agent said no: not current"]


async def test_a_door_reached_by_address_is_checked_against_its_services_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster without DNS: the fence dials the Service's address, and checks the door's
    certificate (which names the Service, not the address) against the name it is given."""
    (tmp_path / "token").write_text("tok\n")
    monkeypatch.setattr(fence_module, "TOKEN_DIR", str(tmp_path))
    material = generate(["dispatch-admission.dispatch-system.svc"])

    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"seconds": 7.0})
    app = web.Application()
    app.router.add_post("/fence", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=material.ssl_context()).start()
    url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    ca = material.ca.decode()
    try:
        with pytest.raises(OSError, match="cannot reach the agent"):
            await fence_module._ask_agent(url, ca, 5)  # the address is not in the certificate
        assert await fence_module._ask_agent(
            url, ca, 5, "dispatch-admission.dispatch-system.svc") == 7.0
    finally:
        await runner.cleanup()
    place = dataclasses.replace(PLACE, server_name="dispatch-admission.dispatch-system.svc")
    [init] = [op for op in sidecar_patch({"spec": {}}, place)
              if op["path"] == "/spec/initContainers"]
    env = {e["name"]: e["value"] for e in init["value"][0]["env"]}
    assert env["DISPATCH_FENCE_SERVER_NAME"] == "dispatch-admission.dispatch-system.svc"
    assert "DISPATCH_FENCE_SERVER_NAME" not in json.dumps(sidecar_patch({"spec": {}}, PLACE))
