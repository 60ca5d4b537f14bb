"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) against every remem saver:
SQLite on a file and in memory, PostgreSQL, each sync and async; base and extended capabilities."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from remem.checkpoint import AsyncPostgresSaver, AsyncSqliteSaver, PostgresSaver, SqliteSaver

KINDS = [
    "sqlite-file",
    "sqlite-memory",
    "async-sqlite-file",
    "async-sqlite-memory",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("async-postgres", marks=pytest.mark.postgres),
]


@pytest.mark.parametrize("kind", KINDS)
async def test_conformance_full(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    target = request.getfixturevalue("pg_url") if "postgres" in kind else str(tmp_path / "cp.db")
    if kind.endswith("memory"):
        target = ":memory:"

    async def factory() -> AsyncIterator[object]:
        if kind.startswith("async-sqlite"):
            async with AsyncSqliteSaver.from_conn_string(target) as asaver:
                yield asaver
        elif kind.startswith("sqlite"):
            with SqliteSaver.from_conn_string(target) as saver:
                yield saver
        elif kind == "postgres":
            with PostgresSaver.from_conn_string(target) as pg:
                yield pg
        else:
            async with AsyncPostgresSaver.from_conn_string(target) as apg:
                yield apg

    registered = checkpointer_test(name=f"remem-{kind}")(factory)
    report = await validate(registered)
    failures = {name: r.failures for name, r in report.results.items() if r.passed is not True}
    assert failures == {}, failures
    assert {name for name, r in report.results.items() if r.detected} == {c.value for c in ALL_CAPABILITIES}
    assert report.conformance_level() == "FULL"
