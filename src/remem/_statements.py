"""The one statement protocol: every package that talks SQL (migrations, checkpoints, store, ledger, jobs)
writes its operations as programs of :class:`Statement` objects, and one sync and one async driver run them.

The shape is httpx's ``auth_flow``: a *flow* is a generator that yields requests and is sent each one's
answer back; it does no I/O itself, so the same flow runs under a blocking and an asyncio driver. A
:data:`Program` is the flow of SQL: it yields statements (placeholders already in the dialect's spelling)
and receives each one's rows::

    def count_program(table: str) -> Program[int]:
        ((n,),) = yield Statement(f"SELECT count(*) FROM {table}")
        return int(n)

    run(count_program("t"), lambda: backend.transaction(write=False))      # sync
    await arun(count_program("t"), lambda: abackend.transaction(write=False))  # async

What a backend supplies is written down as :class:`Backend` / :class:`AsyncBackend`: a transaction, and in
it a function that runs one statement (:func:`execute` / :func:`aexecute` do that on any DB-API cursor:
``sqlite3``, ``aiosqlite``, ``psycopg``). A program that yields nothing opens no transaction. Retries are
the driver's, given as a :class:`Retry` rule where the driver is set up, never by overriding a backend.

Flows that are not SQL (the memory client's store calls) use the same shape through :func:`drive` /
:func:`adrive`, which answer each request with a function of the caller's.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

__all__ = [
    "AExecute",
    "AsyncBackend",
    "Backend",
    "Done",
    "Execute",
    "Fetch",
    "Flow",
    "Program",
    "Retry",
    "Rows",
    "Statement",
    "adrive",
    "aexecute",
    "apipelined",
    "aresume",
    "aretrying",
    "arun",
    "cancelling",
    "drive",
    "execute",
    "many",
    "pipelined",
    "resume",
    "retrying",
    "rowcount",
    "run",
    "run_immediate",
    "start",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
Y = TypeVar("Y")
R = TypeVar("R")

Rows = list[tuple[Any, ...]]
Fetch = Literal["all", "none", "count", "many"]


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement, placeholders already in the dialect's spelling. ``fetch``: ``"all"`` sends its rows
    back, ``"count"`` one row holding its row count, ``"none"`` no rows, ``"many"`` (``params`` is a list of
    parameter rows, run with executemany) no rows."""

    sql: str
    params: Sequence[Any] = ()
    fetch: Fetch = "all"


def many(sql: str, rows: Sequence[Sequence[Any]]) -> Statement:
    """``sql`` run once per parameter row."""
    return Statement(sql, rows, "many")


def rowcount(sql: str, params: Sequence[Any] = ()) -> Generator[Statement, Rows, int]:
    """``sql`` (an UPDATE, a DELETE) run for the number of rows it changed."""
    ((count,),) = yield Statement(sql, params, "count")
    return int(count)


Flow = Generator[Y, Any, T]
"""A generator that yields requests of type Y, is sent each one's answer, and returns a T."""
Program = Generator[Statement, Rows, T]
"""A flow of SQL: yields statements, is sent each one's rows, returns a T."""
Execute = Callable[[Statement], Rows]
AExecute = Callable[[Statement], Awaitable[Rows]]


class Backend(Protocol):
    """What a blocking backend supplies to :func:`run`: one transaction, as a writer from the start when
    ``write`` (SQLite: ``BEGIN IMMEDIATE``), and in it the function that runs a statement. ``snapshot=False``:
    a read whose statements need not share one snapshot (a backend may save BEGIN and COMMIT)."""

    def _transaction(self, write: bool, snapshot: bool = True) -> AbstractContextManager[Execute]: ...


class AsyncBackend(Protocol):
    """Async version of :class:`Backend`."""

    def _atransaction(self, write: bool, snapshot: bool = True) -> AbstractAsyncContextManager[AExecute]: ...


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """What :func:`start` returns for a flow that finished without a request."""

    value: T


def start(flow: Generator[Y, Any, T]) -> Y | Done[T]:
    """The flow's first request, or :class:`Done` when it asks for nothing."""
    try:
        return next(flow)
    except StopIteration as done:
        return Done(done.value)


def resume(flow: Generator[Y, R, T], request: Y, reply: Callable[[Y], R]) -> T:
    """Answer ``request`` (the flow's current one) and every later one with ``reply``, to the result."""
    while True:
        answer = reply(request)
        try:
            request = flow.send(answer)
        except StopIteration as done:
            result: T = done.value
            return result


async def aresume(flow: Generator[Y, R, T], request: Y, reply: Callable[[Y], Awaitable[R]]) -> T:
    """Async version of :func:`resume`."""
    while True:
        answer = await reply(request)
        try:
            request = flow.send(answer)
        except StopIteration as done:
            result: T = done.value
            return result


def drive(flow: Generator[Y, R, T], reply: Callable[[Y], R]) -> T:
    """Run ``flow`` to its result, answering each request with ``reply``."""
    first = start(flow)
    return first.value if isinstance(first, Done) else resume(flow, first, reply)


async def adrive(flow: Generator[Y, R, T], reply: Callable[[Y], Awaitable[R]]) -> T:
    """Async version of :func:`drive`."""
    first = start(flow)
    return first.value if isinstance(first, Done) else await aresume(flow, first, reply)


def run(program: Program[T], transaction: Callable[[], AbstractContextManager[Execute]]) -> T:
    """Run ``program`` in one ``transaction()``, opened only if the program yields a statement."""
    first = start(program)
    if isinstance(first, Done):
        return first.value
    with transaction() as run_one:
        return resume(program, first, run_one)


