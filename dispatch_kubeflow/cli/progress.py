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

from dispatch_kubeflow.waits import task_group

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

    failed: list[Exception] = []

    async def spin() -> None:
        nonlocal shown
        try:
            await asyncio.sleep(DELAY)
            i = 0
            while True:
                out.write(f"\r{FRAMES[i % len(FRAMES)]} {what} "
                          f"({time.monotonic() - began:.0f}s)")
                out.flush()
                shown = True
                i += 1
                await asyncio.sleep(0.1)
        except Exception as exc:
            # Raised when the block ends, as before the block owned the spinner: a line
            # that cannot be written does not cancel the work it only shows.
            failed.append(exc)

    try:
        async with task_group() as group:
            spinner = group.create_task(spin())
            try:
                yield
            finally:
                spinner.cancel()
    finally:
        if failed:
            raise failed[0]
        if shown:
            out.write("\r\033[K")  # clear the line: what follows starts clean
            out.flush()
