"""Put Mermaid into the site, so that diagrams render with no network.

    python docs/fetch_mermaid.py          # fetch (once) and copy into docs/assets/
    python docs/fetch_mermaid.py --print  # the pinned version and where it goes

Material for MkDocs draws a page's ```mermaid blocks with the global ``mermaid`` object,
and loads it from a CDN (unpkg) only when no page script defined it. mkdocs.yml's
``extra_javascript`` names ``assets/javascripts/mermaid.min.js``: this script makes that
file. It takes the pinned version from the npm registry with ``npm pack`` (the registry's
ordinary client), keeps the tarball in the project's cache (``$DISPATCH_CACHE``, default
``~/.cache/dispatch-kubeflow``, as deploy/local/lib.sh), checks it against the pinned
sha512 integrity (the registry's ``dist.integrity``), and copies ``dist/mermaid.min.js``
into docs/assets/javascripts/ (ignored by git). Nothing of Mermaid is committed.

To move the pin: ``npm view mermaid@X.Y.Z dist.integrity``, then change both constants.
Material 9's component calls Mermaid 11's API (``initialize``, ``render``): stay on 11.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

VERSION = "11.17.2"
INTEGRITY = ("sha512-V6K3C8EBdEsPFZXSKMJe6ppQOENxuHARr9GvHX4hh47lAbhMRD9qf4oEK7LoaRQxULMa80/qt5gHO"
             "73aCleBBg==")
MEMBER = "package/dist/mermaid.min.js"

DOCS = Path(__file__).resolve().parent
TARGET = DOCS / "assets" / "javascripts" / "mermaid.min.js"


def cache_dir() -> Path:
    base = os.environ.get("DISPATCH_CACHE") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dispatch-kubeflow")
    return Path(base) / "npm"


def integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def tarball() -> Path:
    """The pinned tarball, from the cache or fetched into it; checked either way."""
    cache = cache_dir()
    tgz = cache / f"mermaid-{VERSION}.tgz"
    if not tgz.exists() or integrity(tgz.read_bytes()) != INTEGRITY:
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit("fetch_mermaid: npm is not installed (Node.js's npm fetches "
                             f"mermaid@{VERSION} from the npm registry)")
        cache.mkdir(parents=True, exist_ok=True)
        tgz.unlink(missing_ok=True)
        done = subprocess.run([npm, "pack", f"mermaid@{VERSION}", "--pack-destination",
                               str(cache), "--silent"], capture_output=True, text=True,
                              timeout=300, check=False)
        if done.returncode != 0 or not tgz.exists():
            raise SystemExit(f"fetch_mermaid: npm pack mermaid@{VERSION} failed "
                             f"(exit {done.returncode}): {done.stderr.strip()[-500:]}")
        got = integrity(tgz.read_bytes())
        if got != INTEGRITY:
            tgz.unlink()
            raise SystemExit(f"fetch_mermaid: mermaid-{VERSION}.tgz has integrity {got}, "
                             f"not the pinned {INTEGRITY}")
    return tgz


def install() -> Path:
    with tarfile.open(tarball()) as tar:
        member = tar.extractfile(MEMBER)
        if member is None:
            raise SystemExit(f"fetch_mermaid: {MEMBER} is not in mermaid-{VERSION}.tgz")
        script = member.read()
    if not TARGET.exists() or TARGET.read_bytes() != script:
        TARGET.parent.mkdir(parents=True, exist_ok=True)
        tmp = TARGET.with_suffix(".tmp")
        tmp.write_bytes(script)
        tmp.replace(TARGET)
    return TARGET


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--print", action="store_true", help="print the pin and the paths, only")
    a = ap.parse_args(argv)
    if a.print:
        print(f"mermaid {VERSION} {INTEGRITY}\ncache {cache_dir()}\ntarget {TARGET}")
        return 0
    path = install()
    print(f"mermaid {VERSION} -> {path.relative_to(DOCS.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
