"""The backend's settings section (JSON), validated.

The keys are the seed's, camelCase::

    {
      "cluster":      {"kubeconfig": "/path", "context": "name"}   or {"inCluster": true},
      "namespace":    "tutorial",
      "probeRuntime": {"kind": "ClusterTrainingRuntime", "name": "dispatch-kind"},
      "kueue":        {"localQueue": "lq", "priorityClass": "low",
                       "admissionCheck": "dispatch-admission",
                       "multiKueue": {"workers": {"worker1": {"kubeconfig": "/path"}}}},
      "timeouts":     {"request": "10s", "start": "2m", "stopJob": "3m",
                       "preflightProbe": "10s", "transient": "30s"}
    }

``kueue`` absent means plain mode (no Kueue: the TrainJob's ``spec.suspend`` is the gate);
``kueue.multiKueue`` present means MultiKueue mode: ``cluster`` is Kueue's manager cluster,
and each worker (named as its MultiKueueCluster) is reached as ``cluster`` is.
Unknown keys are refused. Every problem raises `dispatch_kubeflow.errors.SettingsError`
whose ``field`` is the dotted key (``timeouts.stopJob``) and whose message says what the key
accepts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic.alias_generators import to_camel

from dispatch_kubeflow.errors import SettingsError

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
DURATION_ACCEPTS = 'a positive duration such as "10s", "3m" or "1h30m" (units h, m, s, ms, us, ns)'
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def parse_duration(value: object) -> timedelta:
    """Parse a Go-style duration ("10s", "1h30m", "1.5s", "500ms"); positive only."""
    if isinstance(value, timedelta):
        text = None
        result = value
    elif isinstance(value, str):
        text = value.strip()
        pos, seconds = 0, 0.0
        if not text:
            raise ValueError(f"got an empty string; expected {DURATION_ACCEPTS}")
        while pos < len(text):
            m = _DURATION_PART.match(text, pos)
            if not m:
                raise ValueError(f"got {value!r}; expected {DURATION_ACCEPTS}")
            seconds += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
            pos = m.end()
        try:
            result = timedelta(seconds=seconds)
        except OverflowError:
            raise ValueError(f"got {value!r}, far past any timeout; expected "
                             f"{DURATION_ACCEPTS}") from None
    else:
        raise ValueError(f"got {type(value).__name__} {value!r}; expected {DURATION_ACCEPTS}")
    if result <= timedelta(0):
        raise ValueError(f"got {text or result!r}; expected {DURATION_ACCEPTS}")
    return result


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


def _text(d: timedelta) -> str:
    seconds = int(d.total_seconds())
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{d.total_seconds():g}s"


def _at_most(limit: timedelta) -> AfterValidator:
    """A duration past ``limit`` is a mistake (a unit slip: "10h" for "10s"), not a wish: a
    call would hang that long on a server that does not answer."""
    def check(v: timedelta) -> timedelta:
        if v > limit:
            raise ValueError(f"got {_text(v) if v.total_seconds() >= 1 else v}; expected at "
                             f"most {_text(limit)}")
        return v
    return AfterValidator(check)


REQUEST_MAX = timedelta(minutes=5)
START_MAX = timedelta(hours=1)
STOP_JOB_MAX = timedelta(hours=24)
PREFLIGHT_PROBE_MAX = timedelta(minutes=10)
TRANSIENT_MAX = timedelta(hours=1)
_Request = Annotated[timedelta, BeforeValidator(parse_duration), _at_most(REQUEST_MAX)]
_Start = Annotated[timedelta, BeforeValidator(parse_duration), _at_most(START_MAX)]
_StopJob = Annotated[timedelta, BeforeValidator(parse_duration), _at_most(STOP_JOB_MAX)]
_Probe = Annotated[timedelta, BeforeValidator(parse_duration), _at_most(PREFLIGHT_PROBE_MAX)]
_Transient = Annotated[timedelta, BeforeValidator(parse_duration), _at_most(TRANSIENT_MAX)]


class _Section(BaseModel):
    # JSON keys are the camelCase aliases only: a snake_case key is an unknown key.
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel)


class ClusterSettings(_Section):
    """How to reach the cluster: a kubeconfig (and context), or the pod's service account.
    A proxy is taken from the environment (``HTTPS_PROXY``, ``NO_PROXY``, ``~/.netrc``), read
    once when the connection opens."""

    kubeconfig: str | None = Field(
        None, description="a path to a kubeconfig file (default: $KUBECONFIG or ~/.kube/config, "
        "files merged as kubectl merges them); its users may authenticate with a token, a "
        "tokenFile, an exec plugin's token, an OIDC id-token, a username and password, or a "
        "client certificate")
    context: str | None = Field(None, description="a context name in the kubeconfig")
    in_cluster: bool = Field(False, description="true to use the pod's service account")

    @field_validator("in_cluster")
    @classmethod
    def _exclusive(cls, v: bool, info: ValidationInfo) -> bool:
        if v and (info.data.get("kubeconfig") or info.data.get("context")):
            raise ValueError("true cannot be combined with kubeconfig or context")
        return v


class ProbeRuntimeSettings(_Section):
    """The runtime the preflight's start-gate probe TrainJob refers to."""

    kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] = Field(
        "ClusterTrainingRuntime",
        description='"ClusterTrainingRuntime" or "TrainingRuntime" (in the namespace)')
    name: str = Field(description="the runtime's name (a DNS subdomain)")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _subdomain(v)


