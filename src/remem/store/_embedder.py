"""Which embedder made a store's vectors: recorded with its first vector write, checked by every open, write
and search with an index, so that vectors of two models never meet in one index.

MiniLM and e5-small both make 384 dims: a store written with one and opened with the other would rank by
comparing vectors of two models, with no error. The record (:class:`remem.embeddings.EmbedderIdentity`,
the model, its dims and the prefix its texts get) is a row of ``remem_store_meta`` (schema v8), not an
item: no listing, search, stats, export or erasure counts it. It names no user and holds no user's text, so
an erasure leaves it (the vectors it describes go with their items); it goes with the store's tables.

- A write that embeds vectors runs :func:`record_program` in its transaction: the record is inserted if
  absent (two first writers in two processes: one inserts, the other finds it), then read back and
  compared, so the one of another model fails and rolls back (an automatic choice no record named takes
  the recorded model and the write runs again). On PostgreSQL it is read ``FOR SHARE``,
  so a re-embedding's rewrite of the record waits for the writers under way.
- Opening a store with an index (setup) runs :func:`open_program`: a record of another model is refused
  there, before anything is read or written. A store written before v8 has vectors and no record: the
  model that made them is not known, so the embedder it is opened with is recorded then (``"auto"``
  takes MiniLM, the default of then), and a warning says so (with what to do when another model made
  them). A read-only open records nothing.
- A search with a query vector reads the record in its transaction (:func:`check_program`, or folded into
  the statement that finds its namespaces), so a store re-embedded by another process since this one
  opened is not searched with the old model.
- :meth:`remem.store.RememStoreBase.reembed` embeds every vector again with the store's embedder and
  rewrites the record: the way to switch models.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from remem.embeddings import MINILM, EmbedderIdentity, adopt_identity, rechoose_identity
from remem.errors import EmbedderMismatchError
from remem.store import _core as core
from remem.store._core import IndexPlan
from remem.store._exec import Program, Rows, Statement, Tx, VecChanged, Vector, many
from remem.store._rows import Dialect, core_hash
from remem.store._schema import ITEMS, META, VECTORS

__all__ = [
    "EMBEDDER",
    "check",
    "check_program",
    "open_program",
    "read_program",
    "record_program",
    "reembed_page_program",
    "reembed_texts",
    "reembed_write_program",
    "stored_value",
    "write_program",
]

EMBEDDER = "embedder"
"""The name of the record in ``remem_store_meta``."""

logger = logging.getLogger(__name__)


def stored_value(d: Dialect) -> tuple[str, list[str]]:
    """A scalar subquery that reads the record (None where there is none) and its parameters, for a
    statement to carry it as a column."""
    return f"(SELECT value FROM {META} WHERE name = ?)", [EMBEDDER]


def read_program(d: Dialect, share: bool = False) -> Program[EmbedderIdentity | None]:
    """The stored record, None where no vector was written yet; ``share``: held until the transaction
    ends on PostgreSQL (a writer's: a re-embedding's rewrite of the record waits for it to commit, so no
    vector of the old model is committed after it)."""
    lock = " FOR SHARE" if share and d.name == "postgres" else ""
    rows = yield Statement(d.q(f"SELECT value FROM {META} WHERE name = ?{lock}"), [EMBEDDER])
    return EmbedderIdentity.from_json(rows[0][0]) if rows and rows[0][0] is not None else None


def check(
    plan: IndexPlan, stored: EmbedderIdentity | str | None, where: str = "this store", rechoose: bool = False
) -> None:
    """Refuse ``plan``'s embedder where the store's vectors were made by another (``stored``: the record,
    as read or as its JSON; None: no record yet). ``rechoose``: a run that embedded ahead, where an
    automatic choice no record named takes the recorded model, and the error raised then stops the run:
    the driver sees the embedder's identity changed, and runs it once more with everything embedded again."""
    if isinstance(stored, str):
        stored = EmbedderIdentity.from_json(stored)
    if stored is None:
        return
    if stored == plan.identity:
        adopt_identity(plan.embed, stored)  # (an automatic choice a record names is fixed)
        return
    if stored.dims == plan.dims and adopt_identity(plan.embed, stored) and stored == plan.identity:
        return  # an embedder that chooses its model (embedder="auto") took the recorded one
    if rechoose and stored.dims == plan.dims:
        rechoose_identity(plan.embed, stored)
    raise EmbedderMismatchError(
        f"{where} holds vectors made by {stored.describe()}, and it was opened with "
        f"{plan.identity.describe()}: vectors of two models do not compare. Open it with the embedder "
        "that made them (REMEM_EMBEDDER / embedder=, or index['embed']), or re-embed it with the new one: "
        "remem store reembed (store.reembed()), which rewrites every vector and this record",
        stored=stored.describe(),
        configured=plan.identity.describe(),
    )


def check_program(
    d: Dialect, plan: IndexPlan, where: str = "this store", rechoose: bool = False
) -> Program[None]:
    """Refuse ``plan``'s embedder if the record names another (a search, before its vector side)."""
    check(plan, (yield from read_program(d)), where, rechoose)


