"""The worker permit's arithmetic, one home for the three that measure it.

The design: docs/multikueue-fence.md.

A worker cluster may run dispatch executions only while it holds a permit: a Lease in the
manager that the worker's agent renews by a write carrying the Lease's resourceVersion.
Three parties measure time, each on its own monotonic clock and never from another host's
time of day:

- the worker's agent (:class:`Permit`): the permit runs for ``length`` from *before* the
  renewal that the manager accepted was sent;
- each pod's fence (:class:`Share`): its share runs for what the agent said was left, from
  *before* the pod asked;
- the manager (:class:`Silence`): a version of the Lease it first saw at ``since`` may be
  revoked (a write carrying that version) once :func:`manager_wait` has passed on its clock.

Clocks are not synchronized; each runs at a rate within ``drift`` of real time. Under that
assumption every pod's share ends, in real time, before the manager may revoke the
permit's version it came from (tested with random rates and delays, and model-checked:
verify/multikueue.pml).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.admission_count import admissions
from dispatch_kubeflow.core.objects import annotations_of, meta

DEFAULT_LENGTH = 60.0
"""Seconds a renewal keeps the permit, on the worker's clock."""
DEFAULT_DRIFT = 0.01
"""The bound on every clock's rate error, as a fraction of real time."""
MAX_DRIFT = 0.2


class PermitError(ValueError):
    """A permit's length or drift out of range (the message names which)."""


def manager_wait(length: float, drift: float) -> float:
    """Seconds on the manager's clock between first seeing a permit version and revoking it.

    A permit of ``length`` on the worker's clock, and every pod's share of it on the pod's
    clock, ends at most ``length / (1 - drift)`` real seconds after the worker sent the
    renewal; the manager first saw the renewal after that, and its own clock may run fast by
    ``drift``: so ``length * (1 + drift) / (1 - drift)`` on its clock."""
    check(length, drift)
    return length * (1 + drift) / (1 - drift)


def check(length: float, drift: float) -> None:
    if not length > 0:
        raise PermitError(f"permit length must be > 0 seconds, got {length}")
    if not 0 <= drift <= MAX_DRIFT:
        raise PermitError(f"clock drift must be within [0, {MAX_DRIFT}], got {drift}")


@dataclass(slots=True)
class Permit:
    """The worker agent's permit: until when it may run executions (its clock)."""

    length: float = DEFAULT_LENGTH
    until: float = float("-inf")

    def renewed(self, asked_at: float) -> None:
        """A renewal sent at ``asked_at`` (read before sending) was accepted."""
        self.until = max(self.until, asked_at + self.length)

    def revoked(self) -> None:
        """The manager revoked it (a renewal met the revoked Lease): nothing is left."""
        self.until = float("-inf")

    def left(self, now: float) -> float:
        """What is left at ``now``, for a pod that asks (0 when none)."""
        return max(0.0, self.until - now)

    def holds(self, now: float) -> bool:
        return now < self.until


@dataclass(slots=True)
class Share:
    """A pod's share of its worker's permit: until when its processes may run (its clock)."""

    until: float = float("-inf")

    def granted(self, asked_at: float, left: float) -> None:
        """The agent answered ``left`` to a question sent at ``asked_at`` (read before asking):
        measured from then, never from the answer's arrival, which may be late."""
        self.until = max(self.until, asked_at + left)

    def expired(self, now: float) -> bool:
        return now >= self.until


@dataclass(slots=True)
class Silence:
    """The manager's view of one worker's permit Lease: the version it sees and since when
    (its clock). A new version restarts the wait; only a live read may say it did not."""

    wait: float
    version: str = ""
    since: float = 0.0

    def seen(self, version: str, now: float) -> None:
        if version != self.version:
            self.version, self.since = version, now

    def revocable(self, now: float) -> bool:
        """Whether the version seen may be revoked now: every share it gave has ended."""
        return bool(self.version) and now - self.since >= self.wait


def lease_name(cluster: str) -> str:
    """The permit Lease of the worker cluster ``cluster`` (its MultiKueueCluster's name)."""
    return f"{names.PERMIT_LEASE_PREFIX}{cluster}"


def is_revoked(lease: Mapping[str, Any] | None) -> bool:
    """Whether the permit Lease as read is revoked. A missing Lease (None) is not: it was
    never granted, or was deleted, and proves nothing of a revocation."""
    return lease is not None and names.PERMIT_REVOKED in annotations_of(lease)


def renewal(lease: Mapping[str, Any], holder: str, at: datetime) -> dict[str, Any]:
    """The PUT that renews ``lease`` as read: it carries the version read, so a revocation
    (or another replica's renewal) since then makes it a 409 that extends nothing.
    ``renewTime`` is for people reading the Lease; no fence reads it."""
    body = copy.deepcopy(dict(lease))
    spec = body.setdefault("spec", {})
    spec["holderIdentity"] = holder
    spec["renewTime"] = at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return body


def revocation(lease: Mapping[str, Any]) -> dict[str, Any]:
    """The PUT that revokes ``lease`` as read, carrying the version the manager timed: a
    renewal that landed since makes it a 409, and the manager times the new version."""
    body = copy.deepcopy(dict(lease))
    body.setdefault("metadata", {}).setdefault("annotations", {})[names.PERMIT_REVOKED] = \
        str(meta(lease).get("resourceVersion") or "")
    return body


def grant(lease: Mapping[str, Any]) -> dict[str, Any]:
    """The PUT that grants the revoked ``lease`` again, carrying the revoked version read:
    written on anything else (another replica's grant), it is a 409 and grants nothing
    twice."""
    body = copy.deepcopy(dict(lease))
    annotations = body.setdefault("metadata", {}).get("annotations") or {}
    body["metadata"]["annotations"] = {k: v for k, v in annotations.items()
                                       if k != names.PERMIT_REVOKED}
    return body


def refusal(workload: Mapping[str, Any] | None, trainjob: Mapping[str, Any] | None,
            admission: int, cluster: str) -> str | None:
    """Why a pod at admission count ``admission`` in the worker ``cluster`` must not start
    (None: it may), from the job's Workload and TrainJob in the manager, read live after the
    pod asked.

    A remote TrainJob left on a worker that was lost makes pods at its old A; only the
    manager knows that A has moved on or that the job runs elsewhere now (the model's
    NOCONFIRM). The two reads may come in either order (the model's TWOREADS, TJFIRST): the
    pod exists before both, so until it ends the gate's live list sees it, or its worker's
    permit is revoked and it gets no answer until it is gone; a pod made after a
    readmission reads the new A in both.
    """
    if workload is None or trainjob is None:
        return "the job is gone from the manager"
    dispatched = str((workload.get("status") or {}).get("clusterName") or "")
    if dispatched != cluster:
        return (f"the manager dispatched the job to {dispatched or 'no worker'}, "
                f"not to {cluster}")
    current = admissions(trainjob)
    if current != admission:
        return f"the job's admission count in the manager is {current}, the pod's {admission}"
    return None
