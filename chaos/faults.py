"""The faults (:data:`chaos.plan.FAULTS`): each run through the local cluster's tools
(``deploy/local``) or the API, and what it changed restored."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos.health import CONTROLLER, lease_holder
from dispatch_kubeflow.core import names
from dispatch_kubeflow.kube import Kube
from dispatch_kubeflow.kube import resources as r

LOCAL_TOOLS = Path(__file__).resolve().parent.parent / "deploy" / "local"


def tool(script: str, *args: str, timeout: float = 120) -> str:
    # DISPATCH_KEEP_ON_FAILURE=1: a failing node.sh step (a kubelet whose healthz does not
    # answer within 30 s) otherwise runs down.sh and takes the whole cluster with it.
    # start_new_session: a Ctrl-C meant for the runner must not reach the tool. Cut between
    # its kill of a kubelet and the kubelet's start again, node.sh left the node without
    # one; in its own session it runs to its end while the runner cleans up.
    done = subprocess.run([str(LOCAL_TOOLS / script), *args], capture_output=True, text=True,
                          timeout=timeout, check=False, start_new_session=True,
                          env={**os.environ, "DISPATCH_KEEP_ON_FAILURE": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args)}: rc={done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()[-300:]}")
    return done.stdout.strip()


def local_faults_available(cluster: str | None) -> tuple[bool, str]:
    """Whether the local cluster's fault tools work for ``cluster``, and why not."""
    if not cluster:
        return False, "no --cluster given: not a local cluster"
    try:
        tool("node.sh", "status", cluster, f"{cluster}-worker", timeout=20)
        tool("apiserver.sh", "status", cluster, timeout=20)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return False, f"local tools fail for {cluster}: {exc}"
    if shutil.which("pgrep") is None:
        return False, "no pgrep"
    return True, ""


def controller_pid(holder: str) -> int | None:
    """The host pid of the controller process whose ``--identity`` is ``holder``."""
    done = subprocess.run(["pgrep", "-f", CONTROLLER], capture_output=True, text=True,
                          check=False)
    for pid in done.stdout.split():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"--identity={holder}".encode() in argv:
            return int(pid)
    return None


class Faults:
    """Runs faults and remembers what to restore."""

    def __init__(self, kube: Kube, cluster: str | None, rng: random.Random) -> None:
        self.kube = kube
        self.cluster = cluster or ""
        self.rng = rng
        self.undo: dict[str, Callable[[], object]] = {}

    def restore_all(self) -> list[str]:
        errors = []
        for key, fn in list(self.undo.items()):
            try:
                fn()
            except Exception as exc:
                errors.append(f"{key}: {exc}")
            self.undo.pop(key, None)
        return errors

    def _worker(self) -> str:
        return self.rng.choice((f"{self.cluster}-worker", f"{self.cluster}-worker2"))

    async def run(self, name: str, length: float) -> dict[str, Any]:
        fn = getattr(self, "_" + name.replace("-", "_"))
        out: dict[str, Any] = await fn(length)
        return out

    async def _delete_leader_pod(self, length: float) -> dict[str, Any]:
        holder = await lease_holder(self.kube)
        if not holder:
            return {"skipped": "no Lease holder"}
        await self.kube.delete(r.POD, holder, names.CONTROLLER_NAMESPACE)
        return {"pod": holder}

    async def _apiserver_restart(self, length: float) -> dict[str, Any]:
        await asyncio.to_thread(tool, "apiserver.sh", "restart", self.cluster, f"{length:g}")
        return {"down_s": length}

    async def _hold_off(self, key: str, on: Callable[[], object], off: Callable[[], object],
                        length: float) -> None:
        self.undo[key] = off
        await asyncio.to_thread(on)
        try:
            await asyncio.sleep(length)
        finally:
            self.undo.pop(key, None)
            await asyncio.to_thread(off)

    async def _etcd_compaction(self, length: float) -> dict[str, Any]:
        # Compacts and restarts the apiserver: its new watch cache starts after the compacted
        # revision, so every watch resumed from before gets 410 and must list again.
        rev = await asyncio.to_thread(tool, "apiserver.sh", "compact", self.cluster)
        return {"revision": int(rev.splitlines()[-1])}

    async def _node_pause(self, length: float) -> dict[str, Any]:
        node = self._worker()
        await self._hold_off(f"pause {node}",
                             lambda: tool("node.sh", "pause", self.cluster, node),
                             lambda: tool("node.sh", "resume", self.cluster, node), length)
        return {"node": node, "seconds": length}

    async def _node_cut(self, length: float) -> dict[str, Any]:
        node = self._worker()
        await self._hold_off(f"cut {node}", lambda: tool("node.sh", "cut", self.cluster, node),
                             lambda: tool("node.sh", "heal", self.cluster, node), length)
        return {"node": node, "seconds": length}

    async def _kubelet_restart(self, length: float) -> dict[str, Any]:
        node = self._worker()
        await asyncio.to_thread(tool, "node.sh", "restart-kubelet", self.cluster, node)
        return {"node": node}

    async def _leader_pid(self) -> tuple[str, int | None]:
        holder = await lease_holder(self.kube)
        return holder, (await asyncio.to_thread(controller_pid, holder)) if holder else None

    async def _controller_sigkill(self, length: float) -> dict[str, Any]:
        holder, pid = await self._leader_pid()
        if pid is None:
            return {"skipped": f"no process of Lease holder {holder!r}"}
        os.kill(pid, signal.SIGKILL)
        return {"pod": holder, "pid": pid}

    async def _controller_sigstop(self, length: float) -> dict[str, Any]:
        holder, pid = await self._leader_pid()
        if pid is None:
            return {"skipped": f"no process of Lease holder {holder!r}"}
        await self._hold_off(f"sigstop {pid}", lambda: os.kill(pid, signal.SIGSTOP),
                             lambda: _cont(pid), length)
        return {"pod": holder, "pid": pid, "seconds": length}


def _cont(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
