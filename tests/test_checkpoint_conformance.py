"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) against every remem saver:
SQLite on a file and in memory, PostgreSQL (the machine's server, also in pipeline mode, and the embedded
PostgreSQL 18: two major versions), each sync and async; base and extended capabilities.

The suite drives only the ``a*`` methods; a sync saver serves them by running its sync methods in a worker
thread, so its sync path is what runs here."""

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
    pytest.param("postgres-pipeline", marks=pytest.mark.postgres),
    pytest.param("async-postgres-pipeline", marks=pytest.mark.postgres),
    pytest.param("postgres-18", marks=pytest.mark.pgvector),
    pytest.param("async-postgres-18", marks=pytest.mark.pgvector),
]


@pytest.mark.parametrize("kind", KINDS)
async def test_conformance_full(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if kind.endswith("-18"):
        target = request.getfixturevalue("pgvector_url")
    elif "postgres" in kind:
        target = request.getfixturevalue("pg_url")
    else:
        target = ":memory:" if kind.endswith("memory") else str(tmp_path / "cp.db")
    pipeline = kind.endswith("pipeline")

    async def factory() -> AsyncIterator[object]:
        if kind.startswith("async-sqlite"):
            async with AsyncSqliteSaver.from_conn_string(target) as asaver:
                yield asaver
        elif kind.startswith("sqlite"):
            with SqliteSaver.from_conn_string(target) as saver:
                yield saver
        elif kind.startswith("postgres"):
            with PostgresSaver.from_conn_string(target, pipeline=pipeline) as pg:
                yield pg
        else:
            async with AsyncPostgresSaver.from_conn_string(target, pipeline=pipeline) as apg:
                yield apg

    registered = checkpointer_test(name=f"remem-{kind}")(factory)
    report = await validate(registered)
    failures = {name: r.failures for name, r in report.results.items() if r.passed is not True}
    assert failures == {}, failures
    assert {name for name, r in report.results.items() if r.detected} == {c.value for c in ALL_CAPABILITIES}
    assert report.conformance_level() == "FULL"
