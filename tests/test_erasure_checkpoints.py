"""Erasure reaches the checkpoints too: a forgotten thread's turns leave no trace in the database."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from remem import (
    Memory,
    ScriptedChatModel,
    Settings,
    build_agent,
    checkpointer_from_url,
    list_threads,
    run_turn,
)
from remem.erasure import erase

SECRET = "zebra-quartz-4471"


def talk(url: str, thread: str, text: str) -> None:
    with checkpointer_from_url(url) as saver:
        agent = build_agent(ScriptedChatModel(default="noted"), strategy="filter", checkpointer=saver)
        run_turn(agent, thread, text)


def remember(url: str, thread: str, user: str, text: str) -> None:
    memory = Memory.from_url(url, settings=Settings(embedder="fake"))
    try:
        memory.thread(thread, user_id=user).add_messages([{"role": "user", "content": text}])
    finally:
        memory.close()


def sqlite_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def test_forgetting_a_thread_removes_its_checkpoints_and_every_byte(tmp_path: Path) -> None:
    path = tmp_path / "remem.db"
    url = f"sqlite:///{path}"
    talk(url, "secret-thread", f"My locker code is {SECRET}.")
    remember(url, "secret-thread", "alice", f"My locker code is {SECRET}.")
    talk(url, "other-thread", "Nothing to hide here.")
    assert SECRET.encode() in sqlite_bytes(path)

    report = erase(url, thread_id="secret-thread")

    assert report.checkpoint_threads == ["secret-thread"] and report.store.items > 0
    with checkpointer_from_url(url) as saver:
        assert list_threads(saver) == ["other-thread"]
    assert SECRET.encode() not in sqlite_bytes(path)


def test_forgetting_a_user_removes_the_checkpoints_of_their_threads(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'remem.db'}"
    for thread, user in (("t-alice", "alice"), ("t-bob", "bob")):
        talk(url, thread, f"{user} says {SECRET}")
        remember(url, thread, user, f"{user} says {SECRET}")

    report = erase(url, user_id="alice")

    assert report.checkpoint_threads == ["t-alice"]
    with checkpointer_from_url(url) as saver:
        assert list_threads(saver) == ["t-bob"]  # bob's thread is untouched


def tables_mentioning(url: str, text: str) -> set[str]:
    """Every table with a row that holds ``text`` (bytea columns print as hex, so both spellings count)."""
    found = set()
    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        for table in tables:
            for (row,) in conn.execute(f'SELECT t::text FROM "{table}" t'):
                if text in row or text.encode().hex() in row:
                    found.add(table)
    return found


@pytest.mark.postgres
def test_forgetting_a_thread_on_postgres_leaves_no_row_with_its_text(pg_url: str) -> None:
    talk(pg_url, "secret-thread", f"My locker code is {SECRET}.")
    remember(pg_url, "secret-thread", "alice", f"My locker code is {SECRET}.")
    talk(pg_url, "other-thread", "Nothing to hide here.")
    assert len(tables_mentioning(pg_url, SECRET)) >= 2  # in the checkpoints and in the store

    erase(pg_url, thread_id="secret-thread")

    assert tables_mentioning(pg_url, SECRET) == set()
    with checkpointer_from_url(pg_url) as saver:
        assert list_threads(saver) == ["other-thread"]


def test_exactly_one_scope_is_required(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        erase(f"sqlite:///{tmp_path / 'x.db'}", user_id="a", thread_id="b")


@pytest.mark.parametrize("url", ["memory://", "foo", "sqlite:///"])
def test_a_bad_url_erases_nothing(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ValueError, match=r"memory:// keeps nothing|unsupported database URL|names no file|no database at"
    ):
        erase(url, thread_id="a")
    assert list(tmp_path.iterdir()) == []  # no file was made, nothing half-erased


def test_registered_namespaces_and_thread_patterns(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from remem.cli import main
    from remem.erasure import register_user_data, registered_user_data
    from remem.store import open_store

    url = f"sqlite:///{tmp_path / 'remem.db'}"
    talk(url, "support-alice-1", "hello")
    talk(url, "support-bob-1", "hello")
    talk(url, "notes-t9", "hello")
    with open_store(url) as store:
        store.put(("crm", "alice", "cards"), "c", {"text": "alice"})
        store.put(("crm", "bob", "cards"), "c", {"text": "bob"})
        store.put(("app", "notes", "notes-t9"), "n", {"text": "note of t9"})
    with pytest.raises(ValueError, match="exactly"):
        register_user_data(url, namespaces=["crm.user-{user_id}"])  # a placeholder must be a whole label
    with pytest.raises(ValueError, match="needs"):
        register_user_data(url, threads=["support-*"])
    register_user_data(
        url, namespaces=["crm.{user_id}", "app.notes.{thread_id}"], threads=["support-{user_id}-*"]
    )
    register_user_data(url, namespaces=["crm.{user_id}"])  # idempotent
    assert registered_user_data(url) == {
        "namespaces": ["app.notes.{thread_id}", "crm.{user_id}"],
        "threads": ["support-{user_id}-*"],
    }

    report = erase(url, user_id="alice")
    assert report.store.items == 1 and report.checkpoint_threads == ["support-alice-1"]
    assert report.registered_namespaces == ["crm.alice"]
    report = erase(url, thread_id="notes-t9")
    assert report.registered_namespaces == ["app.notes.notes-t9"] and report.checkpoint_threads == [
        "notes-t9"
    ]
    with open_store(url) as store:
        assert store.list_namespaces() == [("crm", "bob", "cards")]
    with checkpointer_from_url(url) as saver:
        assert list_threads(saver) == ["support-bob-1"]

    runner = CliRunner()
    idle = runner.invoke(main, ["forget", "--db", url])
    assert idle.exit_code == 0 and "no unfinished erasure" in idle.output
    missing = runner.invoke(main, ["forget", "--db", f"sqlite:///{tmp_path / 'nope.db'}"])
    assert missing.exit_code != 0 and "no database at" in missing.output
    assert not (tmp_path / "nope.db").exists()


def test_a_tenants_erasure_takes_that_tenants_checkpoints_only(tmp_path: Path) -> None:
    from remem.layout import tenant_id
    from remem.server._tenancy import TenantStore
    from remem.store import open_store

    url = f"sqlite:///{tmp_path / 'remem.db'}"
    for tenant in ("a", "b", None):
        talk(url, tenant_id("t1", tenant=tenant), f"{tenant}: my locker code is {SECRET}.")
        with open_store(url) as store:
            scoped = store if tenant is None else TenantStore(store, tenant)
            Memory(scoped).thread("t1", user_id="alice").add_messages([{"role": "user", "content": "hi"}])

    report = erase(url, user_id="alice", tenant="a")  # found by the tenant's thread record

    assert report.checkpoint_threads == ["t1"] and report.scope == "user alice of tenant a"
    with checkpointer_from_url(url) as saver:
        assert sorted(list_threads(saver)) == ["t1", "tenants:b:t1"]
    assert erase(url, thread_id="t1", tenant="b").checkpoint_threads == ["t1"]
    with checkpointer_from_url(url) as saver:
        assert list_threads(saver) == ["t1"]  # the untenanted thread of the same id is left


def test_an_untenanted_user_erasure_leaves_a_tenants_checkpoint_naming_the_user(tmp_path: Path) -> None:
    # `remem forget --user alice` on a database that also serves tenants: the tenant's checkpoint thread
    # (tenants:a:t1) whose metadata names alice is the tenant's alice, not the app's
    from remem.layout import is_tenant_id, tenant_id

    url = f"sqlite:///{tmp_path / 'remem.db'}"
    with checkpointer_from_url(url) as saver:
        agent = build_agent(ScriptedChatModel(default="noted"), strategy="filter", checkpointer=saver)
        for thread in (tenant_id("t1", tenant="a"), "mine"):
            run_turn(agent, thread, f"my locker code is {SECRET}", user_id="alice")

    report = erase(url, user_id="alice")

    assert report.checkpoint_threads == ["mine"]
    with checkpointer_from_url(url) as saver:
        assert list_threads(saver) == ["tenants:a:t1"]
    assert erase(url, user_id="alice", tenant="a").checkpoint_threads == ["t1"]  # the tenant's own erasure
    assert is_tenant_id("tenants:a:t1") and not any(
        is_tenant_id(i) for i in ("tenants", "tenants:a", "tenants::t", "mine", "x:tenants:a:t")
    )
