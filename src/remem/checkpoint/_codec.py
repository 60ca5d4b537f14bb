"""Pure encoding for remem's checkpointers: items, list references and checkpoint rows. No I/O here.

A thread's values are stored as *items*: each distinct serialized value once per thread, numbered in the
order the thread first saw it. A channel value in a checkpoint is a *descriptor*:

    n                   the item numbered n (any value that is not a list)
    [0, d1, d2, ...]    a short list, inline: its items as delta-coded item numbers
    [1, list_no, t...]  a longer list, stored in the lists table, then the items ``t`` (delta-coded, at
                        most ``TAIL_MAX``) appended since that row was written
    [2, k1, d1, ...]    a dict holding lists (such as graph input), each value a descriptor

An item that repeats most of an earlier item of its thread (a user's message once LangGraph gave it an
id repeats the message as sent) is stored compressed after that item, its *base* (:func:`patch_base`):
reading it needs the base's data, and a base is never such an item itself, so that is one step.

A stored list is a snapshot of its item numbers or a delta against an earlier list of the same thread
(keep ``prefix`` items of the base, then ``middle``, then the last ``suffix`` items of the base). A delta
chain is at most ``MAX_CHAIN`` long, so rebuilding any list reads a bounded number of small rows; a long
row is compressed.
"""

from __future__ import annotations

import hashlib
import random
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import ormsgpack
import zstandard
from langgraph.checkpoint.serde.base import SerializerProtocol

from remem.checkpoint import _zdict
from remem.errors import StorageError

__all__ = [
    "BASE_MIN",
    "DECODE_RUN",
    "INLINE_LIST_MAX",
    "LIST_COMPRESS_MIN",
    "MAX_CHAIN",
    "PATCHED_HEAD",
    "TAIL_MAX",
    "EncodedItem",
    "ListRow",
    "RawBody",
    "apply_list_delta",
    "body_names",
    "decode_body",
    "decode_item",
    "decode_list_row",
    "decode_metadata",
    "decode_refs",
    "encode_body",
    "encode_item",
    "encode_list_row",
    "encode_metadata",
    "encode_refs",
    "item_blob",
    "list_delta",
    "loads_many",
    "next_version",
    "patch_base",
    "refs_of_descriptor",
    "resolve_body",
    "unpack_blob",
]

INLINE_LIST_MAX = 8
"""Lists of at most this many items are stored inline in the checkpoint row."""

MAX_CHAIN = 24
"""A stored list is rebuilt from at most this many delta rows on top of one snapshot."""

TAIL_MAX = 16
"""Items a stored list's descriptor carries appended after its row (schema v9) before a new row is written: a
conversation's list grows by a message or two a step, and a row a step cost more than its few numbers."""

COMPRESS_MIN = 24
"""Serialized values at least this long are compressed (zstd with remem's dictionary, :mod:`._zdict`)
when that makes them shorter."""

BASE_MIN = 64
"""An item is a base for a later one (see the module's text) only if its data is at least this long."""

# First byte of a stored item: how the rest is encoded. zlib (2, 7) is what schema v4 wrote; it is read,
# no longer written. _MSGPACK_ZB (schema v6): the base's item number (a varint), then zstd with remem's
# dictionary followed by the base's data.
# _META (schema v10): checkpoint metadata in its usual shape, as a short array (:func:`encode_metadata`).
(
    _MSGPACK,
    _MSGPACK_Z,
    _NULL,
    _BYTES,
    _BYTEARRAY,
    _OTHER,
    _OTHER_Z,
    _MSGPACK_ZD,
    _OTHER_ZD,
    _MSGPACK_ZB,
    _META,
) = range(1, 12)
_CODES = {"msgpack": _MSGPACK, "null": _NULL, "bytes": _BYTES, "bytearray": _BYTEARRAY}
_NAMES = {code: name for name, code in _CODES.items()}
_REFUSED_TYPES = frozenset({"pickle", "json"})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


EncodedItem = tuple[bytes, str, bytes]
"""A serialized value: (digest identifying it within a thread, serializer type, serialized bytes)."""

_TYPE_PREFIX: dict[str, bytes] = {}


def encode_item(serde: SerializerProtocol, value: Any) -> EncodedItem:
    """Serialize one value with ``serde`` and give it a content digest (a plain tuple: this is hot)."""
    type_, data = serde.dumps_typed(value)
    prefix = _TYPE_PREFIX.get(type_)
    if prefix is None:
        prefix = _TYPE_PREFIX.setdefault(type_, type_.encode() + b"\0")
    return hashlib.sha256(prefix + data).digest()[:16], type_, data


