"""remem.layout is the one place that names where remem keeps what.

Without a tenant every namespace is byte for byte what remem wrote before the layout existed, so an
existing database keeps working; with one, every namespace moves under the tenant and no two tenants meet.
Every table created anywhere in remem is named in the layout.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

import remem
from remem import ConfigError, Memory
from remem import layout as L
from remem.extraction import MemoryExtractor
from remem.store import SqliteStore
from remem.testing import FakeEmbedder, ScriptedChatModel, offline_settings

SRC = Path(remem.__file__).parent
SETTINGS = offline_settings()

# What remem 0.1 wrote, spelled out literally: the layout must keep producing exactly these.
OLD_NAMESPACES = {
    "thread_meta": ("threads", "T", "meta"),
    "thread_order": ("threads", "T", "order"),
    "thread_messages": ("threads", "T", "messages"),
    "thread_summaries": ("threads", "T", "summaries"),
    "user_memories": ("users", "U", "memories"),
    "extraction_state": ("_remem", "extraction", "T"),
}


def _build(name: str, tenant: str | None = None) -> tuple[str, ...]:
    label = "U" if name.startswith("user") else "T"
    result: tuple[str, ...] = getattr(L, name)(label, tenant=tenant)
    return result


@pytest.mark.parametrize("name", sorted(OLD_NAMESPACES))
def test_without_a_tenant_namespaces_are_the_ones_databases_already_hold(name: str) -> None:
    assert _build(name) == OLD_NAMESPACES[name]
    assert all(type(label) is str for label in _build(name))  # not a str subclass: same bytes in SQL


def test_roots_keys_and_predicates() -> None:
    assert L.threads_root() == ("threads",) and L.users_root() == ("users",)
    assert L.thread_root("T") == ("threads", "T") and L.user_root("U") == ("users", "U")
    assert L.extraction_root() == ("_remem", "extraction")
    assert (L.THREAD_META_KEY, L.EXTRACTION_STATE_KEY, L.chunk_key(7)) == ("thread", "state", "00000007")
    assert L.is_thread_messages(("threads", "T", "messages"))
    assert not L.is_thread_messages(("threads", "T", "summaries"))
    assert not L.is_thread_messages(("users", "T", "messages"))
    assert L.is_thread_messages(L.thread_messages("T", tenant="acme"), tenant="acme")
    assert not L.is_thread_messages(L.thread_messages("T", tenant="acme"))


LABEL = st.text(min_size=1, max_size=12).filter(lambda t: "." not in t and "\x00" not in t)


@given(tenant=LABEL, other=LABEL, label=LABEL)
def test_a_tenant_moves_every_namespace_under_it_and_tenants_never_meet(
    tenant: str, other: str, label: str
) -> None:
    for name in OLD_NAMESPACES:
        mine = getattr(L, name)(label, tenant=tenant)
        assert mine == ("tenants", L.escape_label(tenant), *getattr(L, name)(label))
        assert mine[:2] != getattr(L, name)(label)[:2]  # never under the untenanted roots
        if other != tenant:
            assert getattr(L, name)(label, tenant=other)[:2] != mine[:2]


def test_an_empty_tenant_is_refused() -> None:
    with pytest.raises(ConfigError, match="tenant"):
        L.user_memories("u", tenant="")


# Ids as apps give them: any text. The ones LangGraph would have taken as labels keep their label.
ANY_ID = st.text(max_size=16) | st.text(alphabet="%.\x0025Eab", max_size=10)
STOCK_LABEL = st.text(min_size=1, max_size=16).filter(lambda t: "." not in t and "\x00" not in t)


@given(text=ANY_ID)
def test_any_id_round_trips_through_its_label_and_the_label_is_one_langgraph_takes(text: str) -> None:
    label = L.escape_label(text)
    assert L.unescape_label(label) == text
    assert label and "." not in label and "\x00" not in label
    for name in OLD_NAMESPACES:
        ns = getattr(L, name)(text)
        assert ns == getattr(L, name)(L.unescape_label(label))
    assert L.thread_id_of(L.thread_meta(text)) == text
    tenant = text or "t"
    assert L.thread_id_of(L.thread_messages(text, tenant=tenant), tenant=tenant) == text
    assert L.thread_id_of(L.user_memories(text)) is None


@given(one=ANY_ID, other=ANY_ID)
def test_two_ids_never_share_a_label(one: str, other: str) -> None:
    if one != other:
        assert L.escape_label(one) != L.escape_label(other)
        assert L.thread_messages(one) != L.thread_messages(other)
        if one and other:
            assert L.user_memories("u", tenant=one) != L.user_memories("u", tenant=other)


@given(text=STOCK_LABEL)
def test_a_label_langgraph_took_is_kept_unless_it_reads_as_an_escaped_id(text: str) -> None:
    if not text.startswith("%"):
        assert L.escape_label(text) == text
        assert type(L.escape_label(text)) is str


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("tenant.42.chat", "%tenant%2E42%2Echat"),
        ("maya@example.com", "%maya@example%2Ecom"),
        ("", "%"),
        ("50%", "50%"),  # was a label already, and reads as no escaped id: kept
        ("%off", "%off"),
        ("%", "%%25"),  # reads as the escape of "": escaped again
        ("%a%2Eb", "%%25a%252Eb"),  # reads as the escape of "a.b"
        ("support-42", "support-42"),
    ],
)
def test_labels_of_some_ids(text: str, label: str) -> None:
    assert L.escape_label(text) == label
    assert L.unescape_label(label) == text


def test_the_memory_client_and_extraction_write_the_namespaces_databases_already_hold(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with Memory.from_url(url, settings=SETTINGS) as memory:
        thread = memory.thread("t1", user_id="u1")
        thread.add_messages(
            [HumanMessage(content="I keep bees", id="h1"), AIMessage(content="Nice", id="a1")]
        )
        reply = json.dumps(
            {"memories": [{"kind": "fact", "text": "The user keeps bees.", "source_message_ids": ["h1"]}]}
        )
        model = ScriptedChatModel(replies=[reply])
        MemoryExtractor(memory.store, model=model).run(
            [HumanMessage(content="I keep bees", id="h1")], user_id="u1", thread_id="t1"
        )
        namespaces = set(memory.store.list_namespaces(limit=100))
    assert namespaces == {
        ("threads", "t1", "meta"),
        ("threads", "t1", "order"),
        ("threads", "t1", "messages"),
        ("users", "u1", "memories"),
        ("_remem", "extraction", "t1"),
        ("_remem", "threads", "t1"),  # the thread's listing (added with the inspector's list)
    }


def test_a_database_written_with_the_old_literal_namespaces_is_read(tmp_path: Path) -> None:
    # Items as remem 0.1 laid them out, written straight into a store; the client finds them.
    path = tmp_path / "old.db"
    index = {"dims": FakeEmbedder().dims, "embed": FakeEmbedder(), "fields": ["content"]}
    with SqliteStore.from_conn_string(path, index=index) as s:
        meta = {"thread_id": "t9", "user_id": "u9", "agent_id": None, "created_at": "2026-01-01T00:00:00Z"}
        s.put(("threads", "t9", "meta"), "thread", {**meta, "message_count": 1, "last_user_seq": 0})
        s.put(("threads", "t9", "order"), "00000000", {"ids": ["old-1"]}, index=False)
        turn = {"id": "old-1", "role": "user", "content": "my cat is called Miso", "timestamp": "", "seq": 0}
        s.put(("threads", "t9", "messages"), "old-1", {**turn, "thread_id": "t9", "user_id": "u9"})
        s.put(
            ("users", "u9", "memories"),
            "mem-1",
            {"content": "The user has a cat named Miso.", "kind": "fact"},
        )
    with Memory.from_url(f"sqlite:///{path}", settings=SETTINGS) as memory:
        thread = memory.get_thread("t9")
        assert [m.content for m in thread.messages()] == ["my cat is called Miso"]
        found = {r.id for r in memory.search("cat Miso", user_id="u9", thread_id="t9", k=5)}
        assert {"old-1", "mem-1"} <= found


_CREATE = re.compile(
    r"CREATE\s+(?:(?:VIRTUAL|UNLOGGED)\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\{?)([A-Za-z_][A-Za-z0-9_]*)\}?",
    re.I,
)


def _created_tables() -> set[str]:
    tables: set[str] = set()
    for path in SRC.rglob("*.py"):
        module = None
        for brace, name in _CREATE.findall(path.read_text(encoding="utf-8")):
            if brace:  # an f-string placeholder: the module's constant holds the name
                parts = path.relative_to(SRC.parent).with_suffix("").parts
                module = module or importlib.import_module(".".join(p for p in parts if p != "__init__"))
                name = getattr(module, name)
            tables.add(name)
    return tables


def test_every_table_remem_creates_is_named_in_the_layout() -> None:
    created = _created_tables()
    assert len(created) >= 8, created  # the checkpointer's and the store's tables are found
    assert created <= L.TABLES, f"tables created outside the layout: {sorted(created - L.TABLES)}"
    core = {*L.CHECKPOINT_TABLES, *L.STORE_TABLES, L.ERASURE_JOURNAL_TABLE, L.ERASURE_REGISTRY_TABLE}
    assert core <= created, f"named but never created: {sorted(core - created)}"


# A table's name spelled as a text of its own outside the layout (SQL text around a name is read by the
# test above). Left for their owners to move; the list may only shrink.
_SPELLED_TABLE_NAMES_LEFT = {
    ("_migrate.py", "remem_schema"),
    ("checkpoint/_base.py", "remem_cp_threads"),
    ("checkpoint/_prune.py", "remem_cp_items"),
    ("checkpoint/_prune.py", "remem_cp_lists"),
}


def _spelled_table_names() -> set[tuple[str, str]]:
    found = set()
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC).as_posix()
        if relative == "layout.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in L.TABLES:
                found.add((relative, node.value))
    return found


def test_table_names_are_taken_from_the_layout_not_spelled_again() -> None:
    spelled = _spelled_table_names()
    assert spelled <= _SPELLED_TABLE_NAMES_LEFT, sorted(spelled - _SPELLED_TABLE_NAMES_LEFT)
    from remem.checkpoint import _sql

    # The migration runner carries remem 0.1's version table over by this name: its value is kept.
    assert _sql.SCHEMA.legacy is not None and _sql.SCHEMA.legacy.table == "remem_cp_migrations"
    assert _sql.SCHEMA.legacy.table is L.CHECKPOINT_MIGRATIONS_TABLE
    assert set(_sql.TABLES) == set(L.CHECKPOINT_TABLES) - {"remem_cp_threads"}  # every per-thread table


def test_the_spelling_check_sees_a_table_name_given_as_a_text() -> None:
    tree = ast.parse('legacy = Legacy("remem_cp_migrations", "version")')
    assert any(isinstance(n, ast.Constant) and n.value in L.TABLES for n in ast.walk(tree))


_ROOTS = {L.THREADS_ROOT, L.USERS_ROOT, L.INTERNAL_ROOT, L.TENANTS_ROOT}


def test_namespaces_are_built_only_in_the_layout() -> None:
    # A tuple in code (docstrings are text, not tuples) that starts with one of the layout's roots.
    spelled = []
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC).as_posix()
        if relative == "layout.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Tuple) and node.elts:
                first = node.elts[0]
                if isinstance(first, ast.Constant) and first.value in _ROOTS:
                    spelled.append(f"{relative}:{node.lineno}: {ast.unparse(node)}")
    assert spelled == []


def test_the_namespace_check_sees_a_spelled_out_namespace() -> None:
    tree = ast.parse('ns = ("users", user_id, "memories")')
    tuples = [n for n in ast.walk(tree) if isinstance(n, ast.Tuple)]
    assert isinstance(tuples[0].elts[0], ast.Constant) and tuples[0].elts[0].value in _ROOTS