MULTIKUEUE_WORKERS_MAX = 20
"""MultiKueueConfig's own bound on its clusters."""


class MultiKueueSettings(_Section):
    """MultiKueue mode: the worker clusters Kueue's MultiKueue may dispatch a job to."""

    workers: dict[str, ClusterSettings] = Field(
        description="an object: each MultiKueueCluster's name (as the manager's "
                    "MultiKueueConfig lists it) -> how to reach that worker: kubeconfig, "
                    f"context or inCluster (1 to {MULTIKUEUE_WORKERS_MAX} workers)")

    @field_validator("workers")
    @classmethod
    def _workers(cls, v: dict[str, ClusterSettings]) -> dict[str, ClusterSettings]:
        if not 1 <= len(v) <= MULTIKUEUE_WORKERS_MAX:
            raise ValueError(f"names {len(v)} workers; a MultiKueueConfig lists 1 to "
                             f"{MULTIKUEUE_WORKERS_MAX}")
        for name in v:
            _subdomain(name)
        return v


class KueueSettings(_Section):
    """Kueue mode: the queue every job goes to and the AdmissionCheck that gates readmission."""

    local_queue: str = Field(description="the LocalQueue in the namespace (a DNS subdomain)")
    priority_class: str | None = Field(
        None, description="a WorkloadPriorityClass name (optional)")
    admission_check: str = Field(
        "dispatch-admission",
        description="the AdmissionCheck served by dispatch's admission controller")

    multi_kueue: MultiKueueSettings | None = Field(
        None, description='an object: {"workers": {"<MultiKueueCluster>": {"kubeconfig": '
                          '"/path", "context": "name"}}}; absent unless Kueue dispatches the '
                          "jobs to worker clusters through MultiKueue")

    @field_validator("local_queue", "admission_check")
    @classmethod
    def _names(cls, v: str) -> str:
        return _subdomain(v)

    @field_validator("priority_class")
    @classmethod
    def _priority(cls, v: str | None) -> str | None:
        return None if v is None else _subdomain(v)


class TimeoutSettings(_Section):
    """How long the backend waits. Per-call deadlines (holds) come from the call itself. Each
    has an upper bound: past it a value is refused, naming the key."""

    request: _Request = Field(
        timedelta(seconds=10),
        description=f"one API request: {DURATION_ACCEPTS}, at most {_text(REQUEST_MAX)}")
    start: _Start = Field(
        timedelta(minutes=2),
        description="Start riding out the TrainJob webhooks' cache lag for a new runtime "
                    f"copy, and waiting for Kueue's Workload: {DURATION_ACCEPTS}, at most "
                    f"{_text(START_MAX)}")
    stop_job: _StopJob = Field(
        timedelta(minutes=3),
        description=f"StopJob's passes in all: {DURATION_ACCEPTS}, at most "
                    f"{_text(STOP_JOB_MAX)}")
    preflight_probe: _Probe = Field(
        timedelta(seconds=10),
        description=f"how long the start-gate probe is watched: {DURATION_ACCEPTS}, at most "
                    f"{_text(PREFLIGHT_PROBE_MAX)}")
    transient: _Transient = Field(
        timedelta(seconds=30),
        description="how long one request rides out an API server that refuses "
                    "connections or answers 429 or 503 (a call's deadline may cut it "
                    f"shorter): {DURATION_ACCEPTS}, at most {_text(TRANSIENT_MAX)}")


