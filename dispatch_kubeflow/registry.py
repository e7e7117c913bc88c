"""Adapter configs and the factory registry: open a backend by name.

A backend registers an async factory under its name (the Kubeflow backend registers as
``"kubeflow"`` when :mod:`dispatch_kubeflow.backend` is imported, which :func:`registered`
and :func:`open_backend` make sure of); :func:`open_backend` looks the name up and awaits
the factory with the config's settings section.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dispatch_kubeflow.core.errors import SettingsError
from dispatch_kubeflow.opening import Opening

if TYPE_CHECKING:  # for the types only: the backend imports this module
    from dispatch_kubeflow.backend import Backend

SettingsSection = bytes | str | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class AdapterConfig:
    """Which backend to open, and its settings section (JSON text, bytes or a mapping)."""

    backend: str
    settings: SettingsSection = field(default_factory=dict)


Factory = Callable[[AdapterConfig], Awaitable["Backend"]]
_FACTORIES: dict[str, Factory] = {}


def register(name: str, factory: Factory, *, replace: bool = False) -> None:
    """Make ``factory`` open backends named ``name``."""
    if not name:
        raise ValueError("a backend needs a name")
    if name in _FACTORIES and _FACTORIES[name] is not factory and not replace:
        raise ValueError(f"a backend named {name!r} is registered already")
    _FACTORIES[name] = factory


_BUILTIN = "dispatch_kubeflow.backend"
"""The module of the Kubeflow backend, which registers it (loaded on first need: the package
loads its modules lazily)."""


def _load_builtin() -> None:
    importlib.import_module(_BUILTIN)


def registered() -> tuple[str, ...]:
    """The names that can be opened."""
    _load_builtin()
    return tuple(sorted(_FACTORIES))


def open_backend(config: AdapterConfig) -> Opening[Backend]:
    """Open the backend the config names (running its preflight):
    ``async with open_backend(config) as backend:``, or ``backend = await
    open_backend(config)`` and close it yourself (``await backend.close()``)."""
    return Opening(lambda: _open(config))


async def _open(config: AdapterConfig) -> Backend:
    _load_builtin()
    factory = _FACTORIES.get(config.backend)
    if factory is None:
        known = ", ".join(registered()) or "none"
        raise SettingsError(f"backend: no backend named {config.backend!r} (registered: {known})",
                            field="backend")
    return await factory(config)
