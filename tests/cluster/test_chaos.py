"""The fault suite's short, fixed-seed version, run by ``make test`` (docs/guarantees.md).

A few seeded runs of ``chaos.runner`` against the test cluster, every property judged on
the recorded history. On the local cluster all faults are drawn; on another cluster only
those that need the API alone (the runner says which it skipped).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.health import HEALTH_WAIT, wait_healthy
from chaos.plan import FAULTS, SCHEDULE_OPS, make_plan
from dispatch_kubeflow.kube import Kube
from tests.cluster.admission_fixture import AdmissionHandle
from tests.cluster.helpers import why_not_local
from tests.conftest import LOCAL_CLUSTER, REPO

pytestmark = [pytest.mark.cluster]

# Seeds whose schedules between them draw every fault and operation kind (checked below),
# and seeds of runs that once found a bug (regressions: docs/guarantees.md).
SEEDS = tuple(int(s) for s in
              os.environ.get("DISPATCH_TEST_CHAOS_SEEDS", "0,1865").split(","))


def test_the_fixed_seeds_draw_every_fault_and_operation() -> None:
    if "DISPATCH_TEST_CHAOS_SEEDS" in os.environ:
        pytest.skip("seeds chosen by DISPATCH_TEST_CHAOS_SEEDS")
    steps = [st for seed in SEEDS for st in make_plan(seed).steps]
    assert {st.name for st in steps if st.kind == "fault"} == set(FAULTS)
    assert {st.name for st in steps if st.kind == "op"} == set(SCHEDULE_OPS)


@pytest.mark.asyncio
async def test_fixed_seed_chaos_runs_find_no_violation(
        kubeconfig: str, kube: Kube, admission: AdmissionHandle, tmp_path: Path) -> None:
    await admission.deployed(kube)  # both replicas, as the runner's health check expects
    local = not why_not_local(kubeconfig, LOCAL_CLUSTER)
    argv = [sys.executable, "-m", "chaos.runner", "--kubeconfig", kubeconfig,
            "--seeds", ",".join(map(str, SEEDS)), "--out", str(tmp_path)]
    if local:
        argv += ["--cluster", LOCAL_CLUSTER]
    try:
        done = await asyncio.to_thread(subprocess.run, argv, cwd=REPO, capture_output=True,
                                       text=True, check=False, timeout=300 * len(SEEDS))
        report = f"{done.stdout}\n{done.stderr[-3000:]}"
        records = [json.loads(line) for line in
                   (tmp_path / "runs.jsonl").read_text().splitlines()] \
            if (tmp_path / "runs.jsonl").exists() else []
        assert [rec["seed"] for rec in records] == list(SEEDS), report
        for rec in records:
            assert not rec["error"], f"seed {rec['seed']}: {rec['error']}\n{report}"
            assert rec["verdicts"], report
            assert all(rec["verdicts"].values()), \
                f"seed {rec['seed']}: {rec['violations']}\n{report}"
            assert rec["executions"] > 0, report
            assert not rec["faults_failed"], f"seed {rec['seed']}: {rec['faults_failed']}"
            if local:
                assert not rec["skipped_faults"], rec["skipped_faults"]
        assert done.returncode == 0, report
    finally:
        # The faults are restored, but a restarted replica or kubelet may still be coming
        # back: the tests after this one get the cluster healthy, as the runs got it.
        problem = await wait_healthy(kube, HEALTH_WAIT)
    assert not problem, f"the cluster stayed unhealthy after the runs: {problem}"
