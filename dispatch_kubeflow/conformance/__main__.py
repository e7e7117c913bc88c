"""``python -m dispatch_kubeflow.conformance`` (or ``dispatch-conformance``): run the suite.

Exit status: 0 when every check passed and cleaning up left nothing behind; 1 when a check
failed (or was not run); 2 for bad arguments; 3 when the suite could not be set up (the
cluster unreachable, its kubeconfig unreadable, a prerequisite missing: said once, with its
cause); 130 when interrupted (after cleaning up).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import textwrap
from collections.abc import Sequence

from dispatch_kubeflow import errors
from dispatch_kubeflow.conformance import CHECKS, Options, Summary, run
from dispatch_kubeflow.conformance.options import FLAVOR, IMAGE, RUNTIME
from dispatch_kubeflow.core import names
from dispatch_kubeflow.waits import task_group


def parser() -> argparse.ArgumentParser:
    checks = "\n".join(f"  {name:16} {what}" for name, what in CHECKS)
    p = argparse.ArgumentParser(
        prog="dispatch-conformance",
        description=textwrap.fill(
            "Check that a cluster gives dispatch-kubeflow every guarantee it relies on. The "
            "suite makes a namespace, a ClusterQueue and a LocalQueue of its own, runs one "
            "two-node job through the tutorial's steps, and removes everything it made, even "
            "when a check fails or it is interrupted. Exit status 0 when every check passed.",
            79),
        epilog=f"checks, in order:\n{checks}",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"),
                   help="the cluster's kubeconfig (default: $KUBECONFIG, then ~/.kube/config)")
    p.add_argument("--context", help="a context in the kubeconfig (default: its current one)")
    p.add_argument("--namespace",
                   help="the namespace (and ClusterQueue) to make; it must not exist "
                        "(default: dk-conformance-<random>)")
    p.add_argument("--keep-going", action="store_true",
                   help="run every check even after one failed (default: stop at the first)")
    p.add_argument("--runtime", default=RUNTIME,
                   help=f"the ClusterTrainingRuntime to run on (default: {RUNTIME})")
    p.add_argument("--image", default=IMAGE,
                   help=f"the job's image, with /bin/sh, env, grep and sort (default: {IMAGE})")
    p.add_argument("--flavor", default=FLAVOR,
                   help=f"the ResourceFlavor of the suite's ClusterQueue (default: {FLAVOR})")
    p.add_argument("--admission-check", default=names.ADMISSION_CHECK,
                   help=f"the AdmissionCheck to list (default: {names.ADMISSION_CHECK})")
    p.add_argument("--setup-timeout", type=float, default=30.0,
                   help="seconds to reach the cluster and make the suite's namespace before "
                        "the run is a setup failure, exit 3 (default: %(default)s)")
    return p


EXIT_SETUP = 3
"""The suite could not be set up: nothing was checked."""


def _say(line: str) -> None:
    print(line, flush=True)


async def _main(options: Options) -> Summary | None:
    loop = asyncio.get_running_loop()
    interrupted = False
    try:
        # The suite runs as a task of its own, so that a signal cancels it (and it cleans
        # up), not this task; the group waits for it and raises what it raised.
        async with task_group() as group:
            task = group.create_task(run(options, out=_say))

            def interrupt() -> None:
                nonlocal interrupted
                if interrupted:  # once is enough: the suite is cleaning up
                    print("conformance: still cleaning up; please wait", file=sys.stderr,
                          flush=True)
                    return
                interrupted = True
                task.cancel()

            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, interrupt)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    if task.cancelled():
        if interrupted:
            return None
        raise asyncio.CancelledError
    return task.result()


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    options = Options(kubeconfig=args.kubeconfig, context=args.context,
                      namespace=args.namespace, keep_going=args.keep_going,
                      runtime=args.runtime, image=args.image, flavor=args.flavor,
                      admission_check=args.admission_check,
                      setup_timeout=args.setup_timeout)
    try:
        summary = asyncio.run(_main(options))
    except errors.DispatchError as exc:  # cannot even connect (the kubeconfig, say)
        _say(f"FAIL setup: {type(exc).__name__}: {exc}")
        _say(f"0 passed, 0 failed, {len(CHECKS)} not run")
        return EXIT_SETUP
    if summary is None:
        _say("conformance: interrupted")
        return 130
    if summary.setup:
        _say(f"FAIL setup: {summary.setup}")
    _say(summary.line)
    if summary.setup:
        return EXIT_SETUP
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
