"""Every name Kubernetes sees, owned in one place.

Changing a value here changes what is written to clusters: these are wire names.
"""

from __future__ import annotations

from typing import Final

DOMAIN: Final = "dispatch.phpboyscout.uk"

# --- Kueue ------------------------------------------------------------------------------
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VERSION: Final = "v1beta2"
ADMISSION_GATED_BY: Final = "kueue.x-k8s.io/admission-gated-by"
"""Kueue's annotation on the job object: comma-separated admission gates."""
QUEUE_NAME_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL: Final = "kueue.x-k8s.io/priority-class"
KUEUE_JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"

GATE: Final = f"{DOMAIN}/gate"
"""dispatch's own admission gate, set on the TrainJob at creation."""

ADMISSION_CHECK: Final = "dispatch-admission"
"""The default AdmissionCheck name (the settings may name another)."""
CONTROLLER_NAME: Final = f"{DOMAIN}/admission"
"""The AdmissionCheck's spec.controllerName that the admission controller serves."""
FIELD_MANAGER: Final = "dispatch-admission"
"""Server-side apply field manager of the admission controller."""
ADAPTER_FIELD_MANAGER: Final = "dispatch-kubeflow"

# --- Lease -------------------------------------------------------------------------------
CONTROLLER_NAMESPACE: Final = "dispatch-system"
LEASE_NAME: Final = "dispatch-admission"
PERMIT_LEASE_PREFIX: Final = "dispatch-worker-"
"""The worker permit's Lease in the manager, one per MultiKueueCluster: this and its name
(core.permit, docs/multikueue-fence.md)."""
PERMIT_REVOKED: Final = f"{DOMAIN}/permit-revoked"
"""On a permit Lease: the manager revoked it (a write carrying the version it timed); no
renewal extends it until the manager grants it again."""
MULTIKUEUE_CONTROLLER: Final = "kueue.x-k8s.io/multikueue"
"""A manager's TrainJob with this ``spec.managedBy`` runs in a worker cluster, through
MultiKueue: Trainer makes nothing for it in the manager."""
MULTIKUEUE_ORIGIN_LABEL: Final = "kueue.x-k8s.io/multikueue-origin"
"""On every object a manager's MultiKueue made in a worker (its remote TrainJob among them);
MultiKueue syncs and deletes only objects that carry it."""
PREBUILT_WORKLOAD: Final = "kueue.x-k8s.io/prebuilt-workload-name"
"""On a remote TrainJob in a worker: the name of its Workload in the manager (MultiKueue
sets it as an annotation since Kueue's WorkloadIdentifierAnnotations, Beta in v0.19)."""

# --- Trainer / JobSet ------------------------------------------------------------------
TRAINER_GROUP: Final = "trainer.kubeflow.org"
TRAINER_VERSION: Final = "v1alpha1"
JOBSET_GROUP: Final = "jobset.x-k8s.io"
JOBSET_VERSION: Final = "v1alpha2"
KIND_CLUSTER_TRAINING_RUNTIME: Final = "ClusterTrainingRuntime"
KIND_TRAINING_RUNTIME: Final = "TrainingRuntime"
JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT_LABEL: Final = "jobset.sigs.k8s.io/restart-attempt"
REPLICATED_JOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL: Final = "jobset.sigs.k8s.io/job-index"
JOBSET_UID_LABEL: Final = "jobset.sigs.k8s.io/jobset-uid"
"""On every Job and pod of a JobSet: which JobSet object made it (a re-made JobSet of the
same name has another UID)."""
COMPLETION_INDEX_LABEL: Final = "batch.kubernetes.io/job-completion-index"
JOB_TRACKING_FINALIZER: Final = "batch.kubernetes.io/job-tracking"
"""The Job controller's finalizer on each pod it counts; it removes it once counted."""
TRAINER_CONTAINER: Final = "node"

# --- dispatch labels (TrainJob, runtime copy, JobSet template, pods) --------------------
JOB_ID_LABEL: Final = f"{DOMAIN}/job-id"
SUBMISSION_LABEL: Final = f"{DOMAIN}/submission"
ATTEMPT_LABEL: Final = f"{DOMAIN}/attempt"
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "dispatch-kubeflow"

# --- dispatch annotations ---------------------------------------------------------------
ADMISSION_COUNT: Final = f"{DOMAIN}/admission-count"
"""A: how many times the job has been admitted; on the TrainJob."""
ADMISSION_TOKEN: Final = f"{DOMAIN}/admission-token"
"""Which admission raised A last, so a new leader never raises it twice."""
APPROVED_JOBSET: Final = f"{DOMAIN}/approved-jobset"
"""The UID of the JobSet the gate approved the current execution as; written with A, on the
TrainJob (core.execution)."""
SPEC_HASH: Final = f"{DOMAIN}/spec-hash"
REQUEST: Final = f"{DOMAIN}/request"
"""The request a TrainJob and its runtime copy were made from (canonical JSON), so that a
conflicting Start can name what differs."""
HOLD_INSTANCE: Final = f"{DOMAIN}/hold-instance"
HOLD_SINCE: Final = f"{DOMAIN}/hold-since"
HOLD_WHO: Final = f"{DOMAIN}/hold-who"
HOLD_UNTIL: Final = f"{DOMAIN}/hold-until"
HOLD_REASON: Final = f"{DOMAIN}/hold-reason"
HOLD_ANNOTATIONS: Final = (HOLD_INSTANCE, HOLD_SINCE, HOLD_WHO, HOLD_UNTIL, HOLD_REASON)
HOLD_RELEASED: Final = f"{DOMAIN}/hold-released"
"""Kueue mode, on a Workload that carried no record when its job's hold was released (one
re-made under the hold): ``<instance> <time>``. The release writes it so that the
controller's copy of the hold, judged from the Workload before, meets its fence (core.hold)."""

# --- execution identity environment -------------------------------------------------------
ENV_JOB_ID: Final = "DISPATCH_JOB_ID"
ENV_SUBMISSION: Final = "DISPATCH_SUBMISSION"
ENV_ATTEMPT: Final = "DISPATCH_ATTEMPT"
ENV_EPOCH: Final = "DISPATCH_EPOCH"

FENCE_CONTAINER: Final = "dispatch-fence"
"""In a worker cluster (MultiKueue): the native sidecar that stops a pod's processes when
its share of the worker's permit runs out (admission.fence)."""

WEBHOOK_NAME: Final = f"identity.{DOMAIN}"
# The scheduling gate the webhook puts on every dispatch pod at its creation, lifted by
# dispatch-admission once the pod, stored, may start (core.scheduling_gate).
EXECUTION_GATE: Final = f"{DOMAIN}/execution"
WEBHOOK_CONFIGURATION: Final = "dispatch-admission"


def trainjob_name(job_id: str, submission: int) -> str:
    """The TrainJob (and runtime copy, and JobSet) name: ``dj-<lowercase job id>-s<n>``."""
    return f"dj-{job_id.lower()}-s{submission}"


def pods_of(trainjob: str) -> str:
    """The label selector of every pod of TrainJob ``trainjob``: its JobSet is named as it
    is, whichever JobSet object (re-made or not) made the pod."""
    return f"{JOBSET_NAME_LABEL}={trainjob}"
