#!/usr/bin/env python3
"""Turn the pinned JobSet, Kueue and Trainer modules' own manifests into what the local
cluster applies: their CRDs, their controllers' RBAC bound to a client-certificate user,
and their webhook configurations pointed at the controllers' loopback ports.

    manifests.py OUT_DIR CA_FILE jobset=DIR:PORT kueue=DIR:PORT trainer=DIR:PORT

Nothing upstream is stored in this repository: the inputs are read from the Go module
cache at build time. This does by hand the little of kustomize the local cluster needs.
"""

from __future__ import annotations

import base64
import copy
import glob
import os
import sys
from typing import Any

import yaml

Obj = dict[str, Any]

# Kueue ships webhooks for every framework it knows; keep those of the frameworks the
# local cluster enables (their CRDs exist) and of Kueue's own resources.
KUEUE_KEEP = ("kueue-x-k8s-io", "batch-v1-job", "jobset-x-k8s-io", "trainer-kubeflow-org")
SYSTEM_NAMESPACES = {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                           "operator": "NotIn",
                                           "values": ["kube-system", "kueue-system"]}]}
JOBSET_POD_SELECTOR = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name",
                                             "operator": "Exists"}]}

LAYOUT = {
    "jobset": {"crds": "config/components/crd/bases/*.yaml",
               "rbac": "config/components/rbac/role.yaml",
               "webhooks": "config/components/webhook/manifests.yaml"},
    "kueue": {"crds": "config/components/crd/bases/*.yaml",
              "rbac": "config/components/rbac/role.yaml",
              "webhooks": "config/components/webhook/manifests.yaml"},
    "trainer": {"crds": "manifests/base/crds/trainer.kubeflow.org_*.yaml",
                "rbac": "manifests/base/rbac/role.yaml",
                "webhooks": "manifests/base/webhook/manifests.yaml"},
}


# libyaml's loader is much faster on Kueue's large CRDs.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def load(path: str) -> list[Obj]:
    with open(path) as f:
        return [d for d in yaml.load_all(f, Loader=_Loader) if d]


def crds(comp: str, mod: str, port: int, ca: str) -> list[Obj]:
    out = []
    for path in sorted(glob.glob(os.path.join(mod, LAYOUT[comp]["crds"]))):
        out += [d for d in load(path) if d.get("kind") == "CustomResourceDefinition"]
    for d in out:
        # A CRD that serves several versions converts through its controller's /convert
        # (upstream wires that with a kustomize patch to an in-cluster Service).
        if len([v for v in d["spec"]["versions"] if v.get("served")]) > 1:
            d["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": f"https://127.0.0.1:{port}/convert", "caBundle": ca},
                "conversionReviewVersions": ["v1"]}}
        else:
            d["spec"].pop("conversion", None)
    return out


def rbac(comp: str, mod: str) -> list[Obj]:
    roles = [d for d in load(os.path.join(mod, LAYOUT[comp]["rbac"])) if d["kind"] == "ClusterRole"]
    out: list[Obj] = []
    for role in roles:
        name = f"dispatch-local-{comp}-{role['metadata']['name']}"
        role["metadata"] = {"name": name}
        out.append(role)
        out.append({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": f"{comp}-controller"}],
        })
    return out


def webhooks(comp: str, mod: str, port: int, ca: str) -> list[Obj]:
    out = []
    for cfg in load(os.path.join(mod, LAYOUT[comp]["webhooks"])):
        cfg = copy.deepcopy(cfg)
        cfg["metadata"] = {"name": f"dispatch-local-{comp}-{cfg['metadata']['name']}"}
        kept = []
        for wh in cfg.get("webhooks") or []:
            path = wh["clientConfig"]["service"]["path"]
            if comp == "kueue" and not any(k in path for k in KUEUE_KEEP):
                continue
            wh["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
            if comp == "kueue" and "kueue-x-k8s-io" not in path:
                wh["namespaceSelector"] = SYSTEM_NAMESPACES
            if comp == "jobset" and path.endswith("-v1-pod"):
                wh["objectSelector"] = JOBSET_POD_SELECTOR
            kept.append(wh)
        cfg["webhooks"] = kept
        out.append(cfg)
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    out_dir, ca_file = argv[1], argv[2]
    ca = base64.b64encode(open(ca_file, "rb").read()).decode()
    os.makedirs(out_dir, exist_ok=True)
    for spec in argv[3:]:
        comp, rest = spec.split("=", 1)
        mod, port = rest.rsplit(":", 1)
        for kind, docs in (("crds", crds(comp, mod, int(port), ca)), ("rbac", rbac(comp, mod)),
                           ("webhooks", webhooks(comp, mod, int(port), ca))):
            with open(os.path.join(out_dir, f"{comp}-{kind}.yaml"), "w") as f:
                yaml.dump_all(docs, f, Dumper=_Dumper, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
