"""What every checkpointer operation shares: its context, its after-commit hooks, the run marks, the
thread id check and the reading of stored lists (used by writes that extend a list and by reads).

An operation is a program of :mod:`remem._statements`: it yields statements and receives each one's rows
back; the sync and async savers of both backends only run the statements (``SyncSaver._run`` in
``_sync`` and ``AsyncSaver._run`` in ``_async``, with the drivers of :mod:`remem._statements`), inside
one transaction per operation. Work that needs no database (serializing values) happens before the
first statement, so a write holds its locks as briefly as possible. The operations themselves live by what they do: :mod:`._write`
(``put``, ``put_writes``), :mod:`._read` (``get_tuple``, ``list``) and :mod:`._prune` (delete, copy, prune).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from remem._statements import Fetch, Program, Statement
from remem.checkpoint import _codec as codec
from remem.checkpoint import _sql as sql
from remem.checkpoint._cache import SaverCache
from remem.checkpoint._claims import Claims
from remem.errors import StaleCacheError
from remem.layout import check_label

FROM_HEAD = "__pregel_remem_from_head"
"""Set by :func:`get_tuple` in the config of a checkpoint that a LangGraph run loaded: True when the run
asked for the thread's latest checkpoint, False when it addressed one (time travel). The run passes the
config back with each :func:`put`, so a run that started from the head can be kept from forking it.

The ``__pregel_`` prefix keeps the mark out of everything LangGraph shows of a run's configs: the
``checkpoints`` and ``debug`` stream payloads (``config`` and ``parent_config``) drop such keys
(``rm_pregel_keys``), so they equal the configs ``get_state_history`` lists, as with a stock saver; and
checkpoint metadata never copies a key that starts with ``__``."""
RUN_MARK = "__pregel_remem_run"
"""Set next to :data:`FROM_HEAD` when a run loads the thread's latest checkpoint: a token of that run,
which LangGraph passes back with the run's puts and in its tasks' configs (see :mod:`._claims`)."""
RUN_KEY = "__pregel_runtime"
"""What LangGraph puts in the ``configurable`` of a run's own reads and writes (never in get_state's)."""


@dataclass
class Tx:
    """Collects what to do once the operation's transaction has committed."""

    after_commit: list[Callable[[], None]] = field(default_factory=list)
    trust_cache: bool = True
    """False when the operation runs again after a :class:`~remem.errors.StaleCacheError`."""
    snapshot: bool = True
    """Whether the operation's statements read one snapshot. A read that asks for none (one statement, with
    the rest from the caches, is the usual ``get_tuple``) raises :class:`~remem.errors.StaleCacheError` when a
    row it names is gone, and runs again in one."""


@dataclass
class Context:
    """What every operation needs: the dialect, the serializer and the saver's caches; and what the saver
    knows of its runs (:class:`~remem.checkpoint._claims.Claims`, kept by ``with_allowlist`` clones)."""

    dialect: sql.Dialect
    serde: SerializerProtocol
    cache: SaverCache
    trusted_types: bool = False
    claims: Claims = field(default_factory=Claims)

    _names: dict[str, codec.EncodedItem] = field(default_factory=dict)

    def name_item(self, name: str) -> codec.EncodedItem:
        """A channel or node name as an item (serialized once per saver: names recur in every checkpoint)."""
        item = self._names.get(name)
        if item is None:
            item = self._names.setdefault(name, codec.encode_item(self.serde, name))
        return item

    def q(self, text: str, params: Any = (), fetch: Fetch = "all") -> Statement:
        return Statement(self.dialect.sql(text), params, fetch)


def thread_id_of(conf: Mapping[str, Any]) -> str:
    """The thread id a config names, as text; an id that is not valid text (a lone surrogate, NUL) is refused
    with remem's one check of ids before any statement is sent."""
    return check_label(str(conf["thread_id"]), "thread_id")


VALUE_GONE = "a stored value of the thread is gone: the thread was pruned or deleted while this call ran"


