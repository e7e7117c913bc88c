"""The factory registry (no cluster: only names are looked up)."""

from __future__ import annotations

import pytest

from dispatch_kubeflow import AdapterConfig, Backend, SettingsError, open_backend
from dispatch_kubeflow.registry import register


@pytest.mark.asyncio
async def test_unknown_backend_names_the_field() -> None:
    with pytest.raises(SettingsError) as err:
        await open_backend(AdapterConfig("slurm", b"{}"))
    assert err.value.field == "backend"
    assert "kubeflow" in str(err.value)


@pytest.mark.asyncio
async def test_bad_settings_fail_before_any_connection() -> None:
    with pytest.raises(SettingsError) as err:
        await open_backend(AdapterConfig("kubeflow", b'{"namespace": "x", "bogus": 1}'))
    assert err.value.field in {"probeRuntime", "bogus"}


def test_register_twice_refused() -> None:
    async def f(config: AdapterConfig) -> Backend:
        raise AssertionError("never opened: only registered")

    register("unit-test-backend", f)
    register("unit-test-backend", f)  # the same factory again is fine
    with pytest.raises(ValueError, match="registered already"):
        register("unit-test-backend", lambda c: f(c))
