"""The optional extras the console scripts need, and one line when one is missing.

A base install (``pip install dispatch-kubeflow``) puts every console script on PATH, but
``kubectl-dispatch`` needs the ``cli`` extra and ``dispatch-admission`` the ``admission``
one. Without it, the script says which extra to install, on one line, and exits 2 (usage),
instead of a traceback of the missing import.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

CLI = ("click", "yaml")
ADMISSION = ("kopf", "prometheus_client", "aiohttp", "cryptography")


def require(command: str, extra: str, modules: Sequence[str]) -> None:
    """Exit 2 with one line naming ``extra`` when one of ``modules`` cannot be imported."""
    missing = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        print(f"{command}: needs the {extra!r} extra ({', '.join(missing)} not installed): "
              f"pip install 'dispatch-kubeflow[{extra}]'", file=sys.stderr)
        raise SystemExit(2)
