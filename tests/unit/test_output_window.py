"""Output's log window: only the last lines (``tail_lines``), only what was logged since
(``since``), asked of the log endpoint; a bad window is a SpecError before any request."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube.resources import POD, TRAINJOB
from dispatch_kubeflow.model import JobID, OutputStream
from dispatch_kubeflow.output import log_window, output
from tests.unit.fake_kube import FakeKube

pytestmark = pytest.mark.asyncio
NS = "ns"


async def running(job: JobID) -> FakeKube:
    k = FakeKube(0)
    await k.create(TRAINJOB, {"metadata": {"name": "tj", "labels": {
        names.JOB_ID_LABEL: str(job), names.SUBMISSION_LABEL: "1"}}}, NS)
    await k.create(POD, {"metadata": {"name": "p0", "labels": {
        names.JOB_ID_LABEL: str(job), names.COMPLETION_INDEX_LABEL: "0",
        names.SUBMISSION_LABEL: "1"}},
        "spec": {"nodeName": "n", "containers": [{"name": names.TRAINER_CONTAINER}]}}, NS)
    k.logs[(NS, "p0", "Stdout")] = [b"a\nb\n", b"c\n"]
    k.logs[(NS, "p0", None)] = [b"a\nb\n", b"c\n"]
    return k


async def test_the_window_is_asked_of_the_server() -> None:
    job = JobID.new()
    k = await running(job)
    async with await output(k, NS, job, tail_lines=1, since=timedelta(seconds=1.5)) as log:
        assert await log.read() == b"c\n"
    # The API server refuses tailLines beside a stream: one stream's last lines are kept
    # here, from the whole log (since is the server's).
    assert k.log_asked == [{"follow": False, "stream": "Stdout", "tail_lines": None,
                            "since_seconds": 2}]  # a part second more is a second more
    async with await output(k, NS, job, tail_lines=5) as log:
        assert await log.read() == b"a\nb\nc\n"  # more lines asked than there are: all
    async with await output(k, NS, job, tail_lines=0) as log:
        assert await log.read() == b""
    async with await output(k, NS, job, tail_lines=1, stream=OutputStream.ALL) as log:
        assert await log.read() == b"c\n"
    assert k.log_asked[-1]["tail_lines"] == 1  # the combined log: the server tails it
    async with await output(k, NS, job) as log:
        assert await log.read() == b"a\nb\nc\n"
    assert k.log_asked[-1]["tail_lines"] is None
    assert k.log_asked[-1]["since_seconds"] is None


async def test_the_window_holds_on_the_combined_log_too() -> None:
    job = JobID.new()
    k = await running(job)
    del k.logs[(NS, "p0", "Stdout")]  # the server cannot split the streams
    async with await output(k, NS, job, tail_lines=2) as log:
        assert not log.split
        assert await log.read() == b"b\nc\n"


@pytest.mark.parametrize(("tail", "since", "field"), [
    (-1, None, "tail_lines"), (True, None, "tail_lines"), ("3", None, "tail_lines"),
    (None, timedelta(0), "since"), (None, 5, "since"),
])
async def test_a_bad_window_is_a_spec_error_before_any_request(tail: Any, since: Any,
                                                               field: str) -> None:
    k = FakeKube(0)
    with pytest.raises(errors.SpecError) as err:
        await output(k, NS, JobID.new(), tail_lines=tail, since=since)
    assert err.value.field == field
    assert k.requests == 0
    with pytest.raises(errors.SpecError):
        log_window(tail, since)


async def test_a_followed_log_of_one_stream_cannot_be_tailed() -> None:
    """The API server refuses tailLines beside a stream, and a followed log never ends, so
    its last lines cannot be kept here: a typed error saying what works."""
    job = JobID.new()
    k = await running(job)
    with pytest.raises(errors.UnsupportedError, match="follow All"):
        await output(k, NS, job, tail_lines=1, follow=True)
    assert k.log_asked == []
