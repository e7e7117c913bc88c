"""A progress line on stderr for waits longer than a second, when stderr is a terminal.

Nothing is written when stderr is not a terminal (a pipe, a file, a test), so output that
a script reads never carries it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from typing import TextIO

FRAMES = "|/-\\"
DELAY = 1.0
"""Waits shorter than this show nothing: a spinner that flashes is noise."""


@contextlib.asynccontextmanager
async def progress(what: str, stream: TextIO | None = None) -> AsyncIterator[None]:
    """Show ``| what (3s)`` on ``stream`` (stderr) while the block runs past a second."""
    out = stream or sys.stderr
    if not out.isatty():
        yield
        return
    began = time.monotonic()
    shown = False

    async def spin() -> None:
        nonlocal shown
        await asyncio.sleep(DELAY)
        i = 0
        while True:
            out.write(f"\r{FRAMES[i % len(FRAMES)]} {what} ({time.monotonic() - began:.0f}s)")
            out.flush()
            shown = True
            i += 1
            await asyncio.sleep(0.1)

    task = asyncio.create_task(spin())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if shown:
            out.write("\r\033[K")  # clear the line: what follows starts clean
            out.flush()
