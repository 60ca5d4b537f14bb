"""What remem's savers store and how they clean up: each value once, growth with what was said, prune
(keep latest, by age, delete) with garbage collection, copy_thread, safe setup from many processes,
no pickle, stats and list_threads. On a SQLite file and on the machine's PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from remem.checkpoint import SqliteSaver, _codec, _sql
from remem.errors import StorageError
from tests.savers import open_saver

KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def chat(saver: Any) -> Any:
    def reply(state: MessagesState) -> dict[str, Any]:
        said = state["messages"][-1].content
        return {"messages": [AIMessage(f"a considered reply to: {said} " + "and more words " * 8)]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def talk(graph: Any, thread_id: str, turns: int, start: int = 0) -> None:
    for i in range(start, start + turns):
        graph.invoke(
            {"messages": [HumanMessage(f"user message {i} " + "with some words " * 6)]}, _cfg(thread_id)
        )


def _cfg(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


@pytest.mark.parametrize("kind", KINDS)
def test_each_message_is_stored_once_and_storage_is_linear(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with open_saver(kind, tmp_path, request) as saver:
        graph = chat(saver)
        talk(graph, "t", 20)
        first = next(s for s in saver.stats().threads if s.thread_id == "t")
        talk(graph, "t", 20, start=20)
        second = next(s for s in saver.stats().threads if s.thread_id == "t")
        assert second.checkpoints == 3 * 40
        # Per turn at most: the input as sent, the same message once add_messages gave it an id (the
        # write may be saved before or after that), the reply; and never one value twice.
        assert second.items <= 4 * 40 + 10  # + channel, node and task names
        with saver._transaction(False) as execute:
            from remem._statements import Statement

            (row,) = execute(Statement("SELECT COUNT(*), COUNT(DISTINCT digest) FROM remem_cp_items"))
        assert row[0] == row[1] == second.items
        # The second 20 turns cost about what the first 20 did: storage grows with what was said.
        assert second.bytes - first.bytes < 1.3 * first.bytes
        messages = graph.get_state(_cfg("t")).values["messages"]
        assert len(messages) == 80


@pytest.mark.parametrize("kind", KINDS)
def test_prune_keep_latest_frees_values_and_thread_goes_on(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with open_saver(kind, tmp_path, request) as saver:
        graph = chat(saver)
        talk(graph, "t", 12)
        talk(graph, "other", 3)
        before = graph.get_state(_cfg("t"))
        items_before = next(s for s in saver.stats().threads if s.thread_id == "t").items
        assert saver.prune_threads(["t"]) == 3 * 12 - 1
        after = graph.get_state(_cfg("t"))
        assert after.values == before.values and after.config == before.config
        assert [s.config for s in graph.get_state_history(_cfg("t"))] == [after.config]
        stats = next(s for s in saver.stats().threads if s.thread_id == "t")
        assert stats.checkpoints == 1
        assert stats.items < items_before
        talk(graph, "t", 2, start=12)  # the saver's caches must not point at pruned rows
        assert len(graph.get_state(_cfg("t")).values["messages"]) == 28
        assert len(list(graph.get_state_history(_cfg("other")))) == 9


@pytest.mark.parametrize("kind", KINDS)
def test_prune_by_age(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    with open_saver(kind, tmp_path, request) as saver:
        graph = chat(saver)
        talk(graph, "old", 2)
        talk(graph, "new", 2)
        assert saver.prune_threads(["old", "new"], older_than=datetime(2000, 1, 1, tzinfo=UTC)) == 0
        assert saver.prune_threads(["old"], older_than=timedelta(0)) == 5
        assert len(list(saver.list(_cfg("old")))) == 1
        assert saver.prune_threads(["old", "new"], strategy="delete", older_than=timedelta(days=1)) == 0
        assert saver.prune_threads(["old"], strategy="delete", older_than=timedelta(0)) == 1
        assert saver.list_threads() == ["new"]
        with pytest.raises(ValueError, match="unknown prune strategy"):
            saver.prune(["new"], strategy="everything")


@pytest.mark.parametrize("kind", KINDS)
def test_copy_thread_then_both_go_on(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    with open_saver(kind, tmp_path, request) as saver:
        graph = chat(saver)
        talk(graph, "source", 4)
        saver.copy_thread("source", "copy")
        assert graph.get_state(_cfg("copy")).values == graph.get_state(_cfg("source")).values
        talk(graph, "copy", 1, start=100)
        talk(graph, "source", 1, start=200)
        copy_texts = [m.content for m in graph.get_state(_cfg("copy")).values["messages"]]
        source_texts = [m.content for m in graph.get_state(_cfg("source")).values["messages"]]
        assert copy_texts[:8] == source_texts[:8] and copy_texts[8] != source_texts[8]
        assert saver.list_threads()[:2] == ["source", "copy"]
        with pytest.raises(ValueError, match="already has checkpoints"):
            saver.copy_thread("source", "copy")
        saver.delete_thread("copy")
        assert graph.get_state(_cfg("copy")).values == {}
        assert saver.list_threads() == ["source"]


_SETUP_SCRIPT = textwrap.dedent(
    """
    import sys
    from remem.checkpoint import PostgresSaver, SqliteSaver
    kind, target = sys.argv[1], sys.argv[2]
    opener = SqliteSaver if kind == "sqlite" else PostgresSaver
    with opener.from_conn_string(target) as saver:
        saver.setup()
        saver.setup()
    """
)


@pytest.mark.parametrize("kind", KINDS)
def test_setup_is_idempotent_from_many_processes(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = request.getfixturevalue("pg_url") if kind == "postgres" else str(tmp_path / "cp.db")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SETUP_SCRIPT, kind, target], stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    with open_saver(kind, tmp_path, request) as saver:
        saver.setup()
        with saver._transaction(False) as execute:
            from remem._statements import Statement

            rows = execute(Statement("SELECT component, version FROM remem_schema"))
        # every migration recorded once, though four processes raced to apply them
        assert sorted(rows) == [("checkpoint", v) for v in range(1, _sql.SCHEMA.latest + 1)]


def test_refuses_to_unpickle_and_never_pickles(tmp_path: Path) -> None:
    import pickle

    with SqliteSaver.from_conn_string(tmp_path / "cp.db") as saver:
        graph = chat(saver)
        talk(graph, "t", 1)
        payload = b"\x06pickle\x00" + pickle.dumps({"boom": 1})
        with saver.lock:
            saver.conn.execute("UPDATE remem_cp_items SET data = ?", (payload,))
        saver._ctx.cache.forget(1)
        fresh = SqliteSaver(saver.conn)
        with pytest.raises(StorageError, match="refused to load"):
            fresh.get_tuple(_cfg("t"))

        class Opaque:
            pass

        config = (
            saver.get_tuple(_cfg("t")).config
            if False
            else {"configurable": {"thread_id": "x", "checkpoint_ns": ""}}
        )
        checkpoint = {
            "v": 4,
            "id": "1",
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": {"c": Opaque()},
            "channel_versions": {"c": 1},
            "versions_seen": {},
            "updated_channels": None,
        }
        with pytest.raises(TypeError):
            saver.put(config, checkpoint, {}, {"c": 1})  # type: ignore[arg-type]


def test_stats_and_list_threads(tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(tmp_path / "cp.db") as saver:
        graph = chat(saver)
        for name in ("a", "b", "c"):
            talk(graph, name, 2)
        talk(graph, "a", 1, start=10)
        assert saver.list_threads() == ["a", "c", "b"]
        stats = saver.stats()
        assert [t.thread_id for t in stats.threads] == ["a", "c", "b"]
        assert [t.checkpoints for t in stats.threads] == [9, 6, 6]
        assert stats.checkpoints == 21
        assert stats.storage_bytes >= sum(t.bytes for t in stats.threads) > 0


def test_prune_by_another_saver_then_going_on(tmp_path: Path) -> None:
    """Two savers on one file (as two processes): one prunes, the other's caches must not go stale."""
    db = tmp_path / "cp.db"
    with SqliteSaver.from_conn_string(db) as writer, SqliteSaver.from_conn_string(db) as pruner:
        graph = chat(writer)
        talk(graph, "t", 10)
        assert pruner.prune_threads(["t"]) == 29
        talk(graph, "t", 3, start=10)
        with SqliteSaver.from_conn_string(db) as reader:
            messages = chat(reader).get_state(_cfg("t")).values["messages"]
            assert [m.content.split()[2] for m in messages[::2]] == [str(i) for i in range(13)]
            assert len(list(reader.list(_cfg("t")))) == 1 + 3 * 3


