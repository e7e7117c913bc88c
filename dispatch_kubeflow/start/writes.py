"""Start's writes: the runtime copy, the closed TrainJob, the copy's owner, each fenced, in
rounds that judge again whatever a concurrent Start or StopJob changed (the proof is the
package's docstring)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.execution import UNBOUNDED_RESTARTS, unbounded_restarts
from dispatch_kubeflow.core.objects import annotations_of, meta, metadata_only
from dispatch_kubeflow.informer import Informers
from dispatch_kubeflow.kube import KubeAPI, retry
from dispatch_kubeflow.kube.resources import (
    CLUSTER_TRAINING_RUNTIME,
    TRAINING_RUNTIME,
    TRAINJOB,
)
from dispatch_kubeflow.model import (
    KIND_CLUSTER_TRAINING_RUNTIME,
    ObjectRef,
    RuntimeRef,
    StartRequest,
)
from dispatch_kubeflow.settings import Settings
from dispatch_kubeflow.start.spec import (
    TRAINJOB_API_VERSION,
    StartMode,
    Validated,
    owner_reference,
    runtime_copy,
    trainjob_body,
    validate,
    what_differs,
)

log = logging.getLogger(__name__)


# Trainer's and Kueue's TrainJob webhooks look the runtime up in their informer caches, which
# may not have seen a copy created a moment ago: they then deny the TrainJob on
# spec.runtimeRef (the runtime "not found"). Usually for milliseconds; but right after an API
# server restart an informer's watch comes back only after client-go's back-off (up to a
# minute), and the denials go on that long (seen in CI right after the fault suite).
RUNTIME_LAG_PATIENCE = 120.0
"""How long a TrainJob create rides out that lag by default (Start passes timeouts.start)."""


KUEUE_TRAINJOB_WEBHOOK = "vtrainjob.kb.io"
"""Kueue's validating webhook for TrainJobs (its kubebuilder marker's name)."""


def runtime_not_seen(exc: errors.KubeError) -> bool:
    """Whether a webhook denied a TrainJob for its runtime: Trainer's or Kueue's TrainJob
    webhook, whose cache has not seen a runtime copy made a moment ago."""
    return (isinstance(exc, errors.KubeWebhookDenied)
            and (exc.webhook.endswith("." + names.TRAINER_GROUP)
                 or exc.webhook == KUEUE_TRAINJOB_WEBHOOK)
            and exc.names_field("spec.runtimeRef"))


async def create_trainjob(kube: KubeAPI, ns: str, body: dict[str, Any], *,
                          patience: float = RUNTIME_LAG_PATIENCE,
                          runtime_there: Callable[[], Awaitable[bool]] | None = None,
                          ) -> dict[str, Any]:
    """Create a TrainJob, riding out the webhooks' cache lag for a runtime just created.

    Retries a runtime-not-seen denial for ``patience`` seconds at most, and not at all once
    ``runtime_there`` says the runtime is gone (a concurrent StopJob removed the copy: the
    denial is then the truth, and the caller judges again). The create is by name, so a
    retry can never make a second TrainJob (409 instead).
    """
    until = retry.now() + patience
    delay = 0.1  # doubling to 2 s: quick for the usual milliseconds, light over a minute
    while True:
        try:
            created: dict[str, Any] = await kube.create(
                TRAINJOB, body, ns, field_manager=names.ADAPTER_FIELD_MANAGER)
            return created
        except errors.KubeWebhookDenied as exc:
            if (not runtime_not_seen(exc) or retry.now() + delay > until
                    or (runtime_there is not None and not await runtime_there())):
                raise
            log.debug("%s has not seen the runtime yet; retrying in %.1fs", exc.webhook, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


_ROUNDS = 4
"""How often Start judges again after a concurrent writer changed what it read."""


async def start(kube: KubeAPI, settings: Settings, mode: StartMode,
                req: StartRequest | Validated, *, shared: Informers | None = None) -> ObjectRef:
    """Start ``req`` closed; see the module docstring.

    Linearizable per job and submission: the runtime copy (one name, created once) decides
    which request may make the TrainJob. Start never deletes or changes another request's
    copy, so a concurrent Start of another request is refused, never undone; a TrainJob is
    made only while the copy carries this request's hash, and kept only if it still does
    afterwards (Trainer builds the JobSet from whatever copy has the name).
    """
    v = validate(req)
    ns, name, digest, mine = settings.namespace, v.name, v.digest, v.doc
    what_tj, what_rt = f"TrainJob {ns}/{name}", f"TrainingRuntime {ns}/{name}"
    # One budget for the webhooks' cache lag across the fast path and the rounds.
    lag_until = retry.now() + settings.timeouts.start.total_seconds()

    def lag_left() -> float:
        return max(0.0, lag_until - retry.now())

    async def copy_there() -> bool:
        return await _copy_if_mine(kube, ns, name, digest) is not None

    source: dict[str, Any] | None
    try:
        source = await _read_runtime(kube, ns, v.runtime)
    except errors.SpecError:
        source = None  # a repeated Start needs no runtime; the rounds say so if one does
    tj = (await _fresh(kube, ns, source, v, settings, mode, patience=lag_left(),
                       runtime_there=copy_there)
          if source is not None else None)
    if tj is None:  # not the first Start, or raced: judge from what is there
        for _ in range(_ROUNDS):
            tj = await kube.get_or_none(TRAINJOB, name, ns)
            if tj is not None:
                _same_or_conflict(tj, mine, digest, what_tj)
                if await _own_copy(kube, ns, name, tj, mine, digest):
                    break
                continue
            rt = await kube.get_or_none(TRAINING_RUNTIME, name, ns)
            if rt is None:
                if source is None:
                    source = await _read_runtime(kube, ns, v.runtime)
                try:
                    # Idempotent by name: of concurrent creates one wins, the others judge again.
                    rt = await _create_copy(kube, ns, source, v)
                except errors.KubeConflict:
                    continue
            _same_or_conflict(rt, mine, digest, what_rt,
                              made_by="a Start whose TrainJob is not there (interrupted, or still "
                              "running): start that request again to complete it, or StopJob "
                              "the job")
            if meta(rt).get("ownerReferences"):
                # Owned, yet no TrainJob: it just came (the next round sees it), or it is gone
                # and the garbage collector is removing the copy.
                continue
            try:
                tj = await create_trainjob(kube, ns, trainjob_body(v, settings, mode),
                                           patience=lag_left(), runtime_there=copy_there)
            except errors.KubeConflict:
                continue  # a concurrent Start made it: the next round judges it
            except errors.KubeWebhookDenied as exc:
                # Trainer found no runtime: did the copy go meanwhile (a concurrent StopJob)?
                if not runtime_not_seen(exc) or await _copy_if_mine(kube, ns, name, digest) \
                        is not None:
                    raise
                continue
            rt = await _copy_if_mine(kube, ns, name, digest)
            if rt is None:
                await _undo_trainjob(kube, ns, name, tj)  # the copy went or changed meanwhile
            if await _own_copy(kube, ns, name, tj, mine, digest, rt):
                break
        else:
            raise errors.ConflictError(
                f"{what_tj}: the job's objects kept changing during {_ROUNDS} rounds of Start "
                "(a concurrent StopJob, or the previous objects still being removed); try again")
    assert tj is not None
    # Waiting for Kueue's Workload may take a while: hold the TrainJob's metadata alone (all
    # that is read of it from here) and not the runtime (1,000 Starts at once, issue 11).
    tj, source = metadata_only(tj), None
    await mode.started(kube, tj, shared)
    return ObjectRef(namespace=ns, name=name, kind="TrainJob", api_version=TRAINJOB_API_VERSION,
                     uid=str(meta(tj)["uid"]))


async def _fresh(kube: KubeAPI, ns: str, source: Mapping[str, Any], v: Validated,
                 settings: Settings, mode: StartMode, *, patience: float,
                 runtime_there: Callable[[], Awaitable[bool]]) -> dict[str, Any] | None:
    """The first Start of a job, in the fewest requests: create the copy, create the
    TrainJob, make the TrainJob own the copy. None when anything was there before or changed
    meanwhile: the rounds of :func:`start` then judge from what is there.

    Each write is fenced, so the fast path decides nothing the rounds would not: the creates
    are by name (409 when the name is taken), and the owner patch carries the resourceVersion
    the copy's create returned, so it lands only if nobody changed or replaced the copy since
    this Start made it, which is what the rounds' read-then-patch proves.
    """
    name = v.name
    try:
        rt = await _create_copy(kube, ns, source, v)
    except errors.KubeConflict:
        return None  # a copy is there: another Start's, or an earlier one's
    try:
        tj = await create_trainjob(kube, ns, trainjob_body(v, settings, mode),
                                   patience=patience, runtime_there=runtime_there)
    except errors.KubeConflict:
        return None
    except errors.KubeWebhookDenied as exc:
        if not runtime_not_seen(exc):
            raise
        return None  # the copy went meanwhile (a concurrent StopJob): the rounds judge
    try:
        await _patch_owner(kube, ns, name, rt, tj)
        return tj
    except (errors.KubeConflict, errors.KubeNotFound):
        pass  # the copy changed since its create: is it still ours?
    if await _copy_if_mine(kube, ns, name, v.digest) is None:
        await _undo_trainjob(kube, ns, name, tj)  # as in the rounds
    return None  # still ours, only touched (a label): the rounds own it


async def _create_copy(kube: KubeAPI, ns: str, source: Mapping[str, Any],
                       v: Validated) -> dict[str, Any]:
    """Create this request's runtime copy. Idempotent by name: of concurrent creates one
    wins, the others get KubeConflict (409) and judge again."""
    created = await kube.create(TRAINING_RUNTIME, runtime_copy(source, v, ns), ns,
                                field_manager=names.ADAPTER_FIELD_MANAGER)
    # Its metadata is all a Start reads of it (the hash, the owner, the resourceVersion);
    # 1,000 concurrent Starts would otherwise each hold a runtime's pod templates.
    return metadata_only(created)


async def _patch_owner(kube: KubeAPI, ns: str, name: str, rt: Mapping[str, Any],
                       tj: Mapping[str, Any]) -> None:
    """Make the TrainJob own the copy, fenced by the copy's resourceVersion as ``rt`` has it
    (KubeConflict or KubeNotFound when the copy changed or went since)."""
    await kube.patch(TRAINING_RUNTIME, name, {"metadata": {
        "resourceVersion": meta(rt)["resourceVersion"],
        "ownerReferences": [owner_reference(tj)]}}, ns)


async def _undo_trainjob(kube: KubeAPI, ns: str, name: str, tj: Mapping[str, Any]) -> None:
    """The copy went or changed between its read (or create) and the TrainJob's create (a
    concurrent StopJob and another Start): Trainer may build this TrainJob from another
    request's copy. Delete it, only it (UID precondition), while it is suspended and closed,
    and say so."""
    await kube.delete(TRAINJOB, name, ns, uid=meta(tj)["uid"])
    raise errors.ConflictError(
        f"TrainingRuntime {ns}/{name} was removed or replaced while this Start ran (a "
        "concurrent StopJob or Start); the TrainJob it made was deleted again; start again")


async def _copy_if_mine(kube: KubeAPI, ns: str, name: str,
                        digest: str) -> dict[str, Any] | None:
    """The copy as it is now, if it is this request's (None when gone or another's)."""
    rt = await kube.get_or_none(TRAINING_RUNTIME, name, ns)
    if (rt is not None and not meta(rt).get("deletionTimestamp")
            and annotations_of(rt).get(names.SPEC_HASH) == digest):
        return rt
    return None


async def _own_copy(kube: KubeAPI, ns: str, name: str, tj: Mapping[str, Any],
                    mine: Mapping[str, Any], digest: str,
                    rt: dict[str, Any] | None = None) -> bool:
    """Make the TrainJob the owner of its copy (so the collector removes the copy with it).

    False when the copy changed under us (judge again). The patch carries the copy's
    resourceVersion, so it lands only on the copy we judged to be this request's. ``rt``:
    the copy as just read (read here when not given).
    """
    if rt is None:
        rt = await kube.get_or_none(TRAINING_RUNTIME, name, ns)
    if rt is None:
        raise errors.ConflictError(
            f"TrainJob {ns}/{name} exists but its runtime copy is gone: the job is being "
            "stopped, or the copy was deleted by hand; StopJob the job")
    _same_or_conflict(rt, mine, digest, f"TrainingRuntime {ns}/{name}",
                      made_by=f"not the copy of TrainJob {ns}/{name}; StopJob the job")
    owners = meta(rt).get("ownerReferences") or []
    if any(o.get("uid") == meta(tj)["uid"] for o in owners):
        return True
    if owners:
        raise errors.ConflictError(
            f"TrainingRuntime {ns}/{name} belongs to an earlier TrainJob of that name (uid "
            f"{owners[0].get('uid')}), which is being removed; wait for StopJob to finish")
    try:
        await _patch_owner(kube, ns, name, rt, tj)
    except (errors.KubeConflict, errors.KubeNotFound):
        return False
    return True


def _same_or_conflict(obj: Mapping[str, Any], mine: Mapping[str, Any], digest: str, what: str,
                      *, made_by: str = "") -> None:
    if meta(obj).get("deletionTimestamp"):
        raise errors.ConflictError(f"{what} is being deleted; wait for StopJob to finish")
    if annotations_of(obj).get(names.SPEC_HASH) != digest:
        made = f"; made by {made_by}" if made_by else ""
        raise errors.ConflictError(
            f"{what} exists for another request ({what_differs(obj, mine)}){made}; the same "
            "job and submission can be started only with the same request")


async def _read_runtime(kube: KubeAPI, namespace: str, runtime: RuntimeRef) -> dict[str, Any]:
    if runtime.kind == KIND_CLUSTER_TRAINING_RUNTIME:
        found = await kube.get_or_none(CLUSTER_TRAINING_RUNTIME, runtime.runtime)
    else:
        found = await kube.get_or_none(TRAINING_RUNTIME, runtime.runtime, namespace)
    if found is None:
        where = "" if runtime.kind == KIND_CLUSTER_TRAINING_RUNTIME else f" in {namespace}"
        raise errors.SpecError(
            f"spec.extensions.RuntimeRef: {runtime.kind} {runtime.runtime}{where} not found",
            field="spec.extensions.RuntimeRef")
    # Checked before anything is made: such a job's identity could not be kept higher.
    unbounded = unbounded_restarts(((found.get("spec") or {}).get("template") or {}).get("spec"))
    if unbounded:
        raise errors.SpecError(
            f"spec.extensions.RuntimeRef: {runtime.kind} {runtime.runtime}'s JobSet template "
            f"sets spec.template.spec.{unbounded}: {UNBOUNDED_RESTARTS}, whose restarts do "
            "not count towards maxRestarts, so a restart count J without bound and no "
            "execution identity known to be higher than the last; use RestartJobSet (bounded "
            "by maxRestarts) in the runtime dispatch jobs use",
            field="spec.extensions.RuntimeRef")
    return found
