"""The request path and the verbs: every request of :class:`~dispatch_kubeflow.kube.Kube`
goes through :meth:`Requests._send`, which retries transient failures (:mod:`.retry`) and
maps the answer: an error status to the error tree (:func:`~dispatch_kubeflow.core.errors.
kube_error`), a body that is not JSON to KubeBadResponse.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from dispatch_kubeflow.core import errors
from dispatch_kubeflow.kube import retry
from dispatch_kubeflow.kube.port import Obj, PatchKind
from dispatch_kubeflow.kube.resources import SELF_SUBJECT_ACCESS_REVIEW, Resource
from dispatch_kubeflow.kube.session import Session, Timeout

log = logging.getLogger(__name__)

_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}

_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""Accept for a list of the items' metadata alone (the API server serves it for every kind;
its items are PartialObjectMetadata, given back their own kind here)."""


class Requests:
    """The request path and the verbs of the port; :class:`~dispatch_kubeflow.kube.Kube`
    sets the attributes."""

    _session: Session
    request_timeout: float
    transient_window: float
    """Seconds one request rides out transient failures at most (:mod:`.retry`)."""
    requests: int
    """How many requests were sent (benchmarks read it)."""
    transient_failures: Counter[str]
    """Tries that failed in a way the request may ride out (a timeout, a refused or reset
    connection, 429, 503, ...), by the error's reason or HTTP status, whether a later try
    succeeded or not: a benchmark's "no request timed out" (benchmarks read it)."""

    # --- the one request path -----------------------------------------------------------
    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: Timeout | None = None,
        stream: bool = False,
        accept: str = "application/json",
    ) -> Any:
        """One request, retrying transient failures (:mod:`.retry`). Streams are not
        retried here: their callers (``observe``) list again themselves."""
        if stream:
            return await self._send_once(method, path, query=query, body=body,
                                         content_type=content_type, timeout=timeout,
                                         stream=True)
        tries = retry.Backoff(self.transient_window)
        while True:
            try:
                return await self._send_once(method, path, query=query, body=body,
                                             content_type=content_type, timeout=timeout,
                                             accept=accept)
            except errors.KubeError as exc:
                wait = None
                if retry.transient(exc, method):
                    self.transient_failures[exc.reason or str(exc.status)] += 1
                    wait = tries.next(exc)
                if wait is None:
                    raise
                log.info("%s %s: %s; try %d in %.1fs", method, path, exc, tries.tries, wait)
                await asyncio.sleep(wait)

    async def _send_once(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: Timeout | None = None,
        stream: bool = False,
        accept: str = "application/json",
    ) -> Any:
        """One try: a stream's open response (2xx), else the JSON body (an error status
        raised as its error)."""
        headers = {"Accept": accept, "Content-Type": content_type}
        params = await self._session.authorize(query, headers)
        if timeout is None:
            timeout = self.request_timeout
        self.requests += 1
        async with self._session.slot(stream):  # why before the timeout starts: slot()
            resp = await self._session.request(method, path, params=params, body=body,
                                               headers=headers, timeout=timeout,
                                               stream=stream)
            ok = 200 <= resp.status <= 299
            if ok and stream:
                return resp
            raw = await self._session.read(resp, f"{method} {path}")
        if not ok:
            try:
                status_body = json.loads(raw) if raw else {}
            except ValueError:
                status_body = {"message": raw.decode(errors="replace")}
            if not isinstance(status_body, dict):
                status_body = {"message": raw.decode(errors="replace")}
            raise errors.kube_error(resp.status, status_body, f"{method} {path}")
        try:
            return json.loads(raw) if raw else {}
        except ValueError as exc:
            raise errors.KubeBadResponse(
                f"{method} {path}: the answer is not JSON: {exc}") from exc

    # --- verbs ---------------------------------------------------------------------------
    async def get(self, res: Resource, name: str, namespace: str | None = None,
                  *, subresource: str | None = None) -> Obj:
        obj: Obj = await self._send("GET", res.path(namespace, name, subresource))
        return obj

    async def get_or_none(self, res: Resource, name: str,
                          namespace: str | None = None) -> Obj | None:
        try:
            return await self.get(res, name, namespace)
        except errors.KubeNotFound:
            return None

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None,
                   field_selector: str | None = None,
                   trim: Callable[[Obj], Obj] | None = None,
                   metadata: bool = False) -> tuple[builtins.list[Obj], str]:
        """All items (following ``continue``: one consistent read) and the list's
        resourceVersion; ``trim`` applied to each item as its page arrives. ``metadata``:
        the server sends each item's metadata alone (a PartialObjectMetadataList)."""
        items: builtins.list[Obj] = []
        cont: str | None = None
        while True:
            page = await self._send("GET", res.path(namespace), query={
                "labelSelector": label_selector, "fieldSelector": field_selector,
                # A page is parsed whole before it is trimmed: smaller pages bound what a
                # trimmed list (an informer's, of a whole namespace) holds at once, 100 pods
                # about 5 MB, for a few more requests of a list made once per informer.
                # Metadata alone is a tenth of that.
                "limit": 500 if trim is None or metadata else 100, "continue": cont,
            }, accept=_METADATA_LIST if metadata else "application/json")
            for item in page.pop("items", None) or []:
                if metadata:
                    item["apiVersion"], item["kind"] = res.api_version, res.kind
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", res.kind)
                items.append(item if trim is None else trim(item))
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return items, str((page.get("metadata") or {}).get("resourceVersion", ""))
    async def create(self, res: Resource, body: Obj, namespace: str | None = None, *,
                     dry_run: bool = False, field_manager: str | None = None,
                     name: str | None = None, subresource: str | None = None) -> Obj:
        """POST a new object; with ``name`` and ``subresource``, POST to that subresource
        (e.g. ``serviceaccounts/<name>/token``; ``body`` then names its own kind)."""
        if subresource and not name:
            raise ValueError("a subresource needs the object's name")
        body = {"apiVersion": res.api_version, "kind": res.kind, **body}
        obj: Obj = await self._send("POST", res.path(namespace, name, subresource), body=body,
                                    query={"dryRun": "All" if dry_run else None,
                                           "fieldManager": field_manager})
        return obj

    async def replace(self, res: Resource, body: Obj, namespace: str | None = None, *,
                      subresource: str | None = None) -> Obj:
        name = body["metadata"]["name"]
        obj: Obj = await self._send("PUT", res.path(namespace, name, subresource), body=body)
        return obj

    async def patch(self, res: Resource, name: str, patch: Any, namespace: str | None = None,
                    *, kind: PatchKind = "merge", subresource: str | None = None,
                    field_manager: str | None = None, force: bool = False,
                    dry_run: bool = False) -> Obj:
        """PATCH with the given content type. ``apply`` is server-side apply; ``dry_run``
        runs every admission step and persists nothing."""
        if kind == "apply" and not field_manager:
            raise ValueError("server-side apply needs a field manager")
        obj: Obj = await self._send(
            "PATCH", res.path(namespace, name, subresource), body=patch,
            content_type=_CONTENT_TYPES[kind],
            query={"fieldManager": field_manager, "force": "true" if force else None,
                   "dryRun": "All" if dry_run else None},
        )
        return obj

    async def delete(self, res: Resource, name: str, namespace: str | None = None, *,
                     uid: str | None = None, propagation: str = "Background",
                     grace_period: int | None = None) -> Obj | None:
        """Delete, optionally only the object with this UID. None when it was already gone."""
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1",
                     "propagationPolicy": propagation}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        try:
            obj: Obj = await self._send("DELETE", res.path(namespace, name), body=body)
        except errors.KubeNotFound:
            return None
        return obj

    # --- special endpoints ---------------------------------------------------------------
    async def served_versions(self, group: str) -> builtins.list[str]:
        """The versions the server serves for an API group ([] when the group is absent)."""
        try:
            doc = await self._send("GET", f"/apis/{group}")
        except errors.KubeNotFound:
            return []
        return [str(v.get("version")) for v in doc.get("versions") or []]

    async def access_review(self, verb: str, resource: str, *, group: str = "",
                            namespace: str | None = None, subresource: str | None = None,
                            name: str | None = None) -> tuple[bool, str]:
        """Ask whether the caller may do ``verb`` on ``resource`` (SelfSubjectAccessReview)."""
        attrs = {k: v for k, v in {
            "verb": verb, "group": group, "resource": resource, "namespace": namespace,
            "subresource": subresource, "name": name}.items() if v}
        out = await self.create(SELF_SUBJECT_ACCESS_REVIEW, {"spec": {"resourceAttributes": attrs}})
        status = out.get("status") or {}
        reason = status.get("reason") or status.get("evaluationError") or ""
        return bool(status.get("allowed")), str(reason)
