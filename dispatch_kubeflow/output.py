"""Output: a rank's log of the job's current execution, as a stream of bytes.

Rank r is the trainer pod (the one with a container named ``node``) labelled
``batch.kubernetes.io/job-completion-index=<r>``. Of several such pods (earlier
executions not yet gone, JobSet restarts, other submissions) the current one is the
highest (submission, A, J), then the newest: A and J come from the pod's
``DISPATCH_ATTEMPT`` (``<job>.<submission>.<attempt>.<A>.<J>``), else from the TrainJob's
admission count and the pod's ``jobset.sigs.k8s.io/restart-attempt`` label.

Streams: ``OutputStream.ALL`` is the container's log as the kubelet keeps it. STDOUT and
STDERR are asked for with the log endpoint's ``stream`` parameter, which the API server
honours only with its feature gate ``PodLogsQuerySplitStreams`` on. When the server
refuses the parameter, STDOUT falls back to the combined log and the stream says so
(``LogStream.split`` is False, and a warning is logged); STDERR raises
`dispatch_kubeflow.errors.UnsupportedError`, since it cannot be told apart.

``tail_lines`` keeps only the log's last lines and ``since`` only what was logged in that
long before now (the log endpoint's ``tailLines`` and ``sinceSeconds``). The API server
refuses ``tailLines`` beside a ``stream`` ("mutually exclusive for now"), so of STDOUT or
STDERR alone the last lines are kept here, from the whole log read once; a followed log of
one stream cannot be tailed (`dispatch_kubeflow.errors.UnsupportedError`: follow
``OutputStream.ALL``, or read the last lines without following).

Reading never blocks the event loop: chunks are awaited from the HTTP response as the
kubelet sends them (``follow=True`` keeps reading until the container ends).
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.admission_count import admissions
from dispatch_kubeflow.core.objects import labels_of, meta
from dispatch_kubeflow.kube import ByteSource, KubeAPI
from dispatch_kubeflow.kube.resources import POD, TRAINJOB
from dispatch_kubeflow.model import JobID, OutputStream
from dispatch_kubeflow.state import restarts
from dispatch_kubeflow.workers import NONE, Workers

log = logging.getLogger(__name__)


class LogStream:
    """An async iterator of log chunks; close it (or use ``async with``) when done.

    What [Backend.output][dispatch_kubeflow.Backend.output] opens:
    ``async for chunk in log:`` gives the log's bytes as the kubelet sends them (with
    ``follow``, until the container ends), or [read][dispatch_kubeflow.LogStream.read]
    takes it all.

    Raises:
        KubeError: While iterating: the log's stream broke off
            ([KubeStreamBroken][dispatch_kubeflow.errors.KubeStreamBroken]) or the server
            refused it.
    """

    def __init__(self, body: ByteSource, *, pod: str, stream: OutputStream, split: bool) -> None:
        self._body = body
        self.pod = pod
        """The pod read."""
        self.stream = stream
        """The stream asked for."""
        self.split = split
        """False when the server could not separate stdout from stderr (combined log)."""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._body.__aiter__()

    async def read(self) -> bytes:
        """Everything until the end (with follow, until the container ends).

        Returns:
            The log's bytes.

        Raises:
            KubeError: The stream broke off or the server refused it.
        """
        parts = [chunk async for chunk in self]
        return b"".join(parts)

    async def aclose(self) -> None:
        """Close the stream (its HTTP response); idempotent."""
        await self._body.aclose()

    async def __aenter__(self) -> LogStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@dataclass(frozen=True, slots=True, order=True)
class _Rank:
    submission: int
    admissions: int
    restarts: int
    created: str
    name: str


def _attempt_env(pod: Mapping[str, Any]) -> str | None:
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") != names.TRAINER_CONTAINER:
            continue
        for env in c.get("env") or []:
            if env.get("name") == names.ENV_ATTEMPT and env.get("value"):
                return str(env["value"])
    return None


def rank_key(pod: Mapping[str, Any], trainjob_a: int) -> _Rank:
    """How current a pod is (pure): (submission, A, J, creation time, name)."""
    sub_label = labels_of(pod).get(names.SUBMISSION_LABEL, "0")
    submission = int(sub_label) if sub_label.isdigit() else 0
    a, j = trainjob_a, restarts(pod)
    attempt = _attempt_env(pod)
    if attempt:
        parts = attempt.split(".")
        if len(parts) >= 5 and parts[-1].isdigit() and parts[-2].isdigit():
            a, j = int(parts[-2]), int(parts[-1])
    return _Rank(submission, a, j, str(meta(pod).get("creationTimestamp", "")),
                 str(meta(pod).get("name", "")))


def has_trainer(pod: Mapping[str, Any]) -> bool:
    return any(c.get("name") == names.TRAINER_CONTAINER
               for c in (pod.get("spec") or {}).get("containers") or [])


def current_pod(pods: Sequence[Mapping[str, Any]],
                a_by_submission: Mapping[int, int]) -> Mapping[str, Any] | None:
    """The pod of the current execution among rank pods (pure)."""
    best: tuple[_Rank, Mapping[str, Any]] | None = None
    for pod in pods:
        if not has_trainer(pod):
            continue
        sub = labels_of(pod).get(names.SUBMISSION_LABEL, "0")
        key = rank_key(pod, a_by_submission.get(int(sub) if sub.isdigit() else 0, 0))
        if best is None or key > best[0]:
            best = (key, pod)
    return best[1] if best else None


async def output(kube: KubeAPI, namespace: str, job: JobID, *, rank: int = 0,
                 stream: OutputStream = OutputStream.STDOUT, follow: bool = False,
                 submission: int | None = None, tail_lines: int | None = None,
                 since: timedelta | None = None, workers: Workers = NONE) -> LogStream:
    """Open rank ``rank``'s log of the current execution of ``job``; ``tail_lines``: only its
    last lines (0 or more), ``since``: only what was logged in that long before now.
    ``workers`` (MultiKueue mode): their pods are candidates too, and the log is read from
    the cluster the current one is in.

    Raises `dispatch_kubeflow.errors.SpecError` for a bad rank, tail or since.

    Raises `dispatch_kubeflow.errors.NotFound` when the job has no pod of that rank,
    or its pod has not started yet (no node: dispatch's start gate holds it, or the
    scheduler has no room): ask again once it runs."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise errors.SpecError(f"rank: must be a non-negative integer, got {rank!r}",
                               field="rank")
    stream = OutputStream(stream)
    since_seconds = log_window(tail_lines, since)
    selector = f"{names.JOB_ID_LABEL}={job},{names.COMPLETION_INDEX_LABEL}={rank}"
    if submission is not None:
        selector += f",{names.SUBMISSION_LABEL}={submission}"
    pods, _ = await kube.list(POD, namespace, label_selector=selector)
    where = {id(p): kube for p in pods}

    async def theirs(name: str, wk: KubeAPI) -> None:
        found, _ = await wk.list(POD, namespace, label_selector=selector)
        pods.extend(found)
        where.update((id(p), wk) for p in found)

    await workers.each(theirs)
    trainjobs, _ = await kube.list(TRAINJOB, namespace,
                                   label_selector=f"{names.JOB_ID_LABEL}={job}")
    a_by_sub = {}
    for tj in trainjobs:
        sub = labels_of(tj).get(names.SUBMISSION_LABEL, "0")
        a_by_sub[int(sub) if sub.isdigit() else 0] = admissions(tj)
    pod = current_pod(pods, a_by_sub)
    if pod is None:
        raise errors.NotFound(f"job {job}: no pod of rank {rank}"
                              + (f" in submission {submission}" if submission else "")
                              + f" in {namespace}")
    name = str(meta(pod)["name"])
    kube = where[id(pod)]  # its log is read from the cluster it is in
    if not (pod.get("spec") or {}).get("nodeName"):
        # Not scheduled yet (dispatch's start gate, or no room): the API server answers a
        # log request for it with an empty stream, which would read as a finished log.
        gates = [str(g.get("name")) for g in (pod.get("spec") or {}).get("schedulingGates")
                 or []]
        raise errors.NotFound(f"job {job}: rank {rank}'s pod {name} has not started yet "
                              f"({'gated by ' + ', '.join(gates) if gates else 'not scheduled'}"
                              "): ask again once it runs")
    want = None if stream is OutputStream.ALL else stream.value
    if want is not None and tail_lines is not None and follow:
        raise errors.UnsupportedError(
            f"the API server cannot tail one stream ({stream!s}) of a followed log (tailLines "
            f"and stream are mutually exclusive); follow {OutputStream.ALL!s}, or read the "
            "last lines without following")
    try:
        # The server tails only the combined log: one stream's last lines are kept here.
        body = await kube.open_pod_log(name, namespace, container=names.TRAINER_CONTAINER,
                                       follow=follow, stream=want,
                                       tail_lines=tail_lines if want is None else None,
                                       since_seconds=since_seconds)
        if want is not None and tail_lines is not None:
            body = _LastLines(body, tail_lines)
        return LogStream(body, pod=name, stream=stream, split=want is not None)
    except errors.KubeInvalid as exc:
        # With the feature gate off, the API server refuses the parameter: 422, a cause on
        # field "stream" (PodLogOptions validation).
        if want is None or not exc.names_field("stream"):
            raise
    if stream is OutputStream.STDERR:
        raise errors.UnsupportedError(
            f"the API server cannot read stderr alone (its feature gate "
            f"PodLogsQuerySplitStreams is off); ask for {OutputStream.ALL!s} instead")
    log.warning("the API server cannot split stdout from stderr (PodLogsQuerySplitStreams "
                "is off): pod %s's stdout is read with stderr mixed in", name)
    body = await kube.open_pod_log(name, namespace, container=names.TRAINER_CONTAINER,
                                   follow=follow, tail_lines=tail_lines,
                                   since_seconds=since_seconds)
    return LogStream(body, pod=name, stream=stream, split=False)


class _LastLines:
    """The last ``n`` lines of a log that ends (not followed), whole, as one chunk."""

    def __init__(self, body: ByteSource, n: int) -> None:
        self.body, self.n = body, n

    async def __aiter__(self) -> AsyncIterator[bytes]:
        lines = b"".join([chunk async for chunk in self.body]).splitlines(keepends=True)
        kept = b"".join(lines[-self.n:]) if self.n else b""
        if kept:
            yield kept

    async def aclose(self) -> None:
        await self.body.aclose()


def log_window(tail_lines: int | None, since: timedelta | None) -> int | None:
    """Check ``tail_lines`` and ``since``; ``since`` in whole seconds (rounded up, as the
    server takes whole seconds and a part second asked for is a second more, not less)."""
    if tail_lines is not None and (isinstance(tail_lines, bool)
                                   or not isinstance(tail_lines, int) or tail_lines < 0):
        raise errors.SpecError(f"tail_lines: must be an integer, 0 or more, got {tail_lines!r}",
                               field="tail_lines")
    if since is None:
        return None
    if not isinstance(since, timedelta) or since <= timedelta(0):
        raise errors.SpecError(f"since: must be a positive timedelta, got {since!r}",
                               field="since")
    return math.ceil(since.total_seconds())
