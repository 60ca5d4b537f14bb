"""One writer per thread: six processes writing one thread at once lose nothing and fork nothing.

Real processes on a real SQLite file and the machine's PostgreSQL. Each child records what it was told
succeeded; afterwards every acknowledged turn is in ``get_state``, in one linear history, each question
followed by its reply, and every acknowledged memory message is in ``messages()`` once.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from remem import Memory, Settings, ThreadBusyError, arun_turn, build_agent, run_turn
from remem._lease import LeaseTarget, athread_lease, thread_lease
from remem.checkpoint._targets import acheckpointer_lease_target, checkpointer_lease_target
from remem.store._targets import store_lease_target
from tests import matrix
from tests.lease_workers import (
    THREAD,
    agent_for,
    append_worker,
    context,
    middleware_worker,
    open_saver,
    replying_model,
    turn_worker,
)

WORKERS = 6
TURNS = 8
APPENDS = 12


def _target(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "threads.db")


def _run_children(target: Any, args: list[tuple[Any, ...]]) -> None:
    children = [context().Process(target=target, args=a) for a in args]
    for child in children:
        child.start()
    for child in children:
        child.join(120)
    assert [c.exitcode for c in children] == [0] * len(children)


def _acked(paths: list[Path]) -> list[str]:
    return [line for p in paths if p.exists() for line in p.read_text(encoding="utf-8").splitlines()]


def _turn_problems(saver: Any, acked: list[str]) -> dict[str, int]:
    """How many acknowledged turns are missing, questions lack their reply, checkpoints fork."""
    agent = agent_for(saver)
    config = {"configurable": {"thread_id": THREAD}}
    messages = agent.get_state(config).values.get("messages", [])
    questions = Counter(m.text for m in messages if m.type == "human")
    unanswered = sum(
        1
        for i, m in enumerate(messages)
        if m.type == "human" and not (i + 1 < len(messages) and messages[i + 1].text == "reply to " + m.text)
    )
    children = Counter(
        t.parent_config["configurable"]["checkpoint_id"] for t in saver.list(config) if t.parent_config
    )
    return {
        "acknowledged": len(acked),
        "missing": sum(1 for q in acked if questions[q] == 0),
        "duplicated": sum(1 for n in questions.values() if n > 1),
        "unanswered": unanswered,
        "forks": sum(1 for n in children.values() if n > 1),
    }


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres", "stock-sqlite"))
def test_six_processes_running_turns_on_one_thread_lose_none(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    target = _target(kind, tmp_path, request)
    with open_saver(kind, target):
        pass  # the tables exist before the children race to create them
    acks = [tmp_path / f"acks-{w}.txt" for w in range(WORKERS)]
    _run_children(turn_worker, [(kind, target, w, TURNS, str(acks[w])) for w in range(WORKERS)])
    with open_saver(kind, target) as saver:
        problems = _turn_problems(saver, _acked(acks))
    print(kind, problems)
    assert problems == {
        "acknowledged": WORKERS * TURNS,  # nobody waited past the 30 s lease timeout
        "missing": 0,
        "duplicated": 0,
        "unanswered": 0,
        "forks": 0,
    }


def _memory_url(kind: str, target: str) -> str:
    return target if kind == "postgres" else f"sqlite:///{target}"


def _bare_invoke_problems(saver: Any, acked: list[str], refused: list[str]) -> dict[str, int]:
    """What N bare ``create_agent(...).invoke`` runs left: acknowledged turns missing or without their
    reply, forks, and refusals (ThreadBusyError) other than the ones the children saw."""
    config = {"configurable": {"thread_id": THREAD}}
    messages = saver.get_tuple(config).checkpoint["channel_values"]["messages"]
    position = {m.text: i for i, m in enumerate(messages) if m.type == "human"}
    children = Counter(
        t.parent_config["configurable"]["checkpoint_id"] for t in saver.list(config) if t.parent_config
    )
    return {
        "sent": len(acked) + len(refused),
        "missing": sum(1 for q in acked if q not in position),
        "duplicated": sum(n - 1 for n in Counter(m.text for m in messages if m.type == "human").values()),
        "unanswered": sum(
            1
            for q in acked
            if q in position
            and not (position[q] + 1 < len(messages) and messages[position[q] + 1].text == "reply to " + q)
        ),
        "forks": sum(1 for n in children.values() if n > 1),
        "refused_but_kept": sum(1 for q in refused if q in position),  # a run refused after its input
    }


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
def test_bare_invokes_with_the_middleware_never_fork_the_thread(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """No run_turn: LangGraph writes each run's input before any middleware hook, so the lease cannot cover
    the whole run. remem's saver refuses a run's checkpoint whose parent is no longer the thread's head
    (ThreadBusyError); every run either lands whole, in one linear history, or is told it was refused."""
    target = _target(kind, tmp_path, request)
    memory_url = _memory_url(kind, target)
    with open_saver(kind, target), Memory.from_url(memory_url, settings=Settings(embedder="fake")):
        pass  # the tables exist before the children race to create them
    acks = [tmp_path / f"acks-{w}.txt" for w in range(WORKERS)]
    _run_children(
        middleware_worker, [(kind, target, memory_url, w, TURNS, str(acks[w])) for w in range(WORKERS)]
    )
    acked = _acked(acks)
    refusals = [json.loads(line) for line in _acked([Path(f"{a}.refused") for a in acks])]
    assert all("moved on while this run was under way" in r["error"] for r in refusals)
    with open_saver(kind, target) as saver:
        problems = _bare_invoke_problems(saver, acked, [r["question"] for r in refusals])
    print(kind, problems, f"{len(acked)} acknowledged, {len(refusals)} refused")
    assert acked, "some runs land"
    kept = problems.pop("refused_but_kept")  # its question stays, unanswered, like a failed model call's
    assert problems == {"sent": WORKERS * TURNS, "missing": 0, "duplicated": 0, "unanswered": 0, "forks": 0}
    print("refused after their input was stored:", kept)


def _echo_graph(saver: Any) -> Any:
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    graph = StateGraph(MessagesState)
    graph.add_node("reply", lambda state: {"messages": [AIMessage("reply to " + state["messages"][-1].text)]})
    graph.add_edge(START, "reply")
    graph.add_edge("reply", END)
    return graph.compile(checkpointer=saver)


def _race_after_read(saver: Any, app: Any, intruder: str) -> None:
    """Make the next run that loads the thread's head see another run write right after its read."""
    read = saver.get_tuple

    def racing(config: Any) -> Any:
        found = read(config)
        conf = config["configurable"]
        if "__pregel_runtime" in conf and not conf.get("checkpoint_id"):
            saver.get_tuple = read
            app.invoke({"messages": [("user", intruder)]}, {"configurable": {"thread_id": THREAD}})
        return found

    saver.get_tuple = racing


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
@pytest.mark.parametrize("empty", [False, True], ids=["thread-with-history", "empty-thread"])
def test_a_run_whose_head_moved_is_refused_and_time_travel_still_forks(
    kind: str, empty: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    config = {"configurable": {"thread_id": THREAD}}
    with open_saver(kind, _target(kind, tmp_path, request)) as saver:
        app = _echo_graph(saver)
        if not empty:
            app.invoke({"messages": [("user", "first")]}, config)
        _race_after_read(saver, app, "intruder")
        with pytest.raises(ThreadBusyError, match=r"moved on while this run was under way.*run_turn"):
            app.invoke({"messages": [("user", "loser")]}, config)
        texts = [m.text for m in app.get_state(config).values["messages"]]
        assert texts[-2:] == ["intruder", "reply to intruder"] and "loser" not in texts
        parents = Counter(
            t.parent_config["configurable"]["checkpoint_id"] for t in saver.list(config) if t.parent_config
        )
        assert max(parents.values()) == 1  # one linear history
        roots = [t for t in saver.list(config) if t.parent_config is None]
        assert len(roots) == 1
        # Stock semantics where a fork is asked for: time travel with input, replay, update_state.
        oldest = list(app.get_state_history(config))[-2].config
        app.invoke({"messages": [("user", "again")]}, oldest)
        assert app.get_state(config).values["messages"][-1].text == "reply to again"
        app.update_state(oldest, {"messages": [("user", "edited")]})
        assert app.get_state(config).values["messages"][-1].text == "edited"
        app.invoke(None, oldest)
        app.invoke({"messages": [("user", "after")]}, config)  # a plain run from the head: fine
        assert app.get_state(config).values["messages"][-1].text == "reply to after"
        assert (
            max(
                Counter(
                    t.parent_config["configurable"]["checkpoint_id"]
                    for t in saver.list(config)
                    if t.parent_config
                ).values()
            )
            > 1
        )


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
def test_run_turn_is_not_cut_short_by_a_bare_invoke(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A bare run's checkpoint waits for the lease a run_turn holds, then is refused: the turn finishes.
    On PostgreSQL the bare run's put first tries the lease in its own transaction (which finds it held
    and writes nothing), then waits for it as on SQLite."""
    from remem import ScriptedChatModel

    config = {"configurable": {"thread_id": THREAD}}
    outcome: list[str] = []
    runners: list[threading.Thread] = []
    with open_saver(kind, _target(kind, tmp_path, request)) as saver:
        bare = agent_for(saver)
        run_turn(bare, THREAD, "first")

        def bare_run() -> None:
            try:
                bare.invoke({"messages": [("user", "bare")]}, config)
                outcome.append("landed")
            except ThreadBusyError:
                outcome.append("refused")

        def model_mid_turn(messages: Any) -> str:
            if not runners:  # mid-turn: a bare run reads the head and tries to write on it
                runner = threading.Thread(target=bare_run)
                runners.append(runner)
                runner.start()
                runner.join(1)
                assert runner.is_alive()  # it cannot write while the turn holds the lease
            return "reply to " + messages[-1].text

        turn_agent = agent_for(saver, model=ScriptedChatModel(default=model_mid_turn))
        assert run_turn(turn_agent, THREAD, "leased").text == "reply to leased"
        runners[0].join(30)
        assert outcome == ["refused"]
        texts = [m.text for m in turn_agent.get_state(config).values["messages"]]
        assert texts[-2:] == ["leased", "reply to leased"] and "bare" not in texts


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
def test_six_processes_appending_to_one_memory_thread_lose_none(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = _memory_url(kind, _target(kind, tmp_path, request))
    settings = Settings(embedder="fake")
    with Memory.from_url(url, settings=settings) as memory:
        memory.thread(THREAD, user_id="maya")
    acks = [tmp_path / f"acks-{w}.txt" for w in range(WORKERS)]
    _run_children(append_worker, [(url, w, APPENDS, str(acks[w])) for w in range(WORKERS)])
    records = [json.loads(line) for line in _acked(acks)]
    acked = [r["id"] for r in records if "id" in r]
    refused = [r for r in records if "refused" in r]
    with Memory.from_url(url, settings=settings) as memory:
        thread = memory.get_thread(THREAD)
        stored = thread.messages()
        info = thread.info()
    ids = Counter(m.id for m in stored)
    seq_of = {m.id: m.seq for m in stored}
    problems = {
        "acknowledged": len(acked),
        "missing": sum(1 for i in acked if ids[i] == 0),
        "duplicated": sum(1 for n in ids.values() if n > 1),
        "count_mismatch": int(info.message_count != len(stored)),
        "seq_gaps": int([m.seq for m in stored] != list(range(len(stored)))),
        "resent_not_returned": sum(
            1 for r in records if "resent" in r and (r["seq"] is None or r["seq"] != seq_of.get(r["resent"]))
        ),
    }
    print(kind, problems, refused)
    assert refused == []
    assert problems == {
        "acknowledged": WORKERS * APPENDS,
        "missing": 0,
        "duplicated": 0,
        "count_mismatch": 0,
        "seq_gaps": 0,
        "resent_not_returned": 0,
    }


# ------------------------------------------------------------------------------ the lease itself


def _hold(owner: Any, scope: Any, entered: threading.Event, leave: threading.Event) -> None:
    with thread_lease(checkpointer_lease_target(owner), "t", scope=scope, timeout=5):
        entered.set()
        leave.wait(10)


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres", "memory"))
def test_a_second_writer_waits_then_fails_with_thread_busy(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    owner: Any
    if kind == "memory":
        owner = InMemorySaver()
        owner_cm: Any = None
    else:
        owner_cm = open_saver(kind, _target(kind, tmp_path, request))
        owner = owner_cm.__enter__()
    try:
        target = checkpointer_lease_target(owner)
        entered, leave = threading.Event(), threading.Event()
        holder = threading.Thread(target=_hold, args=(owner, "checkpoint", entered, leave))
        holder.start()
        assert entered.wait(10)
        with (
            pytest.raises(
                ThreadBusyError, match=r"thread 't' is busy.*waited|waited.*REMEM_THREAD_LEASE_TIMEOUT"
            ),
            thread_lease(target, "t", scope="checkpoint", timeout=0.2),
        ):
            pass
        with thread_lease(target, "other", scope="checkpoint", timeout=0.2):
            pass  # another thread of the same database is free
        with thread_lease(target, "t", scope="memory", timeout=0.2):
            pass  # and so is the memory client's lease of the same thread
        leave.set()
        holder.join(10)
        with thread_lease(target, "t", scope="checkpoint", timeout=0.2) as lease:
            # Nothing looks a held lease up: its holder passes it on, and taking it again waits as anyone.
            with pytest.raises(ThreadBusyError), thread_lease(target, "t", scope="checkpoint", timeout=0.2):
                pass
            lease.verify()
    finally:
        if owner_cm is not None:
            owner_cm.__exit__(None, None, None)


def test_busy_turn_writes_nothing_and_says_what_to_do(tmp_path: Path) -> None:
    with open_saver("sqlite", str(tmp_path / "t.db")) as saver:
        agent = build_agent(replying_model(), strategy="filter", checkpointer=saver)
        run_turn(agent, THREAD, "first")
        before = len(list(saver.list({"configurable": {"thread_id": THREAD}})))
        entered, leave = threading.Event(), threading.Event()
        holder = threading.Thread(target=_hold_thread, args=(saver, entered, leave))
        holder.start()
        assert entered.wait(10)
        try:
            with pytest.raises(ThreadBusyError) as caught:
                run_turn(agent, THREAD, "second", lease_timeout=0.3)
        finally:
            leave.set()
            holder.join(10)
        assert "raise the timeout" in str(caught.value) and "Nothing was written" in str(caught.value)
        assert len(list(saver.list({"configurable": {"thread_id": THREAD}}))) == before
        run_turn(agent, THREAD, "second")
        assert [m.text for m in agent.get_state({"configurable": {"thread_id": THREAD}}).values["messages"]][
            -2:
        ] == [
            "second",
            "reply to second",
        ]


def _hold_thread(saver: Any, entered: threading.Event, leave: threading.Event) -> None:
    with thread_lease(checkpointer_lease_target(saver), THREAD, scope="checkpoint", timeout=5):
        entered.set()
        leave.wait(10)


@pytest.mark.postgres
def test_the_lease_is_found_from_stock_savers_and_stores(tmp_path: Path, pg_url: str) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver as StockPostgresSaver
    from langgraph.checkpoint.sqlite import SqliteSaver as StockSqliteSaver
    from langgraph.store.memory import InMemoryStore

    from remem.store import SqliteStore

    path = tmp_path / "stock.db"
    with StockSqliteSaver.from_conn_string(str(path)) as stock:
        found = checkpointer_lease_target(stock)
        assert found.kind == "sqlite" and found.where == str(path.resolve())
    with SqliteStore.from_conn_string(path) as store:
        assert store_lease_target(store).where == str(path.resolve())
    with StockPostgresSaver.from_conn_string(pg_url) as pg:
        found = checkpointer_lease_target(pg)
        assert found.kind == "postgres" and found.label.endswith(pg_url.rsplit("/", 1)[1])
    assert checkpointer_lease_target(InMemorySaver()).kind == "process"
    assert store_lease_target(InMemoryStore()).kind == "process"


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
async def test_async_turns_on_one_thread_take_turns(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from remem.checkpoint import AsyncPostgresSaver, AsyncSqliteSaver

    opener = AsyncSqliteSaver if kind == "sqlite" else AsyncPostgresSaver
    async with opener.from_conn_string(_target(kind, tmp_path, request)) as saver:
        if kind == "postgres":
            await saver.setup()
        agent = build_agent(replying_model(), strategy="filter", checkpointer=saver)
        await asyncio.gather(*(arun_turn(agent, THREAD, f"q{i}") for i in range(6)))
        assert (await athread_lease_target_kind(saver)) == kind
        messages = (await agent.aget_state({"configurable": {"thread_id": THREAD}})).values["messages"]
        assert sorted(m.text for m in messages if m.type == "human") == [f"q{i}" for i in range(6)]
        assert all(
            messages[i + 1].text == "reply to " + m.text for i, m in enumerate(messages) if m.type == "human"
        )


async def athread_lease_target_kind(saver: Any) -> str:
    return (await acheckpointer_lease_target(saver)).kind


async def test_an_async_wait_that_is_cancelled_leaves_the_lease_free(tmp_path: Path) -> None:
    owner = LeaseTarget.in_process(InMemorySaver())
    async with athread_lease(owner, "t", scope="checkpoint", timeout=5):
        # a waiter of its own (a task started here would share this context's lease)
        waiter = asyncio.get_running_loop().create_task(_take(owner), context=contextvars.Context())
        await asyncio.sleep(0.1)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    await asyncio.sleep(0.1)
    async with athread_lease(owner, "t", scope="checkpoint", timeout=2):
        pass  # a lease the cancelled waiter kept would make this a ThreadBusyError


async def _take(owner: LeaseTarget) -> None:
    async with athread_lease(owner, "t", scope="checkpoint", timeout=5):
        pass


def test_create_agent_turns_with_the_card_middleware_take_turns_under_run_turn(tmp_path: Path) -> None:
    """The create_agent path: run_turn holds the checkpoint lease, the middleware's appends the memory one."""
    from concurrent.futures import ThreadPoolExecutor

    from langchain.agents import create_agent

    from remem.checkpoint import SqliteSaver
    from remem.middleware import ContextCardMiddleware

    # one file for the checkpoints and the memory, as the README's default has it
    url = f"sqlite:///{tmp_path / 'remem.db'}"
    with Memory.from_url(url, settings=Settings(embedder="fake")) as memory:
        with SqliteSaver.from_conn_string(tmp_path / "remem.db") as saver:
            middleware = ContextCardMiddleware(memory, user_id="maya", compaction_token_trigger=100_000)
            agent = create_agent(
                model=replying_model(), tools=[], middleware=[middleware], checkpointer=saver
            )
            questions = [f"w{w} q{i}" for w in range(4) for i in range(5)]
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(lambda q: run_turn(agent, THREAD, q), questions))
            messages = agent.get_state({"configurable": {"thread_id": THREAD}}).values["messages"]
        stored = memory.get_thread(THREAD).messages()
    asked = [m.text for m in messages if m.type == "human"]
    assert sorted(asked) == sorted(questions)
    assert all(
        messages[i + 1].text == "reply to " + m.text for i, m in enumerate(messages) if m.type == "human"
    )
    assert [m.content for m in stored] == [m.text for m in messages]  # the same one order in both


