"""``remem serve``: one memory for many apps and workers, over HTTP, with tenants and keys.

    remem keys create --tenant acme --db postgresql://...      # prints the key once
    remem serve --db postgresql://... --host 0.0.0.0 --workers 2

The app (:func:`create_app`, FastAPI on uvicorn) is stateless over one database: any number of workers
or machines may serve the same PostgreSQL (a SQLite file: one process). Endpoints:

- ``/v1/...``: remem's own (threads, messages, summaries, context cards, search, forget, usage, export,
  keys); ``/docs`` and ``/openapi.json`` describe them;
- ``/healthz``, ``/readyz`` (the database answers, its schema is current), ``/metrics`` (Prometheus).

Every request of a tenant's key is scoped to the tenant at the storage layer (``remem.server._tenancy``):
another tenant's thread is not found (404). Keys are stored hashed (:mod:`remem.server.keys`). Needs the
``server`` extra: ``pip install 'remem[server]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from remem.server._app import ServerOptions

__all__ = ["ServerOptions", "create_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from remem.server import _app

        return getattr(_app, name)
    raise AttributeError(f"module 'remem.server' has no attribute {name!r}")


def create_app(options: ServerOptions, **kwargs: Any) -> Any:
    """The ASGI app of ``remem serve`` (see :func:`remem.server._app.create_app`)."""
    from remem.errors import MissingDependencyError

    try:
        from remem.server import _app
    except ImportError as exc:  # fastapi, uvicorn or prometheus-client
        raise MissingDependencyError.for_extra(exc.name or "fastapi", "server") from exc
    return _app.create_app(options, **kwargs)
