"""Result records, their versioned JSON format, statistics and unit helpers."""

from commlens.results.jsonfmt import FORMAT, FormatError, dump_run, load_run, run_from_dict, run_to_dict, write_json
from commlens.results.records import (
    DTYPE_SIZES,
    FloorKey,
    Measurement,
    MeasurementKey,
    RecordError,
    Run,
    SystemInfo,
)
from commlens.results.runconfig import BenchSettings, IngestedSettings, MonitorJob, ReplayRun, RunConfig
from commlens.results.stats import TimeStats, summarize
from commlens.results.units import format_size, parse_size

__all__ = [
    "BenchSettings",
    "IngestedSettings",
    "MonitorJob",
    "ReplayRun",
    "RunConfig",
    "DTYPE_SIZES",
    "FORMAT",
    "FloorKey",
    "FormatError",
    "Measurement",
    "MeasurementKey",
    "RecordError",
    "Run",
    "SystemInfo",
    "TimeStats",
    "dump_run",
    "format_size",
    "load_run",
    "parse_size",
    "run_from_dict",
    "run_to_dict",
    "summarize",
    "write_json",
]
