"""Write one benchmark's section of docs/benchmarks.md, leaving the other sections as they are."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
DOC_TITLE = "# commlens benchmarks"


def write_section(title: str, body: list[str], doc: Path = DOC) -> None:
    """Replace (or append) the ``## title`` section, re-reading the file just before writing."""
    text = doc.read_text() if doc.exists() else DOC_TITLE + "\n"
    section = title + "\n\n" + "\n".join(body).rstrip() + "\n"
    pattern = re.compile(r"^" + re.escape(title) + r"[ \t]*\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
