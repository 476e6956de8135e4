"""commlens: the performance lab for collective communication in AI training."""

__version__ = "0.1.0"