def _random_words(rng: Any, words: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return " ".join("".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(words))


@pytest.mark.parametrize("kind", KINDS)
def test_random_words_cost_bounded_bytes_per_message(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A fixed workload of random words (nothing a dictionary knows): the stored values (items and
    metadata) stay under a bound per byte of text, so a change that stores more per message shows here."""
    import random

    rng = random.Random(22)

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(_random_words(rng, 60))]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    with open_saver(kind, tmp_path, request) as saver:
        graph = builder.compile(checkpointer=saver)
        for _ in range(30):
            graph.invoke({"messages": [{"role": "user", "content": _random_words(rng, 40)}]}, _cfg("t"))
        text = sum(len(m.content) for m in graph.get_state(_cfg("t")).values["messages"])
        with saver._transaction(False) as execute:
            from remem._statements import Statement

            ((items,),) = execute(Statement("SELECT sum(length(data)) FROM remem_cp_items"))
            ((meta,),) = execute(Statement("SELECT sum(length(metadata)) FROM remem_cp_checkpoints"))
            ((body, rows),) = execute(
                Statement("SELECT sum(length(body)), COUNT(*) FROM remem_cp_checkpoints")
            )
            ctx = saver._ctx
            ((tid, *_),) = execute(ctx.q(_sql.FIND_THREAD, ("t",)))
            patched = execute(ctx.q(ctx.dialect.patched_items(), (tid, _codec.PATCHED_HEAD)))
            ((list_rows,),) = execute(Statement("SELECT COUNT(*) FROM remem_cp_lists"))
    # zlib (schema v4): 1.81 (SQLite) / 1.64 (PostgreSQL) and 0.14 bytes per byte of text; zstd with
    # remem's dictionary (v5): 1.39 / 1.24 and 0.08, the user's message stored twice (as sent, and once
    # LangGraph gave it an id); v6, the second copy compressed after the first: 0.95 / 0.94
    assert items / text < 1.05
    assert meta / text < 0.1
    # v10: metadata as a short array (v9: 16.9 bytes a checkpoint), ts as an offset from the id's moment
    # (v9: a body of 50.3 bytes a checkpoint)
    assert meta / rows <= 6
    assert body / rows <= 46
    assert len(patched) >= 25  # nearly every turn's message (a fresh saver knows no base for its first)
    # v9: the messages' list gets a row when its appended tail passes TAIL_MAX items, not at every step
    # (v8: 52 rows for these 30 turns)
    assert list_rows <= 8


def test_values_written_by_schema_v4_still_read() -> None:
    import zlib

    import ormsgpack

    data = ormsgpack.packb({"content": "words " * 60})
    for blob in (b"\x02" + zlib.compress(data, 1), b"\x07json\x00" + zlib.compress(data, 1)):
        assert _codec.unpack_blob(blob, trusted_types=True)[1] == data
    assert _codec.item_blob("msgpack", data)[0] == 8  # written now: zstd with the dictionary
    assert _codec.unpack_blob(_codec.item_blob("msgpack", data), trusted_types=False) == ("msgpack", data)


# A value schema v5 wrote (two LangChain messages, JsonPlusSerializer's msgpack, zstd with remem's dictionary).
_V5_BLOB = bytes.fromhex(
    "08607f00650300b40492c7b1d9285768657265206469642049207061726b2074686520626c756520636172206c617374207765"
    "656b3fa36d2d31c7c7b84f6e206c6576656c20332c2062796c6966742ea36d2d3209007e210e102e62222f1c0064467319a196"
    "43a286333aeb5a3bcb62a77103"
)


def test_values_written_by_schema_v5_read_forever_and_a_damaged_one_is_a_storage_error() -> None:
    """The dictionary is part of the stored format: a changed byte would make every stored v5 value
    unreadable (a new dictionary needs a new format byte in _codec, and this dictionary kept for reading)."""
    import hashlib

    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from remem.checkpoint import _zdict

    assert hashlib.sha256(_zdict._DICT).hexdigest() == (
        "3234d5b8681a6c71dde749ce4aa4d7171adc4427663404a4deeb9cf21205bd7b"
    )
    type_, data = _codec.unpack_blob(_V5_BLOB, trusted_types=False)
    assert JsonPlusSerializer().loads_typed((type_, data)) == [
        HumanMessage("Where did I park the blue car last week?", id="m-1"),
        AIMessage("On level 3, by the lift.", id="m-2"),
    ]
    for blob in (
        _V5_BLOB[:30],
        b"\x02not zlib",
    ):  # cut short (frames carry no checksum to see a flipped byte)
        with pytest.raises(StorageError, match="cannot be decompressed"):
            _codec.unpack_blob(blob, trusted_types=False)


def test_the_cache_names_a_thread_by_its_newest_digest_map() -> None:
    """A thread deleted and made again by another process has a new tid: the write path's one-round-trip
    lookup by thread id must find the new map, not the old one left in the cache."""
    from remem.checkpoint._cache import SaverCache

    cache = SaverCache()
    cache.digests(1, "t", 0)
    cache.digests(2, "other", 0)
    cache.digests(3, "t", 0)
    found = cache.thread_named("t")
    assert found is not None and found.tid == 3


# A user's message once LangGraph gave it an id (schema v6), compressed after the message as sent (item 7).
_V6_BASE = bytes.fromhex(
    "82a4726f6c65a475736572a7636f6e74656e74d94a5768657265206469642049207061726b2074686520626c756520636172206c"
    "617374207765656b3f204f6e206c6576656c20332c2049207468696e6b2c20627920746865206c6966742e"
)
_V6_BLOB = bytes.fromhex("0a0720d6b5000030c7d3a36d2d310400384bd3b5f6843c180af6702e2c")


def test_values_written_after_a_base_by_schema_v6_read_forever_and_need_their_base() -> None:
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    said = "Where did I park the blue car last week? On level 3, I think, by the lift."
    serde = JsonPlusSerializer()
    assert serde.loads_typed(("msgpack", _V6_BASE)) == {"role": "user", "content": said}
    assert _codec.patch_base(_V6_BLOB) == 7
    assert serde.loads_typed(
        _codec.unpack_blob(_V6_BLOB, trusted_types=False, base=_V6_BASE)
    ) == HumanMessage(said, id="m-1")
    _, data = serde.dumps_typed(HumanMessage(said, id="m-1"))
    alone = _codec.item_blob("msgpack", data)
    after = _codec.item_blob("msgpack", data, [(7, _V6_BASE)])
    assert _codec.patch_base(alone) is None and _codec.patch_base(after) == 7
    assert len(after) < len(alone) // 3
    _, other = serde.dumps_typed({"role": "user", "content": "something else entirely, " * 4})
    assert _codec.patch_base(_codec.item_blob("msgpack", data, [(3, other)])) is None  # nothing in common


@pytest.mark.parametrize("kind", KINDS)
def test_a_value_stored_after_a_base_keeps_it_through_prunes_and_reads_in_a_fresh_saver(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Keep-latest drops the input checkpoints, the only ones that name the messages as sent; the messages
    with their ids were stored after them, so those bases must stay (read by a saver that caches nothing)."""
    with open_saver(kind, tmp_path, request) as saver:
        graph = chat(saver)
        talk(graph, "t", 6)
        before = graph.get_state(_cfg("t")).values["messages"]
        with saver._transaction(False) as execute:
            ((tid, *_),) = execute(saver._ctx.q(_sql.FIND_THREAD, ("t",)))
            patched = execute(saver._ctx.q(saver._ctx.dialect.patched_items(), (tid, _codec.PATCHED_HEAD)))
        assert len(patched) >= 5
        saver.prune_threads(["t"])
    with open_saver(kind, tmp_path, request) as fresh:
        assert chat(fresh).get_state(_cfg("t")).values["messages"] == before
        ctx = fresh._ctx
        bases = sorted({_codec.patch_base(bytes(head)) for _, head in patched})
        with fresh._transaction(True) as execute:  # what only damage, or a change outside remem, does
            delete = ctx.dialect.delete_in("remem_cp_items", "item_no")
            execute(ctx.q(delete, (tid, ctx.dialect.list_param(bases)), "none"))
    with (
        open_saver(kind, tmp_path, request) as damaged,
        pytest.raises(StorageError, match="gone while another one needs it"),
    ):
        chat(damaged).get_state(_cfg("t"))


def _sql_of(saver: Any, text: str, params: tuple[Any, ...] = (), write: bool = False) -> Any:
    with saver._transaction(write) as execute:
        return execute(saver._ctx.q(text, params, "all" if not write else "none"))


def _as_v9(saver: Any) -> None:
    """Turn the saver's database back into what schema v9 held: metadata compressed as any value, ts in
    microseconds since the epoch, PostgreSQL's digest index on the whole digest, v10 not recorded."""
    import ormsgpack

    from remem.checkpoint import _ids

    serde = saver._ctx.serde
    for tid, ns, cid, body, meta in _sql_of(
        saver, "SELECT tid, ns, checkpoint_id, body, metadata FROM remem_cp_checkpoints"
    ):
        fields = ormsgpack.unpackb(bytes(body), option=ormsgpack.OPT_NON_STR_KEYS)
        moment = datetime.fromisoformat(_codec._decode_ts(fields[1], _ids.shown(cid)))
        fields[1] = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
        old_body = ormsgpack.packb(fields, option=ormsgpack.OPT_NON_STR_KEYS)
        value = _codec.decode_metadata(serde, bytes(meta), trusted_types=False)
        old_meta = _codec.item_blob(*serde.dumps_typed(value))
        _sql_of(
            saver,
            "UPDATE remem_cp_checkpoints SET body = ?, metadata = ? WHERE tid = ? AND ns = ? AND checkpoint_id = ?",
            (old_body, old_meta, tid, ns, cid),
            write=True,
        )
    if saver._ctx.dialect.name == "postgres":
        _sql_of(saver, "DROP INDEX remem_cp_items_digest", write=True)
        _sql_of(saver, "CREATE INDEX remem_cp_items_digest ON remem_cp_items (tid, digest)", write=True)
    _sql_of(saver, "DELETE FROM remem_schema WHERE component = 'checkpoint' AND version >= 10", write=True)


@pytest.mark.parametrize("kind", KINDS)
def test_a_v9_database_reads_as_before_and_goes_on_sharing_its_items(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    with open_saver(kind, tmp_path, request) as saver:
        graph = chat(saver)
        talk(graph, "t", 4)
        saver.put_writes(
            graph.get_state(_cfg("t")).config, [("messages", [HumanMessage("pending")])], "task-1"
        )
        history = [
            (s.config, s.parent_config, s.values, s.metadata, s.created_at)
            for s in graph.get_state_history(_cfg("t"))
        ]
        head = saver.get_tuple(_cfg("t"))
        _as_v9(saver)
        ((meta,),) = _sql_of(saver, "SELECT min(length(metadata)) FROM remem_cp_checkpoints")
        assert meta > 10  # as v9 wrote it
    with open_saver(kind, tmp_path, request) as migrated:
        graph = chat(migrated)
        assert [
            (s.config, s.parent_config, s.values, s.metadata, s.created_at)
            for s in graph.get_state_history(_cfg("t"))
        ] == history
        assert migrated.get_tuple(_cfg("t")) == head
        versions = _sql_of(migrated, "SELECT version FROM remem_schema WHERE component = 'checkpoint'")
        assert sorted(v for (v,) in versions) == list(range(1, _sql.SCHEMA.latest + 1))
        if kind == "postgres":
            ((definition,),) = _sql_of(
                migrated, "SELECT indexdef FROM pg_indexes WHERE indexname = 'remem_cp_items_digest'"
            )
            assert "bigint" in definition
    with open_saver(kind, tmp_path, request) as fresh:  # a fresh process finds the shared items by digest
        graph = chat(fresh)
        ((items,),) = _sql_of(fresh, "SELECT COUNT(*) FROM remem_cp_items")
        talk(graph, "t", 1, start=4)
        assert len(graph.get_state(_cfg("t")).values["messages"]) == 10
        ((after,),) = _sql_of(fresh, "SELECT COUNT(*) FROM remem_cp_items")
        assert after == items + 3  # the turn's own: the user's message as sent and with its id, the reply
        ((meta,),) = _sql_of(
            fresh,
            "SELECT max(length(metadata)) FROM remem_cp_checkpoints WHERE seq = (SELECT max(seq) FROM remem_cp_checkpoints)",
        )
        assert meta <= 7
