"""Property tests: random sequences of channel updates (appends, removals, replacements, whole new lists,
scalars, emptied channels, forks from old checkpoints, pending writes) round-trip exactly, read back by the
saver that wrote them and by a fresh one; and the pure list-delta and reference codecs are exact."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.base.id import uuid6

from remem.checkpoint import SqliteSaver
from remem.checkpoint import _codec as codec

leaf = st.one_of(
    st.text(max_size=12),
    st.integers(-(2**40), 2**40),
    st.binary(max_size=8),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.dictionaries(st.text(max_size=4), st.integers(-1000, 1000), max_size=3),
    st.lists(st.integers(0, 5), max_size=3),
)

edit = st.one_of(
    st.tuples(st.just("append"), st.lists(leaf, min_size=1, max_size=6)),
    st.tuples(st.just("remove"), st.integers(0, 1000)),
    st.tuples(st.just("replace"), st.integers(0, 1000), leaf),
    st.tuples(st.just("reorder"), st.randoms(use_true_random=False)),
    st.tuples(st.just("new_list"), st.lists(leaf, max_size=12)),
    st.tuples(st.just("scalar"), leaf),
    st.tuples(st.just("input"), st.lists(leaf, max_size=3)),
    st.tuples(st.just("empty"), st.sampled_from(["msgs", "scalar", "input"])),
    st.tuples(st.just("same"), st.none()),
)
step = st.tuples(
    edit, st.integers(0, 9), st.lists(st.tuples(st.sampled_from(["msgs", "x"]), leaf), max_size=2)
)


def _apply(values: dict[str, Any], change: tuple[Any, ...]) -> set[str]:
    """Edits ``values`` in place; returns the channels that changed."""
    kind = change[0]
    msgs = values.get("msgs")
    if kind == "append":
        values["msgs"] = [*(msgs or []), *change[1]]
    elif kind == "new_list":
        values["msgs"] = list(change[1])
    elif kind in ("remove", "replace", "reorder"):
        if not msgs:
            return set()
        if kind == "remove":
            del msgs[change[1] % len(msgs)]
        elif kind == "replace":
            msgs[change[1] % len(msgs)] = change[2]
        else:
            change[1].shuffle(msgs)
    elif kind == "scalar":
        values["scalar"] = change[1]
        return {"scalar"}
    elif kind == "input":
        values["input"] = {"messages": list(change[1]), "n": len(change[1])}
        return {"input"}
    elif kind == "empty":
        values.pop(change[1], None)
        return {change[1]}
    else:
        return set()
    return {"msgs"}


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("props") / "cp.db"


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tiny inline, chain and tail limits, so short sequences exercise stored lists, deltas, tails and snapshots."""
    monkeypatch.setattr(codec, "INLINE_LIST_MAX", 2)
    monkeypatch.setattr(codec, "MAX_CHAIN", 3)
    monkeypatch.setattr(codec, "TAIL_MAX", 2)
    yield


@settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step, min_size=1, max_size=20))
def test_random_updates_round_trip(db: Path, small_limits: None, steps: list[Any]) -> None:
    thread_id = str(uuid.uuid4())
    expected: list[
        tuple[dict[str, Any], dict[str, Any], list[tuple[str, Any]]]
    ] = []  # (config, values, writes)
    with SqliteSaver.from_conn_string(db) as saver:
        versions: list[dict[str, int]] = []
        for n, (change, parent_pick, writes) in enumerate(steps):
            parent = None if not expected else max(0, len(expected) - 1 - parent_pick % 3)
            if parent is not None and parent_pick > 6:
                parent = parent_pick % len(expected)  # fork from an older checkpoint
            values = {} if parent is None else _copy(expected[parent][1])
            base_versions = {} if parent is None else dict(versions[parent])
            changed = _apply(values, change)
            top = max(base_versions.values(), default=0)
            new_versions = {ch: top + 1 for ch in changed}
            checkpoint: Checkpoint = {
                "v": 4,
                "id": str(uuid6(clock_seq=n)),
                "ts": f"2026-01-01T00:00:{n:02d}.000001+00:00",
                "channel_values": _copy(values),
                "channel_versions": {**base_versions, **new_versions},
                "versions_seen": {"node": {"msgs": top}},
                "updated_channels": sorted(changed),
            }
            config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            if parent is not None:
                config["configurable"]["checkpoint_id"] = expected[parent][0]["configurable"]["checkpoint_id"]
            stored = saver.put(config, checkpoint, {"source": "loop", "step": n}, new_versions)  # type: ignore[arg-type]
            saver.put_writes(stored, writes, task_id=f"task-{n}")
            expected.append((stored, values, list(writes)))
            versions.append(checkpoint["channel_versions"])  # type: ignore[arg-type]
        _check(saver, thread_id, expected)
    with SqliteSaver.from_conn_string(db) as fresh:  # nothing cached: every value read from the rows
        _check(fresh, thread_id, expected)


