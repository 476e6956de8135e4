"""commlens serve: the team's web dashboard and JSON API over the result store.

``create_app(ServeConfig(...))`` builds the ASGI app (FastAPI); ``commlens serve`` runs it under
uvicorn. Pages are rendered on the server; their charts (uPlot, shipped in ``static/vendor``)
fetch the same JSON API that ``/api/openapi.json`` describes. See ``docs/serve.md``.
"""

from typing import Any

from commlens.serve.config import ServeConfig, ServeConfigError

__all__ = ["ServeConfig", "ServeConfigError", "create_app"]


def create_app(config: ServeConfig) -> Any:
    """The ASGI app (``commlens.serve.app.create_app``; FastAPI is imported on use)."""
    from commlens.serve.app import create_app as _create

    return _create(config)
