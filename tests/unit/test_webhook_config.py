"""admission.webhook_config: the leader keeps the MutatingWebhookConfiguration as written,
whoever edits or deletes it (issue 28: it was reconciled only when the controller
started)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from admission.lease import LeaderElector
from admission.webhook_config import (
    MUTATING_WEBHOOK_CONFIGURATION,
    ClientConfig,
    ConfigurationKeeper,
    ensure_configuration,
)
from dispatch_kubeflow.core import errors, names
from tests.unit.fake_kube import FakeKube

pytestmark = pytest.mark.asyncio
CLIENT = ClientConfig(service="dispatch-system/dispatch-admission")
CA = "Q0E="


async def _until(k: FakeKube, ok: Callable[[dict[str, Any] | None], bool],
                 limit: float = 5.0) -> None:
    async with asyncio.timeout(limit):
        while True:
            cur = await k.get_or_none(MUTATING_WEBHOOK_CONFIGURATION, names.WEBHOOK_CONFIGURATION)
            if ok(cur):
                return
            await asyncio.sleep(0.01)


def _ca(cur: dict[str, Any] | None) -> Any:
    return None if cur is None else cur["webhooks"][0]["clientConfig"].get("caBundle")


async def _wipe(k: FakeKube) -> None:
    cur = await k.get(MUTATING_WEBHOOK_CONFIGURATION, names.WEBHOOK_CONFIGURATION)
    cur["webhooks"][0]["clientConfig"]["caBundle"] = ""
    cur["webhooks"][0].pop("matchConditions")
    await k.replace(MUTATING_WEBHOOK_CONFIGURATION, cur)


def _kept(cur: dict[str, Any] | None) -> bool:
    return _ca(cur) == CA and bool(cur and cur["webhooks"][0].get("matchConditions"))


async def test_the_leader_puts_back_an_edited_configuration_and_makes_a_deleted_one_again(
        ) -> None:
    k = FakeKube(3)
    elector = LeaderElector(k, namespace="ctl", name="lease", identity="me", clock=lambda: 0.0)
    assert await elector.try_acquire_or_renew()
    await ensure_configuration(k, CLIENT, CA)
    keeper = ConfigurationKeeper(k, elector, CLIENT, CA)
    task = asyncio.create_task(keeper.run())
    try:
        await asyncio.sleep(0.05)
        await _wipe(k)  # caBundle wiped, match condition dropped
        await _until(k, _kept)
        # Deleted: made again, as it was.
        await k.delete(MUTATING_WEBHOOK_CONFIGURATION, names.WEBHOOK_CONFIGURATION)
        await _until(k, _kept)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_follower_only_watches() -> None:
    k = FakeKube(4)
    elector = LeaderElector(k, namespace="ctl", name="lease", identity="me", clock=lambda: 0.0)
    await ensure_configuration(k, CLIENT, CA)
    keeper = ConfigurationKeeper(k, elector, CLIENT, CA)
    task = asyncio.create_task(keeper.run())
    try:
        await asyncio.sleep(0.05)
        await _wipe(k)
        await asyncio.sleep(0.2)
        assert not _kept(await k.get_or_none(MUTATING_WEBHOOK_CONFIGURATION,
                                             names.WEBHOOK_CONFIGURATION))
        election = asyncio.create_task(elector.run())  # leading now: it looks, and writes
        await _until(k, _kept)
        election.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await election
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_rbac_older_than_the_keeper_is_logged_not_fatal(
        caplog: pytest.LogCaptureFixture) -> None:
    k = FakeKube(5)
    elector = LeaderElector(k, namespace="ctl", name="lease", identity="me", clock=lambda: 0.0)

    def rbac(verb: str, res: object, name: str) -> None:
        if verb in ("list", "watch") and getattr(res, "plural", "") == \
                MUTATING_WEBHOOK_CONFIGURATION.plural:
            raise errors.KubeForbidden("forbidden", status=403)

    k.before = rbac
    keeper = ConfigurationKeeper(k, elector, CLIENT, CA)
    task = asyncio.create_task(keeper.run())
    await asyncio.sleep(0.1)
    assert not task.done()  # the keeper's writer goes on; only the watch gave up
    assert "apply deploy/admission's RBAC" in caplog.text
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_a_deletion_it_may_not_undo_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    """RBAC older than the keeper's create: the deletion is an error naming the fix."""
    k = FakeKube(6)
    elector = LeaderElector(k, namespace="ctl", name="lease", identity="me", clock=lambda: 0.0)
    assert await elector.try_acquire_or_renew()
    await ensure_configuration(k, CLIENT, CA)

    def rbac(verb: str, res: object, name: str) -> None:
        if verb == "create" and getattr(res, "plural", "") == \
                MUTATING_WEBHOOK_CONFIGURATION.plural:
            raise errors.KubeForbidden("forbidden", status=403)

    k.before = rbac
    keeper = ConfigurationKeeper(k, elector, CLIENT, CA)
    task = asyncio.create_task(keeper.run())
    try:
        await asyncio.sleep(0.05)
        await k.delete(MUTATING_WEBHOOK_CONFIGURATION, names.WEBHOOK_CONFIGURATION)
        for _ in range(500):
            if "may not make it" in caplog.text:
                break
            await asyncio.sleep(0.01)
        assert "kubectl apply -f deploy/admission/webhook.yaml" in caplog.text
        assert not task.done()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
