"""Test-only fault injection: crashes and stalls at chosen steps of the controller's writes.

A kill test names the faults on a host replica's command line (``--fault NAME``, repeated;
hidden from ``--help``); they reach the parts that act on them through the controller's
configuration. None by default, and then every method here does nothing:

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
  what the fence prevents;
* ``no-gate-lift`` never asks for a pod's start: its pods stay gated, for a test to lift
  (or try to lift) the gate itself.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterable, Mapping

log = logging.getLogger(__name__)

KNOWN = frozenset({"kill-after-raise", "kill-after-rebind", "kill-after-hold-copy",
                   "kill-after-expiry-clear", "stop-before-ready", "no-fence", "no-gate-lift"})


class Faults:
    """The faults this process was started with."""

    def __init__(self, injected: Iterable[str] = ()) -> None:
        self.injected = frozenset(injected)
        unknown = self.injected - KNOWN
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {sorted(KNOWN)}")
        self._stopped = False

    def __contains__(self, fault: str) -> bool:
        return fault in self.injected

    def kill_if(self, fault: str, where: str, ctx: Mapping[str, object]) -> None:
        """A crash right here, when ``fault`` is injected."""
        if fault in self.injected:
            log.warning("fault injection: SIGKILL %s", where, extra=dict(ctx))
            os.kill(os.getpid(), signal.SIGKILL)

    def stop_once(self, fault: str, where: str, ctx: Mapping[str, object]) -> None:
        """The whole process frozen here (SIGSTOP), the first time only, when ``fault`` is
        injected; the test resumes it with SIGCONT."""
        if fault in self.injected and not self._stopped:
            self._stopped = True
            log.warning("fault injection: SIGSTOP %s", where, extra=dict(ctx))
            for h in logging.getLogger().handlers:
                h.flush()
            os.kill(os.getpid(), signal.SIGSTOP)
