"""``python -m dispatch_kubeflow.cli``: the same as ``kubectl-dispatch``."""

from dispatch_kubeflow.cli import run

run()
