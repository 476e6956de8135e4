"""The input-format registry: one entry per format, and everything that lists formats lists them from it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from benchutil import clean_env, commlens

from commlens.ingest import FORMATS, IngestError, get_format, load_source_runs, registry
from commlens.ingest.base import InputFormat, ParsedRun, PatternSniff, Source

DOCS = Path(__file__).resolve().parents[1] / "docs" / "ingest.md"
H100 = Path(__file__).parent / "data" / "ingest" / "h100-8gpu-all_reduce.log"


def _source(text: str) -> Source:
    return Source(Path("f.txt"), text)


def test_each_format_is_one_entry_declared_by_its_own_module() -> None:
    assert list(FORMATS) == ["nccl-tests", "nccl-tests-json", "param", "nccl-inspector", "commlens"]
    for name, fmt in FORMATS.items():
        assert fmt.name == name and fmt.description and fmt.marker
        module = sys.modules[fmt.parse.__module__]
        if isinstance(fmt.sniff, PatternSniff):  # the pattern it looks for is its module's own
            assert any(v is fmt.sniff.pattern for v in vars(module).values()), f"{name}: a pattern of another module"
        else:
            assert fmt.sniff.__module__ == module.__name__, f"{name}: sniffer and parser in different modules"


def test_formats_with_a_marker_of_their_own_are_sniffed_first() -> None:
    # A commlens run whose config holds a "results" key is still commlens, not nccl-tests -J output.
    assert (
        registry.detect_source_format(_source('{"format": "commlens.run/2", "config": {"results": 1}}')) == "commlens"
    )
    # A PARAM log quoting an nccl-tests word is still PARAM.
    assert registry.detect_source_format(_source("out-of-place\n\tCOMMS-RES-all_reduce-float 8 2\n")) == "param"


def test_the_refusals_name_every_format() -> None:
    with pytest.raises(IngestError) as text_error:
        registry.detect_source_format(_source("nothing here\n"))
    assert str(text_error.value) == (
        "f.txt:1: not a format commlens reads: no nccl-tests table, no PARAM COMMS-RES rows, no JSON "
        "(pass --format if it is one of nccl-tests, nccl-tests-json, param, nccl-inspector, commlens)"
    )
    with pytest.raises(IngestError) as json_error:
        registry.detect_source_format(_source('{"a": 1}'))
    assert str(json_error.value) == (
        'f.txt:1: a JSON document, but neither nccl-tests -J output ("results"), NCCL Inspector records '
        '(header, coll_perf) nor a commlens run ("format": "commlens.run/N")'
    )
    with pytest.raises(
        ValueError,
        match=r"^unknown format 'x'; known: auto, nccl-tests, nccl-tests-json, "
        r"param, nccl-inspector, commlens$",
    ):
        get_format("x")


def test_a_new_entry_is_detected_parsed_and_named_in_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = load_source_runs(_source(H100.read_text()))[1][0]

    def parse(source: Source, *, op: str | None = None) -> ParsedRun:
        return ParsedRun(source="toy", system=parsed.system, measurements=list(parsed.measurements))

    toy = InputFormat(
        name="toy",
        description="toy logs",
        document="text",
        sniff=lambda s: "TOY" in s.text,
        marker="TOY line",
        parse=parse,
    )
    formats = {**registry.FORMATS, "toy": toy}
    monkeypatch.setattr(registry, "FORMATS", formats)
    monkeypatch.setattr(registry, "_ENTRIES", tuple(formats.values()))
    monkeypatch.setattr(registry, "_SNIFF_ORDER", tuple(sorted(formats.values(), key=lambda f: not f.sniff_first)))
    monkeypatch.setattr("commlens.ingest.FORMATS", formats)
    used, (run,) = load_source_runs(_source("TOY\n"))
    assert (used, run.source, len(run.measurements)) == ("toy", "toy", len(parsed.measurements))
    with pytest.raises(
        IngestError,
        match=r"no PARAM COMMS-RES rows, no TOY line, no JSON \(pass --format if it "
        r"is one of nccl-tests, nccl-tests-json, param, nccl-inspector, commlens, toy\)",
    ):
        load_source_runs(_source("nothing\n"))


def test_the_cli_help_lists_the_registry() -> None:
    proc = commlens("ingest", "--help", timeout=60, env={**clean_env(), "COLUMNS": "400"})
    assert proc.returncode == 0
    text = re.sub(r"\s+", " ", proc.stdout)
    assert ", ".join(fmt.description for fmt in FORMATS.values()) + "; - reads standard input" in text
    assert "auto, nccl-tests, nccl-tests-json, param, nccl-inspector or commlens" in text


def test_the_docs_have_a_section_and_a_choice_for_every_format() -> None:
    docs = DOCS.read_text()
    usage = re.search(r"--format (auto\|[a-z|-]+)\]", docs)
    assert usage is not None and usage.group(1).split("|") == ["auto", *FORMATS]
    sections = re.findall(r"^### .*\(`([a-z-]+)`\)$", docs, re.MULTILINE)
    assert sections == list(FORMATS)
