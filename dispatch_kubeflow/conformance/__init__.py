"""The conformance suite: does a cluster give the adapter every guarantee the seed shows?

Run it against any cluster you have a kubeconfig for (the local cluster, kind, your own)::

    python -m dispatch_kubeflow.conformance --kubeconfig PATH [--namespace NS] [--keep-going]

or, installed, ``dispatch-conformance --kubeconfig PATH``. From code, ``await run(Options(...))``.

The suite makes what it needs and removes it afterwards, even when a check fails or it is
interrupted: a namespace of its own (``dk-conformance-<random>`` unless named), a
ClusterQueue of the same name that lists the AdmissionCheck with no ``onFlavors``, and a
LocalQueue ``lq``. It then runs one two-node job through the seed's steps and checks, in
order (each check needs the ones before it):

1. ``preflight``: opening the backend proves ReadmissionGate, AttemptInjection and
   HoldCapability (yes, probed), and the backend is not observe-only;
2. ``start-gated``: Start returns a ``gated`` job; no pod is created and the Workload gets
   no quota while it stays closed;
3. ``open-running``: Open leads to ``running``, and rank 0's log shows the first identity
   (A = 1);
4. ``hold``: a hold ends the execution (``held``, no pod left), and the job is not admitted
   again while held;
5. ``higher-identity``: after the release, rank 0's log (read through the library's
   Output) shows A + 1 and a higher ``DISPATCH_EPOCH``;
6. ``no-overlap``: the job is held again and released while the pods of its execution are
   still terminating (its command traps SIGTERM and sleeps). Watching pods and the
   Workload, the AdmissionCheck must not let the Workload be admitted (check ``Ready`` with
   quota reserved) before the last of those pods is gone; then the next execution runs
   with A + 1. The order is judged by resourceVersion (one etcd revision sequence), or by
   the order the watch events arrived when resourceVersions are not numbers;
7. ``stop``: StopJob reports nothing alive or unproven, Find finds nothing, and no
   TrainJob, runtime copy, Workload, JobSet, Job or pod of the job is left.

Each check is registered where it is defined (:mod:`.registry`, one module per guarantee
under :mod:`.checks`), and every wait is a watch with a deadline (:mod:`.watching`).

It prints one line per check (``PASS <check>: <what it saw>`` or ``FAIL <check>: <why>``)
and a closing line ``N passed, N failed``. Without ``keep_going`` it stops at the first
failure (the checks not run are listed as ``SKIP``).
"""

from __future__ import annotations

from dispatch_kubeflow.conformance.checks import all_checks
from dispatch_kubeflow.conformance.options import FLAVOR, IMAGE, RUNTIME, Options
from dispatch_kubeflow.conformance.runner import CheckResult, Summary, run

__all__ = ["CHECKS", "FLAVOR", "IMAGE", "RUNTIME", "CheckResult", "Options", "Summary", "run"]

CHECKS: tuple[tuple[str, str], ...] = tuple((c.name, c.guarantee) for c in all_checks())
"""Every check, in the order it runs: (name, the guarantee it checks)."""