def test_a_retry_makes_a_message_an_earlier_race_hid_visible(tmp_path: Path) -> None:
    """Before the lease, a racing append could store a message whose order slot another one overwrote:
    the retry was skipped as a duplicate and the message stayed invisible. Now the retry places it."""
    from remem.memory._records import messages_ns

    with Memory.from_url(f"sqlite:///{tmp_path / 'm.db'}", settings=Settings(embedder="fake")) as memory:
        thread = memory.thread("t", user_id="maya")
        thread.add_messages([{"role": "user", "content": "kept", "id": "a"}])
        hidden = {"id": "b", "role": "user", "content": "hidden", "timestamp": "", "seq": 0, "metadata": {}}
        memory.store.put(messages_ns("t"), "b", {**hidden, "thread_id": "t", "user_id": "maya"})
        assert [m.id for m in thread.messages()] == ["a"]  # stored, but not in the thread's order
        (again,) = thread.add_messages([{"role": "user", "content": "hidden", "id": "b"}])
        assert (again.id, again.seq) == ("b", 1)
        assert [(m.id, m.seq) for m in thread.messages()] == [("a", 0), ("b", 1)]
        assert thread.add_messages([{"role": "user", "content": "hidden", "id": "b"}]) == [again]


def _terminate_lease_sessions(url: str) -> int:
    """End every remem lease session on ``url``'s database (as a server restart would), from outside."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'remem-lease' AND datname = current_database()"
        ).fetchall()
    return len(rows)


@pytest.mark.postgres
def test_a_turn_whose_postgres_lease_died_writes_nothing_more(pg_url: str, tmp_path: Path) -> None:
    """The lease's session ends mid-turn; another process takes the lease and runs its turn; the first
    holder's next write fails with a clear StorageError instead of writing beside the new holder."""
    from remem import ScriptedChatModel
    from remem.errors import StorageError

    config = {"configurable": {"thread_id": THREAD}}
    acks = tmp_path / "acks.txt"
    with open_saver("postgres", pg_url) as saver:
        run_turn(agent_for(saver), THREAD, "first")

        def model(messages: Any) -> str:
            assert _terminate_lease_sessions(pg_url) >= 1  # this turn's lease session among them
            other = context().Process(target=turn_worker, args=("postgres", pg_url, 9, 1, str(acks)))
            other.start()
            other.join(60)
            assert other.exitcode == 0  # it took the lease this turn still believes it holds
            return "late reply"

        holder = agent_for(saver, model=ScriptedChatModel(default=model))
        with pytest.raises(
            StorageError, match=r"lease of thread 'shared'.*was lost.*This write was not made"
        ):
            run_turn(holder, THREAD, "doomed")
        assert acks.read_text().split() == ["w9", "q0"]
        history = list(saver.list(config))
        texts = [m.text for m in holder.get_state(config).values["messages"]]
        assert texts[-2:] == ["w9 q0", "reply to w9 q0"]
        assert "late reply" not in repr([(t.checkpoint["channel_values"], t.pending_writes) for t in history])
        parents = Counter(
            t.parent_config["configurable"]["checkpoint_id"] for t in history if t.parent_config
        )
        assert max(parents.values()) == 1
        run_turn(agent_for(saver), THREAD, "after")  # the lease is taken again: the next turn works
        assert holder.get_state(config).values["messages"][-1].text == "reply to after"


