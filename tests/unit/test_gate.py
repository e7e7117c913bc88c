"""Open in Kueue mode (dispatch_kubeflow.gate) against the in-memory fake transport: only
dispatch's gate goes, others' stay, and the common case is one request."""

from __future__ import annotations

import pytest

from dispatch_kubeflow import errors, gate
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube.resources import TRAINJOB
from tests.unit.fake_kube import FakeKube

pytestmark = [pytest.mark.asyncio, pytest.mark.virtual_time]
NS = "ns"


async def gated(value: str | None) -> FakeKube:
    k = FakeKube(seed=1)
    k.max_yields = 0
    annotations = {names.ADMISSION_GATED_BY: value} if value is not None else {}
    await k.create(TRAINJOB, {"metadata": {"name": "tj", "annotations": annotations}}, NS)
    return k


def gates_of(k: FakeKube) -> str | None:
    (tj,) = k.all(TRAINJOB)
    value: str | None = (tj["metadata"].get("annotations") or {}).get(names.ADMISSION_GATED_BY)
    return value


async def test_the_gate_start_wrote_goes_in_one_request() -> None:
    k = await gated(names.GATE)
    before = k.requests
    assert await gate.open_kueue_gate(k, NS, "tj") is True
    assert k.requests - before == 1
    assert gates_of(k) is None


async def test_another_controller_s_gate_stays() -> None:
    k = await gated(f"example.com/other,{names.GATE}")
    assert await gate.open_kueue_gate(k, NS, "tj") is True
    assert gates_of(k) == "example.com/other"
    # The one-request guess was refused by its test op; then a read and the judged patch.
    assert k.calls["patch"] == 2
    assert k.calls["get"] == 1


@pytest.mark.parametrize("value", [None, "example.com/other"])
async def test_nothing_of_ours_to_remove_is_already_open(value: str | None) -> None:
    k = await gated(value)
    assert await gate.open_kueue_gate(k, NS, "tj") is False
    assert gates_of(k) == value


async def test_no_trainjob_is_not_found() -> None:
    k = FakeKube(seed=1)
    with pytest.raises(errors.NotFound, match="ns/tj"):
        await gate.open_kueue_gate(k, NS, "tj")
