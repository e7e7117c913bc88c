"""Descriptors of the Kubernetes resources dispatch-kubeflow touches."""

from __future__ import annotations

from dataclasses import dataclass

from dispatch_kubeflow.core import names


@dataclass(frozen=True, slots=True)
class Resource:
    """Where a resource lives in the API: group ("" for core), version, plural, kind."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


TRAINJOB = Resource(names.TRAINER_GROUP, names.TRAINER_VERSION, "trainjobs", "TrainJob")
TRAINING_RUNTIME = Resource(names.TRAINER_GROUP, names.TRAINER_VERSION, "trainingruntimes",
                            "TrainingRuntime")
CLUSTER_TRAINING_RUNTIME = Resource(names.TRAINER_GROUP, names.TRAINER_VERSION,
                                    "clustertrainingruntimes", "ClusterTrainingRuntime",
                                    namespaced=False)
JOBSET = Resource(names.JOBSET_GROUP, names.JOBSET_VERSION, "jobsets", "JobSet")
JOB = Resource("batch", "v1", "jobs", "Job")
POD = Resource("", "v1", "pods", "Pod")
SERVICE_ACCOUNT = Resource("", "v1", "serviceaccounts", "ServiceAccount")
NAMESPACE = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODE = Resource("", "v1", "nodes", "Node", namespaced=False)
EVENT = Resource("events.k8s.io", "v1", "events", "Event")
LEASE = Resource("coordination.k8s.io", "v1", "leases", "Lease")
WORKLOAD = Resource(names.KUEUE_GROUP, names.KUEUE_VERSION, "workloads", "Workload")
LOCAL_QUEUE = Resource(names.KUEUE_GROUP, names.KUEUE_VERSION, "localqueues", "LocalQueue")
CLUSTER_QUEUE = Resource(names.KUEUE_GROUP, names.KUEUE_VERSION, "clusterqueues",
                         "ClusterQueue", namespaced=False)
ADMISSION_CHECK = Resource(names.KUEUE_GROUP, names.KUEUE_VERSION, "admissionchecks",
                           "AdmissionCheck", namespaced=False)
MULTIKUEUE_CLUSTER = Resource(names.KUEUE_GROUP, names.KUEUE_VERSION, "multikueueclusters",
                              "MultiKueueCluster", namespaced=False)
SELF_SUBJECT_ACCESS_REVIEW = Resource("authorization.k8s.io", "v1", "selfsubjectaccessreviews",
                                      "SelfSubjectAccessReview", namespaced=False)
TOKEN_REVIEW = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview",
                        namespaced=False)
