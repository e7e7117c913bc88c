"""What the benchmarks' bare scripts share: the least a client can do, written out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dispatch_kubeflow.errors import KubeGone
from dispatch_kubeflow.kube import Kube


async def gone(kube: Kube, res: Any, ns: str | None, *, label_selector: str | None = None,
               field_selector: str | None = None) -> int:
    """Until nothing the selector names is left: a list, then (if it held anything) a watch
    from its version until each listed object is deleted. Its requests."""
    requests = 0
    while True:
        items, rv = await kube.list(res, ns, label_selector=label_selector,
                                    field_selector=field_selector)
        left = {o["metadata"]["name"] for o in items}
        requests += 1
        try:
            while left:
                requests += 1
                async for ev in kube.watch(res, ns, resource_version=rv,
                                           label_selector=label_selector,
                                           field_selector=field_selector):
                    rv = ev.object["metadata"]["resourceVersion"]
                    if ev.type == "DELETED":
                        left.discard(ev.object["metadata"]["name"])
                    elif ev.type == "ADDED":
                        left.add(ev.object["metadata"]["name"])
                    if not left:
                        break
        except KubeGone:
            continue  # the version was compacted away: list again, as any script must
        return requests


Obj = dict[str, Any]


async def watch_until(kube: Kube, res: Any, ns: str | None,
                      done: Callable[[Mapping[str, Obj]], bool], *,
                      label_selector: str | None = None, field_selector: str | None = None,
                      resource_version: str = "") -> Mapping[str, Obj]:
    """ONE request, as a rule: a watch (without a resourceVersion it starts with the existing
    objects) until ``done`` holds of what it has seen; the objects then. A version compacted
    away (a quiet selector, a slow phase) starts it over from the objects as they are now,
    as any script must."""
    current: dict[str, Obj] = {}
    while True:
        try:
            async for ev in kube.watch(res, ns, label_selector=label_selector,
                                       field_selector=field_selector,
                                       resource_version=resource_version):
                resource_version = ev.object["metadata"]["resourceVersion"]
                if ev.type == "DELETED":
                    current.pop(ev.object["metadata"]["name"], None)
                else:
                    current[ev.object["metadata"]["name"]] = ev.object
                if done(current):
                    return current
        except KubeGone:
            current, resource_version = {}, ""
