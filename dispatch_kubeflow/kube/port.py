"""The Kubernetes port: what the library and the controller need of the API server.

:class:`KubeAPI` is the interface; :class:`~dispatch_kubeflow.kube.transport.Kube` is the
implementation that talks to a real API server, and the unit tests' in-memory fake
(``tests/unit/fake_kube.py``) is another. Code that orchestrates depends on this protocol,
so it can be exercised without a cluster; errors are those of
:mod:`dispatch_kubeflow.core.errors`, built from a Status by
:func:`~dispatch_kubeflow.core.errors.kube_error`.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from dispatch_kubeflow.kube.resources import Resource

Obj = dict[str, Any]
PatchKind = Literal["merge", "json", "strategic", "apply"]


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One watch event: ADDED, MODIFIED, DELETED, or SYNC (a fresh list, in ``items``)."""

    type: str
    object: Obj
    items: tuple[Obj, ...] = ()


class ByteSource(Protocol):
    """An open stream of bytes (a pod's log): iterate for chunks; :meth:`aclose` ends it."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class KubeAPI(Protocol):
    """One cluster's API server, as JSON dictionaries (the objects as the server sends them).

    Every API error is a :class:`~dispatch_kubeflow.core.errors.KubeError` of the class its
    Status says (404 KubeNotFound, 409 KubeConflict, 410 KubeGone, ...).
    """

    requests: int
    """How many requests were sent (benchmarks and request-count tests read it)."""

    @property
    def host(self) -> str: ...

    async def close(self) -> None: ...

    async def get(self, res: Resource, name: str, namespace: str | None = None,
                  *, subresource: str | None = None) -> Obj: ...

    async def get_or_none(self, res: Resource, name: str,
                          namespace: str | None = None) -> Obj | None:
        """The object, or None when it does not exist."""
        ...

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None,
                   field_selector: str | None = None,
                   trim: Callable[[Obj], Obj] | None = None,
                   metadata: bool = False) -> tuple[builtins.list[Obj], str]:
        """All items and the list's resourceVersion (to watch from). ``trim``: what is kept
        of each item, applied as each page arrives (a list of 2,000 pods is never held
        whole). ``metadata``: the items' metadata alone may come (the server's
        PartialObjectMetadataList), so the caller reads nothing else."""
        ...

    async def create(self, res: Resource, body: Obj, namespace: str | None = None, *,
                     dry_run: bool = False, field_manager: str | None = None,
                     name: str | None = None, subresource: str | None = None) -> Obj:
        """POST a new object (409 AlreadyExists when its name is taken); with ``name`` and
        ``subresource``, POST to that subresource."""
        ...

    async def replace(self, res: Resource, body: Obj, namespace: str | None = None, *,
                      subresource: str | None = None) -> Obj:
        """PUT ``body``; its ``metadata.resourceVersion``, when set, is a precondition."""
        ...

    async def patch(self, res: Resource, name: str, patch: Any, namespace: str | None = None,
                    *, kind: PatchKind = "merge", subresource: str | None = None,
                    field_manager: str | None = None, force: bool = False,
                    dry_run: bool = False) -> Obj:
        """PATCH; a ``metadata.resourceVersion`` in the patch is a precondition (409)."""
        ...

    async def delete(self, res: Resource, name: str, namespace: str | None = None, *,
                     uid: str | None = None, propagation: str = "Background",
                     grace_period: int | None = None) -> Obj | None:
        """Delete, optionally only the object with this UID (409 otherwise). None when it
        was already gone."""
        ...

    def watch(self, res: Resource, namespace: str | None = None, *,
              resource_version: str = "", label_selector: str | None = None,
              field_selector: str | None = None,
              timeout_seconds: int = 290) -> AsyncIterator[WatchEvent]:
        """The events after ``resource_version``; raises KubeGone when it expired. Ends when
        the server ends the watch."""
        ...

    def observe(self, res: Resource, namespace: str | None = None, *,
                label_selector: str | None = None,
                field_selector: str | None = None,
                timeout_seconds: int = 290,
                trim: Callable[[Obj], Obj] | None = None) -> AsyncIterator[WatchEvent]:
        """List (a SYNC event), then watch; lists again after a 410 or a failure. Never
        ends by itself; 401, 403 and 404 are raised. ``trim``: what is kept of each object
        listed or watched."""
        ...

    async def served_versions(self, group: str) -> builtins.list[str]:
        """The versions served for an API group ([] when the group is absent)."""
        ...

    async def access_review(self, verb: str, resource: str, *, group: str = "",
                            namespace: str | None = None, subresource: str | None = None,
                            name: str | None = None) -> tuple[bool, str]:
        """Whether the caller may do ``verb`` on ``resource``, and the reason given."""
        ...

    async def open_pod_log(self, name: str, namespace: str, *, container: str | None = None,
                           follow: bool = False, stream: str | None = None,
                           tail_lines: int | None = None,
                           since_seconds: int | None = None) -> ByteSource:
        """A pod's log, answered (or its error raised) before this returns; ``tail_lines``
        and ``since_seconds`` are the log endpoint's ``tailLines`` and ``sinceSeconds``."""
        ...
