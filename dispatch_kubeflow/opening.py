"""Something one call opens, used either way: ``async with`` it, or ``await`` it.

``async with dk.open_backend(config) as backend:`` and ``async with backend.output(job) as
log:`` read as what they do; the form before, ``async with await ...``, keeps working:
awaited, the call gives the opened object, itself an async context manager that closes it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Generic, TypeVar

T = TypeVar("T", bound=AbstractAsyncContextManager[Any])


class Opening(Generic[T]):
    """The opening of a ``T`` that has not happened yet: ``await`` it for the ``T``, or
    ``async with`` it to have the ``T`` closed at the end of the block. Opened once, when
    first awaited or entered.

    What [open_backend][dispatch_kubeflow.open_backend],
    [Backend.connect][dispatch_kubeflow.Backend.connect] and
    [Backend.output][dispatch_kubeflow.Backend.output] return. The errors of the opening
    are raised when it is awaited or entered.

    Raises:
        RuntimeError: It is awaited or entered a second time.
    """

    __slots__ = ("_open", "_opened")

    def __init__(self, open_: Callable[[], Awaitable[T]]) -> None:
        self._open = open_
        self._opened: T | None = None

    async def _opening(self) -> T:
        if self._opened is not None:
            raise RuntimeError("opened already: await it or enter it, once")
        self._opened = await self._open()
        return self._opened

    def __await__(self) -> Generator[Any, None, T]:
        return self._opening().__await__()

    async def __aenter__(self) -> T:
        opened = await self._opening()
        await opened.__aenter__()  # the objects opened here enter as themselves
        return opened

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> bool | None:
        assert self._opened is not None
        return await self._opened.__aexit__(exc_type, exc, tb)
