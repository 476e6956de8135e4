"""docs/api.md's examples run as they stand: every ``python`` block, in order, in one namespace, in a fresh
directory (the page's own promise). Its benchmark runs are real 2-rank gloo runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

API_MD = Path(__file__).resolve().parents[1] / "docs" / "api.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def blocks() -> list[str]:
    return BLOCK.findall(API_MD.read_text())


def test_the_page_has_an_example_for_every_part_of_the_api() -> None:
    code = "\n".join(blocks())
    for call in ("bench.run(", "Store.open(", "compare_runs(", "detect_history(", "predict(", "project.run(", "algos."):
        assert call in code, f"docs/api.md has no example of {call}"


def test_every_example_of_docs_api_md_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("COMMLENS_DB", raising=False)
    namespace: dict[str, object] = {"__name__": "docs_api"}
    for i, code in enumerate(blocks(), 1):
        try:
            exec(compile(code, f"docs/api.md block {i}", "exec"), namespace)
        except Exception as e:  # the block that failed, named
            raise AssertionError(f"docs/api.md block {i} failed: {type(e).__name__}: {e}\n{code}") from e
    out = capsys.readouterr().out
    assert out.startswith("complete 2 3\n") and "series," in out and "MFU" in out