def _copy(values: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
        for k, v in values.items()
    }


def _check(saver: SqliteSaver, thread_id: str, expected: list[Any]) -> None:
    for config, values, writes in expected:
        tup = saver.get_tuple(config)
        assert tup is not None
        assert tup.checkpoint["channel_values"] == values
        assert [(c, v) for _, c, v in tup.pending_writes or []] == writes
    listed = {
        t.config["configurable"]["checkpoint_id"]: t
        for t in saver.list({"configurable": {"thread_id": thread_id}})
    }
    assert len(listed) == len(expected)
    for config, values, _ in expected:
        assert listed[config["configurable"]["checkpoint_id"]].checkpoint["channel_values"] == values


@settings(max_examples=200, deadline=None)
@given(base=st.lists(st.integers(0, 30), max_size=40), new=st.lists(st.integers(0, 30), max_size=40))
def test_list_delta_round_trips(base: list[int], new: list[int]) -> None:
    prefix, suffix, middle = codec.list_delta(base, new)
    assert codec.apply_list_delta(base, prefix, suffix, middle) == new
    assert codec.decode_refs(codec.encode_refs(new)) == new


@settings(max_examples=100, deadline=None)
@given(value=leaf)
def test_items_round_trip_and_dedupe(value: Any) -> None:
    serde = SqliteSaver.__mro__[1]  # any saver class builds the safe default serializer
    del serde
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    safe = JsonPlusSerializer(pickle_fallback=False, allowed_msgpack_modules=None)
    digest, type_, data = codec.encode_item(safe, value)
    assert codec.encode_item(safe, value)[0] == digest
    blob = codec.item_blob(type_, data)
    assert codec.decode_item(safe, blob, trusted_types=False) == value


@settings(max_examples=100, deadline=None)
@given(value=leaf, base=leaf, no=st.integers(0, 1 << 40))
def test_items_stored_after_a_base_round_trip(value: Any, base: Any, no: int) -> None:
    """Any value, compressed after any other (and after itself, as a message once it got an id is)."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    safe = JsonPlusSerializer(pickle_fallback=False, allowed_msgpack_modules=None)
    _, type_, data = codec.encode_item(safe, value)
    for other in (base, value, [value, base]):
        base_data = codec.encode_item(safe, other)[2]
        blob = codec.item_blob(type_, data, [(no, base_data)])
        found = codec.patch_base(blob)
        assert found in (None, no)
        assert codec.unpack_blob(blob, trusted_types=False, base=base_data) == (type_, data)
        assert len(blob) <= len(codec.item_blob(type_, data))


@settings(max_examples=200, deadline=None)
@given(
    middle=st.lists(st.integers(0, 1 << 40), max_size=300),
    ends=st.tuples(st.integers(0, 24), st.integers(0, 1000), st.integers(0, 1000)),
    base=st.one_of(st.none(), st.integers(0, 1 << 40)),
)
def test_list_rows_round_trip(middle: list[int], ends: tuple[int, int, int], base: int | None) -> None:
    row = codec.ListRow(5, base, *ends, middle=middle)
    assert codec.decode_list_row(5, base, codec.encode_list_row(row)) == row


def test_a_long_snapshot_is_compressed_and_a_v6_list_row_still_reads() -> None:
    """A long thread's snapshot: each turn adds the message as sent, then the user's and the reply's."""
    refs = [n for turn in range(1000) for n in (3 * turn + 1, 3 * turn + 2)]
    row = codec.ListRow(9, None, 0, middle=refs)
    plain = ormsgpack.packb([0, 0, 0, codec.encode_refs(refs)])
    assert codec.decode_list_row(9, None, plain) == row  # what v6 wrote
    assert len(codec.encode_list_row(row)) < len(plain) // 20
    assert codec.decode_list_row(9, None, codec.encode_list_row(row)) == row


