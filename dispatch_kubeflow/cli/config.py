"""Where the plugin's settings come from: the library's JSON settings section, in a file,
or, as kubectl would, the kubeconfig's context.

The file is ``--settings FILE``, else ``$DISPATCH_KUBEFLOW_SETTINGS``, else
``$XDG_CONFIG_HOME/dispatch-kubeflow/settings.json`` (``~/.config/...`` when
``XDG_CONFIG_HOME`` is unset). ``--kubeconfig``, ``--context`` and ``-n`` override
``cluster.kubeconfig``, ``cluster.context`` and ``namespace`` of that file, as kubectl's
own flags would. With no file at the default path (and none named), the kubeconfig's
context says the cluster and the namespace (``default`` when it names none), as for
kubectl: enough for every command that only looks, holds or stops; a command that needs
what only a file can say (the preflight's ``probeRuntime``) says so (:func:`require_file`).
Every problem is a :class:`~dispatch_kubeflow.errors.SettingsError` whose message names
the file and the key, so the plugin can print it as one line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dispatch_kubeflow.errors import SettingsError
from dispatch_kubeflow.kube.kubeconfig import current_context
from dispatch_kubeflow.settings import KueueSettings, Settings

ENV = "DISPATCH_KUBEFLOW_SETTINGS"


CLI_TRANSIENT = "3s"
"""timeouts.transient for the command line, unless its settings file says otherwise."""


def default_path() -> Path:
    """``$XDG_CONFIG_HOME/dispatch-kubeflow/settings.json`` (or under ``~/.config``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "dispatch-kubeflow" / "settings.json"


@dataclass(frozen=True, slots=True)
class Target:
    """What the command line said about where to work."""

    settings_file: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None


def settings_path(target: Target) -> tuple[Path, str]:
    """The settings file and how it was chosen (for messages)."""
    if target.settings_file:
        return Path(target.settings_file), "--settings"
    if os.environ.get(ENV):
        return Path(os.environ[ENV]), f"${ENV}"
    return default_path(), "the default path"


UNSET = "unset-no-settings-file"
"""The probeRuntime (and Kueue localQueue) of settings made from a kubeconfig: Settings
requires them, and nothing the plugin does without a file reads them (Start is never run,
and the preflight refuses first: :func:`require_file`)."""


@dataclass(frozen=True, slots=True)
class Loaded:
    """Settings, and where they came from."""

    settings: Settings
    source: str
    """The file, or ``kubeconfig context NAME`` (for messages)."""
    from_file: bool


def resolve(target: Target) -> Loaded:
    """The settings of ``target``: its file, else (none named, none at the default path)
    the kubeconfig's context, with the command line's overrides."""
    path, how = settings_path(target)
    if how == "the default path" and not path.is_file():
        return from_kubeconfig(target)
    return Loaded(load(target), str(path), True)


def from_kubeconfig(target: Target) -> Loaded:
    """Settings from the kubeconfig's context: its cluster, and its namespace unless ``-n``
    (``default`` when it names none, as kubectl)."""
    ctx = current_context(target.kubeconfig, target.context)
    data: dict[str, Any] = {
        "cluster": {"context": ctx.name,
                    **({"kubeconfig": target.kubeconfig} if target.kubeconfig else {})},
        "namespace": target.namespace or ctx.namespace or "default",
        "probeRuntime": {"name": UNSET},
        "timeouts": {"transient": CLI_TRANSIENT}}
    source = f"kubeconfig context {ctx.name}"
    try:
        return Loaded(Settings.parse(data), source, False)
    except SettingsError as exc:
        raise SettingsError(f"{source}: {exc}", field=exc.field,
                            problems=exc.problems) from None


def require_file(loaded: Loaded, key: str, what: str) -> None:
    """A SettingsError naming ``key`` when the settings came from no file: ``what`` (a
    command) needs what only a settings file can say."""
    if loaded.from_file:
        return
    raise SettingsError(
        f"{key}: {what} needs {key} from a settings file, and there is none ({loaded.source} "
        f"gave the cluster and namespace); pass --settings FILE, set ${ENV}, or write "
        f"{default_path()}", field=key)


def with_kueue(settings: Settings, local_queue: str | None) -> Settings:
    """``settings`` in Kueue mode with ``local_queue`` (None: plain mode), for settings made
    from a kubeconfig, whose mode the job's objects say. The queue is only named, never
    used: nothing the plugin runs without a file starts a job."""
    if local_queue is None:
        return settings.model_copy(update={"kueue": None})
    try:
        kueue = KueueSettings.model_validate({"localQueue": local_queue})
    except ValidationError:  # a label value need not be a queue's name: it is unused
        kueue = KueueSettings.model_validate({"localQueue": UNSET})
    return settings.model_copy(update={"kueue": kueue})


def load(target: Target) -> Settings:
    """The settings of ``target``'s file, with the command line's overrides."""
    path, how = settings_path(target)
    if not path.is_file():
        raise SettingsError(
            f"settings: no settings file at {path} ({how}); pass --settings FILE with the "
            f"library's JSON settings section, set ${ENV}, or write {default_path()}",
            field="settings")
    try:
        data: Any = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"settings: cannot read {path}: {exc}", field="settings") from None
    except json.JSONDecodeError as exc:
        raise SettingsError(
            f"settings: {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
            f"{exc.msg}); fix the file", field="settings") from None
    if not isinstance(data, dict):
        raise SettingsError(f"settings: {path} must hold a JSON object, got "
                            f"{type(data).__name__}", field="settings")
    data = overridden(data, target)
    try:
        return Settings.parse(data)
    except SettingsError as exc:
        raise SettingsError(f"{path}: {exc}", field=exc.field, problems=exc.problems) from None


def overridden(data: dict[str, Any], target: Target) -> dict[str, Any]:
    """``data`` with the command line's cluster and namespace (pure)."""
    data = dict(data)
    cluster = dict(data.get("cluster") or {})
    if target.kubeconfig:
        cluster["kubeconfig"] = target.kubeconfig
        cluster.pop("inCluster", None)
    if target.context:
        cluster["context"] = target.context
        cluster.pop("inCluster", None)
    if cluster:
        data["cluster"] = cluster
    if target.namespace:
        data["namespace"] = target.namespace
    # A person at a terminal wants a dead API server said at once, not ridden out for the
    # library's 30 s; a settings file that names timeouts.transient keeps its own.
    timeouts = data.get("timeouts")
    if timeouts is None or (isinstance(timeouts, dict) and "transient" not in timeouts):
        data["timeouts"] = {**(timeouts or {}), "transient": CLI_TRANSIENT}
    return data
