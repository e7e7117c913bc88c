"""Fixtures shared by every test: each test gets the root logger back as it found it.

The cluster's fixtures (the kubeconfig, an admin connection, a fresh namespace, the admission
controller) are tests/cluster/conftest.py's, so the unit suite does not import what they
need. ``LOCAL_CLUSTER`` and ``REPO`` are here for the tests that name them.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
LOCAL_CLUSTER = os.environ.get("DISPATCH_TEST_CLUSTER", "dk")
LOCAL_KUBECONFIG = Path(os.environ.get("DISPATCH_TEST_KUBECONFIG",
                                       f"/tmp/{LOCAL_CLUSTER}.kubeconfig"))


def load_script(path: Path, name: str) -> ModuleType:
    """A script that is not in a package (docs/*.py, examples/*.py), imported as ``name``
    (registered in sys.modules, so its dataclasses and pickling find it)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None, path
    assert spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _root_logger() -> Iterator[None]:
    """The root logger as each test found it. A CLI under test installs its own handler on
    the stderr of the moment, which pytest closes after the test: every later record would
    then fail to write and print a whole stack (hundreds of them, seconds of the suite)."""
    root, kopf = logging.getLogger(), logging.getLogger("kopf")
    handlers, level, kopf_level = root.handlers[:], root.level, kopf.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        kopf.setLevel(kopf_level)
