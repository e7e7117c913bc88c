"""How a job runs the ledger program: the container command and environment.

The script travels in the command itself (``sh -c <script>``), so the job image needs
nothing but busybox and the pod no volume but the ledger's.
"""

from __future__ import annotations

from pathlib import Path

LEDGER_SH = Path(__file__).with_name("ledger.sh")
LEDGER_DIR = "/ledger"
LEDGER_FILE = f"{LEDGER_DIR}/ledger.jsonl"


def script() -> str:
    return LEDGER_SH.read_text(encoding="utf-8")


def command(shell: str = "/bin/sh") -> list[str]:
    """The container command: the shell, ``-c``, the script, and ``ledger`` as ``$0``."""
    return [shell, "-c", script(), "ledger"]


def env(*, run_seconds: float = 5, fail_once: bool = False, fail_rank: int = 0,
        fail_after: float = 0.3, ledger: str = LEDGER_FILE, term_linger: float = 0,
        early_rank: int | None = None, early_seconds: float = 1) -> dict[str, str]:
    """The environment that tells the ledger program how to behave.

    ``term_linger``: seconds each rank lingers after TERM (a checkpoint on TERM) before it
    exits 143. ``early_rank``: that rank exits 0 after ``early_seconds`` while the others
    run ``run_seconds``.
    """
    out = {"LEDGER": ledger, "LEDGER_RUN_SECONDS": f"{run_seconds:g}"}
    if fail_once:
        out |= {"LEDGER_FAIL_ONCE": "1", "LEDGER_FAIL_RANK": str(fail_rank),
                "LEDGER_FAIL_AFTER": f"{fail_after:g}"}
    if term_linger:
        out["LEDGER_TERM_LINGER"] = f"{term_linger:g}"
    if early_rank is not None:
        out |= {"LEDGER_EARLY_RANK": str(early_rank),
                "LEDGER_EARLY_SECONDS": f"{early_seconds:g}"}
    return out