# ------------------------------------------------------------------------------ reads under the lease


def _decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many values each decode of a stored list decodes (remem's savers decode lists in one call)."""
    from remem.checkpoint import _codec

    counts: list[int] = []
    loads_many = _codec.loads_many

    def counting(serde: Any, blobs: Any) -> Any:
        counts.append(len(blobs))
        return loads_many(serde, blobs)

    monkeypatch.setattr(_codec, "loads_many", counting)
    return counts


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
def test_a_turn_decodes_the_thread_once(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    history = [(HumanMessage if i % 2 == 0 else AIMessage)(f"message {i}", id=f"m{i}") for i in range(300)]
    with open_saver(kind, _target(kind, tmp_path, request)) as saver:
        agent = agent_for(saver, strategy="filter")
        agent.update_state(
            {"configurable": {"thread_id": THREAD}}, {"messages": history}, as_node="delete_messages"
        )  # a finished turn, as a long thread is between turns
        counts = _decoded(monkeypatch)
        assert run_turn(agent, THREAD, "one more").text == "reply to one more"
        big = [n for n in counts if n >= len(history)]
        assert len(big) == 1, counts  # run_turn's read and LangGraph's share one decode
        counts.clear()
        agent.get_state({"configurable": {"thread_id": THREAD}})
        agent.get_state({"configurable": {"thread_id": THREAD}})
        assert len([n for n in counts if n >= len(history)]) == 2  # outside a lease: read as stock


@pytest.mark.parametrize("kind", matrix.backend_params("sqlite", "postgres"))
def test_a_read_kept_under_the_lease_is_never_stale_nor_shared(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from langchain_core.messages import HumanMessage

    target = _target(kind, tmp_path, request)
    config = {"configurable": {"thread_id": THREAD}}
    with open_saver(kind, target) as saver, open_saver(kind, target) as other:
        app = _echo_graph(saver)
        app.invoke({"messages": [("user", "first")]}, config)
        with thread_lease(checkpointer_lease_target(saver), THREAD, scope="checkpoint"):
            first = saver.get_tuple(config)
            assert first is not None
            first.checkpoint["channel_values"]["messages"].append(HumanMessage("changed by a reader"))
            first.checkpoint["channel_versions"]["messages"] = "changed"
            again = saver.get_tuple(config)
            assert again is not None and again.checkpoint == saver_free_read(other, config).checkpoint
            # A write the lease does not cover (another saver's update_state) is seen on the next read.
            _echo_graph(other).update_state(config, {"messages": [HumanMessage("from elsewhere", id="x")]})
            texts = [m.text for m in saver.get_tuple(config).checkpoint["channel_values"]["messages"]]
            assert texts[-1] == "from elsewhere"
            other.put_writes(saver.get_tuple(config).config, [("messages", [HumanMessage("w")])], "task")
            assert len(saver.get_tuple(config).pending_writes) == 1


def saver_free_read(saver: Any, config: Any) -> Any:
    """A read outside any lease, as stock LangGraph reads."""
    found = saver.get_tuple(config)
    assert found is not None
    return found


def test_an_async_run_whose_head_moved_is_refused(tmp_path: Path) -> None:
    from remem.checkpoint import AsyncSqliteSaver

    config = {"configurable": {"thread_id": THREAD}}

    async def main() -> list[str]:
        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "a.db")) as saver:
            app = _echo_graph(saver)
            await app.ainvoke({"messages": [("user", "first")]}, config)
            read = saver.aget_tuple

            async def racing(conf: Any) -> Any:
                found = await read(conf)
                if "__pregel_runtime" in conf["configurable"]:
                    saver.aget_tuple = read  # type: ignore[method-assign]  # the test's race, once
                    await app.ainvoke({"messages": [("user", "intruder")]}, config)
                return found

            saver.aget_tuple = racing  # type: ignore[method-assign]  # the test's race, once
            with pytest.raises(ThreadBusyError, match="moved on while this run was under way"):
                await app.ainvoke({"messages": [("user", "loser")]}, config)
            state = await app.aget_state(config)
            history = [t async for t in saver.alist(config)]
            parents = Counter(
                t.parent_config["configurable"]["checkpoint_id"] for t in history if t.parent_config
            )
            assert max(parents.values()) == 1
            return [m.text for m in state.values["messages"]]

    texts = asyncio.run(main())
    assert texts[-2:] == ["intruder", "reply to intruder"] and "loser" not in texts
