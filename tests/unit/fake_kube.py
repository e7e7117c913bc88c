"""An in-memory fake of our Kubernetes port (:class:`dispatch_kubeflow.kube.KubeAPI`) for
orchestration tests.

What it keeps is what the API server itself does, and nothing more: objects with
resourceVersions, UIDs and creation times (``generateName`` too); the preconditions (create
by a taken name is 409 AlreadyExists, a replace or patch carrying a stale resourceVersion
and a delete whose UID precondition does not match are 409 Conflict, a missing object 404);
finalizers (a delete marks ``deletionTimestamp`` and the object goes once its finalizers are
emptied); label and field selectors on list and watch; watches from a resourceVersion
(ADDED / MODIFIED / DELETED, an object leaving a selector is DELETED), 410 Expired when
asked for a version older than the last :meth:`FakeKube.compact`, and watches that end when
the test calls :meth:`FakeKube.end_watches`. Merge, JSON and (as a merge where lists of
named items merge by name) strategic and apply patches; apply keeps no field ownership, so
it never conflicts with another manager.

Errors are built from a Status dict by :func:`dispatch_kubeflow.core.errors.kube_error`,
the function the real transport uses, so the classes cannot drift. ``observe`` is the real
one (:class:`dispatch_kubeflow.kube.watch.Observes`, the transport's too) over the fake's list
and watch.

It never pretends to be a controller: no garbage collector (``propagation`` is ignored and
dependants stay), no kubelet (a pod's delete is immediate), no Kueue, Trainer or JobSet.
Every call yields to the event loop a seeded random number of times before and after it
takes effect, so concurrent callers interleave differently with each seed.
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
import functools
import pickle
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from dispatch_kubeflow.core import errors
from dispatch_kubeflow.core.times import format_time
from dispatch_kubeflow.kube import KubeAPI, Obj, PatchKind, Resource, WatchEvent
from dispatch_kubeflow.kube.resources import POD, SELF_SUBJECT_ACCESS_REVIEW
from dispatch_kubeflow.kube.watch import WATCH_BACKOFF, Observes, WatchBackoff

Key = tuple[str, str, str]
T = TypeVar("T")
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
_GROUP = Resource("", "", "apigroups", "APIGroup", namespaced=False)  # for the before hook


def clone(v: T) -> T:
    """A deep copy of a JSON value (what every object here is). pickle copies in C: twice as
    fast as a recursive copy and six times copy.deepcopy, which the fake would otherwise
    spend most of its time in."""
    return cast(T, pickle.loads(pickle.dumps(v, pickle.HIGHEST_PROTOCOL)))


# --- errors, as the API server's Status ---------------------------------------------------
def status_error(code: int, reason: str, message: str, res: Resource | None = None,
                 name: str = "", causes: builtins.list[Obj] | None = None) -> errors.KubeError:
    """The error the transport raises for this Status (same function, same classes)."""
    details: Obj = {"name": name}
    if res is not None:
        details.update(group=res.group, kind=res.plural)
    if causes:
        details["causes"] = causes
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message, "details": details}
    return errors.kube_error(code, body, "fake")


def _qualified(res: Resource) -> str:
    return f"{res.plural}.{res.group}" if res.group else res.plural


def not_found(res: Resource, name: str) -> errors.KubeError:
    return status_error(404, "NotFound", f'{_qualified(res)} "{name}" not found', res, name)


def conflict(res: Resource, name: str, why: str) -> errors.KubeError:
    return status_error(409, "Conflict", f'Operation cannot be fulfilled on {_qualified(res)} '
                        f'"{name}": {why}', res, name)


STALE = ("the object has been modified; please apply your changes to the latest version and "
         "try again")


# --- selectors ----------------------------------------------------------------------------
@functools.lru_cache(maxsize=512)
def _split_terms(selector: str) -> tuple[str, ...]:
    """Split at commas outside parentheses (``a in (x,y),b``)."""
    terms, depth, cur = [], 0, ""
    for ch in selector:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return tuple(t.strip() for t in terms if t.strip())


# One selector is matched against every object of a list and every change a watch sees:
# parsed once, the fake spends its time on the objects rather than on the selector's text.
_Term = tuple[str, str, frozenset[str]]  # (op, key, values): op in in, notin, =, !=, has, !has


@functools.lru_cache(maxsize=512)
def _label_terms(selector: str) -> tuple[_Term, ...]:
    terms: builtins.list[_Term] = []
    for term in _split_terms(selector):
        for op in (" notin ", " in "):
            if op in term:
                k, _, vals = term.partition(op)
                allowed = frozenset(v.strip() for v in vals.strip().strip("()").split(","))
                terms.append((op.strip(), k.strip(), allowed))
                break
        else:
            if "!=" in term:
                k, _, v = term.partition("!=")
                terms.append(("!=", k.strip(), frozenset({v.strip()})))
            elif "=" in term:
                k, _, v = term.replace("==", "=").partition("=")
                terms.append(("=", k.strip(), frozenset({v.strip()})))
            elif term.startswith("!"):
                terms.append(("!has", term[1:].strip(), frozenset()))
            else:
                terms.append(("has", term, frozenset()))
    return tuple(terms)


def label_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """Kubernetes label selector syntax: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``,
    ``k in (a,b)``, ``k notin (a,b)``; terms ANDed."""
    for op, k, values in _label_terms(selector or ""):
        if op in ("in", "="):
            if labels.get(k) not in values:
                return False
        elif op in ("notin", "!="):
            if labels.get(k) in values:
                return False
        elif (k in labels) != (op == "has"):
            return False
    return True


def field_matches(selector: str | None, obj: Obj) -> bool:
    """``path=v``, ``path==v``, ``path!=v`` on dotted paths (``metadata.name``)."""
    for term in _split_terms(selector or ""):
        neg = "!=" in term
        path, _, want = term.replace("!=", "=").replace("==", "=").partition("=")
        got: Any = obj
        for part in path.strip().split("."):
            got = got.get(part) if isinstance(got, dict) else None
        if (str(got if got is not None else "") == want.strip()) == neg:
            return False
    return True


# --- patches ------------------------------------------------------------------------------
def merge_patch(into: Obj, patch: Obj, *, named_lists: bool = False) -> None:
    """RFC 7386 merge patch; with ``named_lists``, lists whose items all have a ``name``
    merge item by item by that name (the strategic/apply rule of such lists)."""
    for k, v in patch.items():
        cur = into.get(k)
        if v is None:
            into.pop(k, None)
        elif isinstance(v, dict) and isinstance(cur, dict):
            merge_patch(cur, v, named_lists=named_lists)
        elif named_lists and _named(v) and isinstance(cur, list) and _named(cur):
            by_name = {item["name"]: item for item in cur}
            for item in v:
                if item["name"] in by_name:
                    merge_patch(by_name[item["name"]], item, named_lists=True)
                else:
                    cur.append(clone(item))
        else:
            into[k] = clone(v)


def _named(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(i, dict) and "name" in i for i in v)


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def json_patch(obj: Obj, ops: list[Obj], res: Resource, name: str) -> None:
    """RFC 6902: add, remove, replace, test (a failed test or a missing path is 422)."""
    def invalid(why: str) -> errors.KubeError:
        return status_error(422, "Invalid", f'{_qualified(res)} "{name}": {why}', res, name)

    for op in ops:
        *parents, last = _pointer(op["path"])
        node: Any = obj
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node.get(p)
            if node is None:
                raise invalid(f"the path {op['path']} does not exist")
        kind = op["op"]
        if kind == "test":
            if isinstance(node, list):
                got = node[int(last)] if int(last) < len(node) else object()
            else:
                got = node.get(last, object())
            if got != op.get("value"):
                raise invalid(f"the test of {op['path']} failed")
        elif kind in ("add", "replace"):
            if kind == "replace" and isinstance(node, dict) and last not in node:
                raise invalid(f"the path {op['path']} does not exist")
            if isinstance(node, list):
                if last == "-":
                    node.append(clone(op["value"]))
                elif kind == "add":
                    node.insert(int(last), clone(op["value"]))
                else:
                    node[int(last)] = clone(op["value"])
            else:
                node[last] = clone(op["value"])
        elif kind == "remove":
            if isinstance(node, list):
                del node[int(last)]
            elif last in node:
                del node[last]
            else:
                raise invalid(f"the path {op['path']} does not exist")
        else:
            raise NotImplementedError(f"the fake does not speak JSON patch op {kind}")


# --- pod logs -----------------------------------------------------------------------------
class FakeLog:
    """A pod log's bytes, in the chunks the test gave."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks
        self.closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            if self.closed:
                return
            await asyncio.sleep(0)
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


