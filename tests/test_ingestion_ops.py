"""Ingestions and the rest of the system: an erasure during a load, the jobs an undo leaves queued, an
import of stock checkpoints and an extraction run as ingestions."""

from __future__ import annotations

import json

from remem import Memory
from remem.ingestion import begin_ingestion, get_ingestion, list_ingestions, undo_ingestion
from remem.testing import offline_settings

SETTINGS = offline_settings()


def test_a_load_in_flight_does_not_write_an_erased_user_back(db_url: str) -> None:
    """A load names maya, maya is erased while it runs, then the load goes on (names another thread and
    closes): the entry it writes keeps none of maya's ids. Before, each save wrote the load's whole entry
    back, erased ids included."""
    from remem.erasure import erase

    with Memory.from_url(db_url, settings=SETTINGS) as memory:
        ing = begin_ingestion(memory, kind="load", source="crm.jsonl")
        ing.add_messages(
            "maya-chat", [{"role": "user", "content": "maya likes kites", "id": "m1"}], user_id="maya"
        )
        ing.add_memories("maya", ["prefers email"])
        assert "maya" in json.dumps(get_ingestion(memory, ing.id).to_value())

        erase(db_url, user_id="maya")  # between two writes of the load

        ing.add_messages(
            "bob-chat", [{"role": "user", "content": "bob likes boats", "id": "b1"}], user_id="bob"
        )
        ing.close()
        entry = get_ingestion(memory, ing.id)
        assert "maya" not in json.dumps(entry.to_value())
        assert entry.threads == {"bob-chat": True} and entry.users == [] and entry.state == "done"
        assert undo_ingestion(memory, ing.id).messages == 1


def test_a_load_erased_whole_while_loading_leaves_no_entry(db_url: str) -> None:
    from remem.erasure import erase

    with Memory.from_url(db_url, settings=SETTINGS) as memory:
        ing = begin_ingestion(memory, kind="load", source="maya.jsonl")
        ing.add_memories("maya", ["prefers email"])
        erase(db_url, user_id="maya")
        ing.close()
        assert [e.id for e in list_ingestions(memory)] == []


def test_an_undo_takes_out_the_jobs_queued_on_what_it_removes(db_url: str) -> None:
    """The load's summary refreshes and the extraction jobs of its messages leave the queue (queued or
    parked); an extraction job holding one of the thread's own messages too keeps that one; other threads'
    jobs stay. Before, the undo left them queued (the runbook said to park them by hand)."""
    from langchain_core.messages import HumanMessage

    from remem.extraction.tools import enqueue_extraction
    from remem.jobs import open_queue

    with Memory.from_url(db_url, settings=SETTINGS) as memory, open_queue(db_url) as queue:
        memory.thread("t1", user_id="maya").add_messages(
            [{"role": "user", "content": "I live in Paris.", "id": "a1"}]
        )
        with begin_ingestion(memory, kind="load", queue=queue) as ing:
            ing.add_messages("t1", [{"role": "user", "content": "I moved to Lyon.", "id": "b1"}])
            ing.add_messages("t2", [{"role": "user", "content": "zebra day", "id": "c1"}], user_id="maya")
        mixed = enqueue_extraction(
            queue,
            [HumanMessage("I live in Paris.", id="a1"), HumanMessage("I moved to Lyon.", id="b1")],
            user_id="maya",
            thread_id="t1",
        )
        loaded = enqueue_extraction(
            queue, [HumanMessage("zebra day", id="c1")], user_id="maya", thread_id="t2"
        )
        other = enqueue_extraction(queue, [HumanMessage("kites", id="k1")], user_id="bob", thread_id="t3")
        assert loaded is not None and queue.park(loaded, "endpoint down") == 1

        report = undo_ingestion(memory, ing.id, queue=queue)

        assert report.jobs == 4  # two summary refreshes, one extraction cut, one removed
        jobs = sorted((j.kind, j.thread_id, j.status) for j in queue.jobs())
        assert jobs == [
            ("extraction", "t1", "queued"),
            ("extraction", "t3", "queued"),
            ("summary", "t1", "queued"),
        ]
        assert mixed is not None and other is not None
        assert [m["data"]["id"] for m in queue.get(mixed).payload["messages"]] == ["a1"]
        assert [m["data"]["id"] for m in queue.get(other).payload["messages"]] == ["k1"]
        again = undo_ingestion(memory, ing.id, queue=queue)
        assert again.jobs == 4 and len(queue.jobs()) == 3  # done: nothing more taken out


