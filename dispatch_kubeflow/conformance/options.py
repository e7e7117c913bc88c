"""What the suite runs against, and the defaults it assumes of the cluster."""

from __future__ import annotations

from dataclasses import dataclass

from dispatch_kubeflow.core import names

IMAGE = "localhost/dispatch-busybox:kind"
RUNTIME = "dispatch-kind"
FLAVOR = "default-flavor"
MANAGED_BY = "dispatch-conformance"


@dataclass(frozen=True, slots=True)
class Options:
    """What to run against. ``namespace`` None: a fresh ``dk-conformance-<random>``."""

    kubeconfig: str | None = None
    """The kubeconfig file (None: ``$KUBECONFIG`` or ``~/.kube/config``)."""
    context: str | None = None
    """The kubeconfig's context (None: its current one)."""
    namespace: str | None = None
    """The namespace to make and use (None: a fresh ``dk-conformance-<random>``)."""
    keep_going: bool = False
    """Run every check even after one failed (False: the rest are skipped)."""
    runtime: str = RUNTIME
    """The ClusterTrainingRuntime the job and the preflight probe run on."""
    image: str = IMAGE
    """The image of the job's containers: it needs ``/bin/sh``, ``env``, ``grep``, ``sort``."""
    flavor: str = FLAVOR
    """The ResourceFlavor of the suite's ClusterQueue."""
    admission_check: str = names.ADMISSION_CHECK
    """The AdmissionCheck the suite's ClusterQueue lists (dispatch's admission controller)."""
    linger: int = 8
    """Seconds the job's pods keep running after SIGTERM (at most 25: grace is 30 s)."""
    quiet: float = 5.0
    """Seconds a closed or held job is watched for a pod or an admission that must not come."""
    setup_timeout: float = 30.0
    """Seconds to reach the cluster and make the suite's namespace and queues, after which
    the run is a setup failure (one line, exit 3) rather than every check failing."""