async def arun(program: Program[T], transaction: Callable[[], AbstractAsyncContextManager[AExecute]]) -> T:
    """Async version of :func:`run`."""
    first = start(program)
    if isinstance(first, Done):
        return first.value
    async with transaction() as run_one:
        return await aresume(program, first, run_one)


def _tuples(rows: Sequence[Any]) -> Rows:
    return list(rows) if not rows or type(rows[0]) is tuple else [tuple(r) for r in rows]


def execute(cursor: Any, statement: Statement, sync: Callable[[], Any] | None = None) -> Rows:
    """Run ``statement`` on a DB-API cursor (``sqlite3``, ``psycopg``); ``sync``: what makes a row count
    known (a psycopg pipeline's ``sync``)."""
    params = statement.params
    if statement.fetch == "many":
        if len(params) == 1 or (sync is not None and params):
            # in a pipeline, rows sent one by one are not waited for (executemany waits for its last)
            for row in params:
                cursor.execute(statement.sql, row)
        elif params:
            cursor.executemany(statement.sql, params)
        return []
    cursor.execute(statement.sql, params)
    if statement.fetch == "all":
        return _tuples(cursor.fetchall())
    if statement.fetch == "none":
        return []
    if sync is not None:
        sync()
    return [(cursor.rowcount,)]


async def aexecute(
    cursor: Any, statement: Statement, sync: Callable[[], Awaitable[Any]] | None = None
) -> Rows:
    """Async version of :func:`execute` (``aiosqlite``, ``psycopg``)."""
    params = statement.params
    if statement.fetch == "many":
        if len(params) == 1 or (sync is not None and params):
            for row in params:
                await cursor.execute(statement.sql, row)
        elif params:
            await cursor.executemany(statement.sql, params)
        return []
    await cursor.execute(statement.sql, params)
    if statement.fetch == "all":
        return _tuples(await cursor.fetchall())
    if statement.fetch == "none":
        return []
    if sync is not None:
        await sync()
    return [(cursor.rowcount,)]


def run_immediate(conn: Any, program: Program[T]) -> T:
    """``program`` on a ``sqlite3`` connection in autocommit mode, in one ``BEGIN IMMEDIATE`` transaction: a
    writer from the start, so that what it reads cannot change before it writes (the busy timeout applies)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = drive(program, functools.partial(execute, conn.cursor()))
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result


@contextmanager
def pipelined(conn: Any, begin: str = "BEGIN") -> Iterator[Execute]:
    """A transaction on a ``psycopg`` connection in autocommit mode, in pipeline mode: BEGIN, the statements
    and COMMIT go out as they come, and only a statement whose rows (or row count) are needed waits for the
    server, so a write that reads nothing is one round trip, and a read's BEGIN goes with its first
    statement. Written out, not ``conn.transaction()``: that waits at BEGIN and COMMIT. Every PostgreSQL
    package that wants a transaction in one trip runs it here (checkpoints, the usage ledger)."""
    from psycopg.pq import TransactionStatus
    from psycopg.rows import tuple_row

    try:
        with conn.pipeline() as pipe, conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(begin, prepare=False)
            yield functools.partial(execute, cur, sync=pipe.sync)
            cur.execute("COMMIT", prepare=False)
    except BaseException:
        if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
            conn.rollback()
        raise


@asynccontextmanager
async def apipelined(conn: Any, begin: str = "BEGIN") -> AsyncIterator[AExecute]:
    """Async version of :func:`pipelined`."""
    from psycopg.pq import TransactionStatus
    from psycopg.rows import tuple_row

    try:
        async with conn.pipeline() as pipe, conn.cursor(row_factory=tuple_row) as cur:
            await cur.execute(begin, prepare=False)
            yield functools.partial(aexecute, cur, sync=pipe.sync)
            await cur.execute("COMMIT", prepare=False)
    except BaseException:
        if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
            await conn.rollback()
        raise


# ---------------------------------------------------------------- retries


@dataclass(frozen=True, slots=True)
class Retry:
    """Run a whole transaction again, once, after an error ``when`` accepts (a lost connection that a
    pool or a URL can open again); ``what``: the failure as the warning names it."""

    when: Callable[[BaseException], bool]
    what: str = "the connection was lost"


def cancelling() -> bool:
    """Whether the running asyncio task was asked to stop. A driver that cleans up after a cancel (a
    rollback on the connection the cancel closed) may raise an error of its own in the cancel's place:
    code that catches errors to carry on or retry asks this first, so that a cancelled task still stops."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop
        return False
    return task is not None and task.cancelling() > 0


def retrying(attempt: Callable[[], T], retry: Retry | None) -> T:
    """``attempt()``, and once more if it fails as ``retry`` says may be tried again."""
    if retry is None:
        return attempt()
    try:
        return attempt()
    except Exception as exc:
        if not retry.when(exc):
            raise
        logger.warning("%s (%s); retrying once on a new one", retry.what, exc.__cause__ or exc)
    return attempt()


async def aretrying(attempt: Callable[[], Awaitable[T]], retry: Retry | None) -> T:
    """Async version of :func:`retrying` (a cancelled call is not tried again)."""
    if retry is None:
        return await attempt()
    try:
        return await attempt()
    except Exception as exc:
        if not retry.when(exc) or cancelling():
            raise
        logger.warning("%s (%s); retrying once on a new one", retry.what, exc.__cause__ or exc)
    return await attempt()
