"""The fault suite's ledger, history format and checker (issue 10).

Jobs run :file:`chaos/ledger.sh`, which appends what ran when to a ledger on the host; the
suite records every operation it calls; :func:`chaos.checker.judge` judges both against the
project's guarantees. This package may import :mod:`dispatch_kubeflow`; nothing imports it.
"""
