"""``python -m admission``: the same as the ``dispatch-admission`` console script."""

from admission.scripts import dispatch_admission

raise SystemExit(dispatch_admission())