_sources = st.one_of(st.sampled_from(["input", "loop", "update", "fork"]), leaf)


@settings(max_examples=300, deadline=None)
@given(
    head=st.lists(st.sampled_from(["source", "step", "parents"]), unique=True),
    source=_sources,
    step=leaf,
    parents=st.one_of(st.dictionaries(st.text(max_size=6), st.text(max_size=8), max_size=3), leaf),
    rest=st.dictionaries(st.text(max_size=6), leaf, max_size=3),
)
def test_metadata_round_trips_compact_or_not(
    head: list[str], source: Any, step: Any, parents: Any, rest: dict[str, Any]
) -> None:
    """Schema v10: metadata of any shape reads back as the serializer gave it (bytes and value), in the
    short array form exactly when it starts with source, step and parents as LangGraph writes them."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    safe = JsonPlusSerializer(pickle_fallback=False, allowed_msgpack_modules=None)
    given_values = {"source": source, "step": step, "parents": parents}
    metadata = {k: given_values[k] for k in head} | {k: v for k, v in rest.items() if k not in given_values}
    blob = codec.encode_metadata(safe, metadata)
    assert codec.unpack_blob(blob, trusted_types=False) == safe.dumps_typed(metadata)
    decoded = codec.decode_metadata(safe, blob, trusted_types=False)
    assert decoded == metadata and list(decoded) == list(metadata)
    assert len(blob) <= len(codec.item_blob(*safe.dumps_typed(metadata)))


def test_langgraph_metadata_is_stored_in_a_few_bytes() -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    safe = JsonPlusSerializer(pickle_fallback=False, allowed_msgpack_modules=None)
    for source, step in (("input", -1), ("loop", 57), ("update", 1200), ("fork", 3)):
        blob = codec.encode_metadata(safe, {"source": source, "step": step, "parents": {}})
        assert len(blob) <= 7  # v9 (zstd with remem's dictionary): 15-18
    blob = codec.encode_metadata(safe, {"source": "loop", "step": 1, "parents": {}, "user": "ann"})
    assert codec.decode_metadata(safe, blob, trusted_types=False)["user"] == "ann"


@settings(max_examples=300, deadline=None)
@given(
    moment=st.datetimes(
        min_value=datetime(1971, 1, 1), max_value=datetime(2400, 1, 1), timezones=st.just(UTC)
    ),
    apart=st.integers(-(10**9), 10**9),
    other_id=st.one_of(st.uuids().map(str), st.text(max_size=40)),
)
def test_a_checkpoint_ts_round_trips_against_its_id(moment: datetime, apart: int, other_id: str) -> None:
    """Schema v10: ts stored as an offset from the moment in a uuid6 id reads back exactly, however far
    apart the two are; any other id, or a ts not in LangGraph's form, is stored as before."""
    ts = moment.isoformat()
    at = moment + timedelta(microseconds=apart)
    ticks = (at - datetime(1582, 10, 15, tzinfo=UTC)) // timedelta(microseconds=1) * 10 + apart % 10
    # a uuid6 as langgraph.checkpoint.base.id.uuid6 makes it (its clock is the machine's: set it here)
    v6 = str(uuid.UUID(int=(ticks >> 12) << 80 | 6 << 76 | (ticks & 0xFFF) << 64 | 2 << 62 | 12345))
    assert v6[14] == "6"
    assert abs(codec._id_micros(str(uuid6())) - time.time() * 1e6) < 60e6  # langgraph's own: now
    for cid in (v6, other_id):
        for value in (ts, moment.replace(tzinfo=None).isoformat(), "not a moment"):
            stored = codec._encode_ts(value, cid)
            assert codec._decode_ts(ormsgpack.unpackb(ormsgpack.packb(stored)), cid) == value
    if abs(apart) < 2**15:
        assert len(ormsgpack.packb(codec._encode_ts(ts, v6))) <= 4  # v9: 9 bytes
