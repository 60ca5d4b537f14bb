"""``remem serve`` (the HTTP server) and ``remem keys`` (its API keys). Thin: each calls ``remem.server``."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
from typing import Any

import click

from remem.cli._options import database_url as url_of
from remem.cli._options import db_option, json_option
from remem.errors import RememRuntimeError

__all__ = ["COMMANDS", "keys_group", "mcp_command", "serve_command"]

OPTIONS_ENV = "_REMEM_SERVE_OPTIONS"  # how the options reach uvicorn's worker processes
WORKER_START_TIMEOUT = 60  # seconds (see _run_uvicorn)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listening_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """The server's listening socket, bound here rather than by uvicorn: a TCP socket (``IPPROTO_TCP``, so
    asyncio sets ``TCP_NODELAY`` on each accepted connection) with ``TCP_NODELAY`` set (Linux hands it on to
    accepted connections). uvicorn's own socket for ``--workers N`` has ``proto=0``, so neither happens and
    every small answer waits on Nagle and delayed ACK, about 40 ms (Kludex/uvicorn#3149). ``reuse_port``:
    ``SO_REUSEPORT``, so that each worker binds a socket of its own on the same port (:class:`WorkerSocket`)."""
    address = host.strip("[]")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((address, port))
    except OSError as exc:
        sock.close()
        raise RememRuntimeError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; free the port or choose another with --port"
        ) from exc
    sock.set_inheritable(True)
    return sock


def _worker_socket(host: str, port: int) -> socket.socket:
    return listening_socket(host, port, reuse_port=True)


class WorkerSocket(socket.socket):
    """The port of ``--workers N``, held by the supervisor and bound again by each worker for itself.

    Workers sharing one listening socket do not share its connections: the worker that wakes first on
    each accept takes it, and kept-alive clients pile onto one worker while the other idles (measured:
    2 workers gave 1.3-1.47x the throughput of 1). With a socket per worker (``SO_REUSEPORT``) the kernel
    spreads new connections over the workers by a hash of their addresses. uvicorn hands its workers the
    supervisor's sockets by pickling them; this one pickles as "bind your own on this port"
    (:func:`_worker_socket`). The supervisor's copy is bound but never listens, so it takes no connection
    and only keeps the port (and a port 0 resolved) for the workers it starts or restarts."""

    def __reduce__(self) -> tuple[Any, tuple[str, int]]:
        host, port = self.getsockname()[:2]
        return _worker_socket, (host, port)


def _supervisor_socket(host: str, port: int) -> WorkerSocket:
    # Bound once without SO_REUSEPORT first: a port held by anyone (another remem serve included, whose
    # workers would otherwise share our connections) is refused, as for one worker.
    with listening_socket(host, port) as probe:
        port = probe.getsockname()[1]
    held = listening_socket(host, port, reuse_port=True)
    sock = WorkerSocket(held.family, held.type, held.proto, fileno=held.detach())
    sock.set_inheritable(True)
    return sock


def _fast_parts() -> tuple[Any, Any]:
    """uvicorn's HTTP parser and event loop: httptools and uvloop when installed (``remem[server]`` brings
    them), else h11 and asyncio. Measured with bench/service.py's server: about 0.9 ms less CPU a request."""
    http, loop = "h11", "asyncio"
    with contextlib.suppress(ImportError):
        import httptools  # noqa: F401

        http = "httptools"
    with contextlib.suppress(ImportError):
        import uvloop  # noqa: F401

        loop = "uvloop"
    return http, loop


def _run_uvicorn(host: str, port: int, workers: int, access_log: bool = False) -> None:
    """uvicorn on :func:`listening_socket`: one process, or ``workers`` processes, each on a socket of its
    own (:class:`WorkerSocket`). The access log is off unless asked for: a line per request cost a third
    of a trivial request's CPU (``/metrics`` counts requests by route and status)."""
    import uvicorn

    http, loop = _fast_parts()
    config = uvicorn.Config(
        "remem.cli.serve:app_from_environment",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        timeout_graceful_shutdown=30,
        # How long a worker may take to start: on SIGHUP the supervisor replaces each worker and keeps the
        # old one when the new one is not serving in time. uvicorn's 5 s is less than a worker's start-up
        # on a busy machine (imports, pools), so SIGHUP read nothing again (seen: "not ready in time").
        # The same time bounds the supervisor's check that a worker still answers.
        timeout_worker_healthcheck=WORKER_START_TIMEOUT,
        log_level="info",
        access_log=access_log,
        http=http,
        loop=loop,
    )
    if workers > 1:
        from remem.cli import _supervisor

        _supervisor.run(config, [_supervisor_socket(host, port)])
        return
    sock = listening_socket(host, port)
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):  # the signal handlers normally take it
        server.run(sockets=[sock])
    if not server.started:
        raise SystemExit(3)  # uvicorn's STARTUP_FAILURE: the app did not start (its log says why)


def app_from_environment() -> Any:
    """The app uvicorn's workers build (``remem.cli.serve:app_from_environment``, a factory)."""
    from remem.server import ServerOptions, create_app

    return create_app(ServerOptions(**json.loads(os.environ[OPTIONS_ENV])))


def _open_store(url: str, *, read_only: bool = False) -> Any:
    from remem.store import open_store

    return open_store(url, read_only=read_only)


