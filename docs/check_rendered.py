"""Fail on a Sphinx role left in the built API reference.

The docstrings are Google style, rendered by mkdocstrings as Markdown: a reStructuredText
role such as ``:meth:`Backend.wait``` is not a link there but reaches the reader as the
text ``:meth:`` before the name. ``make docs`` runs this after ``mkdocs build`` on the
reference pages of site/ (or the HTML files given); each role found is printed with its
file, line and the text around it, and the exit status is 1. Write a cross-reference
(``[Backend][dispatch_kubeflow.Backend]``) or plain backticks instead.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROLES = ("meth", "class", "mod", "func", "attr", "data", "exc", "obj", "const")
"""The Python domain's roles (``:py:meth:`` too)."""

_ROLE = re.compile(r":(?:py:)?(?:" + "|".join(ROLES) + r"):(?=[`~!.\w])")
_TAG = re.compile(r"<[^>]*>")
SITE = Path(__file__).resolve().parents[1] / "site"
PAGES = ("reference",)
"""The site's folders whose pages are generated from docstrings."""


@dataclass(frozen=True, slots=True)
class Found:
    """A role in a page: the line of the HTML file and the text around the role."""

    line: int
    text: str


def find_roles(page: str) -> list[Found]:
    """Every Sphinx role in the text of an HTML page (its tags removed, entities decoded).

    Args:
        page: The HTML of one built page.

    Returns:
        Each role found, in page order, with its line and up to 40 characters either side.
    """
    found: list[Found] = []
    for number, line in enumerate(page.splitlines(), start=1):
        text = html.unescape(_TAG.sub("", line))
        for m in _ROLE.finditer(text):
            around = text[max(0, m.start() - 40):m.end() + 40].strip()
            found.append(Found(number, " ".join(around.split())))
    return found


def pages(site: Path) -> list[Path]:
    """The reference pages of a built site."""
    return sorted(p for folder in PAGES for p in (site / folder).rglob("*.html"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("files", nargs="*", type=Path,
                    help="HTML files to check (default: site/reference/**/*.html)")
    args = ap.parse_args(argv)
    files: list[Path] = args.files or pages(SITE)
    if not files:
        print(f"check_rendered: no reference page under {SITE}: run mkdocs build first",
              file=sys.stderr)
        return 1
    bad = 0
    for path in files:
        for f in find_roles(path.read_text(encoding="utf-8")):
            print(f"{path}:{f.line}: raw Sphinx role in the rendered page: {f.text}",
                  file=sys.stderr)
            bad += 1
    if bad:
        print(f"check_rendered: {bad} raw role(s) in {len(files)} page(s); write a "
              "cross-reference [Name][dispatch_kubeflow.Name] or `backticks` in the "
              "docstring", file=sys.stderr)
        return 1
    print(f"check_rendered: no raw role in {len(files)} reference page(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