def load_payloads(
    ctx: Context, tid: int, wanted: Iterable[int], *, gone_is_stale: bool = False
) -> Program[dict[int, tuple[str, bytes]]]:
    """The serialized values (type, data) of a thread's items: from the cache, else in one query, and one
    more for the bases (:func:`~._codec.patch_base`) of the items read that are neither read nor cached.

    ``gone_is_stale`` (a read outside a snapshot, whose statements may straddle a prune or a delete): an
    item or a base no row holds is a :class:`~remem.errors.StaleCacheError`, so the read runs again in a
    snapshot. In a snapshot a missing base is a damaged thread (``unpack_blob``'s StorageError); a missing
    item is left out of what is returned."""
    wanted = set(wanted)
    held = ctx.cache.payloads(tid, wanted)
    missing = sorted(wanted - held.keys())
    if not missing:
        return held
    found = yield ctx.q(ctx.dialect.items_in(), (tid, ctx.dialect.list_param(missing)))
    fetched: dict[int, tuple[str, bytes]] = {}
    patched: list[tuple[int, int, bytes]] = []
    for no, data in found:
        blob = bytes(data)
        base = codec.patch_base(blob)
        if base is None:
            fetched[no] = codec.unpack_blob(blob, trusted_types=ctx.trusted_types)
        else:
            patched.append((no, base, blob))
    if patched:
        bases = {base for _, base, _ in patched} - fetched.keys()
        known = ctx.cache.payloads(tid, bases) if bases else {}
        if bases - known.keys():
            rows = yield ctx.q(
                ctx.dialect.items_in(), (tid, ctx.dialect.list_param(sorted(bases - known.keys())))
            )
            for no, data in rows:
                known[no] = codec.unpack_blob(bytes(data), trusted_types=ctx.trusted_types)
        known.update(fetched)
        if gone_is_stale and bases - known.keys():  # deleted after the items that name them were read
            raise StaleCacheError(VALUE_GONE)
        for no, base, blob in patched:
            base_data = known[base][1] if base in known else None  # None: gone, which unpack_blob says
            fetched[no] = codec.unpack_blob(blob, trusted_types=ctx.trusted_types, base=base_data)
    ctx.cache.put_payloads(tid, fetched)
    held.update(fetched)
    if gone_is_stale and len(held) < len(wanted):
        raise StaleCacheError(VALUE_GONE)
    return held


_LIST_GONE = (
    "a stored list of the thread is gone: the thread was pruned or deleted while this call ran (a write runs "
    "again by itself); run the call again"
)


def load_lists(
    ctx: Context, tid: int, wanted: Iterable[int]
) -> Program[dict[int, tuple[tuple[int, ...], int]]]:
    """Rebuilds stored lists (item numbers and chain depth), reading only the rows not cached."""
    out: dict[int, tuple[tuple[int, ...], int]] = {}
    rows: dict[int, codec.ListRow] = {}
    missing = set()
    for no in wanted:
        hit = ctx.cache.list_refs(tid, no)
        if hit is None:
            missing.add(no)
        else:
            out[no] = hit
    while missing:
        fetched = yield ctx.q(ctx.dialect.lists_in(), (tid, ctx.dialect.list_param(sorted(missing))))
        if missing - {
            row[0] for row in fetched
        }:  # gone since the caller read what names it (a prune, a delete)
            raise StaleCacheError(_LIST_GONE)
        missing = set()
        for no, base, body in fetched:
            row = codec.decode_list_row(no, base, bytes(body))
            rows[no] = row
            if base is not None and base not in rows and base not in out:
                hit = ctx.cache.list_refs(tid, base)
                if hit is None:
                    missing.add(base)
                else:
                    out[base] = hit

    def rebuild(no: int) -> tuple[tuple[int, ...], int]:
        done = out.get(no)
        if done is not None:
            return done
        row = rows[no]
        if row.base is None:
            refs = tuple(row.middle)
        else:
            base_refs, _ = rebuild(row.base)
            refs = tuple(codec.apply_list_delta(base_refs, row.prefix, row.suffix, row.middle))
        out[no] = (refs, row.depth)
        return out[no]

    for no in sorted(rows):
        rebuild(no)
    ctx.cache.put_lists(tid, {no: out[no] for no in rows})
    return out
