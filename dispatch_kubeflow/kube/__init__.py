"""The Kubernetes port: one transport owns all I/O with the API server.

Everything else (the library and the admission controller) talks to Kubernetes through the
:class:`KubeAPI` protocol, implemented by :class:`Kube`, and the :mod:`resources
<dispatch_kubeflow.kube.resources>` descriptors.
"""

from dispatch_kubeflow.kube.port import ByteSource, KubeAPI, Obj, PatchKind, WatchEvent
from dispatch_kubeflow.kube.resources import Resource
from dispatch_kubeflow.kube.slots import oldest_first
from dispatch_kubeflow.kube.transport import Kube

__all__ = ["ByteSource", "Kube", "KubeAPI", "Obj", "PatchKind", "Resource", "WatchEvent",
           "oldest_first"]
