"""Read sessions of a store (:meth:`~remem.store._base.RememStoreBase.reading`): batches of reads that run
one after another in one read transaction, on one connection."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from langgraph.store.base import Op, PutOp, Result

from remem._statements import Execute
from remem.errors import RememUsageError

if TYPE_CHECKING:
    from remem.store._base import RememStoreBase

__all__ = ["Reads", "Transaction", "shared_reads"]

Reads = Callable[[Iterable[Op]], list[Result]]
"""A batch of reads (gets, searches, listings; no put) run in a read session."""
Transaction = Callable[[], contextlib.AbstractContextManager[Execute]]
"""Where a store's program runs when not in a transaction of its own."""


class _SharedTransaction:
    """The transaction of a read session (:meth:`RememStoreBase.reading`): opened by the first batch,
    closed at the end of the session, when a statement fails in it, or before a batch whose search
    queries are to be embedded (that batch opens another). The TTL refreshes its reads ask
    for (``refresh_ttl``) wait in ``touched`` and run when the session ends, each a write of its own."""

    def __init__(self, store: RememStoreBase) -> None:
        self.store = store
        self._open: contextlib.ExitStack | None = None
        self._execute: Execute | None = None
        self.touched: list[int] = []

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        if any(isinstance(op, PutOp) for op in ops):
            raise RememUsageError("a read session runs reads only; write with batch()")
        store = self.store
        texts = store._query_texts(ops, store.search_mode)  # a search's query: no database needed
        if texts:  # the embedder may be a network round trip: no connection waits for it in a transaction
            self.close()
        ready = store._embed_texts(texts)
        results: list[Result] = store._run(
            store._batch_program(ops), write=False, ready=ready, transaction=self._held, touched=self.touched
        )
        return results

    @contextlib.contextmanager
    def _held(self) -> Iterator[Execute]:
        if self._execute is None:
            with contextlib.ExitStack() as opening:
                # one connection for the session: on a single one, the store's lock is held throughout
                opening.enter_context(self.store._serial())
                self._execute = opening.enter_context(self.store._transaction(False))
                self._open = opening.pop_all()
        assert self._execute is not None
        try:
            yield self._execute
        except BaseException as exc:
            self.close(exc)  # rolled back; a driver's error is raised as the store's
            raise

    def close(self, failed: BaseException | None = None) -> None:
        """Commit (roll back after ``failed``) and give the connection back."""
        opened, self._open, self._execute = self._open, None, None
        if opened is None:
            return
        if failed is None:
            opened.close()
        else:  # the store's transaction rolls back, and raises a driver's error as a StorageError
            opened.__exit__(type(failed), failed, failed.__traceback__)


@contextlib.contextmanager
def shared_reads(store: RememStoreBase) -> Iterator[Reads]:
    shared = _SharedTransaction(store)
    try:
        yield shared.batch
    finally:
        shared.close()
        touched, shared.touched = shared.touched, []
        store._refresh_ttl(touched)  # reads done, transaction closed: no read failing later loses them
