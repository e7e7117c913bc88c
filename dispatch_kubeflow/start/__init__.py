"""Start: a runtime copy and a closed TrainJob, then wait for Kueue's Workload.

Order of writes, after every input was validated and the source runtime read:

1. the runtime copy — a namespaced TrainingRuntime named as the TrainJob, copied from the
   named (Cluster)TrainingRuntime, with dispatch's labels added to every replicatedJob's
   Job and pod template so every Job and pod of the job carries them. It must exist before
   the TrainJob: Trainer's TrainJob webhook refuses a TrainJob whose TrainingRuntime is
   not there ("specified trainingRuntime must be created before the TrainJob is created").
2. the TrainJob, suspended, closed by the start gate (Kueue: ``admission-gated-by``), with
   dispatch's labels, Kueue's queue and priority-class labels, and the spec hash.
3. the copy's ownerReference to the TrainJob, so the garbage collector removes it.

Concurrent Starts of one job and submission are linearizable: the copy is created once
(by name), and its spec hash decides which request may make the TrainJob. Start never
deletes or changes another request's copy; a TrainJob is kept only if, after it was made,
the copy still carries its request's hash (else it is deleted again under its UID, before
anything ran), and the owner patch carries the copy's resourceVersion. So exactly one
request's TrainJob exists, built from that request's copy; callers of the same request get
its reference, callers of another get a ConflictError naming what differs.

A Start interrupted between these steps leaves objects labelled with the job id, which
``find``/StopJob find, and which a repeated Start of the same request completes (another
request is refused, naming the interrupted one, until StopJob removes it). What the mode adds
(:class:`StartMode`): Kueue's queue labels and gate, and in Kueue mode Start returns once
Kueue made the Workload (``kueue.x-k8s.io/job-uid=<TrainJob uid>``).
"""

from dispatch_kubeflow.start.spec import (
    TRAINJOB_API_VERSION,
    StartMode,
    Validated,
    job_labels,
    owner_reference,
    request_doc,
    runtime_copy,
    spec_hash,
    trainjob_body,
    validate,
    what_differs,
)
from dispatch_kubeflow.start.writes import (
    KUEUE_TRAINJOB_WEBHOOK,
    RUNTIME_LAG_PATIENCE,
    create_trainjob,
    runtime_not_seen,
    start,
)

__all__ = [
    "KUEUE_TRAINJOB_WEBHOOK",
    "RUNTIME_LAG_PATIENCE",
    "TRAINJOB_API_VERSION",
    "StartMode",
    "Validated",
    "create_trainjob",
    "job_labels",
    "owner_reference",
    "request_doc",
    "runtime_copy",
    "runtime_not_seen",
    "spec_hash",
    "start",
    "trainjob_body",
    "validate",
    "what_differs",
]
