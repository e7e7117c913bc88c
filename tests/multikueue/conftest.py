"""The three local MultiKueue clusters, up once for the tests of a session that need them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.multikueue.clusters import mk, up


@pytest.fixture(scope="session")
def mk_up() -> Iterator[None]:
    """The three clusters up (``multikueue.sh up``: about 2 minutes warm, or the clusters as
    they are); taken down at the session's end unless they were up before it."""
    was_up = up()
    mk("up")
    try:
        yield
    finally:
        if not was_up:
            mk("down")
