"""The usage ledger on real SQLite and PostgreSQL, prices from configuration, and the budget checks."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remem import _migrate
from remem.config import load_settings
from remem.errors import ArgumentTypeError, BudgetExceededError, ConfigError, RememUsageError
from remem.testing import FakeEmbedder
from remem.usage import (
    USAGE_TABLE,
    Budgets,
    Meter,
    Price,
    PriceTable,
    Totals,
    UsageEvent,
    _sql,
    check,
    day_of,
    ledger_from_url,
    open_ledger,
)
from remem.usage._holds import HOLDS_TABLE
from remem.usage._sql import TOTALS_TABLE, TOTALS_TRIGGER
from remem.usage.embeddings import MeteredEmbedder


@pytest.fixture
def ledger(db_url: str) -> Iterator[object]:
    with open_ledger(db_url) as opened:
        yield opened


def _event(**kw: Any) -> UsageEvent:
    return UsageEvent(**{"kind": "chat", "model": "m", "input_tokens": 100, "output_tokens": 10, **kw})


def test_events_limit_is_checked_and_kept(db_url: str) -> None:
    with open_ledger(db_url) as ledger:
        for n in range(3):
            ledger.record(_event(thread_id="a", call_id=f"c{n}", at=1_700_000_000.0 + n))
        assert [e.call_id for e in ledger.events(limit=2)] == ["c0", "c1"]
        assert ledger.events(limit=0) == []
        assert len(ledger.events(limit=None)) == 3
        for wrong in ("a", 1.5, True):
            with pytest.raises(ArgumentTypeError, match="limit is a whole number"):
                ledger.events(limit=wrong)  # type: ignore[arg-type]
        with pytest.raises(RememUsageError, match="0 or more"):
            ledger.events(limit=-1)


def test_one_row_per_call_queryable_across_threads_users_and_days(db_url: str) -> None:
    day1, day2 = 1_700_000_000.0, 1_700_000_000.0 + 86_400
    with open_ledger(db_url) as ledger:
        ledger.record(_event(thread_id="a", user_id="maya", turn=1, at=day1, cost=0.5))
        ledger.record(
            _event(thread_id="a", user_id="maya", turn=1, kind="summariser", at=day1 + 1, cost=None)
        )
        ledger.record(_event(thread_id="a", user_id="maya", turn=2, model="n", at=day2, cost=0.25))
        ledger.record(_event(thread_id="b", user_id="lea", turn=1, at=day2 + 5, cached_tokens=40, cost=1.0))
    with open_ledger(db_url) as ledger:  # another connection (another process would see the same)
        assert len(ledger.events()) == 4
        assert [e.kind for e in ledger.events(thread_id="a", turn=1)] == ["chat", "summariser"]
        by_thread = {t.key: t for t in ledger.totals(by="thread")}
        assert by_thread["a"].calls == 3 and by_thread["a"].tokens == 330
        assert by_thread["a"].cost == 0.75 and by_thread["a"].unpriced == 1
        assert by_thread["a"].as_dict()["cost"] == 0.75  # priced part shown, unpriced counted apart
        assert [t.key for t in ledger.totals(by="turn", thread_id="a")] == [("a", 1), ("a", 2)]
        assert {t.key: t.calls for t in ledger.totals(by="model")} == {"m": 3, "n": 1}
        assert [t.key for t in ledger.totals(by="day")] == ["2023-11-14", "2023-11-15"]
        assert ledger.spent(user_id="maya", day="2023-11-15").tokens == 110
        assert ledger.totals(since=day2)[0].calls == 2
        assert ledger.totals(by="user", since=day2)[0].cached_tokens in (0, 40)
        everything = ledger.spent()
        assert (everything.calls, everything.cost, everything.unpriced) == (4, 1.75, 1)


def test_a_call_recorded_twice_with_its_id_counts_once(ledger: object) -> None:
    from remem.usage import Ledger

    assert isinstance(ledger, Ledger)
    ledger.record(_event(call_id="t:run-1", thread_id="t"))
    ledger.record(_event(call_id="t:run-1", thread_id="t"))  # a resumed run records it again
    ledger.record(_event(thread_id="t"))
    ledger.record(_event(thread_id="t"))  # no id: two calls
    assert ledger.spent(thread_id="t").calls == 3


def test_the_schema_is_one_migration_component_and_setup_is_idempotent(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "u.db"
    for _ in range(3):
        ledger_from_url(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path)
    rows = conn.execute(f"SELECT component, version FROM {_migrate.TABLE}").fetchall()
    assert rows == [("usage", 1), ("usage", 2), ("usage", 3), ("usage", 4)]
    assert (path.stat().st_mode & 0o777) == 0o600


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    return (
        f"sqlite:///{tmp_path / 'usage.db'}"
        if request.param == "sqlite"
        else str(request.getfixturevalue("pg_url"))
    )


# One ledger for every example of a backend (the database outlives them): the totals must still equal the
# sums of all its rows, and a call id an earlier example recorded still adds nothing.
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", None]),  # thread
            st.sampled_from(["maya", "lea", None]),  # user
            st.integers(1, 3),  # turn
            st.integers(0, 1),  # day
            st.integers(0, 500),  # input tokens
            st.one_of(st.none(), st.floats(0, 1)),  # cost
            st.sampled_from([None, "x", "y"]),  # call id (a repeated one adds nothing)
        ),
        max_size=30,
    )
)
def test_running_totals_equal_the_sums_of_the_rows(any_url: str, rows: list[tuple[Any, ...]]) -> None:
    day0 = 1_700_000_000.0
    with open_ledger(any_url) as ledger:
        for thread, user, turn, day, tokens, cost, call_id in rows:
            ledger.record(
                _event(
                    thread_id=thread,
                    user_id=user,
                    turn=turn,
                    at=day0 + day * 86_400,
                    input_tokens=tokens,
                    cost=cost,
                    call_id=call_id,
                )
            )
        for thread in ("a", "b"):
            for turn in (None, 1, 2, 3):
                assert ledger.spent(thread_id=thread, turn=turn) == _summed(
                    ledger, thread_id=thread, turn=turn
                )
        for user in ("maya", "lea"):
            for at in (day0, day0 + 86_400):
                assert ledger.user_day(user, at) == _summed(ledger, user_id=user, day=day_of(at))


def _summed(ledger: Any, **filters: Any) -> Totals:
    """The same totals summed over the rows (``totals`` with a filter ``spent`` does not read in one row)."""
    found = ledger.totals(since=0.0, **filters)[0]
    return Totals(
        None,
        found.calls,
        found.input_tokens,
        found.output_tokens,
        found.cached_tokens,
        pytest.approx(found.cost),
        found.unpriced,
        pytest.approx(found.latency_ms),
    )


def test_a_version_1_ledger_gets_its_running_totals_from_its_rows(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    ledger_from_url(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path, isolation_level=None)  # back to version 1: no running totals
    conn.execute(f"DROP TRIGGER {TOTALS_TRIGGER}")
    conn.execute(f"DROP TABLE {TOTALS_TABLE}")
    conn.execute(f"DROP TABLE {HOLDS_TABLE}")
    conn.execute(f"DELETE FROM {_migrate.TABLE} WHERE component = 'usage' AND version > 1")
    for n in range(5):
        conn.execute(
            f"INSERT INTO {USAGE_TABLE} (kind, thread_id, user_id, turn, model, input_tokens, output_tokens, "
            "cached_tokens, source, cost, at, day) VALUES ('chat', 't', 'maya', ?, 'm', 100, 10, 0, 'provider', "
            "0.5, ?, ?)",
            (1 + n % 2, 1_700_000_000.0, day_of(1_700_000_000.0)),
        )
    conn.close()
    with open_ledger(f"sqlite:///{path}") as ledger:  # migration 2 runs and adds the rows up
        assert ledger.spent(thread_id="t").calls == 5 and ledger.spent(thread_id="t").cost == 2.5
        assert ledger.spent(thread_id="t", turn=1).tokens == 330
        assert ledger.user_day("maya", 1_700_000_000.0).calls == 5


def test_a_version_2_ledger_keeps_its_totals_and_its_trigger_adds_each_new_row_once(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "v2.db"
    ledger_from_url(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path, isolation_level=None)  # back to version 2: totals kept by the writer
    conn.execute(f"DROP TRIGGER {TOTALS_TRIGGER}")
    conn.execute(f"DELETE FROM {_migrate.TABLE} WHERE component = 'usage' AND version = 3")
    for n in range(4):  # as remem wrote a call at version 2: the row, then its totals
        event = _event(thread_id="t", user_id="maya", turn=1 + n % 2, cost=0.5, call_id=f"c{n}")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(*_sql.insert("sqlite", event))
        for statement in _sql.add_to_totals("sqlite", event):
            conn.execute(*statement)
        conn.execute("COMMIT")
    conn.close()
    with open_ledger(f"sqlite:///{path}") as ledger:  # migration 3: the trigger, the totals as they were
        assert ledger.spent(thread_id="t").calls == 4
        ledger.record(_event(thread_id="t", user_id="maya", turn=2, cost=0.25, call_id="c4"))
        ledger.record(_event(thread_id="t", user_id="maya", turn=2, cost=0.25, call_id="c3"))  # known: none
        for turn in (None, 1, 2):
            assert ledger.spent(thread_id="t", turn=turn) == _summed(ledger, thread_id="t", turn=turn)
        assert ledger.user_day("maya") == _summed(ledger, user_id="maya", day=day_of(time.time()))
        assert ledger.spent(thread_id="t").calls == 5 and ledger.spent(thread_id="t", turn=2).cost == 1.25


def test_a_row_whose_totals_cannot_be_written_is_not_kept(tmp_path: Path) -> None:
    import sqlite3

    from remem.errors import StorageError

    path = tmp_path / "u.db"
    with open_ledger(f"sqlite:///{path}") as ledger:
        ledger.record(_event(thread_id="t", user_id="maya", turn=1, call_id="c1"))
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute(
            f"CREATE TRIGGER refuse_totals BEFORE UPDATE ON {TOTALS_TABLE} "
            "BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
        with pytest.raises(StorageError):
            ledger.record(_event(thread_id="t", user_id="maya", turn=1, call_id="c2"))
        conn.execute("DROP TRIGGER refuse_totals")
        conn.close()
        assert [e.call_id for e in ledger.events()] == ["c1"]  # the row went with its totals
        ledger.record(_event(thread_id="t", user_id="maya", turn=1, call_id="c2"))  # the retry counts
        assert ledger.spent(thread_id="t", turn=1) == _summed(ledger, thread_id="t", turn=1)
        assert ledger.spent(thread_id="t").calls == 2


_WRITER = """
import sys
from remem.usage import UsageEvent, open_ledger

