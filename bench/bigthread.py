"""Big threads: one summary-strategy turn, the first context card, `remem history` and an extractive
summary, on threads of 1k, 10k and 100k messages, with this code and (optionally) the code before.

    python bench/bigthread.py                                  # this code only
    git worktree add --detach /tmp/remem-before <commit>       # the code to compare with
    python bench/bigthread.py --before /tmp/remem-before --cap 90

Each thread is written directly, in batches (not one agent turn per message): into a remem
``SqliteSaver`` through ``graph.update_state`` (ten checkpoints), by the code before when there is one
(this code upgrades its copies to its own schema, off the clock), and into a ``Memory`` on SQLite through
``thread.add_messages`` (1,000 at a time, the fake embedder so that no model runs), by each code itself
(its appends are what keeps this code's running summary, the fold; their CPU time is printed). Every
measurement then runs in a fresh process on a copy of those files, so that its peak RSS is its own (what a
refresh follows is done before, in a process of its own, on that copy):

- turn: ``run_turn`` on the saver's thread with the summary strategy and the extractive summariser (the
  scripted model answers; the whole backlog is folded into the summary and removed): a catch-up, linear
  in the backlog by nature;
- next-turn: the turn after that one (a user message on the thread as the strategy left it): what every
  turn of a long-running thread costs;
- card: ``thread.get_context_card()`` (the first summary: the code before reads the whole thread, this
  code starts from the fold its appends kept; then search and render);
- next-card: after that card, one exchange is added and the card is asked for again (a card refresh);
- history: ``inspection.thread_history`` (what ``remem history`` prints, its default 50 checkpoints);
- extractive: ``ExtractiveSummarizer().summarize("", messages)`` over the whole thread (a catch-up);
- next-summary: that summary extended with one more exchange (a summary refresh).

The code before runs from another checkout through ``PYTHONPATH`` (same interpreter and dependencies)
and is stopped at ``--cap`` seconds ("> cap"). Wall time is shown with CPU time next to it, since other
work on the machine stretches the first.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

OPERATIONS = ("turn", "next-turn", "card", "next-card", "history", "extractive", "next-summary")
THREAD = "big"
_WORDS_TEXT = """project plan meeting report team review design code test release feature bug customer ticket
email call schedule weekend travel train coffee lunch dinner weather garden book movie music concert gym
running kitchen recipe bread market invoice payment bank server cloud backup network laptop phone office
city park river museum school lesson course exam notes idea question answer problem option"""
_WORDS = _WORDS_TEXT.split()
_NAMES_TEXT = "Ingrid Tomasz Aiko Bongani Carmela Dariusz Esperanza Fintan Gulnara Hamish Ilse Joaquim"
_NAMES = _NAMES_TEXT.split()
_CITIES_TEXT = "Trondheim Ljubljana Valparaiso Timisoara Arequipa Gdansk Brasov Cuenca Aarhus Bergamo"
_CITIES = _CITIES_TEXT.split()


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def conversation(n: int, seed: int = 7) -> list[BaseMessage]:
    """``n`` messages, user and assistant in turn; users state a fact now and then, among chit-chat."""
    rng = random.Random(seed)
    out: list[BaseMessage] = []
    for i in range(n):
        if i % 2:
            out.append(AIMessage(_sentence(rng, rng.randint(15, 40)), id=f"m{i}"))
            continue
        text = _sentence(rng, rng.randint(10, 25))
        if rng.random() < 0.3:
            name, city = rng.choice(_NAMES), rng.choice(_CITIES)
            text = f"My {rng.choice(_WORDS)} friend {name} lives in {city} at number {rng.randint(1, 999)}. {text}"
        out.append(HumanMessage(text, id=f"m{i}"))
    return out


def _exchange(n: int) -> list[BaseMessage]:
    """One more exchange after the ``n`` messages of :func:`conversation`."""
    return [
        HumanMessage("My cousin Oksana moved to Porto last spring.", id=f"m{n}"),
        AIMessage("Porto is a fine city; I will remember that Oksana lives there.", id=f"m{n + 1}"),
    ]


# --- workers: each runs in its own process ---------------------------------------------------------


def _agent(saver: Any) -> Any:
    from remem.agent import build_agent
    from remem.config import Settings
    from remem.models import ScriptedChatModel

    settings = Settings(strategy="summary")
    return build_agent(
        ScriptedChatModel(),
        strategy="summary",
        summarizer="extractive",
        checkpointer=saver,
        settings=settings,
    )


def _memory_settings() -> Any:
    from remem.config import Settings

    return Settings(embedder="fake")


def build_saver(path: str, n: int) -> None:
    from remem.agent import thread_config
    from remem.checkpoint import SqliteSaver

    messages = conversation(n)
    with SqliteSaver.from_conn_string(path) as saver:
        graph = _agent(saver)
        step = max(n // 10, 1)  # ten checkpoints, for `history` to list
        for start in range(0, n, step):
            # As the summarising node: the graph then ends there, and the next turn starts afresh.
            batch = {"messages": messages[start : start + step]}
            graph.update_state(thread_config(THREAD), batch, as_node="summarize_conversation")


def build_memory(path: str, n: int) -> None:
    from remem import Memory

    messages = conversation(n)
    with Memory.from_url(f"sqlite:///{path}", settings=_memory_settings()) as memory:
        thread = memory.thread(THREAD, user_id="bench-user")
        for start in range(0, n, 1000):
            thread.add_messages(messages[start : start + 1000])


def prepare(operation: str, path: str, n: int) -> None:
    """What the refresh ``operation`` follows, done in a process of its own (its peak RSS is not the
    refresh's): the catch-up turn, the first card and one more exchange, the whole thread's summary."""
    if operation == "next-turn":
        from remem.agent import run_turn
        from remem.checkpoint import SqliteSaver

        with SqliteSaver.from_conn_string(path) as saver:
            run_turn(_agent(saver), THREAD, "Hello. My brother Piotr works in Gdansk.")
    elif operation == "next-card":
        from remem import Memory

        with Memory.from_url(f"sqlite:///{path}", settings=_memory_settings()) as memory:
            thread = memory.get_thread(THREAD)
            thread.get_context_card()
            thread.add_messages(_exchange(n))
    elif operation == "next-summary":
        from remem.summarize import ExtractiveSummarizer

        Path(path).write_text(ExtractiveSummarizer().summarize("", conversation(n)).text, encoding="utf-8")


def run_operation(operation: str, path: str, n: int) -> dict[str, Any]:
    """Do ``operation`` once and say what it took (the input is made before the clock starts)."""
    import remem

    result: dict[str, Any] = {"code": str(Path(remem.__file__).resolve().parents[1])}
    if operation in ("extractive", "next-summary"):
        from remem.summarize import ExtractiveSummarizer

        summarizer, previous = ExtractiveSummarizer(), ""
        if operation == "next-summary":
            previous, messages = Path(path).read_text(encoding="utf-8"), _exchange(n)
        else:
            messages = conversation(n)
        started, cpu = time.perf_counter(), time.process_time()
        text = summarizer.summarize(previous, messages).text
        result["detail"] = f"{len(text)} chars"
    elif operation in ("card", "next-card"):
        from remem import Memory

        with Memory.from_url(f"sqlite:///{path}", settings=_memory_settings()) as memory:
            thread = memory.get_thread(THREAD)
            started, cpu = time.perf_counter(), time.process_time()
            card = thread.get_context_card()
            result["detail"] = f"{card.token_count} tokens"
    else:
        from remem.checkpoint import SqliteSaver

        with SqliteSaver.from_conn_string(path) as saver:
            if operation in ("turn", "next-turn"):
                from remem.agent import run_turn, thread_config

                graph = _agent(saver)
                started, cpu = time.perf_counter(), time.process_time()
                run_turn(graph, THREAD, "Hello again. My sister Oksana moved to Porto.")
                left = len(graph.get_state(thread_config(THREAD)).values["messages"])
                result["detail"] = f"{left} messages left"
            else:
                from remem.inspection import reader_graph, thread_history

                started, cpu = time.perf_counter(), time.process_time()
                rows = thread_history(reader_graph(saver), THREAD, 50)
                result["detail"] = f"{len(rows)} checkpoints"
    result["seconds"] = time.perf_counter() - started
    result["cpu"] = time.process_time() - cpu
    result["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def setup(path: str, memory: bool) -> None:
    """Bring a thread's files to this code's schema (written by the code before, they may be older), so
    that no migration runs on the clock."""
    if memory:
        from remem import Memory

        with Memory.from_url(f"sqlite:///{path}", settings=_memory_settings()) as opened:
            opened.get_thread(THREAD)
    else:
        from remem.checkpoint import SqliteSaver

        with SqliteSaver.from_conn_string(path) as saver:
            saver.setup()


def worker(args: argparse.Namespace) -> None:
    if args.worker in ("setup-saver", "setup-memory"):
        setup(args.path, args.worker == "setup-memory")
        print(json.dumps({}))
    elif args.worker == "build-saver":
        build_saver(args.path, args.n)
        print(json.dumps({}))
    elif args.worker == "build-memory":
        cpu = time.process_time()
        build_memory(args.path, args.n)
        print(json.dumps({"cpu": time.process_time() - cpu}))
    elif args.worker.startswith("prepare-"):
        prepare(args.worker.removeprefix("prepare-"), args.path, args.n)
        print(json.dumps({}))
    else:
        print(json.dumps(run_operation(args.worker, args.path, args.n)))


# --- the driver -------------------------------------------------------------------------------------


def _spawn(task: str, path: str, n: int, code: Path | None, cap: float | None) -> dict[str, Any] | None:
    """Run one worker (with the code at ``code`` when given); None when it passed ``cap`` seconds."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code / "src") + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, __file__, "--worker", task, "--path", path, "--n", str(n)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=cap, check=False)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        raise SystemExit(f"{task} ({n} messages) failed:\n{done.stderr[-3000:]}")
    parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def _copy_db(source: Path, target: Path) -> str:
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{source}{suffix}").exists():
            shutil.copyfile(f"{source}{suffix}", f"{target}{suffix}")
    return str(target)


def _cell(result: dict[str, Any] | None, cap: float, what: str) -> str:
    if result is None:
        return f"> {cap:g} s" if what == "time" else "-"
    if what == "time":
        return f"{result['seconds']:.2f} s ({result['cpu']:.2f})"
    return f"{result['rss_mb']:.0f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000", help="thread lengths, comma-separated")
    parser.add_argument("--before", type=Path, help="a checkout of the code to compare with")
    parser.add_argument("--cap", type=float, default=90.0, help="seconds the code before may take per step")
    parser.add_argument("--operations", default=",".join(OPERATIONS))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    operations = args.operations.split(",")
    header = f"{'messages':>8}  {'operation':<10}  {'before: wall (cpu)':>20}  {'after: wall (cpu)':>19}"
    header += f"  {'RSS before':>10}  {'RSS after':>9}  detail (after)"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory(prefix="remem-bigthread-") as tmp:
        root = Path(tmp)
        for n in sizes:
            saver_db = root / f"saver-{n}.db"
            memory_dbs = {label: root / f"memory-{label}-{n}.db" for label in ("before", "after")}
            started = time.perf_counter()
            # Written by the code before, if any (a newer schema would refuse it); this code upgrades a copy.
            _spawn("build-saver", str(saver_db), n, args.before, None)
            print(f"{n:>8}  (checkpoints written in {time.perf_counter() - started:.0f} s)", flush=True)
            if {"card", "next-card"} & set(operations):
                # The memory thread is written by each code's own appends (this code's fold as it goes).
                for label, code in (("before", args.before), ("after", None)):
                    if label == "before" and code is None:
                        continue
                    built = _spawn("build-memory", str(memory_dbs[label]), n, code, None)
                    cpu = f" ({built['cpu']:.1f} CPU s)" if built else ""
                    print(f"{n:>8}  (memory thread written by the code {label}{cpu})", flush=True)
            for operation in operations:
                results: dict[str, dict[str, Any] | None] = {}
                for label, code in (("before", args.before), ("after", None)):
                    if label == "before" and code is None:
                        continue
                    source = memory_dbs[label] if operation in ("card", "next-card") else saver_db
                    copy = _copy_db(source, root / f"{label}-{operation}-{n}.db")
                    if label == "after" and args.before and source == saver_db:
                        _spawn("setup-saver", copy, n, None, None)
                    if operation.startswith("next-"):
                        _spawn(f"prepare-{operation}", copy, n, code, None)
                    results[label] = _spawn(operation, copy, n, code, args.cap if label == "before" else None)
                before = results.get("before") if args.before else None
                after = results["after"]
                if before is not None and after is not None and before["code"] == after["code"]:
                    raise SystemExit(f"--before ran the same code as this checkout ({after['code']})")
                print(
                    f"{n:>8}  {operation:<10}  {_cell(before, args.cap, 'time') if args.before else '':>20}"
                    f"  {_cell(after, args.cap, 'time'):>19}"
                    f"  {_cell(before, args.cap, 'rss') if args.before else '':>10}"
                    f"  {_cell(after, args.cap, 'rss'):>9}  {after['detail'] if after else ''}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
