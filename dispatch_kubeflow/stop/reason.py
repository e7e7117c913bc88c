"""Why a job was stopped: an Event on each of its TrainJobs."""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from dispatch_kubeflow import errors
from dispatch_kubeflow.core import names
from dispatch_kubeflow.core.objects import meta
from dispatch_kubeflow.core.times import format_microtime
from dispatch_kubeflow.kube import KubeAPI
from dispatch_kubeflow.kube.resources import EVENT

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = f"{names.DOMAIN}/kubeflow"


async def record_reason(kube: KubeAPI, trainjob: Mapping[str, Any], reason: str) -> None:
    """An Event on the TrainJob saying why it is stopped (best effort)."""
    m = meta(trainjob)
    now = format_microtime(datetime.now(UTC))
    body = {
        "metadata": {"generateName": f"{m['name']}.stop-", "namespace": m["namespace"]},
        "eventTime": now,
        "type": "Normal",
        "reason": "StopJob",
        "action": "Stop",
        "note": reason[:1024],
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": f"{REPORTING_CONTROLLER}-{socket.gethostname()}"[:128],
        "regarding": {"apiVersion": f"{names.TRAINER_GROUP}/{names.TRAINER_VERSION}",
                      "kind": "TrainJob", "name": m["name"], "namespace": m["namespace"],
                      "uid": m.get("uid")},
    }
    try:
        # A record, not a decision: a repeated StopJob records its reason again, by design.
        await kube.create(EVENT, body, m["namespace"])
    except errors.KubeError as exc:
        log.warning("StopJob: could not record the reason on TrainJob %s: %s", m["name"], exc)
