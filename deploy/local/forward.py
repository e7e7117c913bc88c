#!/usr/bin/env python3
"""A TCP forwarder that can be told to refuse: one cluster's own path to another's API
server, for the local MultiKueue clusters (multikueue.sh).

    forward.py --listen HOST:PORT --target HOST:PORT [--refuse-file PATH]

Bytes are copied both ways unchanged, so TLS passes through and the client verifies the
target's own certificate. Because the path is a process of its own, it can be cut without
touching what else reaches the target: multikueue.sh drops its port's packets in the host's
firewall, or, with no firewall tool, creates PATH and sends SIGUSR1. While PATH exists the
forwarder refuses: it closes its listening socket (new connections are refused) and every
open connection. SIGUSR1 makes it look at PATH again; SIGTERM or SIGINT stops it.
Standard library only: it runs with any python3 on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time

BUFFER = 64 * 1024


def address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {text!r}")
    return host, int(port)


def log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}", file=sys.stderr, flush=True)


class Forwarder:
    def __init__(self, listen: tuple[str, int], target: tuple[str, int],
                 refuse_file: str | None, connect_timeout: float) -> None:
        self.listen = listen
        self.target = target
        self.refuse_file = refuse_file
        self.connect_timeout = connect_timeout
        self.server: asyncio.Server | None = None
        self.connections: set[asyncio.Task[None]] = set()
        self.changed = asyncio.Event()
        self.stopping = False

    def refusing(self) -> bool:
        return self.refuse_file is not None and os.path.exists(self.refuse_file)

    async def apply(self) -> None:
        """Listen or refuse, as PATH says."""
        if self.refusing():
            if self.server is not None:
                self.server.close()
                self.server = None
                dropped = await self.close_connections()
                log(f"refusing: listener closed, {dropped} open connection(s) closed")
        elif self.server is None:
            try:
                self.server = await asyncio.start_server(self.handle, *self.listen)
            except OSError as e:
                # Its address may not exist yet (a worker's bridge): run() tries again.
                log(f"cannot listen on {self.listen[0]}:{self.listen[1]}: {e}")
                return
            log(f"listening on {self.listen[0]}:{self.listen[1]}, "
                f"forwarding to {self.target[0]}:{self.target[1]}")

    async def close_connections(self) -> int:
        tasks = list(self.connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        peer = writer.get_extra_info("peername")
        upstream: asyncio.StreamWriter | None = None
        cancelled = False
        try:
            try:
                up_reader, up_writer = await asyncio.wait_for(
                    asyncio.open_connection(*self.target), self.connect_timeout)
            except (OSError, TimeoutError) as e:
                log(f"{peer}: cannot reach {self.target[0]}:{self.target[1]}: {e!r}")
                return
            upstream = up_writer
            await asyncio.gather(self.pipe(reader, up_writer, writer),
                                 self.pipe(up_reader, writer, up_writer))
        except asyncio.CancelledError:
            # Refusing or stopping. The task ends normally: asyncio's server would report a
            # cancelled handler as an unhandled exception.
            cancelled = True
        finally:
            # Cancelled: both ends at once, unflushed. Done: after what is queued is sent.
            for end in (writer, upstream):
                if end is not None:
                    if cancelled:
                        end.transport.abort()
                    else:
                        end.close()
            self.connections.discard(task)

    @staticmethod
    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                   other: asyncio.StreamWriter) -> None:
        """Copy src to dst; pass an end of stream on (half-close, as TCP has it)."""
        try:
            while data := await src.read(BUFFER):
                dst.write(data)
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()
        except OSError:
            # A reset on either side ends the pair, or the other direction would wait forever.
            dst.transport.abort()
            other.transport.abort()

    def wake(self, stop: bool) -> None:
        self.stopping = self.stopping or stop
        self.changed.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, self.wake, False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.wake, True)
        await self.apply()
        while True:
            retry = self.server is None and not self.refusing()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 1.0 if retry else None)
            self.changed.clear()
            if self.stopping:
                break
            await self.apply()
        if self.server is not None:
            self.server.close()
        await self.close_connections()
        log("stopped")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", type=address, required=True, help="HOST:PORT to listen on")
    parser.add_argument("--target", type=address, required=True, help="HOST:PORT to forward to")
    parser.add_argument("--refuse-file", help="refuse while this file exists (see SIGUSR1)")
    parser.add_argument("--connect-timeout", type=float, default=10.0,
                        help="seconds to wait for the target on each new connection")
    args = parser.parse_args()
    forwarder = Forwarder(args.listen, args.target, args.refuse_file, args.connect_timeout)
    asyncio.run(forwarder.run())


if __name__ == "__main__":
    main()
