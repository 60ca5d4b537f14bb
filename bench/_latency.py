"""Search p50/p95 at 100k items for every mode, with the fusion rule before and after (bench/retrieval.py)."""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from _generated import FACT_TYPES, SMALL_TALK, _fill
from langgraph.store.base import PutOp

from remem.store import SqliteStore, hybrid_search
from remem.store import _fusion as fusion
from remem.testing import FakeEmbedder


@contextmanager
def rule_in_store(rule: fusion.FusionRule) -> Iterator[None]:
    """Run the store with another fusion rule (the store reads ``DEFAULT`` at each search)."""
    with mock.patch.object(fusion, "DEFAULT", rule):
        yield


def latency(size: int, queries: int = 60) -> None:
    rng = random.Random(5)
    embedder = FakeEmbedder(384)
    texts = [
        _fill(rng.choice(FACT_TYPES)[rng.randrange(2)], rng)[0]
        if rng.random() < 0.4
        else rng.choice(SMALL_TALK)
        for _ in range(size)
    ]
    asked = [rng.choice(FACT_TYPES)[2 + rng.randrange(2)] for _ in range(queries)]
    with tempfile.TemporaryDirectory() as tmp:
        index = {"dims": 384, "embed": embedder, "fields": ["content"]}
        with SqliteStore.from_conn_string(str(Path(tmp) / "bench.db"), index=index) as store:
            start = time.perf_counter()
            for s in range(0, size, 1000):
                store.batch(
                    [
                        PutOp(("threads", f"c{i % 100}", "messages"), f"m{i}", {"content": t})
                        for i, t in enumerate(texts[s : s + 1000], s)
                    ]
                )
            print(
                f"\n### Search at {size:,} items (SQLite file, fake 384-d embedder, prefix ('threads',), limit 10)\n"
            )
            print(f"loaded in {time.perf_counter() - start:.0f} s\n")
            print("| mode | p50 ms | p95 ms |")
            print("|---|---:|---:|")
            runs: list[tuple[str, str, fusion.FusionRule]] = [
                ("keyword", "keyword", fusion.DEFAULT),
                ("vector", "vector", fusion.DEFAULT),
                ("hybrid-rrf (first rule)", "hybrid", fusion.RRF),
                ("hybrid-scores (last rule)", "hybrid", fusion.SCORES),
                ("hybrid (after)", "hybrid", fusion.DEFAULT),
            ]
            for label, mode, rule in runs:
                samples = []
                with rule_in_store(rule):
                    for q in asked:
                        start = time.perf_counter()
                        hybrid_search(store, ("threads",), q, mode=mode, limit=10)  # type: ignore[arg-type]
                        samples.append((time.perf_counter() - start) * 1000)
                ordered = sorted(samples)
                p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
                print(f"| {label} | {statistics.median(ordered):.2f} | {p95:.2f} |", flush=True)
