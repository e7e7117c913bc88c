"""The controller's RBAC as it ships (deploy/admission), enforced on the in-memory fake: a
read the ClusterRoles do not grant fails as the API server fails it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from dispatch_kubeflow import errors

REPO = Path(__file__).resolve().parents[2]


def shipped_rbac(*manifests: str) -> Callable[[str, object, str], None]:
    """A ``FakeKube.before`` that forbids, as the API server would, every verb the
    ClusterRoles of these manifests (under deploy/admission) do not grant."""
    granted: set[tuple[str, str]] = set()
    for manifest in manifests:
        for doc in yaml.safe_load_all((REPO / "deploy" / "admission" / manifest).read_text()):
            if doc and doc["kind"] == "ClusterRole":
                granted |= {(res, verb) for rule in doc["rules"] for res in rule["resources"]
                            for verb in rule["verbs"]}

    def check(verb: str, res: object, name: str) -> None:
        if (getattr(res, "plural", ""), verb) not in granted:
            raise errors.KubeForbidden(f"{verb} {getattr(res, 'plural', '')} not granted",
                                       status=403)
    return check