def _valid(memory: Memory, user: str) -> list[str]:
    from remem.layout import user_memories

    items = memory.store.search(user_memories(user), limit=50)
    return sorted(i.value["content"] for i in items if i.value.get("valid"))


def test_an_extraction_run_outside_a_turn_is_an_ingestion_its_undo_takes_back(db_url: str) -> None:
    """A backfill extraction over a thread, as one ingestion: the memory it adds goes, the memory it
    superseded is valid again, the watermark is back where the run found it, so extraction redoes it.
    Before, an extraction run left no id on what it wrote."""
    import re

    from langchain_core.messages import BaseMessage

    from remem import ScriptedChatModel
    from remem.extraction import MemoryExtractor
    from remem.layout import EXTRACTION_STATE_KEY, INGESTION_MEMORY_KEY, extraction_state, user_memories

    def found(*memories: dict[str, object]) -> str:
        return json.dumps({"memories": list(memories)})

    def supersede(messages: list[BaseMessage]) -> str:
        target = re.search(r'memory id="([^"]+)"', str(messages[-1].content))
        assert target is not None
        decision = {
            "candidate": 0,
            "action": "update",
            "target_id": target.group(1),
            "text": "Maya lives in Lyon",
        }
        return json.dumps({"decisions": [decision]})

    with Memory.from_url(db_url, settings=SETTINGS) as memory:
        thread = memory.thread("t1", user_id="maya")
        thread.add_messages([{"role": "user", "content": "I live in Paris.", "id": "a1"}])
        first = ScriptedChatModel(replies=[found({"kind": "fact", "text": "Maya lives in Paris"})])
        MemoryExtractor(memory.store, first).run(
            [m.to_langchain() for m in thread.messages()], user_id="maya", thread_id="t1"
        )
        thread.add_messages([{"role": "user", "content": "I moved to Lyon.", "id": "a2"}])
        model = ScriptedChatModel(replies=[found({"kind": "fact", "text": "Maya lives in Lyon"}), supersede])

        with begin_ingestion(memory, kind="extraction", source="backfill") as ing:
            result = ing.extract(MemoryExtractor(memory.store, model), thread_id="t1")

        assert len(result.updated) == 1 and _valid(memory, "maya") == ["Maya lives in Lyon"]
        (new,) = [i for i in memory.store.search(user_memories("maya")) if i.value.get(INGESTION_MEMORY_KEY)]
        assert new.value[INGESTION_MEMORY_KEY] == ing.id
        assert get_ingestion(memory, ing.id).as_row()["memories"] == 1

        report = undo_ingestion(memory, ing.id)

        assert (report.memories, report.memories_restored, report.messages) == (1, 1, 0)
        assert _valid(memory, "maya") == ["Maya lives in Paris"]
        state = memory.store.get(extraction_state("t1"), EXTRACTION_STATE_KEY)
        assert state is not None and state.value["watermark"] == "a1"
        assert [m.id for m in memory.get_thread("t1").messages()] == ["a1", "a2"]  # the thread's own stay
        again = ScriptedChatModel(replies=[found({"kind": "fact", "text": "Maya lives in Lyon"}), supersede])
        redo = MemoryExtractor(memory.store, again).run(
            [m.to_langchain() for m in memory.get_thread("t1").messages()], user_id="maya", thread_id="t1"
        )
        assert redo.new_messages == 1 and _valid(memory, "maya") == ["Maya lives in Lyon"]


