"""What a service author writes (issue 29, item 5): ``async with`` for what a call opens (the
``async with await`` form kept), ``wait(timeout=)``, naive datetimes as typed errors naming
their parameter, ``__version__``, and a typo in a public name caught by ``mypy --strict``."""

from __future__ import annotations

import importlib.metadata
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

import pytest

import dispatch_kubeflow as dk
from dispatch_kubeflow.opening import Opening
from dispatch_kubeflow.waits import within


class Thing:
    """An async context manager that records its life."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def __aenter__(self) -> Thing:
        self.log.append("enter")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.log.append("exit")


@pytest.mark.asyncio
async def test_an_opening_is_entered_or_awaited_and_opened_once() -> None:
    log: list[str] = []

    async def open_() -> Thing:
        log.append("open")
        return Thing(log)

    async with Opening(open_) as thing:
        assert isinstance(thing, Thing)
        log.append("body")
    assert log == ["open", "enter", "body", "exit"]
    log.clear()
    async with await Opening(open_) as thing:  # the form before
        log.append("body")
    assert log == ["open", "enter", "body", "exit"]
    once = Opening(open_)
    await once
    with pytest.raises(RuntimeError, match="once"):
        await once


@pytest.mark.asyncio
async def test_a_failed_opening_enters_nothing() -> None:
    async def broken() -> Thing:
        raise dk.SettingsError("namespace: required", field="namespace")

    with pytest.raises(dk.SettingsError):
        async with Opening(broken):
            pytest.fail("entered")


@pytest.mark.asyncio
async def test_open_backend_and_output_are_openings() -> None:
    with pytest.raises(dk.SettingsError, match="no backend named 'slurm'"):
        async with dk.open_backend(dk.AdapterConfig("slurm", b"{}")):
            pytest.fail("opened")
    assert isinstance(dk.open_backend(dk.AdapterConfig("slurm")), Opening)
    assert "Opening[LogStream]" in str(dk.Backend.output.__annotations__["return"])


@pytest.mark.asyncio
@pytest.mark.parametrize(("make", "field"), [
    (lambda: dk.CallMeta(datetime.now() + timedelta(minutes=1)), "call.deadline"),
    (lambda: dk.HoldMeta(1, dk.Actor(dk.ActorKind.HUMAN, "me"),
                         until=datetime(2030, 1, 1)), "until"),
])
async def test_a_naive_datetime_is_a_typed_error_naming_its_field(make: Any, field: str) -> None:
    with pytest.raises(dk.SpecError) as caught:
        make()
    assert caught.value.field == field
    assert "has no time zone" in str(caught.value)


@pytest.mark.asyncio
async def test_within_refuses_a_naive_deadline_and_keeps_an_aware_one() -> None:
    with pytest.raises(dk.SpecError) as caught:
        async with within(datetime.now() + timedelta(seconds=5), "x"):
            pytest.fail("ran")
    assert caught.value.field == "deadline"
    async with within(datetime.now(UTC) + timedelta(seconds=5), "x"):
        pass


def test_the_version_is_the_distributions() -> None:
    assert dk.__version__ == importlib.metadata.version("dispatch-kubeflow")
    assert "__version__" in dk.__all__


def test_a_typo_in_a_public_name_fails_mypy_strict(tmp_path: Any) -> None:
    api = pytest.importorskip("mypy.api")
    code = tmp_path / "svc.py"
    code.write_text("import dispatch_kubeflow as dk\n\n"
                    "def f() -> None:\n    dk.Backend\n    dk.Bakend\n")
    out, _, status = api.run(["--strict", "--no-incremental", str(code)])
    assert status == 1, out
    assert 'Module has no attribute "Bakend"' in out
    assert out.count("error:") == 1, out
