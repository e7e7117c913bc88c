"""Kubernetes' times: RFC 3339 (metav1.Time) and MicroTime, read and written in one place.

The API server writes ``metav1.Time`` as ``2006-01-02T15:04:05Z`` and ``metav1.MicroTime``
(Leases, events.k8s.io Events) with six fractional digits; dispatch writes its own
annotations (hold-until, hold-since) as RFC 3339 too.
"""

from __future__ import annotations

from datetime import UTC, datetime

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
"""metav1.Time: UTC, whole seconds."""
MICROTIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
"""metav1.MicroTime: UTC, exactly six fractional digits."""


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 / ISO 8601 time (``Z`` or an offset, any fraction) as an aware datetime.

    None for a missing, empty or unreadable value; a time without an offset is UTC.
    """
    if value is None or value == "":
        return None
    try:
        t = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _utc(t: datetime) -> datetime:
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)


def format_time(t: datetime) -> str:
    """As metav1.Time marshals: UTC, whole seconds, ``Z`` (a naive ``t`` is UTC)."""
    return _utc(t).strftime(TIME_FORMAT)


def format_microtime(t: datetime) -> str:
    """As metav1.MicroTime marshals: UTC, exactly six fractional digits, ``Z`` (a naive
    ``t`` is UTC)."""
    return _utc(t).strftime(MICROTIME_FORMAT)
