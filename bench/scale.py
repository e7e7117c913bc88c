"""Scale benchmark: N jobs through one Backend and the admission controller, each figure
beside its floor, in one table per run (issue 11).

For each N (``--jobs 50 200 1000``) two phases run on the same cluster, one after the other:

- **dispatch**: N two-node jobs (``echo ok``) through one :class:`~dispatch_kubeflow.Backend`
  in Kueue mode, behind a ClusterQueue that lists the AdmissionCheck ``dispatch-admission``
  (the controller deployed in the cluster decides), with quota for ``--quota`` jobs at once:
  Start all, Open all, ``Backend.wait`` all to their end, StopJob all, each batch at once.
- **floor**: the same N jobs, made by :func:`bare_run` (the fewest requests a script needs
  for the same lifecycle, every one written out and counted) behind a ClusterQueue whose
  AdmissionCheck is served by :class:`MinimalApprover` (one watch on Workloads, one
  server-side apply of the check per decision, nothing else: no fence, no pod check); once
  all have ended, every one stopped at once by :func:`bare_stop`, as the dispatch phase
  stops its N.

A separate observer (its own connection, one watch on the namespace's Workloads) times every
decision: from when it sees QuotaReserved to when it sees the check Ready. Requests are
counted by each phase's own :class:`~dispatch_kubeflow.kube.Kube` (``Kube.requests``; a watch
counts as one) and divided by N. A sampler thread reads ``/proc`` every 0.25 s for the peak
RSS and the CPU seconds of each phase's client (the library with its Backend, or the bare
script, each run alone in a process of its own), this process (the observer and the floor's
approver), the controller's replicas, kube-apiserver, etcd and Kueue (the local cluster's
processes; on another cluster those columns say n/a). The API
server's own metric ``apiserver_longrunning_requests{verb="WATCH"}`` is read during the waits.

With ``--fenced-floor`` a second floor runs after the first, the same but for its approver,
:class:`FencedApprover` (bench/fenced.py): the controller's three fenced requests and nothing
else, so its table says how close the controller comes to what its fence alone costs (issue
28 item 3), in the same run as the minimal floor's.

Then StopJob of a job whose objects go promptly (``--prompt K``, default 5): K jobs one after
another, each stopped alone once it has ended, through the library and as the bare script,
requests and seconds side by side.

Then P4, with ``--sdk`` (the optional ``bench`` extra installs the Kubeflow SDK): for a few
jobs, the time from each change (running, held, succeeded), as the observer's watch saw it,
to ``Backend.wait`` returning, beside ``TrainerClient.wait_for_job_status`` on the same
TrainJob (in a thread, as it blocks), which polls every 2 s by default.

Needs the local cluster (or any with Kueue, JobSet, Trainer, the ClusterTrainingRuntime
``dispatch-kind`` and the controller running), ``KUBECONFIG`` set::

    python bench/scale.py --jobs 50 200 --cluster dk [--sdk]

It makes its namespaces, ClusterQueues, LocalQueues and the floor's AdmissionCheck, and
deletes them at the end, also when interrupted.
"""

# Each part has its module beside this one: the job and its queues (queues.py), /proc and
# the API server's watches (sampler.py), the observer (observer.py), the floor's approver and
# bare script (bare.py, on floor.py's list-and-watch), the two phases (phases.py), StopJob of
# a prompt job (prompt.py), P4 (p4.py), the tables (tables.py), --workers (rollout.py).

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid

from bare import floor_check
from fenced import FENCED_CHECK, FENCED_CONTROLLER
from p4 import p4
from phases import Phase, dispatch_phase, floor_phase
from prompt import prompt_stops
from rollout import set_workers
from sampler import cluster_pids
from tables import p4_table, prompt_table, table

from dispatch_kubeflow.kube import Kube


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, nargs="+", default=[50, 200, 1000], help="N, each run")
    ap.add_argument("--quota", type=int, default=10, help="jobs the ClusterQueue admits at once")
    ap.add_argument("--workers", type=int, nargs="+", default=None, metavar="W",
                    help="roll the controller out with --workers=W before each dispatch phase "
                         "(one dispatch phase per W, all beside one floor; default: as deployed)")
    ap.add_argument("--floor", action=argparse.BooleanOptionalAction, default=True,
                    help="also run each N against the floor (--no-floor: the library alone, "
                         "e.g. to see whether N jobs go through at all in half the time)")
    ap.add_argument("--dispatch", action=argparse.BooleanOptionalAction, default=True,
                    help="run each N through the library and the controller (--no-dispatch: "
                         "the floor alone, e.g. beside an earlier --no-floor run of the same N)")
    ap.add_argument("--fenced-floor", action="store_true",
                    help="then a second floor whose approver sends the controller's three "
                         "fenced requests (bench/fenced.py) instead of one write: what the "
                         "fence alone costs")
    ap.add_argument("--apiserver-profile", type=int, default=0, metavar="SECONDS",
                    help="profile the API server's CPU for this long in each phase, once a "
                         "third of its decisions were seen (needs its --profiling=true: "
                         "APISERVER_PROFILING=true make cluster-up)")
    ap.add_argument("--cluster", default="dk", help="the local cluster (its processes' figures)")
    ap.add_argument("--prompt", type=int, default=5, metavar="JOBS",
                    help="StopJob of a job whose objects go promptly, over this many jobs")
    ap.add_argument("--sdk", type=int, default=0, metavar="JOBS",
                    help="P4 against the Kubeflow SDK over this many jobs (the bench extra)")
    a = ap.parse_args()
    if not (a.floor or a.dispatch):
        ap.error("--no-floor with --no-dispatch leaves nothing to run")
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        sys.exit("set KUBECONFIG to the cluster to measure")
    tag = uuid.uuid4().hex[:6]
    admin = await Kube.connect(kubeconfig=kubeconfig, request_timeout=30)
    try:
        await floor_check(admin, True)
        if a.fenced_floor:
            await floor_check(admin, True, FENCED_CHECK, FENCED_CONTROLLER)
        for n in a.jobs:
            ds: list[tuple[int | None, Phase]] = []
            pids = cluster_pids(a.cluster)
            for w in (a.workers or [None]) if a.dispatch else []:
                if w is not None:
                    await set_workers(admin, w)
                    # After the roll-out: the controller's replicas are new processes.
                    pids = cluster_pids(a.cluster)
                ds.append((w, await dispatch_phase(kubeconfig, admin, n, a.quota, pids,
                                                   f"{tag}{w or ''}",
                                                   profile_s=a.apiserver_profile)))
            # Without the floor (--no-floor), its column is empty ("-", nan) and no ratio.
            f = (await floor_phase(kubeconfig, admin, n, a.quota, pids, tag,
                                   profile_s=a.apiserver_profile) if a.floor
                 else Phase("floor (not run)", n))
            g = (await floor_phase(kubeconfig, admin, n, a.quota, pids, tag, fenced=True)
                 if a.fenced_floor else None)
            # Without the library's phase (--no-dispatch), its column is the empty one.
            for w, d in ds or [(None, Phase("dispatch (not run)", n))]:
                table(d, f, w)
                if g is not None:
                    table(d, g, w)
        if a.prompt:
            prompt_table(await prompt_stops(kubeconfig, admin, a.prompt, a.quota, tag))
        if a.sdk:
            p4_table(await p4(kubeconfig, admin, a.sdk, tag))
    finally:
        await floor_check(admin, False)
        await floor_check(admin, False, FENCED_CHECK)
        await admin.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
