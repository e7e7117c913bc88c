"""deploy/local/forward.py, the TCP forwarder the three MultiKueue clusters reach each other
through (multikueue.sh): bytes pass both ways; while its refuse file exists (told by SIGUSR1)
it refuses new connections and closes open ones; removed, it forwards again; SIGTERM stops
it. Run as the process multikueue.sh runs, against an echo server on loopback."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.conftest import REPO

FORWARD = REPO / "deploy" / "local" / "forward.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


async def round_trip(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(data)), 5)
    finally:
        writer.close()


async def answers(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    """The echo through the forwarder, once it listens (it starts in the background)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        try:
            return await round_trip(port, data)
        except (ConnectionError, asyncio.IncompleteReadError):
            if loop.time() > end:
                raise
            await asyncio.sleep(0.05)


@pytest_asyncio.fixture
async def forwarder(tmp_path: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, int,
                                                           Path]]:
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    target = server.sockets[0].getsockname()[1]
    port = free_port()
    refuse = tmp_path / "refuse"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(FORWARD), "--listen", f"127.0.0.1:{port}",
        "--target", f"127.0.0.1:{target}", "--refuse-file", str(refuse),
        stderr=asyncio.subprocess.PIPE)
    try:
        yield proc, port, refuse
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        server.close()
        await server.wait_closed()


@pytest.mark.asyncio
async def test_it_forwards_refuses_when_cut_and_forwards_again_when_healed(
        forwarder: tuple[asyncio.subprocess.Process, int, Path]) -> None:
    proc, port, refuse = forwarder
    assert await answers(port, b"hello") == b"hello"
    # An open connection, then the cut: it is closed, and new ones are refused.
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"x")
    await writer.drain()
    assert await asyncio.wait_for(reader.readexactly(1), 5) == b"x"
    refuse.touch()
    proc.send_signal(signal.SIGUSR1)
    assert await asyncio.wait_for(reader.read(1), 5) == b"", "the open connection stays"
    writer.close()
    await asyncio.sleep(0.3)
    with pytest.raises(ConnectionRefusedError):
        await round_trip(port, b"cut")
    # Healed: it listens again.
    refuse.unlink()
    proc.send_signal(signal.SIGUSR1)
    assert await answers(port, b"again") == b"again"
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 5) == 0


def test_a_bad_address_is_exit_2() -> None:
    done = subprocess.run([sys.executable, str(FORWARD), "--listen", "nohost", "--target",
                           "127.0.0.1:1"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "not HOST:PORT" in done.stderr
