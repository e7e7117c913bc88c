"""The design page's layer diagram draws exactly the import-linter layers contract."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _contract_layers() -> list[set[str]]:
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    (layers,) = [c["layers"] for c in cfg["tool"]["importlinter"]["contracts"]
                 if c["type"] == "layers"]
    return [{m.strip() for m in layer.split("|")} for layer in layers]


def test_the_diagram_has_every_layer_module_and_no_other() -> None:
    page = (REPO / "docs/design.md").read_text()
    (diagram,) = re.findall(r"```mermaid\n(flowchart TB.*?)```", page, re.S)
    drawn = set(re.findall(r'\["((?:dispatch_kubeflow|admission)[\w.]*)', diagram))
    want = set().union(*_contract_layers())
    assert drawn == want, f"only drawn: {drawn - want}; only in the contract: {want - drawn}"


def test_the_diagram_draws_the_layers_top_to_bottom() -> None:
    page = (REPO / "docs/design.md").read_text()
    (diagram,) = re.findall(r"```mermaid\n(flowchart TB.*?)```", page, re.S)
    order = re.findall(r'\["((?:dispatch_kubeflow|admission)[\w.]*)', diagram)
    layer_of = {m: i for i, layer in enumerate(_contract_layers()) for m in layer}
    drawn_layers = [layer_of[m] for m in order]
    assert drawn_layers == sorted(drawn_layers), list(zip(order, drawn_layers, strict=True))
