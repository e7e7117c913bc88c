"""``python -m admission``: the same as the ``dispatch-admission`` console script."""

from admission.cli import main

raise SystemExit(main())
