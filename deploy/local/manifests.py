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

NAMESPACES = {"jobset": "jobset-system", "kueue": "kueue-system", "trainer": "kubeflow-system"}
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
        # The CRDs upstream's kustomization patches to convert through the controller's
        # /convert (webhook_in_<plural>.yaml) do so here too, at its loopback port.
        if d["spec"]["names"]["plural"] in converted(mod, LAYOUT[comp]["crds"]):
            d["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": f"https://127.0.0.1:{port}/convert", "caBundle": ca},
                "conversionReviewVersions": ["v1"]}}
        else:
            d["spec"].pop("conversion", None)
    return out


def converted(mod: str, crd_glob: str) -> set[str]:
    kust = os.path.join(mod, os.path.dirname(os.path.dirname(crd_glob)), "kustomization.yaml")
    if not os.path.exists(kust):
        return set()
    patches = (load(kust) or [{}])[0].get("patches") or []
    names = [os.path.basename(p.get("path", "")) for p in patches]
    return {n[len("webhook_in_"):-len(".yaml")] for n in names if n.startswith("webhook_in_")}


def rbac(comp: str, mod: str) -> list[Obj]:
    """The controller's ClusterRole and its namespaced manager Roles, bound to the user
    its client certificate names (``<comp>-controller``)."""
    ns = NAMESPACES[comp]
    rbac_dir = os.path.dirname(os.path.join(mod, LAYOUT[comp]["rbac"]))
    roles = [d for d in load(os.path.join(mod, LAYOUT[comp]["rbac"])) if d["kind"] == "ClusterRole"]
    for path in sorted(glob.glob(os.path.join(rbac_dir, "manager_*_role.yaml"))):
        roles += [d for d in load(path) if d["kind"] == "Role"]
    out: list[Obj] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}]
    for role in roles:
        name = f"dispatch-local-{comp}-{role['metadata']['name']}"
        namespaced = role["kind"] == "Role"
        meta = {"name": name, **({"namespace": ns} if namespaced else {})}
        role["metadata"] = meta
        out.append(role)
        out.append({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding" if namespaced else "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role["kind"],
                        "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": f"{comp}-controller"}],
        })
    return out + public(comp, mod)


def public(comp: str, mod: str) -> list[Obj]:
    """What Trainer's install gives every user besides its controller, as kustomize builds
    it: the ConfigMap ``kubeflow-trainer-public`` of the manager overlay's
    configMapGenerator (the Kubeflow SDK reads the Trainer version from it) and the Role
    and RoleBinding that let every authenticated user read it."""
    if comp != "trainer":
        return []
    ns = NAMESPACES[comp]
    kust = os.path.join(mod, "manifests/overlays/manager/kustomization.yaml")
    out: list[Obj] = []
    for gen in ((load(kust) or [{}])[0].get("configMapGenerator") or []
                if os.path.exists(kust) else []):
        data = dict(lit.split("=", 1) for lit in gen.get("literals") or [])
        out.append({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": gen["name"], "namespace": ns}, "data": data})
    for name in ("public_configmap_role.yaml", "public_configmap_role_binding.yaml"):
        path = os.path.join(mod, "manifests/base/rbac", name)
        for d in load(path) if os.path.exists(path) else []:
            d["metadata"]["namespace"] = ns
            out.append(d)
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
    with open(ca_file, "rb") as f:
        ca = base64.b64encode(f.read()).decode()
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
