"""The unit suite's event loops: the ordinary one, and for tests marked ``virtual_time``
one whose clock jumps over waits (tests/unit/virtual_time.py). A test marked ``wall_clock``
as well keeps the ordinary loop: what it waits for is a wall-clock instant (a hold's
expiry), which no jump of the loop's clock brings nearer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest

from tests.unit.virtual_time import VirtualTimeLoop


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item
                                  ) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    if (item.get_closest_marker("virtual_time") is not None
            and item.get_closest_marker("wall_clock") is None):
        return {"virtual-time": VirtualTimeLoop}
    return {"asyncio": asyncio.new_event_loop}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # An unclosed aiohttp response or socket is an error here, where the transport is tested
    # on real loopback servers (the ini ignores ResourceWarning for the cluster suite, whose
    # clients the kubernetes library owns).
    for item in items:
        item.add_marker(pytest.mark.filterwarnings("error::ResourceWarning"))