@dataclass(frozen=True, slots=True)
class _Change:
    rv: int
    type: str
    key: Key
    obj: Obj
    before: Obj | None


class FakeKube(Observes):
    """The fake. State is public for a test's own checks and arrangements."""

    def __init__(self, seed: int = 0, *, max_yields: int = 3,
                 host: str = "https://fake.invalid",
                 watch_backoff: WatchBackoff = WATCH_BACKOFF) -> None:
        self.watch_backoff = watch_backoff
        """observe's, as Kube's."""
        self.objects: dict[Key, Obj] = {}
        self.rv = 0
        self.rng = random.Random(seed)
        self.max_yields = max_yields
        self.requests = 0
        self.calls: Counter[str] = Counter()
        """Calls by verb (get, list, watch, ...): what a test counts to prove no polling."""
        self.open_watches = 0
        self._host = host
        self.before: Callable[[str, Resource, str], None] | None = None
        """Called as (verb, resource, name) just before a call takes effect: a test's way
        of doing something concurrent at an exact point (it may raise, to fail the call)."""
        self.served: dict[str, builtins.list[str]] = {}
        """API group -> the versions it serves (for served_versions)."""
        self.denied: dict[tuple[str, str], str] = {}
        """(verb, resource) -> the reason access_review refuses it; the rest is allowed."""
        self.logs: dict[tuple[str, str, str | None], builtins.list[bytes]] = {}
        """(namespace, pod, stream or None) -> the log's chunks."""
        self.log_asked: builtins.list[dict[str, Any]] = []
        """The options of every open_pod_log (sinceSeconds is recorded, not applied: the
        fake keeps no time per line)."""
        self.changes: builtins.list[_Change] = []
        self._changes_of: dict[str, builtins.list[_Change]] = {}
        """The same history by plural, in rv order: a watch reads only its kind's."""
        self.compacted = 0
        """Watches from a resourceVersion below this are 410 Expired."""
        self._generation = 0  # end_watches bumps it: open watches end
        self._wake = asyncio.Event()
        self.closed = False

    # --- the test's controls -----------------------------------------------------------
    def compact(self) -> None:
        """Forget the history so far, as etcd's compaction does."""
        self.compacted = self.rv
        self.changes.clear()
        self._changes_of.clear()

    def end_watches(self) -> None:
        """End every open watch, as the API server does at a watch's timeout."""
        self._generation += 1
        self._notify()

    def write_now(self, res: Resource, name: str, namespace: str | None, patch: Obj) -> Obj:
        """Another writer's merge patch, in effect at once (no yield): for a ``before``
        hook, which cannot await, to change an object at an exact point."""
        key = self._key(res, name, namespace)
        old = self._existing(res, name, namespace)
        new = clone(old)
        merge_patch(new, patch)
        return self._store(key, old, new)

    def all(self, res: Resource) -> builtins.list[Obj]:
        return [o for (plural, _, _), o in self.objects.items() if plural == res.plural]

    # --- plumbing ------------------------------------------------------------------------
    async def _yield(self) -> None:
        for _ in range(self.rng.randint(0, self.max_yields)):
            await asyncio.sleep(0)

    def _key(self, res: Resource, name: str, namespace: str | None) -> Key:
        return (res.plural, (namespace or "") if res.namespaced else "", name)

    async def _enter(self, verb: str, res: Resource, name: str) -> None:
        self.requests += 1
        self.calls[verb] += 1
        await self._yield()
        if self.before is not None:
            self.before(verb, res, name)

    def _notify(self) -> None:
        self._wake.set()
        self._wake = asyncio.Event()

    def _record(self, typ: str, key: Key, obj: Obj, before: Obj | None) -> None:
        # No copies: a stored object is never changed in place (every write stores a new
        # dict), so the history may share them; callers only ever get copies.
        change = _Change(self.rv, typ, key, obj, before)
        self.changes.append(change)
        self._changes_of.setdefault(key[0], []).append(change)
        self._notify()

    def _bump(self, obj: Obj) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def _existing(self, res: Resource, name: str, namespace: str | None) -> Obj:
        obj = self.objects.get(self._key(res, name, namespace))
        if obj is None:
            raise not_found(res, name)
        return obj

    def _store(self, key: Key, old: Obj, new: Obj, *, deleting: bool = False) -> Obj:
        """Write ``new`` over ``old``: identity kept, a new resourceVersion, and the object
        gone once it is being deleted and no finalizer is left."""
        kept = ("uid", "name", "namespace", "creationTimestamp") + (
            () if deleting else ("deletionTimestamp",))
        for field in kept:
            if field in old["metadata"]:
                new["metadata"][field] = old["metadata"][field]
            else:
                new["metadata"].pop(field, None)
        if new == old:
            return clone(old)  # a no-op write does not change the version
        self._bump(new)
        if "deletionTimestamp" in new["metadata"] and not new["metadata"].get("finalizers"):
            del self.objects[key]
            self._record("DELETED", key, new, old)
        else:
            self.objects[key] = new
            self._record("MODIFIED", key, new, old)
        return clone(new)

    def _check_version(self, res: Resource, name: str, obj: Obj, want: Any) -> None:
        if want not in (None, "") and str(want) != obj["metadata"]["resourceVersion"]:
            raise conflict(res, name, STALE)

    # --- the port --------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return self._host

    async def close(self) -> None:
        self.closed = True
        self.end_watches()

    async def get(self, res: Resource, name: str, namespace: str | None = None,
                  *, subresource: str | None = None) -> Obj:
        await self._enter("get", res, name)
        obj = clone(self._existing(res, name, namespace))
        await self._yield()
        return obj

    async def get_or_none(self, res: Resource, name: str,
                          namespace: str | None = None) -> Obj | None:
        try:
            return await self.get(res, name, namespace)
        except errors.KubeNotFound:
            return None

    def _selected(self, res: Resource, namespace: str | None, obj: Obj | None,
                  label_selector: str | None, field_selector: str | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        return ((not res.namespaced or not namespace or meta.get("namespace") == namespace)
                and label_matches(label_selector, meta.get("labels") or {})
                and field_matches(field_selector, obj))

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None,
                   field_selector: str | None = None,
                   trim: Callable[[Obj], Obj] | None = None,
                   metadata: bool = False) -> tuple[builtins.list[Obj], str]:
        await self._enter("list", res, "")
        items = [clone(o) for k, o in sorted(kv for kv in self.objects.items()
                                             if kv[0][0] == res.plural)
                 if self._selected(res, namespace, o, label_selector, field_selector)]
        if metadata:  # as the server's PartialObjectMetadataList: no spec, no status
            items = [{"apiVersion": o["apiVersion"], "kind": o["kind"],
                      "metadata": o["metadata"]} for o in items]
        if trim is not None:
            items = [trim(o) for o in items]
        rv = str(self.rv)
        await self._yield()
        return items, rv

    async def create(self, res: Resource, body: Obj, namespace: str | None = None, *,
                     dry_run: bool = False, field_manager: str | None = None,
                     name: str | None = None, subresource: str | None = None) -> Obj:
        if subresource:
            # A subresource's POST (a token, an eviction) is that subresource's own API.
            raise NotImplementedError(f"the fake has no {res.plural}/{subresource}")
        meta = dict(body.get("metadata") or {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise status_error(422, "Invalid", f"{res.kind} is invalid: metadata.name: "
                                   "Required value: name or generateName is required", res)
            meta["name"] = meta["generateName"] + "".join(
                self.rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
        obj_name = str(meta["name"])
        await self._enter("create", res, obj_name)
        key = self._key(res, obj_name, namespace)
        if key in self.objects:
            raise status_error(409, "AlreadyExists",
                               f'{_qualified(res)} "{obj_name}" already exists', res, obj_name)
        obj = clone({**body, "apiVersion": res.api_version, "kind": res.kind})
        meta.pop("resourceVersion", None)
        meta.update(uid=str(uuid.UUID(int=self.rng.getrandbits(128))),
                    creationTimestamp=format_time(EPOCH + timedelta(seconds=self.rv)))
        if res.namespaced:
            meta["namespace"] = namespace or ""
        obj["metadata"] = clone(meta)
        if not dry_run:
            self._bump(obj)
            self.objects[key] = obj
            self._record("ADDED", key, obj, None)
        await self._yield()
        return clone(obj)

    async def replace(self, res: Resource, body: Obj, namespace: str | None = None, *,
                      subresource: str | None = None) -> Obj:
        name = str(body["metadata"]["name"])
        await self._enter("replace", res, name)
        key = self._key(res, name, namespace)
        old = self._existing(res, name, namespace)
        self._check_version(res, name, old, body["metadata"].get("resourceVersion"))
        new = clone(body)
        new.setdefault("apiVersion", res.api_version)
        new.setdefault("kind", res.kind)
        if subresource == "status":
            new = {**clone(old), "status": clone(body.get("status"))}
        out = self._store(key, old, new)
        await self._yield()
        return out

    async def patch(self, res: Resource, name: str, patch: Any, namespace: str | None = None,
                    *, kind: PatchKind = "merge", subresource: str | None = None,
                    field_manager: str | None = None, force: bool = False,
                    dry_run: bool = False) -> Obj:
        if kind == "apply" and not field_manager:
            raise ValueError("server-side apply needs a field manager")
        await self._enter("patch", res, name)
        key = self._key(res, name, namespace)
        old = self.objects.get(key)
        if old is None:
            if kind == "apply" and not subresource:  # apply creates what is missing
                return await self.create(res, patch, namespace, dry_run=dry_run)
            raise not_found(res, name)
        new = clone(old)
        if kind == "json":
            json_patch(new, patch, res, name)
        else:
            self._check_version(res, name, old, (patch.get("metadata") or {})
                                .get("resourceVersion"))
            body = clone(patch)
            (body.get("metadata") or {}).pop("resourceVersion", None)
            if subresource == "status":
                body = {"status": body.get("status")}
            merge_patch(new, body, named_lists=kind != "merge")
        if dry_run:
            return new
        out = self._store(key, old, new)
        await self._yield()
        return out

    async def delete(self, res: Resource, name: str, namespace: str | None = None, *,
                     uid: str | None = None, propagation: str = "Background",
                     grace_period: int | None = None) -> Obj | None:
        await self._enter("delete", res, name)
        key = self._key(res, name, namespace)
        obj = self.objects.get(key)
        if obj is None:
            return None
        if uid and obj["metadata"]["uid"] != uid:
            raise conflict(res, name, f"Precondition failed: UID in precondition: {uid}, "
                           f"UID in object meta: {obj['metadata']['uid']}")
        if obj["metadata"].get("finalizers"):
            new = clone(obj)
            new["metadata"].setdefault("deletionTimestamp",
                                       format_time(EPOCH + timedelta(seconds=self.rv)))
            out = self._store(key, obj, new, deleting=True)
        else:
            del self.objects[key]
            gone = clone(obj)
            self._bump(gone)
            self._record("DELETED", key, gone, obj)
            out = clone(gone)
        await self._yield()
        return out

    async def watch(self, res: Resource, namespace: str | None = None, *,
                    resource_version: str = "", label_selector: str | None = None,
                    field_selector: str | None = None,
                    timeout_seconds: int = 290) -> AsyncIterator[WatchEvent]:
        await self._enter("watch", res, "")
        self.open_watches += 1
        try:
            async for ev in self._events(res, namespace, resource_version, label_selector,
                                         field_selector, timeout_seconds):
                yield ev
        finally:
            self.open_watches -= 1

    async def _events(self, res: Resource, namespace: str | None, resource_version: str,
                      label_selector: str | None, field_selector: str | None,
                      timeout_seconds: int) -> AsyncIterator[WatchEvent]:
        generation = self._generation
        if resource_version in ("", "0"):
            # "Any version": the current state first, as synthetic ADDED events.
            for _, obj in sorted(kv for kv in self.objects.items() if kv[0][0] == res.plural):
                if self._selected(res, namespace, obj, label_selector, field_selector):
                    yield WatchEvent("ADDED", clone(obj))
            after = self.rv
        else:
            after = int(resource_version)
            if after < self.compacted:
                raise status_error(410, "Expired", f"too old resource version: {after} "
                                   f"({self.compacted})")
        deadline = asyncio.get_running_loop().time() + timeout_seconds
        while generation == self._generation:
            if after < self.compacted:  # fell behind a compaction while open
                raise status_error(410, "Expired", f"too old resource version: {after} "
                                   f"({self.compacted})")
            of_kind = self._changes_of.get(res.plural, [])
            pending = of_kind[bisect.bisect_right(of_kind, after, key=lambda c: c.rv):]
            for c in pending:
                after = c.rv
                now_in = c.type != "DELETED" and self._selected(
                    res, namespace, c.obj, label_selector, field_selector)
                was_in = self._selected(res, namespace, c.before, label_selector,
                                        field_selector)
                if c.type == "ADDED" and now_in:
                    yield WatchEvent("ADDED", clone(c.obj))
                elif c.type == "MODIFIED" and now_in:
                    yield WatchEvent("MODIFIED" if was_in else "ADDED", clone(c.obj))
                elif was_in and not now_in:
                    yield WatchEvent("DELETED", clone(c.obj))
                if generation != self._generation:
                    return
            if pending:
                continue
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation
                # that lands as the event is set, and a cancelled watch would then go on.
                async with asyncio.timeout(left):
                    await self._wake.wait()
            except TimeoutError:
                return

    async def served_versions(self, group: str) -> builtins.list[str]:
        await self._enter("served_versions", _GROUP, group)
        return list(self.served.get(group, []))

    async def access_review(self, verb: str, resource: str, *, group: str = "",
                            namespace: str | None = None, subresource: str | None = None,
                            name: str | None = None) -> tuple[bool, str]:
        await self._enter("access_review", SELF_SUBJECT_ACCESS_REVIEW, resource)
        why = self.denied.get((verb, resource))
        return (False, why) if why is not None else (True, "")

    async def open_pod_log(self, name: str, namespace: str, *, container: str | None = None,
                           follow: bool = False, stream: str | None = None,
                           tail_lines: int | None = None,
                           since_seconds: int | None = None) -> FakeLog:
        await self._enter("log", POD, name)
        self._existing(POD, name, namespace)
        self.log_asked.append({"follow": follow, "stream": stream, "tail_lines": tail_lines,
                               "since_seconds": since_seconds})
        chunks = self.logs.get((namespace, name, stream))
        if stream is not None and tail_lines is not None:
            # As the API server (PodLogOptions validation): a cause with field "".
            raise status_error(422, "Invalid", f'PodLogOptions "{name}" is invalid: []: '
                               "Forbidden: `tailLines` and specific `stream` are mutually "
                               "exclusive for now", POD, name,
                               [{"reason": "FieldValueForbidden", "field": "",
                                 "message": "Forbidden: `tailLines` and specific `stream` "
                                            "are mutually exclusive for now"}])
        if chunks is None and stream is not None:
            raise status_error(422, "Invalid", f'PodLogOptions "{name}" is invalid: stream: '
                               "Forbidden: may not be specified", POD, name,
                               [{"reason": "FieldValueForbidden", "field": "stream",
                                 "message": "Forbidden: may not be specified"}])
        if tail_lines is not None and chunks:  # as the kubelet: the last lines, whole
            lines = b"".join(chunks).splitlines(keepends=True)
            chunks = [b"".join(lines[-tail_lines:])] if tail_lines else []
        return FakeLog(list(chunks or []))


_IMPLEMENTS_THE_PORT: type[KubeAPI] = FakeKube  # mypy proves the fake is a KubeAPI
