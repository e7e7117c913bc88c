"""The argument types of ``kubectl dispatch``: each turns what a user types into the
library's value, or fails with one line saying what was expected."""

from __future__ import annotations

import getpass
import os
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import click

import dispatch_kubeflow as dk
from dispatch_kubeflow.core.times import parse_time
from dispatch_kubeflow.settings import parse_duration

if TYPE_CHECKING:  # click's ParamType is generic only to type checkers (click >= 8.3)
    _Param = click.ParamType[Any, Any]
else:
    _Param = click.ParamType


class JobIDType(_Param):
    """A job id as ``kubectl dispatch get`` lists it (either case)."""

    name = "JOB"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> dk.JobID:
        if isinstance(value, dk.JobID):
            return value
        try:
            return dk.JobID(str(value))
        except dk.SpecError:
            self.fail(f"{value!r} is not a job id: expected 26 Crockford base32 characters "
                      "(the JOB column of 'kubectl dispatch get')", param, ctx)


class WhenType(_Param):
    """An RFC 3339 time, or a duration from now (``30m``, ``2h``)."""

    name = "TIME|DURATION"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        text = str(value).strip()
        when = parse_time(text)
        if when is not None:
            return when
        try:
            return datetime.now(UTC) + parse_duration(text)
        except ValueError:
            self.fail(f"{text!r} is neither an RFC 3339 time (2026-05-01T13:00:00Z) nor a "
                      "duration from now (30m, 2h)", param, ctx)


class DurationType(_Param):
    """A duration (``90s``, ``3m``), at most ``at_most`` when given (a settings bound)."""

    name = "DURATION"

    def __init__(self, at_most: timedelta | None = None) -> None:
        self.at_most = at_most

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            got = parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if self.at_most is not None and got > self.at_most:
            self.fail(f"got {value}; expected at most {self.at_most}", param, ctx)
        return got


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class RefType(_Param):
    """A job id, or ``<namespace>/<TrainJob>`` as Start returned it: a namespace (a DNS
    label) and a name (a DNS subdomain) around one ``/``."""

    name = "REF"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> dk.JobID | dk.ObjectRef:
        if isinstance(value, dk.JobID | dk.ObjectRef):
            return value
        text = str(value)
        if "/" not in text:
            return JOB.convert(text, param, ctx)
        ns, _, name = text.partition("/")
        if not _DNS_LABEL.match(ns) or not _DNS_SUBDOMAIN.match(name):
            self.fail(f"{text!r} is neither a job id nor <namespace>/<TrainJob> (a namespace, "
                      "one '/', a TrainJob's name: what Start returned)", param, ctx)
        return dk.ObjectRef(ns, name)


class ActorType(_Param):
    name = "KIND:ID"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> dk.Actor:
        if isinstance(value, dk.Actor):
            return value
        kind, sep, who = str(value).partition(":")
        kinds = [k.value for k in dk.ActorKind]
        if not sep or not who or kind not in kinds:
            self.fail(f"{value!r}: expected KIND:ID with KIND one of {', '.join(kinds)} "
                      "(human:alice)", param, ctx)
        return dk.Actor(dk.ActorKind(kind), who)


JOB = JobIDType()


def default_actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = os.environ.get("USER", "unknown")
    return f"human:{user}"
