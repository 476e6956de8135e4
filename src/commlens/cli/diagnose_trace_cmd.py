"""Placeholder: filled in by the issue 6 work."""

from __future__ import annotations
