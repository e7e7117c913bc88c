"""The pod's own fence (``dispatch-fence``): a pod's processes run only on a share of its
worker's permit, and stop when the share runs out, whether or not anyone can be reached.

In a worker cluster (MultiKueue, docs/multikueue-fence.md) every dispatch pod carries this
as a native sidecar. Before the workload starts it asks the worker's agent "how long" until
the answer is positive (the workload's container waits for the sidecar's startup probe);
then it asks every length / 3, and sooner as its share runs short (a renewal that lands
just before the end is still seen). Each answer is measured from *before* the question was
sent, on the pod's own clock (core.permit.Share), never from the answer's arrival, which
may be late. A watchdog, apart from the questions, stops the pod's processes the moment the share
runs out: an agent that hangs, a worker cut off from the manager and a dead agent all end in
the same place, at most one permit length after the last renewal the manager accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.permit import Share

log = logging.getLogger(__name__)

Ask = Callable[[], Awaitable[float]]
"""One question to the agent: the seconds it grants (0: none). May hang; raises OSError or
TimeoutError when the agent cannot be reached (anything else is a bug, and stops the pod)."""


class Fence:
    """One pod's fence: ``ask`` the agent, ``stop`` the pod's processes (every process of
    the pod but the fence, in its shared process namespace)."""

    def __init__(self, ask: Ask, stop: Callable[[], None], *, length: float,
                 clock: Callable[[], float] = time.monotonic,
                 retry: float = 1.0) -> None:
        self._ask, self._stop = ask, stop
        self.period = length / 3
        self._clock = clock
        self._retry = retry
        self.share = Share()
        self.started = asyncio.Event()
        """Set once the first positive answer came: the startup probe's answer."""
        self._extended = asyncio.Event()
        self.stopped = False

    async def question(self) -> bool:
        """One question; whether it extended the share. A failed or refused question
        extends nothing: the share runs out by itself."""
        asked = self._clock()  # before the question is sent: the share runs from here
        try:
            seconds = await self._ask()
        except (OSError, TimeoutError) as exc:
            log.warning("cannot ask the agent how long: %s; %.0f s of the share left",
                        exc, max(0.0, self.share.until - self._clock()))
            return False
        if seconds <= 0:
            return False
        before = self.share.until
        self.share.granted(asked, seconds)
        if self.share.until > before:
            self._extended.set()
        return self.share.until > before

    async def run(self) -> None:
        """Ask until the first share, then keep asking while the watchdog waits for the
        share to run out; returns once the pod's processes were stopped. However it ends
        (a bug in a question, cancelled with the pod), the processes are stopped: none may
        outlive the fence that measures their share."""
        try:
            # Polls the agent, which has nothing to notify with: a pod may not start
            # until an answer says so.
            while True:
                if await self.question():
                    break
                await asyncio.sleep(self._retry)
            self.started.set()
            async with asyncio.TaskGroup() as tasks:
                asker = tasks.create_task(self._keep_asking())
                await self._watch()
                asker.cancel()
        finally:
            if not self.stopped:
                self._halt()

    def _halt(self) -> None:
        self.stopped = True
        self._stop()

    def next_question_in(self) -> float:
        """Seconds until the next question: a period while the share has two periods left or
        more (the permit renewed on time); as it runs short (the worker cut off from the
        manager, the agent unable to review a token), half of what is left, never under the
        retry pause. A renewal that lands just before the share would end is then still
        seen: asking a period apart, a pod back from a 20 s cut could miss one by seconds.
        About log2(length) more questions while a share runs out; none in steady state."""
        left = self.share.until - self._clock()
        return min(self.period, max(self._retry, left / 2))

    async def _keep_asking(self) -> None:
        while True:
            await asyncio.sleep(self.next_question_in())
            # A question that hangs must not hold the next one back past the share's end.
            try:
                await asyncio.wait_for(self.question(), self.period)
            except TimeoutError:
                log.warning("the agent did not answer within %.0f s", self.period)

    async def _watch(self) -> None:
        while not self.share.expired(self._clock()):
            self._extended.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._extended.wait(),
                                       max(0.0, self.share.until - self._clock()))
        log.warning("the share of the worker's permit ran out: stopping the pod's processes")
        self._halt()