def write_program(d: Dialect, identity: EmbedderIdentity) -> Program[None]:
    """Insert the record unless one is there (another process's first write may have come first)."""
    yield Statement(
        d.q(f"INSERT INTO {META} (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING"),
        [EMBEDDER, identity.to_json()],
        "none",
    )


def record_program(d: Dialect, plan: IndexPlan, where: str = "this store") -> Program[None]:
    """In a transaction that writes vectors ``plan``'s embedder made: record it if the store has no record
    yet, and refuse it if the record names another. One statement once the record is there."""
    stored = yield from read_program(d, share=True)
    if stored is None:
        yield from write_program(d, plan.identity)
        stored = yield from read_program(d, share=True)  # (another writer's, if it committed first)
    check(plan, stored, where, rechoose=True)


def open_program(d: Dialect, plan: IndexPlan, read_only: bool, where: str = "this store") -> Program[None]:
    """At setup with an index: refuse another model's record; record a store written before v8 (vectors,
    no record) with the embedder it is opened with, and say so."""
    stored = yield from read_program(d)
    if stored is not None or read_only:
        check(plan, stored, where)
        return
    if not (yield Statement(d.q(f"SELECT 1 FROM {VECTORS} LIMIT 1"))):
        return  # nothing embedded yet: the first vector write records its embedder
    # an embedder that chooses its model (embedder="auto", the default since the record exists) takes the
    # default of before, MiniLM; an explicit one is recorded as it is
    adopt_identity(plan.embed, MINILM)
    yield from write_program(d, plan.identity)
    stored = yield from read_program(d)
    check(plan, stored, where)
    logger.warning(
        "%s holds vectors written before remem recorded which embedder made them; recorded %s, the "
        "embedder it was opened with. If another model made them, run remem store reembed (or "
        "store.reembed()) to embed them again with this one",
        where,
        plan.identity.describe(),
    )


# ---------------------------------------------------------------- re-embedding (switching models)


def reembed_page_program(d: Dialect, after: int, items: int) -> Program[Rows]:
    """The stored vectors of the next ``items`` items with vectors whose id is above ``after``, every
    vector of an item in the same page: (item id, namespace id, vector path, item value)."""
    rows = yield Statement(
        d.q(
            f"SELECT v.item_id, v.ns_id, v.path, i.value FROM {VECTORS} v JOIN {ITEMS} i ON i.id = v.item_id "
            f"WHERE v.item_id IN (SELECT DISTINCT item_id FROM {VECTORS} WHERE item_id > ? "
            "ORDER BY item_id LIMIT ?) ORDER BY v.item_id, v.path"
        ),
        [after, items],
    )
    return rows


def reembed_texts(rows: Sequence[Sequence[Any]]) -> list[tuple[int, int, str, str | None]]:
    """(item id, namespace id, vector path, the text at that path of the item's value: None where it has
    none any more) for the rows of :func:`reembed_page_program`. A path is the index field it was made
    from, or that field and an element's position (``"tags.1"``: LangGraph's texts of a list)."""
    out: list[tuple[int, int, str, str | None]] = []
    for item_id, ns_id, path, value in rows:
        fields = {path}
        head, _, tail = str(path).rpartition(".")
        if head and tail.isdigit():
            fields.add(head)
        found = dict(core.texts_for(core.loads(value), core._parsed_fields(sorted(fields))))
        out.append((int(item_id), int(ns_id), str(path), found.get(path)))
    return out


def reembed_write_program(
    d: Dialect,
    tx: Tx,
    plan: IndexPlan,
    rows: Sequence[tuple[int, int, str, str | None]],
    vectors: dict[bytes, Vector],
    first: bool,
) -> Program[None]:
    """Write a page's vectors made again with ``plan``'s embedder (a path whose text is gone loses its
    vector); the first page records ``plan``'s embedder as the store's, the others check that nobody
    recorded another since."""
    if first:
        # an automatic embedder that chose nothing (no text to embed) takes the default, MiniLM: the record
        # names a model, never the embedder that chooses one
        adopt_identity(plan.embed, MINILM)
        yield Statement(
            d.q(
                f"INSERT INTO {META} (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value"
            ),
            [EMBEDDER, plan.identity.to_json()],
            "none",
        )
        adopt_identity(plan.embed, plan.identity)  # (the choice is the record's now)
    else:
        yield from check_program(d, plan)
    updates: list[tuple[Any, ...]] = []
    gone: list[tuple[int, str]] = []
    added: list[tuple[int, int, Vector]] = []
    for item_id, ns_id, path, text in rows:
        if text is None:
            gone.append((item_id, path))
            continue
        h = core_hash(text)
        updates.append((h, d.vector_param(vectors[h]), item_id, path))
        added.append((item_id, ns_id, vectors[h]))
    if updates:
        yield many(
            d.q(f"UPDATE {VECTORS} SET text_hash = ?, embedding = ? WHERE item_id = ? AND path = ?"), updates
        )
    if gone:
        yield many(d.q(f"DELETE FROM {VECTORS} WHERE item_id = ? AND path = ?"), gone)
    if added:
        yield from d.vectors_written(sorted({ns_id for _, ns_id, _ in added}), plan.dims)
    tx.changes.append(VecChanged(sorted({r[0] for r in rows}), added))
