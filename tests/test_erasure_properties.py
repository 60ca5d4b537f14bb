"""Property: however often an erasure is stopped, and wherever between two journal writes, finishing it
leaves the same database and reports the same totals as an erasure that ran straight through."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import remem.erasure
from remem import checkpointer_from_url, list_threads
from remem.erasure import ErasureReport, erase, finish_erasures, unfinished_erasures
from remem.store import open_store
from tests.test_erasure_crash import Seeded, journal_totals, seed, sqlite_bytes


class Crash(BaseException):
    """Stands for the process dying: nothing in remem catches a BaseException."""


@pytest.fixture(scope="module")
def template() -> Iterator[Seeded]:
    folder = Path(tempfile.mkdtemp(prefix="rem-erase-"))
    try:
        yield seed(f"sqlite:///{folder / 'remem.db'}")
    finally:
        shutil.rmtree(folder)


def _copy(template: Seeded, folder: Path) -> Seeded:
    source = Path(template.url.removeprefix("sqlite:///"))
    for part in source.parent.glob(source.name + "*"):
        shutil.copy(part, folder / part.name)
    return Seeded(
        f"sqlite:///{folder / source.name}",
        template.secret,
        template.other,
        template.items,
        template.checkpoints,
    )


def _state(url: str) -> tuple[Any, ...]:
    with open_store(url) as store:
        stats = store.stats()
        names = store.list_namespaces(limit=1000)
    with checkpointer_from_url(url) as saver:
        threads = list_threads(saver)
    return stats["items"], stats["vectors"], tuple(names), tuple(threads)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stops=st.lists(st.integers(min_value=1, max_value=14), min_size=1, max_size=3))
def test_stopped_anywhere_any_number_of_times_then_finished(template: Seeded, stops: list[int]) -> None:
    with tempfile.TemporaryDirectory() as straight_dir, tempfile.TemporaryDirectory() as stopped_dir:
        straight = _copy(template, Path(straight_dir))
        reference = erase(straight.url, user_id="alice")
        stopped = _copy(template, Path(stopped_dir))
        finished: list[ErasureReport] = []
        for stop in stops:  # each run is stopped at its stop-th journal write (or finishes before)
            remem.erasure._on_step = _stop_at(stop)
            try:
                finished.append(erase(stopped.url, user_id="alice"))
            except Crash:
                pass
            finally:
                remem.erasure._on_step = None
        finished += finish_erasures(stopped.url)
        assert unfinished_erasures(stopped.url) == 0
        assert all(r.compacted for r in finished)
        # The journal counts what every run removed, including a run stopped after its last write.
        assert journal_totals(stopped.url) == journal_totals(straight.url)
        assert journal_totals(straight.url)["items"] == reference.store.items > 0
        assert _state(stopped.url) == _state(straight.url)
        assert template.secret.encode() not in sqlite_bytes(stopped.url)


def _stop_at(stop: int) -> Callable[[str], None]:
    writes = [0]

    def hook(step: str) -> None:
        if step == "saved":
            writes[0] += 1
            if writes[0] == stop:
                raise Crash

    return hook
