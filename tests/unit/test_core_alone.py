"""The controller imports only the shared core and the Kubernetes port of the library.

One fresh interpreter answers both tests (an interpreter's start-up and imports are most
of their cost), in three steps that each add to what the one before loaded: the bare
package, then the controller, then the package's public names on first use. Importing
the controller imports the bare package first anyway, so the second step loads exactly
what a fresh ``import admission`` would.
"""

from __future__ import annotations

import atexit
import functools
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIST = "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('dispatch_kubeflow'))))"
PROBE = "; ".join([
    "import sys, dispatch_kubeflow as dk", LIST, "print('--')",
    "import admission, admission.readmission, admission.app, admission.cli", LIST,
    "print('--')",
    "dk.errors.KubeNotFound; assert dk.registered() == ('kubeflow',)", LIST,
])


def _start() -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", PROBE], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    atexit.register(_end, proc)  # when the tests were deselected
    return proc


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


# In one process, started when this module is collected, so that the interpreter's start-up
# (a second and a half of CPU) runs on the other core beside the tests before these. Under
# pytest-xdist every worker collects every module, and only one runs these tests: there it
# starts on first use, so the other workers do not pay for it.
_PROBE = None if os.environ.get("PYTEST_XDIST_WORKER") else _start()


@functools.cache
def loaded() -> tuple[set[str], set[str], set[str]]:
    """What is loaded after the bare package, after the controller, after first use."""
    probe = _PROBE or _start()
    out, err = probe.communicate(timeout=60)
    assert probe.returncode == 0, err
    package, controller, used = (set(part.split()) for part in out.split("--"))
    return package, controller, used


def test_importing_the_controller_loads_only_core_and_kube() -> None:
    _, loaded_by_controller, _ = loaded()
    others = {m for m in loaded_by_controller if m != "dispatch_kubeflow"
              and not m.startswith(("dispatch_kubeflow.core", "dispatch_kubeflow.kube"))}
    assert not others, f"the controller loads library modules: {sorted(others)}"
    assert {"dispatch_kubeflow.core", "dispatch_kubeflow.kube"} <= loaded_by_controller


def test_the_package_loads_its_public_names_on_first_use() -> None:
    before, loaded_by_controller, after = loaded()
    assert before == {"dispatch_kubeflow"}
    # loaded by the first use itself, not already by the controller's imports
    assert {"dispatch_kubeflow.errors", "dispatch_kubeflow.backend"} <= after - loaded_by_controller
