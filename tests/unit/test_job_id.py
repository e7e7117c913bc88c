"""JobID: ULID layout, sortable, upper-case Crockford base32, lower case in names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dispatch_kubeflow.core import names
from dispatch_kubeflow.errors import SpecError
from dispatch_kubeflow.model import JobID

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def test_known_value() -> None:
    job = JobID.new(T0, bytes(10))
    assert len(job) == 26
    assert job == job.upper()
    assert job.endswith("0" * 16)
    assert job.time == T0


def test_sorts_by_time() -> None:
    ids = [JobID.new(T0 + timedelta(milliseconds=ms)) for ms in (5, 1, 3, 2, 4)]
    assert sorted(ids) == [ids[1], ids[3], ids[2], ids[4], ids[0]]


def test_random_part_differs() -> None:
    assert JobID.new(T0) != JobID.new(T0)


def test_parse_normalises_case() -> None:
    job = JobID.new(T0)
    assert JobID(job.lower()) == job
    assert JobID(JobID(job)) is job


def test_in_names_lower_case() -> None:
    job = JobID.new(T0, bytes(range(10)))
    name = names.trainjob_name(job, 1)
    assert name == f"dj-{job.lower()}-s1"
    assert name == name.lower()


@pytest.mark.parametrize("bad", [
    "", "abc", "01HZZZZZZZZZZZZZZZZZZZZZZZ0",  # 27 characters
    "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",  # overflows 48 bits of time
    "01HZZZZZZZZZZZZZZZZZZZZZZI",  # I is not Crockford
    "01HZZZZZZZZZZZZZZZZZZZZZZ-",
])
def test_invalid(bad: str) -> None:
    with pytest.raises(SpecError) as err:
        JobID(bad)
    assert err.value.field == "job"


def test_not_a_string() -> None:
    with pytest.raises(SpecError):
        JobID(123)  # type: ignore[arg-type]


def test_naive_time_and_bad_entropy() -> None:
    with pytest.raises(SpecError):
        JobID.new(datetime(2026, 1, 1))
    with pytest.raises(SpecError):
        JobID.new(T0, b"short")
