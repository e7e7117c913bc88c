"""admission.tls_keeper: the shared TLS Secret, made again when deleted and served as it is
now when it changes (issue 28: the Secret deleted, replicas ended up on different CAs)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator

import pytest
from cryptography import x509

from admission import tls
from admission.lease import LeaderElector
from admission.tls_keeper import SecretKeeper
from tests.unit.fake_kube import FakeKube

pytestmark = pytest.mark.asyncio
NS, NAME = "dispatch-system", "dispatch-admission-tls"


async def served_certificate(ctx: ssl.SSLContext, trust: tls.TlsMaterial) -> bytes:
    """The certificate a TLS server on ``ctx`` presents now (DER), to a client that trusts
    ``trust``'s CA: a real handshake over loopback."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=ctx)
    port = server.sockets[0].getsockname()[1]
    client = ssl.create_default_context(cadata=trust.ca.decode())
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client,
                                                  server_hostname="127.0.0.1")
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        return bytes(der)
    finally:
        server.close()
        await server.wait_closed()


def der(material: tls.TlsMaterial) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding
    return x509.load_pem_x509_certificate(material.cert).public_bytes(Encoding.DER)


@contextlib.asynccontextmanager
async def keeping(k: FakeKube, elector: LeaderElector, material: tls.TlsMaterial,
                  told: list[tls.TlsMaterial]) -> AsyncIterator[SecretKeeper]:
    serving = material.ssl_context()
    keeper = SecretKeeper(k, elector, NS, NAME, material, serving, told.append)
    task = asyncio.create_task(keeper.run())
    try:
        await asyncio.sleep(0.05)
        yield keeper
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def secret_data(k: FakeKube) -> dict[str, str] | None:
    s = await k.get_or_none(tls.SECRET, NAME, NS)
    return None if s is None else dict(s["data"])


async def until(probe: object, limit: float = 20.0) -> None:
    for _ in range(int(limit / 0.01)):
        if await probe():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not within the limit")


async def test_a_deleted_secret_is_made_again_by_the_leader_from_what_is_served() -> None:
    k = FakeKube(1)
    elector = LeaderElector(k, namespace=NS, name="lease", identity="me", clock=lambda: 0.0)
    assert await elector.try_acquire_or_renew()
    material = await tls.from_secret(k, NS, NAME, ["127.0.0.1"])
    before = await secret_data(k)
    told: list[tls.TlsMaterial] = []
    async with keeping(k, elector, material, told):
        await k.delete(tls.SECRET, NAME, NS)

        async def back() -> bool:
            return await secret_data(k) == before
        await until(back)
    assert told == []  # the same CA: nothing for the webhook configuration to change


async def test_a_follower_makes_nothing_until_it_leads() -> None:
    k = FakeKube(2)
    clock = [0.0]
    other = LeaderElector(k, namespace=NS, name="lease", identity="other",
                          clock=lambda: clock[0])
    assert await other.try_acquire_or_renew()
    me = LeaderElector(k, namespace=NS, name="lease", identity="me", clock=lambda: clock[0])
    assert not await me.try_acquire_or_renew()  # sees the other's record, renewing
    material = await tls.from_secret(k, NS, NAME, ["127.0.0.1"])
    async with keeping(k, me, material, []):
        await k.delete(tls.SECRET, NAME, NS)
        await asyncio.sleep(0.2)
        assert await secret_data(k) is None
        clock[0] += 3600  # the other's Lease expired: this one takes it, and looks
        election = asyncio.create_task(me.run())

        async def back() -> bool:
            return await secret_data(k) is not None
        try:
            await until(back)
        finally:
            election.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await election


async def test_a_changed_secret_is_served_and_its_ca_told() -> None:
    k = FakeKube(3)
    elector = LeaderElector(k, namespace=NS, name="lease", identity="me", clock=lambda: 0.0)
    old = await tls.from_secret(k, NS, NAME, ["127.0.0.1"])
    new = tls.generate(["127.0.0.1"])
    told: list[tls.TlsMaterial] = []
    async with keeping(k, elector, old, told) as keeper:
        assert await served_certificate(keeper.serving, old) == der(old)
        await k.replace(tls.SECRET, {**await k.get(tls.SECRET, NAME, NS),
                                     **tls.secret_body(NS, NAME, new)}, NS)

        async def switched() -> bool:
            return bool(told)
        await until(switched)
        assert told == [new]
        # The server, still running on the same context, presents the new certificate.
        assert await served_certificate(keeper.serving, new) == der(new)