class Settings(_Section):
    """The whole settings section. ``kueue`` None is plain mode."""

    cluster: ClusterSettings = Field(default_factory=lambda: ClusterSettings.model_validate({}),
                                     description="an object: kubeconfig, context, inCluster")
    namespace: str = Field(description="the namespace jobs run in (a DNS label)")
    probe_runtime: ProbeRuntimeSettings = Field(
        description='an object: {"kind": "ClusterTrainingRuntime", "name": "<runtime>"}')
    probe_watch: Literal["proof", "window"] = Field(
        "proof",
        description='how long the start-gate probe is watched: "proof" ends it as soon as '
                    "Kueue reports its Workload AdmissionGated by dispatch's gate with no pod "
                    '(within timeouts.preflightProbe); "window" watches the whole '
                    "timeouts.preflightProbe, as the seed did (plain mode always does)")
    kueue: KueueSettings | None = Field(
        None, description="an object: localQueue, priorityClass, admissionCheck, "
                          "multiKueue; absent for plain mode")
    timeouts: TimeoutSettings = Field(
        default_factory=lambda: TimeoutSettings.model_validate({}),
        description="an object: request, start, stopJob, preflightProbe, transient")

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        if not _DNS_LABEL.match(v):
            raise ValueError(f"{v!r} is not a DNS label (lower-case letters, digits and '-', "
                             "at most 63, starting and ending alphanumeric)")
        return v

    @classmethod
    def parse(cls, raw: bytes | str | Mapping[str, Any] | Settings) -> Settings:
        """Validate a settings section (JSON text or an already decoded mapping).

        Args:
            raw: JSON text or bytes, a decoded mapping, or Settings (returned as they are).

        Returns:
            The validated settings, with defaults filled in.

        Raises:
            SettingsError: Not JSON, not an object, an unknown key, a missing or invalid
                value (``field`` names the first key at fault, ``problems`` lists them all).
        """
        if isinstance(raw, Settings):
            return raw
        data: Any
        if isinstance(raw, bytes | bytearray | str):
            try:
                data = json.loads(raw)
            except ValueError as exc:
                raise SettingsError(f"settings: not valid JSON: {exc}", field="") from None
        else:
            data = dict(raw)
        if not isinstance(data, dict):
            raise SettingsError(
                f"settings: must be a JSON object, got {type(data).__name__}", field="")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise _settings_error(exc) from None


def _subdomain(v: str) -> str:
    if not _DNS_SUBDOMAIN.match(v):
        raise ValueError(f"{v!r} is not a Kubernetes name (lower-case letters, digits, '-' and "
                         "'.', at most 253, starting and ending alphanumeric)")
    return v


def _settings_error(exc: ValidationError) -> SettingsError:
    problems = []
    first_field = ""
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        dotted = ".".join(loc)
        problems.append(f"{dotted or 'settings'}: {_describe(err, loc)}")
        first_field = first_field or dotted
    message = "invalid settings: " + "; ".join(problems)
    return SettingsError(message, field=first_field, problems=problems)


def _describe(err: Any, loc: list[str]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        accepted = ", ".join(sorted(f.alias or n for n, f in parent.model_fields.items())) \
            if parent else "none"
        return f"unknown key; accepted keys here: {accepted}"
    accepts = _accepts(loc)
    if kind == "missing":
        return f"is required: {accepts}" if accepts else "is required"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if accepts and kind != "value_error":
        return f"{msg}; accepts {accepts}"
    return msg


def _model_at(loc: list[str]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = Settings
    keys = iter(loc)
    for key in keys:
        if model is None:
            return None
        info = _field(model, key)
        if info is None:
            return None
        model = _submodel(info.annotation)
        if getattr(info.annotation, "__origin__", None) is dict:
            next(keys, None)  # a map's key (a worker's name), then its value's fields
    return model


def _accepts(loc: list[str]) -> str:
    if not loc:
        return ""
    parent = _model_at(loc[:-1])
    info = _field(parent, loc[-1]) if parent else None
    return (info.description or "") if info else ""


def _field(model: type[BaseModel], key: str) -> Any:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info
    return None


def _submodel(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None