url, name, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with open_ledger(url) as ledger:
    for n in range(first, last):
        # call ids first..last: the two processes share some (a call both recorded counts once)
        ledger.record(UsageEvent("chat", "m", 10 + n, 1, thread_id=name, user_id="maya", turn=n % 3,
                                 cost=0.01, at=1_700_000_000.0, call_id=f"call-{n}"))
"""


def test_two_processes_recording_in_one_file_keep_the_totals_exact(tmp_path: Path) -> None:
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    with open_ledger(url):  # the schema first, so the writers only record
        pass
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, url, thread, str(first), str(first + 150)])
        for thread, first in (("a", 0), ("b", 100))
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    with open_ledger(url) as ledger:
        assert len(ledger.events()) == 250  # call-100..149 came from both: once
        for thread in ("a", "b"):
            for turn in (None, 0, 1, 2):
                assert ledger.spent(thread_id=thread, turn=turn) == _summed(
                    ledger, thread_id=thread, turn=turn
                )
        day = ledger.user_day("maya", 1_700_000_000.0)  # one user's day, spent from two processes
        assert day == _summed(ledger, user_id="maya", day=day_of(1_700_000_000.0)) and day.calls == 250


def test_grouping_by_an_unknown_column_never_reaches_sql(ledger: object) -> None:
    from remem.errors import RememUsageError
    from remem.usage import Ledger

    assert isinstance(ledger, Ledger)
    with pytest.raises(RememUsageError, match="cannot group usage by"):
        ledger.totals(by="cost; DROP TABLE remem_usage")


def test_prices_come_from_the_configuration_file_and_the_environment(tmp_path: Path) -> None:
    toml = tmp_path / "remem.toml"
    toml.write_text(
        '[remem.prices."gpt-4o-mini"]\ninput = 0.15\noutput = 0.6\ncached = 0.075\n'
        "[remem.prices.local]\ninput = 0\noutput = 0\n"
    )
    s = load_settings(environ={}, config_file=toml)
    table = PriceTable.from_settings_rows(s.prices)
    assert table.price("gpt-4o-mini") == Price(0.15, 0.6, 0.075)
    # 1M input of which 400k cached, 100k output
    assert table.cost("gpt-4o-mini", 1_000_000, 100_000, 400_000) == pytest.approx(0.09 + 0.03 + 0.06)
    assert table.cost("local", 5000, 5000) == 0.0
    env = load_settings(environ={"REMEM_PRICES": '{"m": {"input": 1, "output": 2}}'}, config_file=None)
    assert env.prices == (("m", 1.0, 2.0, None),)
    assert load_settings(environ={}, config_file=None).replace(prices=env.prices).prices == env.prices
    for bad in ('{"m": {"input": 1}}', '{"m": {"input": -1, "output": 1}}', '{"m": {"in": 1}}', "[1"):
        with pytest.raises(ConfigError, match=r"prices|PRICES"):
            load_settings(environ={"REMEM_PRICES": bad}, config_file=None)


def test_an_unpriced_model_costs_null_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    table = PriceTable({"known": Price(1.0, 1.0)})
    with caplog.at_level(logging.WARNING, logger="remem.usage"):
        assert table.cost("mystery", 10, 10) is None
        assert table.cost("mystery", 99, 99) is None
        assert table.cost("known", 1_000_000, 0) == 1.0
    assert len([r for r in caplog.records if "mystery" in r.getMessage()]) == 1


def test_meter_prefers_the_providers_numbers_and_counts_otherwise(tmp_path: Path) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    with open_ledger(f"sqlite:///{tmp_path / 'm.db'}") as ledger:
        meter = Meter(ledger, PriceTable({"m": Price(2.0, 4.0)}))
        sent = [HumanMessage(content="hello " * 40)]
        reported = AIMessage(
            content="hi",
            usage_metadata={
                "input_tokens": 500,
                "output_tokens": 20,
                "total_tokens": 520,
                "input_token_details": {"cache_read": 100},
            },
        )
        provider = meter.record_reply("extractor", "m", sent, reported, started=time.perf_counter())
        counted = meter.record_reply("summariser", "m", sent, AIMessage(content="hi"), thread_id="t")
        assert (provider.source, provider.input_tokens, provider.cached_tokens) == ("provider", 500, 100)
        assert provider.cost == pytest.approx((500 * 2.0 + 20 * 4.0) / 1e6)
        assert provider.latency_ms is not None and provider.latency_ms >= 0
        assert counted.source == "counted" and counted.input_tokens > 40
        embedder = MeteredEmbedder(FakeEmbedder(), meter, model="fake-embed", thread_id="t")
        embedder.embed_documents(["one text", "two texts"])
        embedder.embed_query("three")
        kinds = [e.kind for e in ledger.events()]
        assert kinds == ["extractor", "summariser", "embedder", "embedder"]


def test_budget_errors_name_the_budget_the_limit_the_amount_and_what_to_do() -> None:
    budgets = Budgets(turn_tokens=1000, user_day_cost=2.0)
    spent = {"turn": Totals(calls=2, input_tokens=800, output_tokens=100), "user_day": Totals(cost=1.5)}
    with pytest.raises(BudgetExceededError) as caught:
        check(budgets, tokens=200, cost=0.1, spent=spent, estimated=True)
    error = caught.value
    assert (error.budget, error.limit, error.amount, error.unit) == (
        "turn_token_budget",
        1000,
        1100,
        "tokens",
    )
    assert (
        "1,100 tokens" in str(error)
        and "1,000 tokens" in str(error)
        and "REMEM_TURN_TOKEN_BUDGET" in str(error)
    )
    assert "counted before the call" in str(error)
    with pytest.raises(BudgetExceededError, match=r"user_day_cost_budget.*next UTC day") as day:
        check(budgets, tokens=10, cost=0.6, spent=spent, estimated=False)
    assert day.value.amount == pytest.approx(2.1)
    check(budgets, tokens=10, cost=None, spent=spent, estimated=False)  # unpriced: no cost guessed
    check(Budgets(), tokens=10**9, cost=10**9, spent={}, estimated=True)  # no budget: no limit


def test_budgets_read_from_settings_with_overrides() -> None:
    s = load_settings(
        environ={"REMEM_TURN_TOKEN_BUDGET": "500", "REMEM_USER_DAY_COST_BUDGET": "3.5"}, config_file=None
    )
    budgets = Budgets.from_settings(s, call_tokens=50)
    assert (budgets.turn_tokens, budgets.user_day_cost, budgets.call_tokens) == (500, 3.5, 50)
    assert budgets.thread_tokens is None and budgets.needs("turn") and not budgets.needs("thread")


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(min_value=1, max_value=10_000),
    earlier=st.integers(min_value=0, max_value=10_000),
    call=st.integers(min_value=0, max_value=10_000),
)
def test_a_check_passes_exactly_when_the_total_stays_within_the_limit(
    limit: int, earlier: int, call: int
) -> None:
    spent = {"thread": Totals(input_tokens=earlier)}
    try:
        check(Budgets(thread_tokens=limit), tokens=call, cost=None, spent=spent, estimated=True)
        passed = True
    except BudgetExceededError as exc:
        passed = False
        assert exc.amount == earlier + call and exc.limit == limit
    assert passed == (earlier + call <= limit)


def test_running_totals_match_the_rows_on_every_backend(db_url: str) -> None:
    with open_ledger(db_url) as ledger:
        for n in range(6):
            ledger.record(
                _event(
                    thread_id="t",
                    user_id="maya",
                    turn=1 + n % 2,
                    cost=None if n == 3 else 0.1,
                    call_id=f"c{n % 5}",
                )
            )
        ledger.record(_event(thread_id=None, user_id=None))  # counted in no running total
        for turn in (None, 1, 2):
            assert ledger.spent(thread_id="t", turn=turn) == _summed(ledger, thread_id="t", turn=turn)
        day = ledger.user_day("maya")
        assert day == _summed(ledger, user_id="maya", day=day_of(time.time()))
        assert day.calls == 5 and day.unpriced == 1  # c0 came twice: once
        both = ledger.spent_in(["turn", "thread", "user_day"], thread_id="t", turn=2, user_id="maya")
        assert both == {
            "turn": ledger.spent(thread_id="t", turn=2),
            "thread": ledger.spent(thread_id="t"),
            "user_day": day,
        }


def test_a_budget_read_on_the_savers_file_does_not_wait_for_the_savers_lock(tmp_path: Path) -> None:
    import threading

    from remem import checkpointer_from_url
    from remem.usage import UsageEvent, ledger_for

    with checkpointer_from_url(f"sqlite:///{tmp_path / 'app.db'}") as saver, ledger_for(saver) as ledger:
        ledger.record(UsageEvent("chat", "m", 10, 5, thread_id="t1", user_id="maya", turn=1, call_id="c1"))
        read: list[int] = []
        with saver.lock:  # as during a checkpoint write that runs beside the model call
            reader = threading.Thread(target=lambda: read.append(ledger.spent(thread_id="t1").tokens))
            reader.start()
            reader.join(timeout=10)
            assert read == [15]  # read while the lock was held: from the ledger's own WAL reader
        ledger.record(UsageEvent("chat", "m", 1, 1, thread_id="t1", turn=1, call_id="c2"))
        assert ledger.spent(thread_id="t1").tokens == 17  # and it sees the ledger's own writes at once


@pytest.mark.postgres
def test_a_postgres_ledger_whose_connection_the_server_dropped_opens_it_again(pg_url: str) -> None:
    import psycopg

    from remem.errors import StorageError
    from remem.usage import UsageEvent

    with open_ledger(pg_url) as ledger:
        ledger.record(UsageEvent("chat", "m", 10, 5, thread_id="t1", call_id="c1"))
        pid = ledger.conn.info.backend_pid  # type: ignore[attr-defined]
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(StorageError):  # the call that finds it dropped says so (nothing half-written)
            ledger.record(UsageEvent("chat", "m", 1, 1, thread_id="t1", call_id="c2"))
        ledger.record(UsageEvent("chat", "m", 1, 1, thread_id="t1", call_id="c2"))  # the next one reconnects
        assert ledger.spent(thread_id="t1").tokens == 17


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("a", 1), "input"),
        ((-1, 1), "input"),
        ((1, None), "output"),
        ((1, True), "output"),
        ((1, 1, -0.5), "cached"),
        ((1, 1, float("nan")), "cached"),
        ((float("inf"), 1), "input"),
    ],
)
def test_a_price_that_is_not_a_number_of_0_or_more_is_refused_when_made(
    args: tuple[Any, ...], named: str
) -> None:
    with pytest.raises(
        ConfigError, match=rf"price's {named} is a number >= 0 per million tokens, e\.g\. Price\("
    ):
        Price(*args)


def test_a_price_of_zero_and_no_cached_rate_are_accepted() -> None:
    assert Price(0, 0).cost(1_000_000, 1_000_000) == 0.0
    assert Price(1, 2).cost(1_000_000, 0, 500_000) == 1.0  # cached charged as input when no rate is given


@pytest.mark.parametrize("priced", [True, False])
@pytest.mark.parametrize(
    ("counts", "error"),
    [
        (("a", 1, 0), ArgumentTypeError),
        ((1, 1.5, 0), ArgumentTypeError),
        ((1, 1, True), ArgumentTypeError),
        ((-1, 1, 0), RememUsageError),
    ],
)
def test_a_cost_of_token_counts_that_are_not_whole_numbers_is_a_remem_error(
    priced: bool, counts: tuple[Any, ...], error: type[Exception]
) -> None:
    table = PriceTable({"m": Price(1.0, 2.0)})
    with pytest.raises(error, match="tokens"):
        table.cost("m" if priced else "unpriced", *counts)
    if priced:
        with pytest.raises(error, match="tokens"):
            Price(1.0, 2.0).cost(*counts)


def test_a_price_table_holds_only_prices() -> None:
    with pytest.raises(ConfigError, match=r"map a model name to a Price"):
        PriceTable({"m": (0.15, 0.6)})  # type: ignore[dict-item]


_ANY_VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-10, 10**9),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(
    _ANY_VALUE, _ANY_VALUE, _ANY_VALUE, st.integers(0, 10**7), st.integers(0, 10**7), st.integers(0, 10**7)
)
def test_a_price_is_made_only_of_numbers_of_0_or_more_and_its_cost_is_never_negative(
    inp: Any, out: Any, cached: Any, input_tokens: int, output_tokens: int, cached_tokens: int
) -> None:
    try:
        price = Price(inp, out, cached)
    except ConfigError:
        return  # the only error a wrong price gives
    for value in (price.input, price.output, *(() if price.cached is None else (price.cached,))):
        assert not isinstance(value, bool) and isinstance(value, int | float) and 0 <= value < float("inf")
    cost = price.cost(input_tokens, output_tokens, cached_tokens)
    assert cost >= 0.0
    assert cost == PriceTable({"m": price}).cost("m", input_tokens, output_tokens, cached_tokens)


def test_totals_add_up_and_say_when_no_call_was_priced() -> None:
    from remem.usage import Totals

    priced = Totals("t", calls=2, input_tokens=10, output_tokens=5, cached_tokens=3, cost=0.5, unpriced=1)
    unpriced = Totals("u", calls=1, input_tokens=7, unpriced=1)
    both = priced + unpriced
    assert (both.key, both.calls, both.tokens, both.cached_tokens, both.cost, both.unpriced) == (
        "t",
        3,
        22,
        3,
        0.5,
        2,
    )
    assert priced.priced_cost == 0.5 and unpriced.priced_cost is None and Totals().priced_cost is None
    assert both.as_dict()["cost"] == 0.5 and unpriced.as_dict()["cost"] is None
