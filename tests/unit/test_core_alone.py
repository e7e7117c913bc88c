"""The controller imports only the shared core and the Kubernetes port of the library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIST = "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('dispatch_kubeflow'))))"
PROBE = ("import admission, admission.readmission, admission.app, admission.cli, sys; "
         + LIST)


def run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True,
                         capture_output=True, text=True, timeout=60)
    return out.stdout


def test_importing_the_controller_loads_only_core_and_kube() -> None:
    loaded = set(run(PROBE).split())
    others = {m for m in loaded if m != "dispatch_kubeflow"
              and not m.startswith(("dispatch_kubeflow.core", "dispatch_kubeflow.kube"))}
    assert not others, f"the controller loads library modules: {sorted(others)}"
    assert {"dispatch_kubeflow.core", "dispatch_kubeflow.kube"} <= loaded


def test_the_package_loads_its_public_names_on_first_use() -> None:
    before, after = run("import dispatch_kubeflow as dk, sys; " + LIST + "; print('--'); "
                        "dk.errors.KubeNotFound; assert dk.registered() == ('kubeflow',); "
                        + LIST).split("--")
    assert set(before.split()) == {"dispatch_kubeflow"}
    assert {"dispatch_kubeflow.errors", "dispatch_kubeflow.backend"} <= set(after.split())
