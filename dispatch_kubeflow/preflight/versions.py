"""Proof 1, API versions: the cluster serves the API groups the library speaks."""

from __future__ import annotations

from collections.abc import Sequence

from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import KubeAPI

ALWAYS: tuple[tuple[str, str], ...] = (
    (names.TRAINER_GROUP, names.TRAINER_VERSION), (names.JOBSET_GROUP, names.JOBSET_VERSION))
"""What every mode needs (Kueue mode adds Kueue's)."""


async def check_versions(kube: KubeAPI, required: Sequence[tuple[str, str]]) -> list[str]:
    """Problems with the served API versions ([] when all are served)."""
    problems = []
    for group, version in required:
        served = await kube.served_versions(group)
        if version not in served:
            have = f"it serves {', '.join(served)}" if served else "the group is not installed"
            problems.append(f"the cluster does not serve {group}/{version} ({have})")
    return problems