def item_blob(type_: str, data: bytes, bases: Sequence[tuple[int, bytes]] = ()) -> bytes:
    """What is stored for a new item: a format byte, then the data (compressed when that pays); compressed
    after one of ``bases`` (item number, data: earlier items of the thread, none of them stored after a
    base itself) when the data repeats part of it and that makes it shorter still."""
    code = _CODES.get(type_)
    if code is None:
        head = type_.encode() + b"\0"
        if len(data) >= COMPRESS_MIN and len(packed := _zdict.compress(data)) < len(data):
            return bytes([_OTHER_ZD]) + head + packed
        return bytes([_OTHER]) + head + data
    if code == _MSGPACK and len(data) >= COMPRESS_MIN:
        packed = _zdict.compress(data)
        best = bytes([_MSGPACK_ZD]) + packed if len(packed) < len(data) else bytes([code]) + data
        for no, base in reversed(bases):  # the latest first: a value usually repeats a recent one
            if _repeats(data, base) and len(after := _patch(no, base, data)) < len(best):
                return after
        return best
    return bytes([code]) + data


PATCHED_HEAD = bytes([_MSGPACK_ZB])
"""The first byte of an item stored after a base."""


def _repeats(data: bytes, base: bytes) -> bool:
    """Whether ``data`` holds the middle of ``base`` (a cheap test before compressing after it)."""
    mid = len(base) // 2
    return len(base) >= BASE_MIN and base[mid - 16 : mid + 16] in data


