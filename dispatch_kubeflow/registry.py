"""The factory registry: open a backend by name.

A backend registers an async factory under its name; the Kubeflow backend is registered as
``"kubeflow"`` from the start (`dispatch_kubeflow.NAME`). `open_backend` looks the config's
name up and awaits the factory with the config's settings section.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from dispatch_kubeflow import backend
from dispatch_kubeflow.backend import Backend
from dispatch_kubeflow.core.errors import SettingsError
from dispatch_kubeflow.model import AdapterConfig, SettingsSection
from dispatch_kubeflow.opening import Opening

__all__ = ["AdapterConfig", "Factory", "SettingsSection", "open_backend", "register",
           "registered"]

Factory = Callable[[AdapterConfig], Awaitable[Backend]]
_FACTORIES: dict[str, Factory] = {backend.NAME: backend.factory}


def register(name: str, factory: Factory, *, replace: bool = False) -> None:
    """Make ``factory`` open backends named ``name``.

    Args:
        name: The name [AdapterConfig][dispatch_kubeflow.AdapterConfig] gives as ``backend``.
        factory: An async callable that opens a backend from the config.
        replace: Whether to replace a factory registered under the name already.

    Raises:
        ValueError: ``name`` is empty, or another factory has the name and ``replace`` is
            False.
    """
    if not name:
        raise ValueError("a backend needs a name")
    if name in _FACTORIES and _FACTORIES[name] is not factory and not replace:
        raise ValueError(f"a backend named {name!r} is registered already")
    _FACTORIES[name] = factory


def registered() -> tuple[str, ...]:
    """The names that can be opened.

    Returns:
        The registered names, sorted (``"kubeflow"`` among them).
    """
    return tuple(sorted(_FACTORIES))


def open_backend(config: AdapterConfig) -> Opening[Backend]:
    """Open the backend the config names (running its preflight):
    ``async with open_backend(config) as backend:``, or ``backend = await
    open_backend(config)`` and close it yourself (``await backend.close()``).

    Nothing happens until the result is awaited or entered; the errors below are raised
    then. A preflight that cannot reach the cluster or finds a capability missing does not
    raise: the backend opens observe-only
    ([observe_only_reasons][dispatch_kubeflow.Backend.observe_only_reasons] says why).

    Args:
        config: Which backend (``"kubeflow"``, or a name given to
            [register][dispatch_kubeflow.register]) and its settings section.

    Returns:
        The opening of the backend: ``await`` it for the [Backend][dispatch_kubeflow.Backend],
            or ``async with`` it to have the backend closed at the end of the block.

    Raises:
        SettingsError: No backend has that name; the settings are invalid (``field`` names
            the key); the kubeconfig file or the pod's service account cannot be loaded.
    """
    return Opening(lambda: _open(config))


async def _open(config: AdapterConfig) -> Backend:
    factory = _FACTORIES.get(config.backend)
    if factory is None:
        known = ", ".join(registered()) or "none"
        raise SettingsError(f"backend: no backend named {config.backend!r} (registered: {known})",
                            field="backend")
    return await factory(config)
