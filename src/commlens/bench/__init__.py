"""Measurement: launcher, per-rank worker, timing, validation.

Heavy modules (torch) load only in ``worker``/``collectives``/``launcher``;
importing this package stays cheap.
"""

from commlens.bench.config import BenchConfig, ConfigError

__all__ = ["BenchConfig", "ConfigError"]
