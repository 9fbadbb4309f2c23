"""Helpers shared by the command modules: quiet library logging."""

from __future__ import annotations

from infertune.libraries import quiet_libraries

__all__ = ["quiet_libraries"]
