"""ContextCardMiddleware on LangChain's create_agent, and ContextCardNode in a StateGraph (scripted model)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import StructuredTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from remem import Memory, RememUsageError
from remem.memory import is_card_message
from remem.messages import is_provider_valid
from remem.middleware import ContextCardMiddleware, ContextCardNode
from remem.models import ScriptedChatModel
from remem.testing import offline_settings

SETTINGS = offline_settings()
LONG_SYSTEM_PROMPT = "You are a careful assistant who answers in full sentences. " * 40


@pytest.fixture
def memory(any_db_url: str) -> Iterator[Memory]:
    with Memory.from_url(any_db_url, settings=SETTINGS) as mem:
        yield mem


def _turns(agent: Any, texts: list[str], messages: list[BaseMessage] | None = None) -> list[BaseMessage]:
    """Play turns the way the guide does: the caller resends the whole returned list each time."""
    messages = [] if messages is None else messages
    for text in texts:
        messages.append(HumanMessage(content=text))
        messages[:] = agent.invoke({"messages": messages})["messages"]
    return messages


TEXTS = [f"Turn {i}: my note number {i} mentions the {w} project." for i, w in enumerate("abcdefghijklmnop")]


def test_each_turn_is_persisted_once_even_when_the_list_is_sent_again(memory: Memory) -> None:
    model = ScriptedChatModel(default=lambda msgs: f"Reply to: {msgs[-1].text}")
    mw = ContextCardMiddleware(memory, thread_id="t", user_id="u", compaction_token_trigger=100_000)
    agent = create_agent(model=model, tools=[], middleware=[mw])
    state = _turns(agent, TEXTS[:3])
    stored = memory.get_thread("t").messages()
    assert [m.role for m in stored] == ["user", "assistant"] * 3
    assert [m.id for m in stored] == [m.id for m in state]  # the caller's (state's) ids are kept
    # A fresh middleware (a restarted process) given the whole list again stores nothing twice.
    again = ContextCardMiddleware(memory, thread_id="t", user_id="u", compaction_token_trigger=100_000)
    _turns(create_agent(model=model, tools=[], middleware=[again]), TEXTS[3:4], list(state))
    assert len(memory.get_thread("t").messages()) == 8


def test_compaction_replaces_history_with_card_and_a_raw_tail(memory: Memory) -> None:
    model = ScriptedChatModel(default="Noted, thanks.")
    mw = ContextCardMiddleware(
        memory, thread_id="t", user_id="u", compaction_token_trigger=120, kept_message_count=3
    )
    agent = create_agent(model=model, tools=[], middleware=[mw])
    state = _turns(agent, TEXTS[:6])
    compacted = [call for call in model.calls if any(is_card_message(m) for m in call)]
    assert compacted, "the prompt passed the trigger and was compacted"
    first = compacted[0]
    assert is_card_message(first[0]) and first[0].type == "human"  # user role, never system
    assert first[0].text.startswith("<context_card>")
    assert [m.type for m in first[1:]] == ["human", "ai", "human"]  # the raw tail of 3
    assert first[-1].text == TEXTS[model.calls.index(first)]  # one model call per turn
    # The state was compacted too: one card, then the tail and the reply.
    assert sum(is_card_message(m) for m in state) == 1 and is_card_message(state[0])
    # The card is neither persisted nor counted: the thread holds exactly the 12 real turns.
    stored = memory.get_thread("t").messages()
    assert len(stored) == 12 and not any("context_card" in m.content for m in stored)
    for call in model.calls:
        assert is_provider_valid([m for m in call if not isinstance(m, SystemMessage)])


def test_external_tail_card_is_reused_until_the_trigger_is_passed_again(memory: Memory) -> None:
    model = ScriptedChatModel(default="ok")
    mw = ContextCardMiddleware(
        memory, thread_id="t", user_id="u", compaction_token_trigger=90, kept_message_count=2
    )
    agent = create_agent(model=model, tools=[], middleware=[mw])
    _turns(agent, TEXTS)
    cards = [call[0].text for call in model.calls if call and is_card_message(call[0])]
    assert len(cards) >= 3
    # Between compactions the very same card opens the prompt (so a provider's prompt cache holds).
    repeats = sum(1 for a, b in itertools.pairwise(cards) if a == b)
    assert repeats >= 1


def test_system_prompt_and_tool_schemas_count_toward_the_trigger(memory: Memory) -> None:
    @tool
    def lookup_invoice(invoice_id: str) -> str:
        """Look up an invoice by id in the accounting system and return its status, amount and due date."""
        return "paid"

    def run(system_prompt: str | None, tools: list[Any], thread_id: str) -> ScriptedChatModel:
        model = ScriptedChatModel(default="fine")
        mw = ContextCardMiddleware(
            memory, thread_id=thread_id, compaction_token_trigger=300, kept_message_count=1
        )
        agent = create_agent(model=model, tools=tools, system_prompt=system_prompt, middleware=[mw])
        _turns(agent, TEXTS[:2])
        return model

    bare = run(None, [], "bare")
    assert not any(is_card_message(m) for call in bare.calls for m in call)  # messages alone: under
    prompted = run(LONG_SYSTEM_PROMPT, [], "prompted")
    assert any(is_card_message(m) for m in prompted.calls[-1])  # system prompt pushes it over
    assert isinstance(prompted.calls[-1][0], SystemMessage)  # and the system prompt is kept
    tooled = run(None, [lookup_invoice, _big_tool()], "tooled")
    assert any(is_card_message(m) for m in tooled.calls[-1])  # tool schemas push it over


def _big_tool() -> Any:
    def reconcile_ledger(account: str, period: str, currency: str, strict: bool) -> str:
        return "done"

    description = (
        "Reconcile the ledger of an account for a period. " + "Explains every field in detail. " * 60
    )
    return StructuredTool.from_function(reconcile_ledger, description=description)


def test_the_tail_never_starts_with_a_tool_result(memory: Memory) -> None:
    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}"

    def script(messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, HumanMessage) and not is_card_message(last):
            return AIMessage(
                content="",
                tool_calls=[{"name": "weather", "args": {"city": "Lisbon"}, "id": f"c{len(messages)}"}],
            )
        return AIMessage(content="It is sunny in Lisbon.")

    model = ScriptedChatModel(default=script)
    mw = ContextCardMiddleware(
        memory, thread_id="tools", user_id="u", compaction_token_trigger=60, kept_message_count=1
    )
    agent = create_agent(model=model, tools=[weather], middleware=[mw])
    _turns(agent, ["What's the weather?", "And tomorrow?", "And the day after?"])
    compacted = [call for call in model.calls if call and is_card_message(call[0])]
    assert compacted
    for call in model.calls:
        assert is_provider_valid(call), call
        if is_card_message(call[0]) and len(call) > 1:
            assert not isinstance(call[1], ToolMessage)
    # Tool traffic is not persisted; user questions and final answers are.
    roles = [m.role for m in memory.get_thread("tools").messages()]
    assert set(roles) == {"user", "assistant"}


def test_self_contained_pattern_sends_the_card_alone(memory: Memory) -> None:
    model = ScriptedChatModel(default="ok")
    mw = ContextCardMiddleware(
        memory,
        thread_id="t",
        user_id="u",
        compaction_token_trigger=120,
        kept_message_count=3,
        pattern="self_contained",
    )
    agent = create_agent(model=model, tools=[], middleware=[mw])
    _turns(agent, TEXTS[:8])
    alone = [
        (turn, call) for turn, call in enumerate(model.calls) if len(call) == 1 and is_card_message(call[0])
    ]
    assert alone, "a compacting call sends the card alone"
    turn, call = alone[0]
    assert "<recent_messages>" in call[0].text and TEXTS[turn] in call[0].text
    assert call[0].text.count(TEXTS[turn]) == 1


async def test_async_agent_compacts_and_persists(memory: Memory) -> None:
    model = ScriptedChatModel(default="ok")
    mw = ContextCardMiddleware(
        memory,
        thread_id="a",
        user_id="u",
        compaction_token_trigger=80,
        kept_message_count=3,
        recall_results=1,
    )
    agent = create_agent(model=model, tools=[], middleware=[mw])
    messages: list[BaseMessage] = []
    for text in TEXTS[:5]:
        messages.append(HumanMessage(content=text))
        messages = (await agent.ainvoke({"messages": messages}))["messages"]
    assert any(is_card_message(m) for m in model.calls[-1])
    assert len(await (await memory.aget_thread("a")).amessages()) == 10
    assert any(m.name == "memory_recall" for call in model.calls for m in call)


def test_thread_id_comes_from_the_run_config_when_not_given(memory: Memory) -> None:
    model = ScriptedChatModel(default="ok")
    agent = create_agent(model=model, tools=[], middleware=[ContextCardMiddleware(memory, user_id="u")])
    agent.invoke(
        {"messages": [HumanMessage(content="hello", id="h1")]}, {"configurable": {"thread_id": "cfg"}}
    )
    assert memory.get_thread("cfg").messages()[0].id == "h1"
    with pytest.raises(RememUsageError, match="thread_id"):
        agent.invoke({"messages": [HumanMessage(content="hello")]})


def test_settings_are_checked() -> None:
    memory = Memory.from_url("memory://", settings=SETTINGS)
    with pytest.raises(RememUsageError, match="pattern"):
        ContextCardMiddleware(memory, thread_id="t", pattern="middle")  # type: ignore[arg-type]
    with pytest.raises(RememUsageError, match="compaction_token_trigger"):
        ContextCardMiddleware(memory, thread_id="t", compaction_token_trigger=0)
    with pytest.raises(RememUsageError, match="kept_message_count"):
        ContextCardNode(memory, thread_id="t", kept_message_count=-1)
    with pytest.raises(RememUsageError, match="recall_results"):
        ContextCardMiddleware(memory, thread_id="t", recall_results=-1)


def test_an_option_neither_takes_is_refused_as_a_signature_would_refuse_it() -> None:
    # The options are written once (CardOptions) and taken as keywords, so a misspelt one must still fail.
    memory = Memory.from_url("memory://", settings=SETTINGS)
    with pytest.raises(TypeError, match="'kept_mesage_count'; did you mean 'kept_message_count'"):
        ContextCardMiddleware(memory, kept_mesage_count=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="ContextCardNode does no per-turn recall: recall_results"):
        ContextCardNode(memory, recall_results=2)  # type: ignore[call-arg]
    node = ContextCardNode(memory, system_prompt="be brief", card_token_budget=900, kept_message_count=1)
    assert (node.compactor.card_token_budget, node.compactor.kept, node.compactor.trigger) == (900, 1, 6000)
    middleware = ContextCardMiddleware(memory, recall_results=2)
    assert (middleware.compactor.recall_results, middleware.compactor.recall_token_budget) == (2, 400)


def test_node_in_a_state_graph(memory: Memory) -> None:
    model = ScriptedChatModel(default="ok")
    node = ContextCardNode(memory, user_id="u", compaction_token_trigger=80, kept_message_count=2)

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("memory", node)
    builder.add_node("model", call_model)
    builder.add_edge(START, "memory")
    builder.add_edge("memory", "model")
    graph = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "graph"}}
    for text in TEXTS[:6]:
        graph.invoke({"messages": [HumanMessage(content=text)]}, config)
    state = graph.get_state(config).values["messages"]
    assert is_card_message(state[0])
    assert any(is_card_message(call[0]) for call in model.calls)
    # Replies are persisted by the next call of the node: all but the last one are stored.
    assert len(memory.get_thread("graph").messages()) == 11


async def test_async_node(memory: Memory) -> None:
    node = ContextCardNode(memory, thread_id="n", compaction_token_trigger=40, kept_message_count=1)
    messages: list[BaseMessage] = [HumanMessage(content=t, id=f"h{i}") for i, t in enumerate(TEXTS[:3])]
    update = await node.acall({"messages": messages})
    assert is_card_message(update["messages"][1]) and update["messages"][2].id == "h2"
    assert await node.arecord({"messages": messages}) == {}
    assert [m.id for m in memory.get_thread("n").messages()] == ["h0", "h1", "h2"]


def test_per_turn_recall_follows_the_question_and_keeps_the_prefix(memory: Memory) -> None:
    model = ScriptedChatModel(default="ok")
    mw = ContextCardMiddleware(
        memory,
        thread_id="r",
        user_id="u",
        compaction_token_trigger=90,
        kept_message_count=2,
        recall_results=2,
    )
    agent = create_agent(model=model, tools=[], middleware=[mw])
    facts = ["My sister Ingrid moved to Trondheim.", *TEXTS[:6], "Where did my sister Ingrid move to?"]
    state = _turns(agent, facts)
    last = model.calls[-1]
    recalls = [m for m in last if m.name == "memory_recall"]
    assert len(recalls) == 1 and "Trondheim" in recalls[0].text
    index = last.index(recalls[0])
    assert last[index - 1].text == facts[-1]  # right after the question: the prefix before it is unchanged
    assert _recall_root(recalls[0].text)
    assert not any(m.name == "memory_recall" for m in state)  # never stored in the state...
    assert not any(
        "recalled_memory" in m.content for m in memory.get_thread("r").messages()
    )  # ...nor persisted
    ids_in_prompt = {m.id for m in last if m.id}
    assert not any(f'record_id="{i}"' in recalls[0].text for i in ids_in_prompt)  # nothing already in view


def _recall_root(text: str) -> bool:
    import xml.etree.ElementTree as ET

    return ET.fromstring(text).tag == "recalled_memory"


def test_thread_recall_excludes_and_fits_its_budget(memory: Memory) -> None:
    thread = memory.thread("rc", user_id="u")
    thread.add_messages(
        [{"role": "user", "content": f"fact {i} about the ledger job", "id": f"f{i}"} for i in range(6)]
    )
    recall = thread.recall("ledger job", 3, exclude_ids=["f0", "f1"], token_budget=80)
    assert recall.records and len(recall.records) <= 3
    assert {r.id for r in recall.records}.isdisjoint({"f0", "f1"})
    assert recall.token_count <= 80 and memory.count_text(recall.content) <= 80
    assert thread.recall("ledger job", 3, token_budget=5).content == ""


@pytest.mark.parametrize("pattern", ["external_tail", "self_contained"])
def test_the_latest_question_always_reaches_the_model(memory: Memory, pattern: str) -> None:
    model = ScriptedChatModel(default="ok")
    mw = ContextCardMiddleware(
        memory,
        thread_id=f"q-{pattern}",
        compaction_token_trigger=60,
        kept_message_count=0,
        pattern=pattern,  # type: ignore[arg-type]
    )
    agent = create_agent(model=model, tools=[], middleware=[mw])
    _turns(agent, TEXTS[:5])
    assert any(call and is_card_message(call[0]) for call in model.calls)
    for turn, call in enumerate(model.calls):
        question = TEXTS[turn]
        if len(call) == 1 and is_card_message(call[0]):  # self-contained: the card holds the question
            assert pattern == "self_contained"
            assert "<recent_messages>" in call[0].text and question in call[0].text
        else:
            assert call[-1].text == question


def test_with_a_checkpointer_the_caller_sends_only_the_new_message(memory: Memory) -> None:
    model = ScriptedChatModel(default="ok")
    mw = ContextCardMiddleware(memory, user_id="u", compaction_token_trigger=80, kept_message_count=2)
    agent = create_agent(model=model, tools=[], middleware=[mw], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "saved"}}
    for text in TEXTS[:8]:
        agent.invoke({"messages": [HumanMessage(content=text)]}, config)
    state = agent.get_state(config).values["messages"]
    assert is_card_message(state[0]) and sum(is_card_message(m) for m in state) == 1
    stored = memory.get_thread("saved").messages()
    assert [m.content for m in stored if m.role == "user"] == TEXTS[:8]
    assert len(stored) == 16


def test_ids_with_dots_work_in_the_middleware_as_in_stock_savers(memory: Memory) -> None:
    model = ScriptedChatModel(default=lambda msgs: f"Reply to: {msgs[-1].text}")
    mw = ContextCardMiddleware(
        memory, thread_id="tenant.42.chat", user_id="maya@example.com", compaction_token_trigger=100_000
    )
    _turns(create_agent(model=model, tools=[], middleware=[mw]), TEXTS[:2])
    stored = memory.get_thread("tenant.42.chat")
    assert stored.user_id == "maya@example.com"
    assert [m.role for m in stored.messages()] == ["user", "assistant"] * 2