def _patch(no: int, base: bytes, data: bytes) -> bytes:
    return bytes([_MSGPACK_ZB]) + _varint(no) + _zdict.compress_after(base, data)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_varint(blob: bytes, at: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        byte = blob[at]
        n |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return n, at
        shift += 7


def patch_base(blob: bytes) -> int | None:
    """The item number of the base a stored item was compressed after (None: it needs no other item)."""
    if not blob or blob[0] != _MSGPACK_ZB:
        return None
    try:
        return _read_varint(blob, 1)[0]
    except IndexError as exc:
        raise StorageError(_DAMAGED_VALUE) from exc


def unpack_blob(blob: bytes, *, trusted_types: bool, base: bytes | None = None) -> tuple[str, bytes]:
    """The serializer's (type, data) from a stored blob, decompressed; ``base`` is the data of the item
    :func:`patch_base` names, for a blob that has one.

    Only the serializer's safe formats are read back: a blob that claims to be pickle or JSON (which
    could construct arbitrary objects) is refused unless the saver was given a custom serializer.
    """
    blob = bytes(blob)
    try:
        if blob and blob[0] == _MSGPACK_ZB:
            if base is None:
                raise StorageError(_BASE_GONE)
            return "msgpack", _zdict.decompress_after(base, blob[_read_varint(blob, 1)[1] :])
        return _unpack(blob, trusted_types)
    except (zstandard.ZstdError, zlib.error, IndexError) as exc:
        raise StorageError(_DAMAGED_VALUE) from exc


_BASE_GONE = (
    "a stored value of the thread is gone while another one needs it to be read (deleted outside remem, or "
    "the database is damaged). Restore the database from a backup, or erase the thread (remem forget --thread)"
)
_DAMAGED_VALUE = (
    "a stored value cannot be decompressed (damaged, or changed outside remem); nothing was written. Restore "
    "the database from a backup, or erase the thread (remem forget --thread)"
)


def _unpack(blob: bytes, trusted_types: bool) -> tuple[str, bytes]:
    code = blob[0]
    if code == _META:
        return "msgpack", _expand_metadata(blob[1:])
    if code == _MSGPACK_ZD:
        return "msgpack", _zdict.decompress(blob[1:])
    if code == _MSGPACK_Z:
        return "msgpack", zlib.decompress(blob[1:])
    if code in _NAMES:
        return _NAMES[code], blob[1:]
    if code in (_OTHER, _OTHER_Z, _OTHER_ZD):
        type_b, _, data = blob[1:].partition(b"\0")
        type_ = type_b.decode()
        if type_ in _REFUSED_TYPES and not trusted_types:
            raise StorageError(
                f"refused to load a stored value of type {type_!r}: remem's savers never write it, so the "
                "database was written by something else; load it with a saver given an explicit serde"
            )
        if code == _OTHER_ZD:
            return type_, _zdict.decompress(data)
        return type_, zlib.decompress(data) if code == _OTHER_Z else data
    raise StorageError(f"unknown stored value format {code}; the database was not written by remem")


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes([0x90 | n])
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


DECODE_RUN = 1024
"""The most msgpack values :func:`loads_many` joins into one array: the copy it makes stays small however
long the list (a 100,000-message thread would otherwise be copied whole next to its payloads)."""


def loads_many(serde: SerializerProtocol, payloads: Sequence[tuple[str, bytes]]) -> list[Any]:
    """Deserialize many values; runs of msgpack values are read as msgpack arrays of up to
    :data:`DECODE_RUN` values (much faster than one at a time)."""
    if payloads and all(t == "msgpack" for t, _ in payloads):
        out: list[Any] = []
        for start in range(0, len(payloads), DECODE_RUN):
            run = payloads[start : start + DECODE_RUN]
            out.extend(serde.loads_typed(("msgpack", _array_header(len(run)) + b"".join(d for _, d in run))))
        return out
    return [serde.loads_typed(p) for p in payloads]


def decode_item(serde: SerializerProtocol, blob: bytes, *, trusted_types: bool) -> Any:
    """Deserialize one blob made by :meth:`EncodedItem.blob`."""
    return serde.loads_typed(unpack_blob(blob, trusted_types=trusted_types))


def encode_refs(refs: Sequence[int]) -> list[int]:
    """Delta-code item numbers: mostly increasing lists become runs of small integers."""
    out: list[int] = []
    prev = 0
    for r in refs:
        out.append(r - prev)
        prev = r
    return out


def decode_refs(coded: Iterable[int]) -> list[int]:
    """Inverse of :func:`encode_refs`."""
    out: list[int] = []
    cur = 0
    for d in coded:
        cur += d
        out.append(cur)
    return out


def list_delta(base: Sequence[int], new: Sequence[int]) -> tuple[int, int, list[int]]:
    """(prefix, suffix, middle) such that ``new == base[:prefix] + middle + base[len(base)-suffix:]``."""
    limit = min(len(base), len(new))
    prefix = 0
    while prefix < limit and base[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and base[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    return prefix, suffix, list(new[prefix : len(new) - suffix])


def apply_list_delta(base: Sequence[int], prefix: int, suffix: int, middle: Sequence[int]) -> list[int]:
    """Rebuild a list from its base and a delta made by :func:`list_delta`."""
    out = list(base[:prefix])
    out.extend(middle)
    if suffix:
        out.extend(base[len(base) - suffix :])
    return out


@dataclass(frozen=True, slots=True)
class ListRow:
    """One stored list: a snapshot (``base`` is None) or a delta against list ``base``."""

    list_no: int
    base: int | None
    depth: int
    prefix: int = 0
    suffix: int = 0
    middle: list[int] = field(default_factory=list)


LIST_COMPRESS_MIN = 48
"""A stored list's body at least this long is compressed when that makes it shorter (a snapshot of a long
list: its delta-coded item numbers repeat the same few small steps, a turn's messages after another's)."""
_LIST_ZD = 0xC1
"""First byte of a compressed list body (schema v7): one that msgpack never writes, so a v6 body (a msgpack
array) still reads as it is."""


def encode_list_row(row: ListRow) -> bytes:
    packed = ormsgpack.packb([row.depth, row.prefix, row.suffix, encode_refs(row.middle)])
    if len(packed) >= LIST_COMPRESS_MIN and len(squeezed := _zdict.compress(packed)) + 1 < len(packed):
        return bytes([_LIST_ZD]) + squeezed
    return packed


def decode_list_row(list_no: int, base: int | None, body: bytes) -> ListRow:
    if body[:1] == bytes([_LIST_ZD]):
        try:
            body = _zdict.decompress(body[1:])
        except zstandard.ZstdError as exc:
            raise StorageError(_DAMAGED_VALUE) from exc
    depth, prefix, suffix, coded = ormsgpack.unpackb(body)
    return ListRow(list_no, base, depth, prefix, suffix, decode_refs(coded))


def refs_of_descriptor(desc: Any, lists: Mapping[int, Sequence[int]]) -> list[int]:
    """Item numbers a descriptor stands for, in order (``lists`` holds rebuilt stored lists)."""
    if isinstance(desc, int):
        return [desc]
    if desc[0] == 0:
        return decode_refs(desc[1:])
    if desc[0] == 2:
        return [n for sub in desc[2::2] for n in refs_of_descriptor(sub, lists)]
    return [*lists[desc[1]], *decode_refs(desc[2:])]


_GREGORIAN = 0x01B21DD213814000
"""A uuid's clock (100 ns ticks since 1582-10-15) at the Unix epoch."""


def _id_micros(checkpoint_id: str) -> int | None:
    """The moment (microseconds since the Unix epoch) a version 6 uuid carries, as LangGraph's checkpoint
    ids are (langgraph.checkpoint.base.id.uuid6); None for any other id."""
    if len(checkpoint_id) != 36 or checkpoint_id[14] != "6":
        return None
    try:
        n = int(checkpoint_id.replace("-", ""), 16)
    except ValueError:
        return None
    return (((n >> 80) << 12 | (n >> 64) & 0x0FFF) - _GREGORIAN) // 10


def _encode_ts(ts: str, checkpoint_id: str) -> str | int | list[int]:
    """A checkpoint's ``ts``: the moment in microseconds, or (schema v10) ``[offset]`` from the moment in its
    uuid6 id (taken a few microseconds apart: one to three bytes, not nine); as given when either would not
    give it back exactly."""
    try:
        moment = datetime.fromisoformat(ts)
    except (TypeError, ValueError):
        return ts
    if moment.tzinfo is not UTC and moment.utcoffset() != timedelta(0):
        return ts
    micros = (moment - _EPOCH) // timedelta(microseconds=1)
    if _decode_ts(micros, checkpoint_id) != ts:
        return ts
    base = _id_micros(checkpoint_id)
    return micros if base is None else [micros - base]


def _decode_ts(ts: str | int | list[int], checkpoint_id: str) -> str:
    if isinstance(ts, str):
        return ts
    if isinstance(ts, list):
        base = _id_micros(checkpoint_id)
        if base is None or len(ts) != 1 or type(ts[0]) is not int:
            raise StorageError(_DAMAGED_BODY)
        ts = base + ts[0]
    return (_EPOCH + timedelta(microseconds=ts)).isoformat()


_BODY_KEYS = ("v", "id", "ts", "channel_values", "channel_versions", "versions_seen", "updated_channels")
_NON_STR = ormsgpack.OPT_NON_STR_KEYS


def body_names(checkpoint: Mapping[str, Any]) -> set[str]:
    """The channel and node names a checkpoint's body refers to (stored once per thread, as items)."""
    names = set(checkpoint.get("channel_versions", {}))
    names.update(checkpoint.get("channel_values", {}))
    for node, seen in checkpoint.get("versions_seen", {}).items():
        names.add(node)
        names.update(seen)
    names.update(checkpoint.get("updated_channels") or ())
    return names


@dataclass(frozen=True, slots=True)
class RawBody:
    """A checkpoint row's body as stored: names are item numbers (see :func:`resolve_body`)."""

    v: int
    ts: str | int | list[int]
    versions: dict[int, Any]
    seen: dict[int, dict[int, Any]]
    updated: list[int] | None
    descriptors: dict[int, Any]
    extra: list[Any] | None

    def name_refs(self) -> set[int]:
        refs = set(self.versions) | set(self.seen) | set(self.descriptors)
        for inner in self.seen.values():
            refs.update(inner)
        refs.update(self.updated or ())
        return refs

    def created(self, checkpoint_id: str) -> str:
        """The checkpoint's ``ts`` (its id is part of how it is stored)."""
        return _decode_ts(self.ts, checkpoint_id)


def encode_body(
    serde: SerializerProtocol,
    checkpoint: Mapping[str, Any],
    descriptors: dict[int, Any],
    names: Mapping[str, int],
) -> bytes:
    """A checkpoint without its values (which are ``descriptors``), names replaced by their item numbers."""
    extra = {k: v for k, v in checkpoint.items() if k not in _BODY_KEYS}
    updated = checkpoint.get("updated_channels")
    return ormsgpack.packb(
        [
            checkpoint.get("v", 1),
            _encode_ts(checkpoint["ts"], checkpoint["id"]),
            {names[k]: v for k, v in checkpoint.get("channel_versions", {}).items()},
            {
                names[n]: {names[c]: v for c, v in seen.items()}
                for n, seen in checkpoint.get("versions_seen", {}).items()
            },
            None if updated is None else [names[c] for c in updated],
            descriptors,
            list(serde.dumps_typed(extra)) if extra else None,
        ],
        option=_NON_STR,
    )


_DAMAGED_BODY = (
    "a stored checkpoint cannot be read (its body is damaged, or was changed outside remem); nothing was "
    "written. Restore the database from a backup, or erase the thread (remem forget --thread)"
)


def decode_body(body: bytes) -> RawBody:
    """A checkpoint row's body; one that is not what remem writes (damaged, tampered with) is a
    :class:`~remem.errors.StorageError`, not a bare decoding error."""
    try:
        raw = RawBody(*ormsgpack.unpackb(body, option=_NON_STR))
    except (ormsgpack.MsgpackDecodeError, TypeError, ValueError) as exc:
        raise StorageError(_DAMAGED_BODY) from exc
    maps = (raw.versions, raw.seen, raw.descriptors)
    if not all(isinstance(m, dict) for m in maps) or not all(isinstance(m, dict) for m in raw.seen.values()):
        raise StorageError(_DAMAGED_BODY)
    return raw


def resolve_body(
    serde: SerializerProtocol, checkpoint_id: str, raw: RawBody, names: Mapping[int, str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(checkpoint without ``channel_values``, descriptors by channel) of a stored body."""
    checkpoint: dict[str, Any] = {
        "v": raw.v,
        "id": checkpoint_id,
        "ts": raw.created(checkpoint_id),
        "channel_versions": {names[k]: v for k, v in raw.versions.items()},
        "versions_seen": {names[n]: {names[c]: v for c, v in seen.items()} for n, seen in raw.seen.items()},
        "updated_channels": None if raw.updated is None else [names[c] for c in raw.updated],
    }
    if raw.extra:
        checkpoint.update(serde.loads_typed((raw.extra[0], raw.extra[1])))
    return checkpoint, {names[k]: d for k, d in raw.descriptors.items()}


_META_KEYS = ("source", "step", "parents")
_SOURCES = ("input", "loop", "update", "fork")


def encode_metadata(serde: SerializerProtocol, metadata: Mapping[str, Any]) -> bytes:
    """A checkpoint's metadata as stored. Metadata that starts with LangGraph's ``source``, ``step`` and
    ``parents`` (in that order, serialized as plain msgpack) is stored as the array of its values, the
    source as its number among :data:`_SOURCES`, the other keys after (schema v10): 5-7 bytes where zstd
    leaves 15-18. Only when the array gives back the serializer's bytes exactly; else as any value."""
    type_, data = serde.dumps_typed(dict(metadata))
    if type_ == "msgpack" and list(metadata)[:3] == list(_META_KEYS) and type(metadata["source"]) is str:
        source, step, parents, *rest = metadata.values()
        code = _SOURCES.index(source) if source in _SOURCES else source
        pairs = zip(list(metadata)[3:], rest, strict=True)
        compact = [code, step, parents, *(x for pair in pairs for x in pair)]
        try:
            packed = ormsgpack.packb(compact)
        except (TypeError, ormsgpack.MsgpackEncodeError):
            packed = b""
        if packed and _expand_metadata(packed) == data:
            return bytes([_META]) + packed
    return item_blob(type_, data)


def _expand_metadata(packed: bytes) -> bytes:
    """The serializer's bytes of metadata stored by :func:`encode_metadata` as an array."""
    try:
        code, step, parents, *rest = ormsgpack.unpackb(packed)
        source = _SOURCES[code] if type(code) is int else code
        value = {
            "source": source,
            "step": step,
            "parents": parents,
            **dict(zip(rest[::2], rest[1::2], strict=True)),
        }
        return ormsgpack.packb(value)
    except (
        TypeError,
        ValueError,
        IndexError,
        ormsgpack.MsgpackDecodeError,
        ormsgpack.MsgpackEncodeError,
    ) as exc:
        raise StorageError(_DAMAGED_VALUE) from exc


def decode_metadata(serde: SerializerProtocol, blob: bytes, *, trusted_types: bool) -> dict[str, Any]:
    return dict(decode_item(serde, blob, trusted_types=trusted_types))


def next_version(current: str | int | float | None) -> str | int | float:
    """The version after ``current``: small integers for remem's threads.

    Integers are safe here because values are found through each checkpoint's own descriptors,
    never by (channel, version), so a fork reusing a version number cannot clash. Threads written
    with string versions (by the stock savers) keep their format.
    """
    if current is None:
        return 1
    if isinstance(current, str):
        n = int(current.split(".")[0]) + 1
        return f"{n:032}.{random.random():016}"
    if isinstance(current, float):
        return float(int(current) + 1)
    return current + 1
