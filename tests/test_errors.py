"""One error base: every stage's error is a ``CommlensError`` carrying its exit code, and the CLI turns one
into ``error: ...`` and that code in one place (``commlens.cli.errors``)."""

from __future__ import annotations

import pytest
import typer

from commlens.algos.base import AlgoError
from commlens.bench.config import ConfigError
from commlens.cli.errors import errors_as_exit
from commlens.cluster.spec import ClusterError, ClusterSpec, ClusterSpecError, check_name
from commlens.diagnose.links_measure import LinkProbe, ProbeError
from commlens.diagnose.stragglers import StragglerError, StragglerParams
from commlens.diagnose.trace_match import MatchError
from commlens.errors import CommlensError
from commlens.ingest import parse_time
from commlens.ingest.base import IngestError, IngestOptionError
from commlens.ingest.flightrec import DumpError
from commlens.ingest.kineto import KinetoTraceError
from commlens.ingest.nccltests_op import OpInferenceError
from commlens.model.fit import FitError
from commlens.model.layout import InfeasibleError
from commlens.model.predict import PredictError, sweep_sizes
from commlens.ops import UnknownOpError
from commlens.project.errors import ProjectionError
from commlens.regress.compare import CompareError, CompareSettings, CompareSettingsError
from commlens.regress.detect import DetectSettings, DetectSettingsError
from commlens.regress.history import TimeFormatError, parse_utc
from commlens.results.jsonfmt import FormatError
from commlens.results.records import RecordError
from commlens.results.units import SizeError, parse_size
from commlens.store.db import StoreError
from commlens.topology.spec import TopologyError
from commlens.workload.spec import WorkloadError

# Each stage's error, and the built-in base its callers may still catch it by.
STAGE_ERRORS = [
    (UnknownOpError, ValueError),
    (RecordError, ValueError),
    (SizeError, ValueError),
    (FormatError, ValueError),
    (ConfigError, ValueError),
    (AlgoError, ValueError),
    (StoreError, Exception),
    (IngestError, ValueError),
    (DumpError, ValueError),
    (KinetoTraceError, ValueError),
    (OpInferenceError, ValueError),
    (CompareError, ValueError),
    (TopologyError, ValueError),
    (FitError, ValueError),
    (InfeasibleError, ValueError),
    (ProjectionError, ValueError),
    (WorkloadError, ValueError),
    (ClusterError, RuntimeError),
    (MatchError, ValueError),
    (StragglerError, ValueError),
    (ProbeError, ValueError),
    (ClusterSpecError, ValueError),
    (ClusterSpecError, ClusterError),
    (CompareSettingsError, ValueError),
    (DetectSettingsError, ValueError),
    (TimeFormatError, ValueError),
    (IngestOptionError, ValueError),
    (PredictError, ValueError),
]


@pytest.mark.parametrize(("error", "builtin"), STAGE_ERRORS, ids=[e.__name__ for e, _ in STAGE_ERRORS])
def test_every_stage_error_is_a_commlens_error_with_exit_code_2(error: type[Exception], builtin: type) -> None:
    assert issubclass(error, CommlensError) and issubclass(error, builtin)
    assert error.exit_code == 2  # bad usage or input


def test_errors_as_exit_prints_the_message_and_exits_with_its_code(capsys: pytest.CaptureFixture[str]) -> None:
    class CheckFailed(CommlensError):
        exit_code = 1

    with pytest.raises(typer.Exit) as ended, errors_as_exit("--op: "):
        raise UnknownOpError("unknown op 'x'")
    assert ended.value.exit_code == 2 and capsys.readouterr().err == "error: --op: unknown op 'x'\n"
    with pytest.raises(typer.Exit) as ended, errors_as_exit():
        raise CheckFailed("wrong results\tin 2 rows\x1b")
    assert ended.value.exit_code == 1 and capsys.readouterr().err == "error: wrong results\tin 2 rows\\x1b\n"
    with pytest.raises(typer.Exit), errors_as_exit(escape_all=True):
        raise StoreError("tag\tx")
    assert capsys.readouterr().err == "error: tag\\x09x\n"


def test_errors_as_exit_lets_other_exceptions_through() -> None:
    with pytest.raises(ValueError, match="a bug"), errors_as_exit():
        raise ValueError("a bug")
    with errors_as_exit():
        pass


def test_straggler_params_refuse_impossible_values_with_their_error() -> None:
    with pytest.raises(StragglerError, match="late_threshold_s must be a finite number > 0, got 0.0"):
        StragglerParams(late_threshold_s=0.0)


def test_sizes_and_probes_refuse_bad_values_with_their_errors() -> None:
    with pytest.raises(SizeError, match="invalid size '64X': expected a number with an optional K, M or G suffix"):
        parse_size("64X")
    with pytest.raises(ProbeError, match="size_bytes must be >= 1024"):
        LinkProbe(size_bytes=8)


def test_settings_and_options_raise_their_stage_error() -> None:
    """What the CLI once caught as a broad ValueError now raises a CommlensError of its stage."""
    with pytest.raises(ClusterSpecError, match="name '../x': lower-case letters"):
        check_name("../x")
    with pytest.raises(ClusterSpecError, match="hosts must be between 2 and"):
        ClusterSpec(name="c", hosts=1, link_bytes_per_s=1e9)
    with pytest.raises(CompareSettingsError, match=r"alpha must be in \(0, 1\), got 2"):
        CompareSettings(alpha=2)
    with pytest.raises(DetectSettingsError, match="min_segment must be >= 2, got 1"):
        DetectSettings(min_segment=1)
    with pytest.raises(TimeFormatError, match="'yesterday' is not an ISO 8601 date"):
        parse_utc("yesterday")
    with pytest.raises(IngestOptionError, match="'yesterday' is not an ISO 8601 date"):
        parse_time("yesterday")
    with pytest.raises(PredictError, match="step factor must be >= 2, got 1"):
        sweep_sizes(8, 64, 1)
