"""Hostile input: labels, keys, values, filter keys and queries from users or models never break the SQL.

Every input is either stored and read back exactly, or refused with a ``ValueError`` (remem's usage errors
and LangGraph's ``InvalidNamespaceError``) before any SQL runs; never a database error, never a match that
the filter semantics do not allow.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from remem.store import PostgresStore, SqliteStore, hybrid_search
from remem.store._core import matches
from remem.testing import FakeEmbedder

NASTY = st.sampled_from(
    [
        "'",
        '"',
        "%",
        "_",
        "*",
        "\\",
        "\x00",
        "\udc80",
        "\ud83d",
        "😀",
        "'; DROP TABLE remem_items; --",
        '") OR 1=1 --',
        "$",
        "$.x",
        "[0]",
        "NEAR(a b)",
        "a OR b",
        "AND",
        "-",
        "^",
        ":",
        "\n",
        "\t",
        "\u202e",
        "x" * 5000,
        "é",
        "ß",
        "\x1f",
        "\x7f",
    ]
)
TEXT = st.lists(st.one_of(NASTY, st.text(max_size=8)), max_size=4).map("".join)
JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**40), 2**40),
        st.floats(allow_nan=False, allow_infinity=False),
        TEXT,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=6,
)
# Empty labels and keys are refused at once; drawn freely they were half of all cases, so the draws leave
# them out and the explicit examples below keep that path.
FILLED = TEXT.filter(lambda text: text != "")
LABEL = st.one_of(
    st.text(min_size=1, max_size=10), FILLED, st.sampled_from(["%", "_", "*", "'", "x" * 1000, "é😀"])
)
CASES = st.tuples(
    st.lists(LABEL, min_size=1, max_size=3).map(tuple),
    FILLED,
    st.dictionaries(TEXT, JSON, min_size=1, max_size=4),
    TEXT,
    TEXT,
)


def _has_operator_keys(value: Any) -> bool:
    if isinstance(value, dict):
        return any(k.startswith("$") for k in value) or any(_has_operator_keys(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_operator_keys(v) for v in value)
    return False


def check_hostile(store: Any, case: tuple[Any, ...]) -> set[str]:
    """Check one case; the names of the checks it reached (empty when the store refused the case)."""
    namespace, key, value, filter_key, query = case
    ns = ("fuzz", *namespace)
    try:
        store.put(ns, key, value)
    except ValueError:
        event("refused before SQL")
        return set()  # a label or key that cannot be stored faithfully
    event("stored")
    reached = {"stored"}
    item = store.get(ns, key)
    assert item is not None and item.value == value and item.key == key and item.namespace == ns
    # Any filter key: either refused, or results that obey the filter semantics exactly.
    probe = value.get(filter_key, next(iter(value.values())))
    try:
        found = store.search(("fuzz",), filter={filter_key: probe}, limit=1000)
    except ValueError:
        found = None
    if found is not None:
        reached.add("any filter key")
        assert all(matches(i.value, {filter_key: probe}) for i in found)
        if filter_key in value and not _has_operator_keys(probe):
            assert any(i.key == key and i.namespace == ns for i in found)
    same_key = next(iter(value))
    own = value[same_key]
    if len(same_key) > 10_000:  # storable as a value's key, but past the documented filter-key limit
        with pytest.raises(ValueError, match="the most is 10000"):
            store.search(("fuzz",), filter={same_key: own}, limit=1000)
    elif not _has_operator_keys(own):  # a dict with "$" keys reads as operators, not as a value
        reached.add("own value found")
        exact = store.search(("fuzz",), filter={same_key: own}, limit=1000)
        assert any(i.key == key and i.namespace == ns for i in exact)
        for mode in ("keyword", "vector", "hybrid"):
            hits = hybrid_search(store, ("fuzz",), query, mode=mode, filter={same_key: own})
            assert all(matches(hit.value, {same_key: own}) for hit in hits), mode
    assert ns in store.list_namespaces(prefix=("fuzz",), limit=10_000)
    store.delete(ns, key)
    assert store.get(ns, key) is None
    return reached


def fuzz(store: Any, max_examples: int) -> None:
    """Run ``check_hostile`` over ``max_examples`` drawn cases, then check that the cases reached the real
    checks: a store that refused every input, or a filter refusing every key, would pass each case alone."""
    reached: Counter[str] = Counter()

    @settings(max_examples=max_examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=CASES)
    @example(case=(("a",), "k", {"x" * 10_001: 1}, "f", "q"))  # a key past the filter-key limit
    @example(case=(("a",), "", {"v": 1}, "v", "q"))  # an empty key
    @example(case=(("a", ""), "k", {"v": 1}, "v", "q"))  # an empty label
    def run(case: tuple[Any, ...]) -> None:
        reached["case"] += 1
        reached.update(check_hostile(store, case))

    run()
    cases = reached["case"]
    assert cases >= max_examples // 2, reached  # hypothesis may stop early when it runs out of cases
    # About two cases in three are storable (lone surrogates, NUL and periods in labels are refused; 64%
    # on SQLite, 67% on Postgres under CI's fixed draws, 30% to 80% under random ones, as run locally);
    # each check after the put ran for a fair share.
    for check, share in (("stored", 5), ("any filter key", 6), ("own value found", 6)):
        assert reached[check] >= cases // share, f"{check!r} reached in {reached[check]} of {cases} cases"


@pytest.fixture
def fuzz_sqlite(tmp_path: Path) -> Iterator[SqliteStore]:
    with SqliteStore.from_conn_string(
        tmp_path / "f.db", index={"dims": 16, "embed": FakeEmbedder(16)}
    ) as store:
        yield store


@pytest.fixture
def fuzz_postgres(pg_url: str) -> Iterator[PostgresStore]:
    with PostgresStore.from_conn_string(pg_url, index={"dims": 16, "embed": FakeEmbedder(16)}) as store:
        yield store


def test_hostile_input_sqlite(fuzz_sqlite: SqliteStore) -> None:
    fuzz(fuzz_sqlite, max_examples=150)


@pytest.mark.postgres
def test_hostile_input_postgres(fuzz_postgres: PostgresStore) -> None:
    fuzz(fuzz_postgres, max_examples=80)


def test_a_store_that_refuses_every_input_fails_the_fuzz() -> None:
    class Refusing:
        def put(self, *args: Any, **kwargs: Any) -> None:
            raise ValueError("refused")

    with pytest.raises(AssertionError, match="'stored' reached in 0 of"):
        fuzz(Refusing(), max_examples=20)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fuzz_store(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"fuzz_{request.param}")


@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.just(None))  # check_hostile records hypothesis events
def test_hostile_but_valid_inputs_are_stored_not_refused(fuzz_store: Any, _: None) -> None:
    # Each property alone also holds for a store that refuses everything; these must reach every check.
    cases = [
        (("'; DROP TABLE remem_items; --",), '") OR 1=1 --', {"q": "' OR '1'='1", "%": "_"}, "q", "a OR b"),
        (("%", "_", "*"), "é😀", {"$.x": [1, {"y": None}], "n": 2**40}, "n", "NEAR(a b)"),
        (("\u202e", "x" * 1000), "\\", {"t": "x" * 5000, "ß": 1.5}, "ß", "-^:"),
    ]
    for case in cases:
        assert check_hostile(fuzz_store, case) == {"stored", "any filter key", "own value found"}, case


def test_injection_strings_are_stored_literally(fuzz_sqlite: SqliteStore) -> None:
    ns = ("fuzz", "x'); DROP TABLE remem_items; --")
    fuzz_sqlite.put(ns, "' OR '1'='1", {"q": "' OR '1'='1"})
    assert fuzz_sqlite.search(("fuzz",), filter={"q": "' OR 1=1 --"}) == []
    assert [i.key for i in fuzz_sqlite.search(("fuzz",), filter={"q": "' OR '1'='1"})] == ["' OR '1'='1"]
    assert fuzz_sqlite.search(("fuzz", "x%"), limit=10) == []  # a prefix is not a LIKE pattern
    assert fuzz_sqlite.stats()["items"] == 1
