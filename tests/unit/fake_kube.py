"""An in-memory fake of our transport (:class:`dispatch_kubeflow.kube.Kube`) for
orchestration tests: objects, resourceVersions, UIDs and the API server's preconditions
(create by name, a merge patch's resourceVersion, a delete's UID), nothing else.

It never pretends to be a controller: no garbage collector, no Trainer, no Kueue. Every
call yields to the event loop a seeded random number of times before and after it takes
effect, so concurrent callers interleave differently with each seed.
"""

from __future__ import annotations

import asyncio
import copy
import random
import uuid
from collections.abc import Callable
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.kube.resources import Resource

Obj = dict[str, Any]
Key = tuple[str, str, str]


def _merge(into: Obj, patch: Obj) -> None:
    """RFC 7386 merge patch."""
    for k, v in patch.items():
        if v is None:
            into.pop(k, None)
        elif isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


class FakeKube:
    def __init__(self, seed: int = 0, *, max_yields: int = 3) -> None:
        self.objects: dict[Key, Obj] = {}
        self.rv = 0
        self.rng = random.Random(seed)
        self.max_yields = max_yields
        self.requests = 0
        self.before: Callable[[str, Resource, str], None] | None = None
        """Called as (verb, resource, name) just before a call takes effect: a test's way
        of doing something concurrent at an exact point."""

    async def _yield(self) -> None:
        for _ in range(self.rng.randint(0, self.max_yields)):
            await asyncio.sleep(0)

    def _key(self, res: Resource, name: str, namespace: str | None) -> Key:
        return (res.plural, namespace or "", name)

    async def _enter(self, verb: str, res: Resource, name: str) -> None:
        self.requests += 1
        await self._yield()
        if self.before is not None:
            self.before(verb, res, name)

    def _bump(self, obj: Obj) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    # --- the verbs the orchestration uses ----------------------------------------------
    async def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        await self._enter("get", res, name)
        obj = self.objects.get(self._key(res, name, namespace))
        await self._yield()
        if obj is None:
            raise errors.KubeNotFound(f"{res.plural} {name!r} not found", status=404,
                                      reason="NotFound")
        return copy.deepcopy(obj)

    async def get_or_none(self, res: Resource, name: str,
                          namespace: str | None = None) -> Obj | None:
        try:
            return await self.get(res, name, namespace)
        except errors.KubeNotFound:
            return None

    async def create(self, res: Resource, body: Obj, namespace: str | None = None, *,
                     dry_run: bool = False, field_manager: str | None = None) -> Obj:
        name = body["metadata"]["name"]
        await self._enter("create", res, name)
        key = self._key(res, name, namespace)
        if key in self.objects:
            raise errors.KubeConflict(f"{res.plural} {name!r} already exists", status=409,
                                      reason="AlreadyExists")
        obj = copy.deepcopy({"apiVersion": res.api_version, "kind": res.kind, **body})
        obj["metadata"].update(uid=str(uuid.UUID(int=self.rng.getrandbits(128))),
                               namespace=namespace or "")
        self._bump(obj)
        if not dry_run:
            self.objects[key] = obj
        await self._yield()
        return copy.deepcopy(obj)

    async def patch(self, res: Resource, name: str, patch: Obj, namespace: str | None = None,
                    *, kind: str = "merge", **_: Any) -> Obj:
        if kind != "merge":
            raise NotImplementedError(f"the fake speaks merge patches, not {kind}")
        await self._enter("patch", res, name)
        obj = self.objects.get(self._key(res, name, namespace))
        if obj is None:
            raise errors.KubeNotFound(f"{res.plural} {name!r} not found", status=404,
                                      reason="NotFound")
        want = (patch.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != obj["metadata"]["resourceVersion"]:
            raise errors.KubeConflict("the object has been modified", status=409,
                                      reason="Conflict")
        _merge(obj, {**patch, "metadata": {k: v for k, v in (patch.get("metadata") or {})
                                           .items() if k != "resourceVersion"}})
        self._bump(obj)
        await self._yield()
        return copy.deepcopy(obj)

    async def delete(self, res: Resource, name: str, namespace: str | None = None, *,
                     uid: str | None = None, **_: Any) -> Obj | None:
        await self._enter("delete", res, name)
        key = self._key(res, name, namespace)
        obj = self.objects.get(key)
        if obj is None:
            return None
        if uid is not None and obj["metadata"]["uid"] != uid:
            raise errors.KubeConflict("Precondition failed: UID in precondition", status=409,
                                      reason="Conflict")
        del self.objects[key]
        await self._yield()
        return copy.deepcopy(obj)

    # --- for the test's own checks -------------------------------------------------------
    def all(self, res: Resource) -> list[Obj]:
        return [o for (plural, _, _), o in self.objects.items() if plural == res.plural]
