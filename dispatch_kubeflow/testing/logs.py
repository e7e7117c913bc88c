"""A fake pod's log: what :meth:`FakeCluster.write_output` wrote, as a stream of bytes."""

from __future__ import annotations

from collections.abc import AsyncIterator

from dispatch_kubeflow.model import OutputStream
from dispatch_kubeflow.testing.cluster import FakeCluster
from dispatch_kubeflow.testing.objects import FakeJob


class FakeLog:
    """A :class:`~dispatch_kubeflow.kube.ByteSource` over one pod's writes: those of
    ``stream`` (ALL: both, in the order written). With ``follow`` it goes on with later
    writes until the pod no longer runs, as the kubelet's log does."""

    def __init__(self, cluster: FakeCluster, job: FakeJob, pod: str, stream: OutputStream,
                 follow: bool) -> None:
        self._cluster = cluster
        self._job = job
        self._pod = pod
        self._stream = stream
        self._follow = follow
        self._closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        read = 0
        while not self._closed:
            changed = self._cluster._changed
            written = self._job.logs.get(self._pod, [])
            while read < len(written):  # a write made while a chunk was being read counts
                stream, data = written[read]
                read += 1
                if self._stream is OutputStream.ALL or stream is self._stream:
                    yield data
            if not self._follow or not self._running():
                return
            await changed.wait()

    def _running(self) -> bool:
        pod = self._job.pods.get(self._pod)
        return pod is not None and pod["status"].get("phase") == "Running" \
            and not pod["metadata"].get("deletionTimestamp")

    async def aclose(self) -> None:
        self._closed = True