# --- its place in a pod (the worker's webhook) ---------------------------------------------

STARTED = "/dev/shm/dispatch-fence-started"
"""Written by the fence once the first positive answer came; its startup probe reads it, and
the pod's other containers start only after that probe (a native sidecar's). In the pod's
own tmpfs, which every user may write: the fence's own root filesystem is read-only, and the
pod's may be too. Nothing else of the pod runs before the probe
passes, so nothing else could write it first."""
TOKEN_DIR = "/var/run/secrets/dispatch-fence"
AUDIENCE = "dispatch-fence"
"""The audience of the pod's own ServiceAccount token the fence shows the agent: a token
for nothing else, so the agent learns from it which pod asks (its bound pod name and UID)."""


@dataclass(frozen=True, slots=True)
class Placement:
    """What the worker's webhook puts in a dispatch pod for its fence."""

    image: str
    """An image holding this package (the controller's own)."""
    agent: str
    """The agent's URL, as a pod reaches it (its Service in dispatch-system)."""
    length: float
    """The permit's length: the fence asks every length / 3 (sooner as its share runs short)."""
    ca: str
    """The PEM of the CA that signed the agent's serving certificate (the controller's)."""
    server_name: str = ""
    """The name the agent's certificate is checked against when the URL names an address
    (a cluster without DNS reaches the Service by its ClusterIP); "": the URL's host."""


SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where the API server's ServiceAccount admission mounts a pod's API token."""


def fence_parts(place: Placement) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fence's container and its token's volume, as the webhook puts them."""
    fence = {
        "name": names.FENCE_CONTAINER,
        "image": place.image,
        "command": ["python", "-m", "admission.fence"],
        "restartPolicy": "Always",
        "env": [
            {"name": "DISPATCH_FENCE_AGENT", "value": place.agent},
            {"name": "DISPATCH_FENCE_LENGTH", "value": f"{place.length:g}"},
            {"name": "DISPATCH_FENCE_CA", "value": place.ca},
            *([{"name": "DISPATCH_FENCE_SERVER_NAME", "value": place.server_name}]
              if place.server_name else []),
        ],
        "startupProbe": {
            "exec": {"command": ["python", "-c",
                                 f"import os, sys; sys.exit(not os.path.exists({STARTED!r}))"]},
            "periodSeconds": 1, "failureThreshold": 100000,
        },
        "volumeMounts": [{"name": names.FENCE_CONTAINER, "mountPath": TOKEN_DIR,
                          "readOnly": True}],
        "resources": {"requests": {"cpu": "10m", "memory": "48Mi"},
                      "limits": {"memory": "96Mi"}},
        # It must kill the pod's processes whatever user they run as: as the image's user
        # (65532) it could not kill a root workload's, and a cut-off worker's pod ran on
        # past its share. Root with the one capability to signal, nothing else.
        "securityContext": {
            "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,
            "allowPrivilegeEscalation": False, "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["KILL"]}},
    }
    volume = {"name": names.FENCE_CONTAINER, "projected": {"sources": [
        {"serviceAccountToken": {"audience": AUDIENCE, "expirationSeconds": 3600,
                                 "path": "token"}}]}}
    return fence, volume


def sidecar_patch(pod: dict[str, Any], place: Placement) -> list[dict[str, Any]]:
    """JSONPatch ops putting the fence in ``pod``: first of its init containers, as a native
    sidecar (restartPolicy Always) whose startup probe holds every other container back
    until the first answer, with the pod's processes in one namespace so that it can stop
    them. A pod that brings a container of that name already is refused by the caller
    (:func:`claims_the_fence`), unless it is this webhook's own (:func:`fence_is_ours`)."""
    spec = pod.get("spec") or {}
    fence, volume = fence_parts(place)
    ops: list[dict[str, Any]] = [{"op": "add", "path": "/spec/shareProcessNamespace",
                                  "value": True}]
    if spec.get("initContainers"):
        ops.append({"op": "add", "path": "/spec/initContainers/0", "value": fence})
    else:
        ops.append({"op": "add", "path": "/spec/initContainers", "value": [fence]})
    if spec.get("volumes"):
        ops.append({"op": "add", "path": "/spec/volumes/-", "value": volume})
    else:
        ops.append({"op": "add", "path": "/spec/volumes", "value": [volume]})
    return ops


def claims_the_fence(pod: dict[str, Any]) -> bool:
    """Whether ``pod`` brings a container or volume named like the fence: a pod that could
    stand in for its own fence is refused, never merged."""
    spec = pod.get("spec") or {}
    named = [c.get("name") for f in ("initContainers", "containers")
             for c in spec.get(f) or []]
    named += [v.get("name") for v in spec.get("volumes") or []]
    return names.FENCE_CONTAINER in named


def fence_is_ours(pod: dict[str, Any], place: Placement) -> bool:
    """Whether what ``pod`` brings under the fence's name is exactly what this webhook puts
    (as the API server stores it: every field the webhook sets as it set it, defaults
    added): the pod as this webhook left it, handed back by a reinvocation
    (``reinvocationPolicy: IfNeeded``, after another webhook changed the pod). Anything
    else under that name (another image, agent, CA, command, a container among the pod's
    own) is not, and is refused."""
    return not fence_differs(pod, place)


def fence_differs(pod: dict[str, Any], place: Placement) -> str:
    """Where what ``pod`` brings under the fence's name differs from this webhook's fence
    ("" where it does not: see :func:`fence_is_ours`)."""
    spec = pod.get("spec") or {}
    fence, volume = fence_parts(place)
    inits = [c for c in spec.get("initContainers") or [] if c.get("name") == fence["name"]]
    if any(c.get("name") == fence["name"] for c in spec.get("containers") or []):
        return "a container of the pod's own"
    vols = [v for v in spec.get("volumes") or [] if v.get("name") == volume["name"]]
    if len(inits) != 1 or len(vols) != 1:
        return "not one init container and one volume"
    if spec.get("shareProcessNamespace") is not True:
        return "spec.shareProcessNamespace"
    # The API server's ServiceAccount admission mounts the pod's API token into every
    # container, the fence's too, before this webhook is called again; nothing else may be
    # added (a mount over the fence's own code, a variable that changes what it loads).
    init = {**inits[0], "volumeMounts": [
        m for m in inits[0].get("volumeMounts") or []
        if m.get("mountPath") != SERVICE_ACCOUNT_MOUNT]}
    return (_differs(fence, init, "the init container") or
            _differs(volume, vols[0], "the volume"))


def _differs(ours: Any, theirs: Any, at: str) -> str:
    """Where ``theirs`` lacks a field of ``ours`` or holds another value ("" nowhere;
    ``theirs`` may have more: the API server's defaults)."""
    if isinstance(ours, dict):
        if not isinstance(theirs, dict):
            return at
        return next((d for k, v in ours.items()
                     if (d := (_differs(v, theirs[k], f"{at}.{k}") if k in theirs
                               else f"{at}.{k}"))), "")
    if isinstance(ours, list):
        if not isinstance(theirs, list) or len(ours) != len(theirs):
            return at
        return next((d for i, (a, b) in enumerate(zip(ours, theirs, strict=True))
                     if (d := _differs(a, b, f"{at}[{i}]"))), "")
    return "" if ours == theirs else at


def carries_the_fence(pod: dict[str, Any]) -> bool:
    """Whether ``pod`` carries the fence as the worker's webhook puts it: a native sidecar
    (an init container with restartPolicy Always) of that name."""
    return any(c.get("name") == names.FENCE_CONTAINER and c.get("restartPolicy") == "Always"
               for c in (pod.get("spec") or {}).get("initContainers") or [])


# --- stopping the pod's processes ----------------------------------------------------------

def stop_processes(pids: Callable[[], Iterable[int]] | None = None,
                   kill: Callable[[int, int], None] = os.kill,
                   me: int | None = None) -> list[int]:
    """SIGKILL every process of the pod but the fence and the pod's first process (the
    sandbox's pause, pid 1 in a shared process namespace); the pids killed. A process that
    ended meanwhile is skipped. A container whose processes are killed ends, and the pod's
    restart policy and its Job decide what follows, through the webhook again."""
    me = os.getpid() if me is None else me
    killed = []
    for pid in (pids or _proc_pids)():
        if pid in (me, 1):
            continue
        try:
            kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        except PermissionError:
            # Never the end of the fence (it would crash-loop, stopping nothing): the
            # others are killed, and the caller tries again.
            _refused(pid)
            continue
        killed.append(pid)
    return killed


_REFUSED: set[int] = set()


def _refused(pid: int) -> None:
    if pid not in _REFUSED:  # once a process: the stop is tried every half second
        _REFUSED.add(pid)
        log.error("the fence may not signal process %d: it keeps running; the fence needs "
                  "CAP_KILL (its securityContext)", pid)


def _proc_pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


# --- the program ---------------------------------------------------------------------------

async def _ask_agent(agent: str, ca: str, timeout: float, server_name: str = "") -> float:
    """One question over HTTPS, with the pod's own token for the fence's audience (read at
    each question: the kubelet rotates it). Unreachable or refused: OSError."""
    token = (await asyncio.to_thread(Path(TOKEN_DIR, "token").read_text)).strip()
    context = ssl.create_default_context(cadata=ca)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s, \
                s.post(f"{agent}/fence", headers={"Authorization": f"Bearer {token}"},
                       ssl=context, server_hostname=server_name or None) as resp:
            if resp.status != 200:
                raise OSError(f"the agent answered {resp.status}: {await resp.text()}")
            body = await resp.json()
    except aiohttp.ClientError as exc:
        raise OSError(f"cannot reach the agent at {agent}: {exc}") from exc
    seconds = float(body.get("seconds") or 0.0)
    reason = str(body.get("reason") or "")
    if seconds <= 0 and reason != _last_refusal[0]:
        # Asked every second until it says yes: each reason once, not each time.
        log.info("the agent said no: %s", reason or "(no reason given)")
    _last_refusal[0] = reason if seconds <= 0 else ""
    return seconds


_last_refusal = [""]
"""The agent's last refusal this fence logged (one fence a process)."""


async def _serve(fence: Fence) -> None:
    async with asyncio.TaskGroup() as tasks:
        running = tasks.create_task(fence.run())
        await fence.started.wait()
        await asyncio.to_thread(_mark_started)
        await running


def _mark_started() -> None:
    Path(STARTED).write_text("started\n", encoding="utf-8")


def serve_once(fence: Fence) -> None:
    """Run ``fence`` until it stops the pod's processes; a failure is logged (the caller
    then keeps the processes stopped, and nothing after would say why)."""
    with contextlib.suppress(FileNotFoundError):
        Path(STARTED).unlink()  # a restarted fence starts unanswered
    try:
        asyncio.run(_serve(fence))
    except Exception:
        log.exception("the fence failed; the pod's processes stay stopped")


def _stop() -> None:
    stop_processes()


def main() -> None:
    """``python -m admission.fence``, in the pod (:func:`sidecar_patch` says how)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    agent, ca = os.environ["DISPATCH_FENCE_AGENT"], os.environ["DISPATCH_FENCE_CA"]
    length = float(os.environ["DISPATCH_FENCE_LENGTH"])
    server_name = os.environ.get("DISPATCH_FENCE_SERVER_NAME", "")
    # A fence that (re)starts while other processes of the pod run does not know their
    # share: they stop before anything else. In a new pod there are none yet (the fence is
    # the first container, and the others wait for its startup probe).
    stop_processes()
    fence = Fence(lambda: _ask_agent(agent, ca, length / 3, server_name), _stop,
                  length=length)
    try:
        serve_once(fence)
    finally:
        # The share ran out, or the fence failed: nothing of this pod runs again. A
        # container its restart policy brings back (after at least the kubelet's 10 s
        # back-off) is stopped again, until the pod is deleted.
        while True:
            stop_processes()
            time.sleep(0.5)


if __name__ == "__main__":
    main()
