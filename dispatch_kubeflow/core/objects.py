"""Readers of Kubernetes objects as the API server sends them (JSON dictionaries).

Pure and forgiving: a missing ``metadata``, ``status`` or field reads as empty, never raises.
Shared by the library and the admission controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = Mapping[str, Any]


def meta(obj: Obj | None) -> Mapping[str, Any]:
    """``metadata`` (empty when absent)."""
    return (obj or {}).get("metadata") or {}


def metadata_only(obj: Obj | None) -> dict[str, Any]:
    """A new object of ``obj``'s metadata alone, without ``managedFields`` (what a reader of
    names, labels, owners and finalizers keeps; the spec and status can be large)."""
    return {"metadata": {k: v for k, v in meta(obj).items() if k != "managedFields"}}


def project(obj: Obj | None, paths: tuple[str, ...]) -> dict[str, Any]:
    """A new object of ``obj``'s metadata (as :func:`metadata_only`) and the fields at the
    dotted ``paths``, shared with ``obj``: ``"status.conditions"``, or through each item of a
    list, ``"spec.podSets[].template.metadata.labels"`` (the list keeps its length). A path
    absent from ``obj`` is absent from the result. What a cache keeps of what it judges."""
    out = metadata_only(obj)
    for path in paths:
        _copy(obj or {}, path.split("."), out)
    return out


def _copy(src: Any, steps: list[str], dst: dict[str, Any]) -> None:
    """Copy the field at ``steps`` below ``src`` into ``dst``, making only the dicts and
    lists on the way to a field that exists."""
    step, rest = steps[0], steps[1:]
    through = step.endswith("[]")
    key = step[:-2] if through else step
    if not isinstance(src, Mapping) or key not in src:
        return
    value = src[key]
    if not rest:
        dst[key] = value
    elif through:
        if isinstance(value, list):
            kept = dst.get(key) or [{} for _ in value]
            for item, into in zip(value, kept, strict=True):
                _copy(item, rest, into)
            dst[key] = kept
    else:
        below = dst.get(key) or {}
        _copy(value, rest, below)
        if below:
            dst[key] = below


def labels_of(obj: Obj | None) -> Mapping[str, str]:
    return meta(obj).get("labels") or {}


def annotations_of(obj: Obj | None) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def condition(obj: Obj | None, kind: str) -> dict[str, Any] | None:
    """A copy of the status condition of this type, or None."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def is_true(obj: Obj | None, kind: str) -> bool:
    """Whether the status condition of this type is ``True``."""
    cond = condition(obj, kind)
    return cond is not None and cond.get("status") == "True"


def controller_uid(obj: Obj | None, kind: str) -> str:
    """The UID of the ``kind`` object that controls ``obj`` (its controller owner
    reference; "" when none is recorded)."""
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("kind") == kind and ref.get("controller"):
            return str(ref.get("uid") or "")
    return ""
