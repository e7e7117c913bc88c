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
