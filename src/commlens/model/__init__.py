"""Cost models of collective algorithms mapped onto topologies, calibrated from measurements.

- :func:`predict` / :func:`sweep`: time, algBW, busBW and a breakdown per level.
- :data:`MODELS`: one cost formula per (op, algorithm); :data:`ALGORITHMS`: the shared names.
- :func:`commlens.model.fit.fit_runs` / :func:`commlens.model.check.check_runs`:
  calibrate constants from stored runs and state the error (imported on use:
  they need numpy and scipy).
"""

from commlens.model.algorithms import ALGORITHMS, MODELS, algorithms_for
from commlens.model.cost import Term
from commlens.model.layout import InfeasibleError, Layout, build_layout
from commlens.model.predict import AUTO, Prediction, predict, predict_algorithms, sweep

__all__ = [
    "ALGORITHMS",
    "AUTO",
    "InfeasibleError",
    "Layout",
    "MODELS",
    "Prediction",
    "Term",
    "algorithms_for",
    "build_layout",
    "predict",
    "predict_algorithms",
    "sweep",
]
