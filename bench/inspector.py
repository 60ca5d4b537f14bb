"""The inspector's pages on a 10,000-message thread: how long the server takes to answer each, against
rendering the whole thread (what an inspector that shows a thread on one page does).

    python bench/inspector.py                       # 10,000 messages, 200 threads, 5 runs each
    python bench/inspector.py --messages 100000 --threads 1000

A SQLite file is written first through the memory client (1,000 messages at a time, the keyword index
only, as the inspector's tests seed it), with ``--threads`` short threads beside the long one. The app
(``remem serve``'s, no keys, loopback) then answers each page in this process through Starlette's test
client: the time is the server's own (routing, reads, rendering), with no network. Each page is asked for
once unmeasured, then ``--runs`` times; the median wall time is shown with the median CPU time of this
process next to it (other work on a shared machine stretches the first).

Baselines, in the same run and on the same file:
- whole thread: every message read (``thread.messages()``) and rendered as the thread page renders one;
- list, a read per thread: the list of threads read as it was before listings existed (each thread's
  metadata and last message).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

THREAD = "big"


def seed(db: str, messages: int, threads: int) -> None:
    from remem.memory import Memory
    from remem.store import open_store

    with open_store(db) as store:
        memory = Memory(store)
        thread = memory.thread(THREAD, user_id="bulk")
        for start in range(0, messages, 1000):
            thread.add_messages(
                [
                    {
                        "id": f"b{i}",
                        "role": "user" if i % 2 == 0 else "assistant",
                        "content": f"message number {i} about the garden, the bees and the weather",
                    }
                    for i in range(start, min(start + 1000, messages))
                ]
            )
        for n in range(threads):
            memory.thread(f"t{n:04d}", user_id=f"u{n % 7}").add_messages(
                [
                    {"id": "q", "role": "user", "content": f"question {n} about the train to the coast"},
                    {"id": "a", "role": "assistant", "content": f"answer {n}: the 9:40 from platform 2"},
                ]
            )


def timed(call: Callable[[], Any], runs: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``runs`` calls, after one unmeasured."""
    call()
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=10_000, help="messages of the long thread")
    parser.add_argument("--threads", type=int, default=200, help="short threads beside it")
    parser.add_argument("--runs", type=int, default=5, help="measured requests per page")
    args = parser.parse_args()
    if args.messages < 1 or args.threads < 0 or args.runs < 1:
        parser.error("--messages and --runs take at least 1, --threads at least 0")

    logging.disable(logging.INFO)  # the app's request log would drown the table
    from starlette.testclient import TestClient

    from remem.memory import Memory
    from remem.server import ServerOptions, create_app
    from remem.server._ui import _data
    from remem.server._ui._html import join
    from remem.server._ui._threads import _message
    from remem.store import open_store
    from remem.testing import offline_settings

    with tempfile.TemporaryDirectory() as folder:
        db = f"sqlite:///{Path(folder) / 'inspector.db'}"
        started = time.perf_counter()
        seed(db, args.messages, args.threads)
        print(f"seeded {args.messages:,} + {args.threads} threads in {time.perf_counter() - started:.1f} s")
        pages = {
            "thread, latest page": ("/ui/thread", {"id": THREAD}),
            "thread, middle page": ("/ui/thread", {"id": THREAD, "page": str(args.messages // 100 + 1)}),
            "thread, timeline": ("/ui/thread/timeline", {"id": THREAD}),
            "thread, tokens": ("/ui/thread/usage", {"id": THREAD}),
            "thread, card": ("/ui/thread/card", {"id": THREAD}),
            "list of threads": ("/ui/threads", {}),
            "list, by content": ("/ui/threads", {"text": "platform"}),
        }
        rows: list[tuple[str, float, float, str]] = []
        app = create_app(ServerOptions(db), settings=offline_settings())
        with TestClient(app, base_url="http://127.0.0.1") as client:

            def ask(path: str, params: dict[str, str]) -> Callable[[], Any]:
                def call() -> Any:
                    answer = client.get(path, params=params)
                    assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
                    return answer

                return call

            for name, (path, params) in pages.items():
                size = len(ask(path, params)().content)
                rows.append((name, *timed(ask(path, params), args.runs), f"{size / 1024:,.0f} KiB"))
        with open_store(db) as store:
            memory = Memory(store)
            thread = memory.get_thread(THREAD)
            whole = [""]

            def render_whole() -> None:
                whole[0] = join(_message(m) for m in thread.messages())

            rows.append(
                (
                    "baseline: whole thread",
                    *timed(render_whole, args.runs),
                    f"{len(whole[0]) / 1024:,.0f} KiB",
                )
            )
            rows.append(
                (
                    "baseline: list, a read per thread",
                    *timed(lambda: list(_data._unlisted(memory, set())), args.runs),
                    "",
                )
            )
    width = max(len(r[0]) for r in rows)
    print(f"\n{'page (' + format(args.messages, ',') + ' messages)':<{width}}  {'wall':>9}  {'cpu':>9}  size")
    for name, wall, cpu, size in rows:
        print(f"{name:<{width}}  {wall * 1000:7.1f}ms  {cpu * 1000:7.1f}ms  {size}")


if __name__ == "__main__":
    main()
