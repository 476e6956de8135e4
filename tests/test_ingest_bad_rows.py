"""Table rows that went wrong (issue 12, item 7): a time of 0, a size or count that is not plain digits.

Each case edits one row of a real log (a copy), then runs the installed ``commlens ingest`` in a real
process against a real SQLite store: a malformed size is an error at its line with nothing stored; a
time of 0 is left out with a warning, a note and the run marked incomplete, never stored as busBW 0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from benchutil import commlens, stored_runs

from commlens.ingest import load_runs

DATA = Path(__file__).parent / "data" / "ingest"
H100 = DATA / "h100-8gpu-all_reduce.log"
PARAM = DATA / "param-h100-8rank.log"
JSON_V3 = DATA / "h100-8gpu-all_reduce-I.json"
# Line 54 of the H100 log: the 64 KiB row, both halves complete.
ROW_LINE = 54
ROW = "       65536         16384     float     sum      -1    18.95    3.46    6.05       0    18.25    3.59    6.28       0"


def _edited(tmp_path: Path, src: Path, line: int, old: str, new: str, name: str) -> Path:
    lines = src.read_text().splitlines(keepends=True)
    assert old in lines[line - 1], lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    out = tmp_path / name
    out.write_text("".join(lines))
    return out


def test_the_row_edited_is_the_64k_row() -> None:
    assert H100.read_text().splitlines()[ROW_LINE - 1] == ROW


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        ("       65536 ", "          -8 ", "size '-8' is not a decimal byte count"),
        ("       65536 ", "        0x10 ", "size '0x10' is not a decimal byte count"),
        ("       65536 ", "      65_536 ", "size '65_536' is not a decimal byte count"),
        (" 16384 ", " 16_384 ", "count '16_384' is not a decimal element count"),
        (" 16384 ", " -16384 ", "count '-16384' is not a decimal element count"),
        ("       65536 ", "     65536.0 ", "size '65536.0' is not a decimal byte count"),
    ],
)
def test_malformed_size_or_count_is_an_error_at_its_line(tmp_path: Path, old: str, new: str, what: str) -> None:
    log = _edited(tmp_path, H100, ROW_LINE, old, new, "bad.log")
    db = tmp_path / "s.db"
    proc = commlens("ingest", str(log), "--db", str(db))
    assert proc.returncode == 2, proc.stderr
    assert f"error: {log}:{ROW_LINE}: {what}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not db.exists() or stored_runs(db) == []


def test_malformed_size_without_the_footer_is_still_an_error(tmp_path: Path) -> None:
    """The footer average used to be the only hint of a dropped row; without it there was none."""
    text = "".join(
        line
        for line in H100.read_text().splitlines(keepends=True)
        if not re.match(r"#\s*(Out of bounds|Avg bus)", line)
    )
    log = tmp_path / "nofooter.log"
    log.write_text(text.replace(ROW, ROW.replace("       65536 ", "        0x10 ", 1)))
    proc = commlens("ingest", str(log), "--db", str(tmp_path / "s.db"))
    assert proc.returncode == 2
    assert "size '0x10' is not a decimal byte count" in proc.stderr


def test_a_number_like_line_outside_a_table_is_not_a_row(tmp_path: Path) -> None:
    """Only lines inside a table are read as rows: job output before the header stays ignored."""
    log = tmp_path / "preamble.log"
    log.write_text("-1 0x2 files copied\n" + H100.read_text())
    proc = commlens("ingest", str(log), "--db", str(tmp_path / "s.db"))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    ("halves", "left_out"),
    [
        ((" 18.95 ",), 1),
        ((" 18.95 ", " 18.25 "), 2),
    ],
)
def test_time_zero_is_left_out_warned_noted_and_incomplete(
    tmp_path: Path, halves: tuple[str, ...], left_out: int
) -> None:
    log = tmp_path / "zero.log"
    row = ROW
    for old in halves:
        row = row.replace(old, " " * (len(old) - 5) + "0.00 ", 1)
    log.write_text(H100.read_text().replace(ROW, row))
    db = tmp_path / "s.db"
    proc = commlens("ingest", str(log), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert f"warning: {log}:{ROW_LINE}:" in proc.stderr and "printed with time 0" in proc.stderr
    assert "incomplete" in proc.stdout
    (stored,) = stored_runs(db)
    assert stored["status"] == "incomplete"
    (run,) = load_runs(log)
    full = load_runs(H100)[0]
    assert len(run.measurements) == len(full.measurements) - left_out
    assert all(m.stats.mean_s > 0 and m.busbw_bytes_per_s > 0 for m in run.measurements)
    assert any("time 0" in n for n in run.notes)


def test_every_row_time_zero_is_an_error(tmp_path: Path) -> None:
    lines = H100.read_text().splitlines(keepends=True)
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 13 and parts[0].isdigit():
            parts[5] = parts[9] = "0.00"
            line = " ".join(parts) + "\n"
        elif len(parts) == 8 and parts[0][0].isdigit():  # the rest of the row a NCCL INFO record cut
            parts[0] = parts[4] = "0.00"
            line = " ".join(parts) + "\n"
        out.append(line)
    log = tmp_path / "allzero.log"
    log.write_text("".join(out))
    proc = commlens("ingest", str(log), "--db", str(tmp_path / "s.db"))
    assert proc.returncode == 2
    assert "every row of the log has time 0" in proc.stderr


def test_json_time_zero_is_left_out_and_incomplete(tmp_path: Path) -> None:
    doc = json.loads(JSON_V3.read_text())
    doc["results"][0]["out_of_place"]["time"] = 0
    path = tmp_path / "zero.json"
    path.write_text(json.dumps(doc, indent=1))
    db = tmp_path / "s.db"
    proc = commlens("ingest", str(path), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "results[0] out-of-place" in proc.stderr and "printed with time 0" in proc.stderr
    (stored,) = stored_runs(db)
    assert stored["status"] == "incomplete"
    (run,) = load_runs(path)
    assert len(run.measurements) == len(load_runs(JSON_V3)[0].measurements) - 1
    assert all(m.stats.mean_s > 0 for m in run.measurements)


@pytest.mark.parametrize(
    ("new", "what"),
    [
        ("0x400000", "size '0x400000' is not a decimal byte count"),
        ("4_194_304", "size '4_194_304' is not a decimal byte count"),
        ("4194304.5", "size '4194304.5' is not a decimal byte count"),
    ],
)
def test_param_malformed_size_is_an_error(tmp_path: Path, new: str, what: str) -> None:
    log = _edited(tmp_path, PARAM, 12, "4194304 ", new + " ", "bad.log")
    proc = commlens("ingest", str(log), "--db", str(tmp_path / "s.db"))
    assert proc.returncode == 2
    assert f"error: {log}:12: {what}" in proc.stderr


def test_param_time_zero_is_left_out_and_incomplete(tmp_path: Path) -> None:
    log = _edited(tmp_path, PARAM, 12, " 54.1 ", "  0.0 ", "zero.log")
    db = tmp_path / "s.db"
    proc = commlens("ingest", str(log), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert f"warning: {log}:12:" in proc.stderr
    (stored,) = stored_runs(db)
    assert stored["status"] == "incomplete"
    (run,) = load_runs(log)
    assert len(run.measurements) == len(load_runs(PARAM)[0].measurements) - 1
    assert all(m.stats.mean_s > 0 for m in run.measurements)
