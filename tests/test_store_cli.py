"""``remem forget`` and ``remem store stats`` on real databases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from remem.cli import main
from remem.store import PostgresStore, SqliteStore
from remem.testing import offline_settings


def _seed(store: SqliteStore | PostgresStore) -> None:
    store.put(("users", "alice", "memories"), "m1", {"content": "alice likes kites"})
    store.put(("users", "bob", "memories"), "m1", {"content": "bob likes boats"})
    store.put(("threads", "t1", "messages"), "h1", {"content": "hi", "user_id": "alice"})


def test_forget_user_and_stats_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with SqliteStore.from_conn_string(url) as store:
        _seed(store)
    runner = CliRunner()
    stats = runner.invoke(main, ["store", "stats", url])
    assert stats.exit_code == 0, stats.output
    assert "items" in stats.output and "3" in stats.output and "users" in stats.output
    result = runner.invoke(main, ["forget", "--user", "alice", "--db", url, "--yes"])
    assert result.exit_code == 0, result.output
    assert "items" in result.output and "2" in result.output
    with SqliteStore.from_conn_string(url) as store:
        assert store.stats()["items"] == 1
        assert store.get(("users", "bob", "memories"), "m1") is not None


def test_forget_asks_first_and_checks_its_arguments(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with SqliteStore.from_conn_string(url) as store:
        _seed(store)
    runner = CliRunner()
    refused = runner.invoke(main, ["forget", "--namespace", "users.bob", "--db", url], input="n\n")
    assert refused.exit_code == 1 and "Aborted" in refused.output
    both = runner.invoke(main, ["forget", "--user", "a", "--thread", "b", "--db", url])
    assert both.exit_code == 2 and "exactly one" in both.output
    bad = runner.invoke(main, ["forget", "--namespace", "users..x", "--db", url, "--yes"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    done = runner.invoke(main, ["forget", "--namespace", "users.bob", "--db", url], input="y\n")
    assert done.exit_code == 0
    with SqliteStore.from_conn_string(url) as store:
        assert store.list_namespaces() == [("threads", "t1", "messages"), ("users", "alice", "memories")]


@pytest.mark.postgres
def test_forget_thread_and_stats_on_postgres(pg_url: str) -> None:
    with PostgresStore.from_conn_string(pg_url) as store:
        _seed(store)
    runner = CliRunner()
    result = runner.invoke(main, ["forget", "--thread", "t1", "--db", pg_url, "--yes"])
    assert result.exit_code == 0, result.output
    stats = runner.invoke(main, ["store", "stats", pg_url])
    assert stats.exit_code == 0 and "2" in stats.output


def test_forgetting_a_user_that_is_not_there_reports_no_success(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with SqliteStore.from_conn_string(url) as store:
        _seed(store)
    result = CliRunner().invoke(main, ["forget", "--user", "alcie", "--db", url, "--yes"])
    assert result.exit_code == 1, result.output
    assert "nothing was stored for user alcie" in result.stderr and "forgot" not in result.output
    thread = CliRunner().invoke(main, ["forget", "--thread", "t2", "--db", url, "--yes"])
    assert thread.exit_code == 1 and "nothing was stored for thread t2" in thread.stderr


def test_store_stats_reads_and_never_creates(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with SqliteStore.from_conn_string(url) as store:
        _seed(store)
    runner = CliRunner()
    as_json = runner.invoke(main, ["store", "stats", "--db", url, "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["items"] == 3
    typo = runner.invoke(main, ["store", "stats", "--db", f"sqlite:///{tmp_path / 'cli2.db'}"])
    assert typo.exit_code == 1 and "there is no database" in typo.stderr
    assert not (tmp_path / "cli2.db").exists()


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_forget_and_threads_take_ids_with_dots(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from remem import Memory
    from remem.layout import escape_label, user_memories

    url = (
        f"sqlite:///{tmp_path / 'cli.db'}" if backend == "sqlite" else str(request.getfixturevalue("pg_url"))
    )
    user, thread = "maya@example.com", "tenant.42.chat"
    with Memory.from_url(url, settings=offline_settings()) as memory:
        memory.thread(thread, user_id=user).add_messages([{"role": "user", "content": "kites", "id": "h1"}])
        memory.thread("other.thread", user_id="bob").add_messages([{"role": "user", "content": "boats"}])
        memory.store.put(user_memories(user), "m1", {"content": "maya likes kites", "user_id": user})
    runner = CliRunner(env={"REMEM_EMBEDDER": "fake"})  # the embedder that made the store's vectors
    listed = runner.invoke(main, ["threads", "--db", url, "--json"])
    assert listed.exit_code == 0, listed.output
    assert {t["thread"] for t in json.loads(listed.output)["threads"]} == {thread, "other.thread"}
    gone = runner.invoke(main, ["forget", "--user", user, "--db", url, "--yes"])
    assert gone.exit_code == 0, gone.output + gone.stderr
    namespace = "threads." + escape_label("other.thread")  # a label as `store stats` and errors show it
    assert namespace == "threads.%other%2Ethread"
    by_ns = runner.invoke(main, ["forget", "--namespace", namespace, "--db", url, "--yes"])
    assert by_ns.exit_code == 0, by_ns.output + by_ns.stderr
    with Memory.from_url(url, settings=offline_settings()) as memory:
        assert memory.store.list_namespaces() == []
