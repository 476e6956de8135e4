"""``commlens diagnose``: links, stragglers, hangs. Each family lives in its own module."""

from __future__ import annotations

from commlens.cli.app import command_group

diagnose_app = command_group("diagnose")

from commlens.cli import diagnose_hang_cmd, diagnose_job_cmd, diagnose_links_cmd, diagnose_trace_cmd  # noqa: E402,F401