def _stock_graph(saver: object) -> object:
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    def reply(state: MessagesState) -> dict[str, object]:
        said = state["messages"][-1].content
        return {"messages": [AIMessage(f"noted: {said}", id=f"ai-{len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)  # type: ignore[arg-type]


def _talk_on_stock(db_url: str) -> None:
    """Two threads written by LangGraph's stock saver, in the database remem imports into."""
    from contextlib import ExitStack

    from langchain_core.messages import HumanMessage

    with ExitStack() as stack:
        if db_url.startswith("sqlite"):
            from langgraph.checkpoint.sqlite import SqliteSaver

            saver: object = stack.enter_context(
                SqliteSaver.from_conn_string(db_url.removeprefix("sqlite:///"))
            )
        else:
            from langgraph.checkpoint.postgres import PostgresSaver

            saver = stack.enter_context(PostgresSaver.from_conn_string(db_url))
        saver.setup()  # type: ignore[attr-defined]
        graph = _stock_graph(saver)
        for thread, words in (("s1", ["I keep a zebra", "and two kites"]), ("s2", ["the boat is blue"])):
            for n, text in enumerate(words):
                config = {"configurable": {"thread_id": thread}}
                graph.invoke({"messages": [HumanMessage(text, id=f"{thread}-h{n}")]}, config)  # type: ignore[attr-defined]


def _said(word: str, memory: Memory) -> set[str]:
    """The threads whose messages a store search for ``word`` finds (by keyword or vector)."""
    from remem.layout import is_thread_messages, thread_id_of, threads_root

    hits = memory.store.search(threads_root(), query=word, limit=50)
    return {
        str(thread_id_of(h.namespace))
        for h in hits
        if is_thread_messages(h.namespace) and word in str(h.value)
    }


def test_remem_import_is_an_ingestion_that_undo_takes_back_whole(db_url: str) -> None:
    """`remem import` copies the stock threads' checkpoints and puts their conversations in the memory
    threads (searchable), all under one ingestion id; `remem ingest undo` deletes both and leaves what was
    there before, and the stock tables, as they were. A thread continued after the import is not cut:
    the undo refuses and says what to do. Before, an import had no id and could not be undone."""
    from click.testing import CliRunner

    from remem.checkpoint import checkpointer_from_url
    from remem.cli import main
    from remem.errors import NotFoundError
    from remem.layout import INGESTION_MESSAGE_KEY

    def cli(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(main, [*args, "--db", db_url], env={"REMEM_EMBEDDER": "fake"})
        return result.exit_code, result.output

    with Memory.from_url(db_url, settings=SETTINGS) as memory:
        memory.thread("mine", user_id="maya").add_messages(
            [{"role": "user", "content": "my own zebra", "id": "o1"}]
        )
    _talk_on_stock(db_url)

    code, out = cli("import")
    assert code == 0 and "of 2 thread(s)" in out and "ingestion ing-" in out, out
    with Memory.from_url(db_url, settings=SETTINGS) as memory, checkpointer_from_url(db_url) as saver:
        assert sorted(saver.list_threads()) == ["s1", "s2"]  # type: ignore[attr-defined]
        s1 = memory.get_thread("s1").messages()
        assert [m.content for m in s1] == [
            "I keep a zebra",
            "noted: I keep a zebra",
            "and two kites",
            "noted: and two kites",
        ]
        (ingestion_id,) = {m.metadata[INGESTION_MESSAGE_KEY] for m in s1}
        assert _said("zebra", memory) == {"s1", "mine"}
        entry = get_ingestion(memory, ingestion_id)
        assert (entry.kind, entry.state, entry.added["messages"]) == ("import", "done", 6)

    code, out = cli("ingest", "undo", "--last", "--json")
    assert code == 0, out
    assert (
        json.loads(out)["threads' checkpoints deleted"] == "2" and json.loads(out)["messages removed"] == "6"
    )
    with Memory.from_url(db_url, settings=SETTINGS) as memory, checkpointer_from_url(db_url) as saver:
        assert saver.list_threads() == []  # type: ignore[attr-defined]
        for thread in ("s1", "s2"):
            try:
                memory.get_thread(thread)
                raise AssertionError(f"{thread} is still there")
            except NotFoundError:
                pass
        assert _said("zebra", memory) == {"mine"}  # its keyword rows and vectors went with it
        assert [m.id for m in memory.get_thread("mine").messages()] == ["o1"]

    code, out = cli("import")  # a new ingestion: the stock tables were left as they were
    assert code == 0 and "of 2 thread(s)" in out, out
    from langchain_core.messages import HumanMessage

    with checkpointer_from_url(db_url) as saver:
        graph = _stock_graph(saver)
        graph.invoke(
            {"messages": [HumanMessage("one more", id="s1-more")]}, {"configurable": {"thread_id": "s1"}}
        )  # type: ignore[attr-defined]
    code, out = cli("ingest", "undo", "--last")
    assert (
        code == 2 and "'s1'" in out and "went on after the import" in out and "remem forget --thread" in out
    ), out
    assert cli("forget", "--thread", "s1", "--yes")[0] == 0
    code, out = cli("ingest", "undo", "--last", "--json")
    assert code == 0 and json.loads(out)["threads' checkpoints deleted"] == "1", out
