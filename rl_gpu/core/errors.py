"""Errors that carry a meaning for the user, shared by every layer."""

from __future__ import annotations


class UsageError(ValueError):
    """Bad input from the user: reported as one line, exit code 2, and nothing on disk is touched."""