@click.command("serve")
@db_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8420, show_default=True, type=click.IntRange(0, 65535), help="Port.")
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Worker processes (PostgreSQL; a SQLite file is served by one).",
)
@click.option(
    "--max-body",
    default=1_048_576,
    show_default=True,
    type=click.IntRange(1, None),
    help="Largest request body in bytes (413 past it).",
)
@click.option(
    "--rate-limit",
    default=600.0,
    show_default=True,
    type=click.FloatRange(0, None),
    help="Requests a minute per key, all workers together (429 past it; 0: no limit).",
)
@click.option(
    "--access-log/--no-access-log",
    default=False,
    show_default=True,
    help="Log a line per request (method, path, status; never a key).",
)
def serve_command(
    database_url: str | None,
    host: str,
    port: int,
    workers: int,
    max_body: int,
    rate_limit: float,
    access_log: bool,
) -> None:
    """Serve the memory over HTTP: remem's API under /v1, docs at /docs, /healthz, /readyz, /metrics.

    Bound beyond loopback it refuses to start until the database has keys (`remem keys create`).

    \b
    Example:
      remem keys create --tenant acme --db sqlite:///app.db
      remem serve --db sqlite:///app.db --port 8420
    """
    from remem._url import parse_database_url
    from remem.server.keys import has_keys

    url = url_of(database_url)
    kind = parse_database_url(url).kind
    if workers > 1 and kind != "postgres":
        raise click.UsageError("several workers need PostgreSQL; serve a SQLite file with --workers 1")
    with _open_store(url) as store:
        keyed = has_keys(store)
    if not is_loopback(host) and not keyed:
        raise click.UsageError(
            f"{host} is reachable from other machines and the database has no API keys; "
            "create one first (`remem keys create --tenant NAME`) or bind to 127.0.0.1"
        )
    options = {
        "url": url,
        "max_body": max_body,
        "rate_limit": rate_limit,
        "require_keys": keyed or not is_loopback(host),
    }
    os.environ[OPTIONS_ENV] = json.dumps(options)
    click.echo(
        f"remem serve: http://{host}:{port} ({'keys required' if options['require_keys'] else 'no keys: loopback only'})",
        err=True,
    )
    _run_uvicorn(host, port, workers, access_log)


@click.group("keys")
def keys_group() -> None:
    """API keys of `remem serve`: one tenant each, stored hashed, shown once.

    \b
    Example:
      remem keys create --tenant acme          # prints the key once
      remem keys rotate KEY_ID --grace 3600    # a new key; the old one works one more hour
    """


def _show(info: Any, as_json: bool, secret: str | None = None) -> None:
    from remem.cli._render import show_table

    data = info.as_dict()
    if as_json:
        click.echo(json.dumps({**({"key": secret} if secret else {}), **data}, indent=2))
        return
    if secret:
        click.echo(f"key: {secret}")
        click.echo("Keep it now: it is not stored and cannot be shown again.", err=True)
    show_table("key", ["field", "value"], [(k, "-" if v is None else v) for k, v in data.items()])


@keys_group.command("create")
@db_option
@click.option("--tenant", metavar="T", help="The tenant whose data the key reaches.")
@click.option("--admin", is_flag=True, help="A key-management key (no tenant's data).")
@click.option("--name", default="", help="A name to tell keys apart.")
@json_option
def keys_create(database_url: str | None, tenant: str | None, admin: bool, name: str, as_json: bool) -> None:
    """Create a key and print it once."""
    from remem.server.keys import create_key

    with _open_store(url_of(database_url)) as store:
        secret, info = create_key(store, tenant=tenant, admin=admin, name=name)
    _show(info, as_json, secret)


@keys_group.command("list")
@db_option
@click.option("--tenant", metavar="T", help="Only this tenant's keys.")
@json_option
def keys_list(database_url: str | None, tenant: str | None, as_json: bool) -> None:
    """List the keys (never their secrets)."""
    from remem.cli._render import show_table
    from remem.server.keys import list_keys

    with _open_store(url_of(database_url), read_only=True) as store:
        found = list_keys(store, tenant=tenant)
    if as_json:
        click.echo(json.dumps([k.as_dict() for k in found], indent=2))
        return
    rows = [
        (k.key_id, k.tenant or "-", k.role, k.name, k.created_at, "yes" if k.active() else "no")
        for k in found
    ]
    show_table(f"{len(found)} key(s)", ["key id", "tenant", "role", "name", "created", "active"], rows)


@keys_group.command("revoke")
@db_option
@click.argument("key_id")
@json_option
def keys_revoke(database_url: str | None, key_id: str, as_json: bool) -> None:
    """Revoke a key at once."""
    from remem.server.keys import revoke_key

    with _open_store(url_of(database_url)) as store:
        info = revoke_key(store, key_id)
    _show(info, as_json)


@keys_group.command("rotate")
@db_option
@click.argument("key_id")
@click.option(
    "--grace",
    default=3600.0,
    show_default=True,
    type=click.FloatRange(0, 366 * 86400),
    help="Seconds the old key keeps working.",
)
@json_option
def keys_rotate(database_url: str | None, key_id: str, grace: float, as_json: bool) -> None:
    """A new key for the same tenant; the old one keeps working --grace seconds."""
    from remem.server.keys import rotate_key

    with _open_store(url_of(database_url)) as store:
        secret, info = rotate_key(store, key_id, grace=grace)
    _show(info, as_json, secret)


@click.command("mcp")
@db_option
def mcp_command(database_url: str | None) -> None:
    """Serve the memory to an MCP client over stdio (tools: search_memory, add_memory, get_context_card,
    list_threads, forget); the whole database, as its owner. `remem serve` has the same tools at /mcp.

    \b
    Example (a desktop client's configuration):
      {"command": "remem", "args": ["mcp", "--db", "sqlite:///app.db"]}
    """
    from remem.config import load_settings
    from remem.server._mcp import build_mcp
    from remem.server._services import Services

    services = Services(url_of(database_url), load_settings())
    try:
        build_mcp(lambda ctx: (services, None)).run("stdio")
    finally:
        services.close()


COMMANDS: list[click.Command] = [serve_command, keys_group, mcp_command]
