"""A MultiKueue worker's part put together (admission.worker_agent, ``--worker-of``): the
webhook's permit check follows the renewal, the fence runs this replica's own image, the
door answers over TLS, and the CLI refuses incomplete worker flags."""

from __future__ import annotations

import ssl
from typing import Any

import aiohttp
import pytest

from admission import cli, tls
from admission.worker_agent import WorkerAgent, WorkerConfig, own_image
from dispatch_kubeflow.core import errors, names
from dispatch_kubeflow.core.permit import lease_name
from dispatch_kubeflow.kube.resources import LEASE, POD
from tests.unit.fake_kube import FakeKube
from tests.unit.shipped_rbac import shipped_rbac
from tests.unit.test_admission_operator import _free_ports

NS = names.CONTROLLER_NAMESPACE


def config(port: int = 9444, image: str = "") -> WorkerConfig:
    return WorkerConfig(cluster="worker1", agent_url=f"https://127.0.0.1:{port}",
                        agent_listen=f"127.0.0.1:{port}", fence_image=image)


async def replica(kube: FakeKube, image: str = "localhost/dispatch-admission:kind") -> None:
    await kube.create(POD, {"metadata": {"name": "replica-a"},
                            "spec": {"containers": [{"name": "admission", "image": image}]}},
                      NS)


@pytest.mark.asyncio
async def test_the_webhooks_permit_check_follows_this_replicas_renewal() -> None:
    manager, worker = FakeKube(0), FakeKube(1)
    await replica(worker)
    agent = WorkerAgent(manager, worker, config(), "replica-a")
    side = await agent.side(NS, "replica-a", b"CA PEM")
    assert side.placement.image == "localhost/dispatch-admission:kind"
    assert (side.placement.agent, side.placement.ca) == ("https://127.0.0.1:9444", "CA PEM")
    assert not side.holds_permit()  # no Lease in the manager: not granted
    assert not await agent.renewal.renew_once()
    await manager.create(LEASE, {"metadata": {"name": lease_name("worker1")}, "spec": {}}, NS)
    assert await agent.renewal.renew_once()
    assert side.holds_permit()
    agent.renewal.permit.revoked()
    assert not side.holds_permit()


@pytest.mark.asyncio
async def test_the_replica_reads_its_image_with_the_rbac_it_ships_with() -> None:
    """Seen on the local MultiKueue clusters: a get of its own pod was forbidden (the
    ClusterRole lists and watches pods) and every worker replica crash-looped."""
    worker = FakeKube(1)
    await replica(worker, "registry/dispatch-admission:2")
    worker.before = shipped_rbac("rbac.yaml", "multikueue-worker/tokenreview-rbac.yaml")
    assert await own_image(worker, NS, "replica-a") == "registry/dispatch-admission:2"


@pytest.mark.asyncio
async def test_the_fence_image_is_the_replicas_own_or_the_flags() -> None:
    worker = FakeKube(1)
    with pytest.raises(errors.SettingsError) as err:
        await own_image(worker, NS, "replica-a")
    assert err.value.field == "--fence-image"
    agent = WorkerAgent(FakeKube(0), worker, config(image="registry/fence:1"), "replica-a")
    assert (await agent.side(NS, "replica-a", b"x")).placement.image == "registry/fence:1"


@pytest.mark.asyncio
async def test_the_door_answers_over_tls_and_wants_a_pods_token() -> None:
    material = tls.generate(["127.0.0.1"])
    [port] = _free_ports(1)
    agent = WorkerAgent(FakeKube(0), FakeKube(1), config(port), "replica-a")
    await agent.start(material.ssl_context())
    try:
        client = ssl.create_default_context(cadata=material.ca.decode())
        async with aiohttp.ClientSession() as http, \
                http.post(f"https://127.0.0.1:{port}/fence", ssl=client) as resp:
            assert resp.status == 401
            body: dict[str, Any] = await resp.json()
        assert "token" in body["reason"]
    finally:
        await agent.stop()


@pytest.mark.parametrize(("argv", "says"), [
    (["--worker-of", "w1"], "needs --manager-kubeconfig"),
    (["--manager-kubeconfig", "/dev/null"], "goes with --worker-of"),
    (["--worker-of", "w1", "--manager-kubeconfig", "/dev/null", "--worker-kubeconfigs", "/"],
     "alternatives"),
    (["--worker-of", "w1", "--manager-kubeconfig", "/dev/null"], "--agent-url"),
])
def test_incomplete_worker_flags_exit_2(argv: list[str], says: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


def test_the_doors_url_comes_from_the_webhooks_service() -> None:
    ns = cli.parser().parse_args([
        "--worker-of", "w1", "--manager-kubeconfig", "/dev/null",
        "--webhook-service", "dispatch-system/dispatch-admission:443"])
    worker = cli.config_from(ns).worker_of
    assert worker is not None
    assert worker.agent_url == "https://dispatch-admission.dispatch-system.svc:9444"
    assert worker.cluster == "w1"
    assert cli.config_from(cli.parser().parse_args([])).worker_of is None
