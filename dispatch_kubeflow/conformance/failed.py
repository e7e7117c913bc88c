"""What a check raises when it saw something the guarantee forbids."""

from __future__ import annotations


class CheckFailed(Exception):
    """A check saw something the guarantee forbids (the message says what)."""
