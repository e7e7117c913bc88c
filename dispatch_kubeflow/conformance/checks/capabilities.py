"""Preflight: the backend proves the capabilities the tutorial relies on."""

from __future__ import annotations

from dispatch_kubeflow.backend import NAME
from dispatch_kubeflow.conformance.failed import CheckFailed
from dispatch_kubeflow.conformance.registry import check
from dispatch_kubeflow.conformance.suite import Suite
from dispatch_kubeflow.model import Capability, CapabilitySource, CapabilityValue
from dispatch_kubeflow.registry import AdapterConfig, open_backend

SEED_CAPABILITIES = (Capability.READMISSION_GATE, Capability.ATTEMPT_INJECTION, Capability.HOLD)


@check("preflight", "preflight proves ReadmissionGate, AttemptInjection and HoldCapability")
async def preflight(suite: Suite) -> str:
    """Opening the backend proves the seed's three (yes, probed); it is not observe-only."""
    config = AdapterConfig(backend=NAME, settings=suite.settings())
    suite.backend = backend = await open_backend(config)
    caps = await backend.capabilities()
    # The seed's three must be yes and probed; StartGate must be yes too, or the
    # backend is observe-only.
    bad = [f"{c}: {st.value} ({st.source}) {st.reason}" for c, st in caps.items()
           if st.value is not CapabilityValue.YES
           or (c in SEED_CAPABILITIES and st.source is not CapabilitySource.PROBED)]
    if bad or backend.observe_only:
        raise CheckFailed("; ".join(bad) or "the backend is observe-only: "
                          + "; ".join(backend.observe_only_reasons))
    return ", ".join(f"{c} yes (probed)" for c in SEED_CAPABILITIES)
