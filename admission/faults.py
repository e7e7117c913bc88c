"""Test-only fault injection: crashes and stalls at chosen steps of the controller's writes.

The kill tests set ``DISPATCH_ADMISSION_FAULT`` (comma-separated) on a host replica:

* ``kill-after-raise`` SIGKILLs the process right after A rose;
* ``kill-after-rebind`` SIGKILLs it right after a rebind raised A for a re-made JobSet;
* ``kill-after-hold-copy`` SIGKILLs it right after it put a TrainJob's hold back on a
  re-made Workload;
* ``kill-after-expiry-clear`` SIGKILLs it right after an expired hold's record left the
  TrainJob, before the Workload is released;
* ``stop-before-ready`` SIGSTOPs the whole process once, after the last leadership check
  and before the Ready write: a leader frozen (GC pause, CPU starvation, SIGSTOP) between
  knowing it leads and writing, which the test resumes with SIGCONT;
* ``no-fence`` writes the check without the Workload's resourceVersion, to show in a test
  what the fence prevents.
* ``no-gate-lift`` never asks for a pod's start: its pods stay gated, for a test to lift
  (or try to lift) the gate itself.

Never for production: unset, every function here does nothing.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping

log = logging.getLogger(__name__)

FAULT_ENV = "DISPATCH_ADMISSION_FAULT"
_stopped_once = False


def faults() -> frozenset[str]:
    return frozenset(f.strip() for f in os.environ.get(FAULT_ENV, "").split(",") if f.strip())


def kill_if(fault: str, where: str, ctx: Mapping[str, object]) -> None:
    """A crash right here, when ``fault`` is injected."""
    if fault in faults():
        log.warning("fault injection: SIGKILL %s", where, extra=dict(ctx))
        os.kill(os.getpid(), signal.SIGKILL)


def stop_once(fault: str, where: str, ctx: Mapping[str, object]) -> None:
    """The whole process frozen here (SIGSTOP), the first time only, when ``fault`` is
    injected; the test resumes it with SIGCONT."""
    global _stopped_once
    if fault in faults() and not _stopped_once:
        _stopped_once = True
        log.warning("fault injection: SIGSTOP %s", where, extra=dict(ctx))
        for h in logging.getLogger().handlers:
            h.flush()
        os.kill(os.getpid(), signal.SIGSTOP)
