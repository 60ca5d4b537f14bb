"""Rate limits per model: token buckets shared by threads, 429 retries with backoff over real HTTP, the
error when a wait would be too long, and the limits applied by BudgetMiddleware. Clocks and sleeps are
injected: nothing here waits for real or asserts a wall-clock time."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.checkpoint.memory import InMemorySaver

from remem import build_agent, run_turn
from remem.agent import ledger_of, thread_config
from remem.config import load_settings
from remem.errors import ConfigError, RateLimitError
from remem.middleware import BudgetMiddleware
from remem.models import RateLimitedChatModel, ScriptedChatModel, chat_model_from_settings
from remem.usage import open_ledger
from remem.usage.ratelimit import Backoff, RateLimit, RateLimiter, shared_limiter
from tests.openai_server import openai_compatible_server


class FakeClock:
    """A monotonic clock that moves only when slept on (by any thread)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.slept.append(seconds)
            self.now += seconds


def _limiter(clock: FakeClock, max_wait: float = 600.0, **limits: RateLimit) -> RateLimiter:
    return RateLimiter(limits or {"m": RateLimit(2, None)}, max_wait=max_wait, clock=clock, sleep=clock.sleep)


def test_requests_per_minute_make_the_third_call_wait_for_the_bucket() -> None:
    clock = FakeClock()
    limiter = _limiter(clock, m=RateLimit(requests_per_minute=2))
    assert [limiter.acquire("m") for _ in range(3)] == [0.0, 0.0, pytest.approx(30.0)]
    assert clock.slept == [pytest.approx(30.0)]
    clock.now += 60  # a quiet minute refills the bucket, never past its size
    assert [limiter.acquire("m") for _ in range(3)] == [0.0, 0.0, pytest.approx(30.0)]


def test_tokens_per_minute_count_the_input_and_are_corrected_by_the_provider() -> None:
    clock = FakeClock()
    limiter = _limiter(clock, m=RateLimit(tokens_per_minute=1200))
    assert limiter.acquire("m", tokens=1000) == 0.0
    limiter.settle("m", counted=1000, actual=400)  # the provider counted fewer: 600 given back
    assert limiter.acquire("m", tokens=800) == 0.0
    # 1200 - 400 - 800 = 0 left: 300 more tokens wait 300 / (1200 / 60) = 15 s.
    assert limiter.acquire("m", tokens=300) == pytest.approx(15.0)


def test_a_model_without_a_row_takes_the_star_row_or_no_limit() -> None:
    clock = FakeClock()
    assert _limiter(clock, m=RateLimit(1)).acquire("other") == 0.0
    star = _limiter(clock, **{"*": RateLimit(1)})
    assert star.acquire("other") == 0.0
    assert star.acquire("other") == pytest.approx(60.0)


def test_a_wait_over_the_maximum_is_a_clear_error_and_takes_nothing() -> None:
    clock = FakeClock()
    limiter = _limiter(clock, max_wait=10.0, m=RateLimit(requests_per_minute=1))
    limiter.acquire("m")
    with pytest.raises(
        RateLimitError, match=r"1 requests per minute.*would wait 60.0 s.*REMEM_RATE_LIMIT_MAX_WAIT"
    ):
        limiter.acquire("m")
    assert clock.slept == []  # refused at once, no hang
    clock.now += 55  # the refused call took nothing: 5 s after the bucket's minute, a call waits 5 s
    assert limiter.acquire("m") == pytest.approx(5.0)
    assert RateLimitError.exit_code == 1


def test_threads_share_one_limiter_and_are_served_in_turn() -> None:
    clock = FakeClock()
    limiter = _limiter(clock, m=RateLimit(requests_per_minute=4))
    waits: list[float] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        waits.append(limiter.reserve("m"))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 4 fit the bucket; the other 4 are spaced by the refill rate (one per 15 s), whatever the order.
    assert sorted(waits) == pytest.approx([0, 0, 0, 0, 15, 30, 45, 60])


def test_the_process_shares_one_limiter_per_configuration() -> None:
    limits = '{"m": {"requests_per_minute": 3}}'
    one = load_settings(environ={"REMEM_RATE_LIMITS": limits}, config_file=None)
    two = load_settings(environ={"REMEM_RATE_LIMITS": limits}, config_file=None)
    found: list[RateLimiter | None] = []
    threads = [threading.Thread(target=lambda s=s: found.append(shared_limiter(s))) for s in (one, two) * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found[0] is not None and all(f is found[0] for f in found)
    other = load_settings(
        environ={"REMEM_RATE_LIMITS": '{"m": {"requests_per_minute": 4}}'}, config_file=None
    )
    assert shared_limiter(other) is not found[0]
    assert shared_limiter(load_settings(environ={}, config_file=None)) is None


def test_rate_limits_come_from_the_toml_file_and_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "remem.toml"
    path.write_text(
        '[remem]\nrate_limit_max_wait = 5\n[remem.rate_limits."gpt-4o-mini"]\nrequests_per_minute = 500\n'
        'tokens_per_minute = 200000\n[remem.rate_limits."*"]\nrequests_per_minute = 60\n'
    )
    settings = load_settings(environ={}, config_file=path)
    assert settings.rate_limits == (("*", 60.0, None), ("gpt-4o-mini", 500.0, 200000.0))
    limiter = RateLimiter.from_settings(settings)
    assert limiter.max_wait == 5.0 and limiter.limit("gpt-4o-mini") == RateLimit(500.0, 200000.0)
    for bad in ('{"m": {"requests_per_minute": 0}}', '{"m": {"rpm": 5}}', '{"m": {}}', "not json"):
        with pytest.raises(ConfigError, match="rate"):
            load_settings(environ={"REMEM_RATE_LIMITS": bad}, config_file=None)


# -- 429s from a real HTTP server -------------------------------------------------------------------------


def _settings(url: str, **more: str) -> Any:
    env = {"REMEM_LLM_MODEL": "local-model", "REMEM_LLM_BASE_URL": url, "REMEM_LLM_MAX_RETRIES": "3", **more}
    return load_settings(environ=env, config_file=None)


def _with_backoff(model: Any, settings: Any, clock: FakeClock) -> RateLimitedChatModel:
    assert isinstance(model, RateLimitedChatModel)
    backoff = Backoff.from_settings(settings, sleep=clock.sleep, rand=lambda: 1.0)
    return model.model_copy(update={"backoff": backoff})


def test_a_429_is_retried_with_backoff_honouring_retry_after() -> None:
    clock = FakeClock()
    failures = [(429, {"Retry-After": "7"}), (429, {}), (429, {"retry-after-ms": "2500"})]
    with openai_compatible_server(["Hello Ada."], failures=failures) as server:
        settings = _settings(server.url)
        model = _with_backoff(chat_model_from_settings(settings), settings, clock)
        agent = build_agent(model, strategy="filter", checkpointer=InMemorySaver())
        assert run_turn(agent, "t", "My name is Ada.").text == "Hello Ada."
    assert len(server.requests) == 4  # three refused, one answered: no other retries (the client's are off)
    # Retry-After 7 s; then backoff 0.5 * 2**1 = 1 s (jitter drawn at its top); then the 2.5 s asked.
    assert clock.slept == [pytest.approx(7.0), pytest.approx(1.0), pytest.approx(2.5)]
    ledger = ledger_of(agent)
    assert ledger is not None
    assert len(ledger.events(thread_id="t")) == 1  # one call paid for


def test_a_retry_after_longer_than_the_maximum_raises_at_once() -> None:
    clock = FakeClock()
    with openai_compatible_server(["never"], failures=[(429, {"Retry-After": "120"})]) as server:
        settings = _settings(server.url, REMEM_RATE_LIMIT_MAX_WAIT="30")
        model = _with_backoff(chat_model_from_settings(settings), settings, clock)
        agent = build_agent(model, strategy="filter", checkpointer=InMemorySaver())
        with pytest.raises(RateLimitError, match=r"120.0 s in all, longer than rate_limit_max_wait \(30 s"):
            run_turn(agent, "t", "anyone there?")
    assert len(server.requests) == 1 and clock.slept == []
    assert agent.get_state(thread_config("t")).values["messages"][-1].text == "anyone there?"  # kept


def test_429s_past_the_retries_give_up_with_a_rate_limit_error() -> None:
    clock = FakeClock()
    with openai_compatible_server(["never"], failures=[(429, {})] * 5) as server:
        settings = _settings(server.url, REMEM_LLM_MAX_RETRIES="2")
        model = _with_backoff(chat_model_from_settings(settings), settings, clock)
        with pytest.raises(RateLimitError, match=r"429 .* 3 times; gave up after 2 retries"):
            model.invoke("hi")
    assert len(server.requests) == 3 and len(clock.slept) == 2


def test_the_configured_model_waits_for_its_rate_limit_and_binds_tools() -> None:
    clock = FakeClock()
    with openai_compatible_server(["one", "two", "three"]) as server:
        settings = _settings(server.url, REMEM_RATE_LIMITS='{"local-model": {"requests_per_minute": 2}}')
        model = chat_model_from_settings(settings)
        assert isinstance(model, RateLimitedChatModel)
        limiter = RateLimiter.from_settings(settings, clock=clock, sleep=clock.sleep)
        model = model.model_copy(update={"limiter": limiter})

        def lookup(city: str) -> str:
            """Look up a city."""
            return city

        bound = model.bind_tools([lookup])
        assert [bound.invoke([HumanMessage(content="hi")]).text for _ in range(3)] == ["one", "two", "three"]
    assert clock.slept == [pytest.approx(30.0)]  # the third of three calls at 2 a minute waited
    assert server.requests[0]["tools"][0]["function"]["name"] == "lookup"  # the binding reached the client


def test_a_non_429_failure_is_not_retried_as_a_rate_limit() -> None:
    clock = FakeClock()
    with openai_compatible_server(["never"], status=503) as server:
        settings = _settings(server.url)
        model = _with_backoff(chat_model_from_settings(settings), settings, clock)
        with pytest.raises(Exception) as caught:
            model.invoke("hi")
    assert not isinstance(caught.value, RateLimitError)
    assert len(server.requests) == 1 and clock.slept == []


# -- BudgetMiddleware ----------------------------------------------------------------------------------


class _TooMany(Exception):
    status_code = 429


def test_budget_middleware_applies_the_limit_and_retries_a_429(tmp_path: Path) -> None:
    clock = FakeClock()
    model = ScriptedChatModel(replies=["first", _TooMany("slow down"), "second", "third"])
    limiter = RateLimiter({"scripted": RateLimit(requests_per_minute=2)}, clock=clock, sleep=clock.sleep)
    backoff = Backoff(sleep=clock.sleep, rand=lambda: 1.0)
    with open_ledger(f"sqlite:///{tmp_path / 'app.db'}") as ledger:
        budget = BudgetMiddleware(ledger, rate_limiter=limiter, backoff=backoff)
        agent = create_agent(model=model, tools=[], middleware=[budget], checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "t1"}}
        replies = [
            agent.invoke({"messages": [HumanMessage(content=text)]}, config)["messages"][-1].text
            for text in ("a", "b", "c")
        ]
        assert replies == ["first", "second", "third"]
        assert ledger.spent(thread_id="t1").calls == 3  # the refused attempt is not a paid call
    # The 429 was retried after 0.5 s (backoff, jitter at its top); the third call waited for the limit.
    assert len(model.calls) == 4
    assert clock.slept[0] == pytest.approx(0.5) and len(clock.slept) == 2
    assert clock.slept[1] == pytest.approx(30.0 - 0.5)


def test_budget_middleware_refuses_a_wait_over_the_maximum() -> None:
    clock = FakeClock()
    model = ScriptedChatModel(default="OK.")
    limiter = RateLimiter(
        {"*": RateLimit(requests_per_minute=1)}, max_wait=1.0, clock=clock, sleep=clock.sleep
    )
    agent = create_agent(
        model=model,
        tools=[],
        middleware=[BudgetMiddleware(rate_limiter=limiter)],
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t1"}}
    agent.invoke({"messages": [HumanMessage(content="a")]}, config)
    with pytest.raises(RateLimitError):
        agent.invoke({"messages": [HumanMessage(content="b")]}, config)
    assert len(model.calls) == 1
    messages = agent.get_state(config).values["messages"]
    assert [m.text for m in messages] == ["a", "OK.", "b"] and not isinstance(messages[-1], AIMessage)


# -- streaming ------------------------------------------------------------------------------------------


class _StreamingModel(BaseChatModel):
    """A fake provider that streams its reply word by word, then a usage chunk (or none); a 429 before
    the first chunk as many times as asked."""

    reply: str = "It is sunny in Lyon today."
    usage: bool = True
    refusals: int = 0
    streams: int = 0

    @property
    def _llm_type(self) -> str:
        return "fake-streaming"

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=self.reply))])

    def _chunks(self) -> list[ChatGenerationChunk]:
        words = self.reply.split(" ")
        chunks = [ChatGenerationChunk(message=AIMessageChunk(content=w + " ")) for w in words[:-1]]
        chunks.append(ChatGenerationChunk(message=AIMessageChunk(content=words[-1])))
        if self.usage:
            meta = {"input_tokens": 40, "output_tokens": 7, "total_tokens": 47}
            chunks.append(ChatGenerationChunk(message=AIMessageChunk(content="", usage_metadata=meta)))
        return chunks

    def _stream(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        self.streams += 1
        if self.refusals:
            self.refusals -= 1
            raise _TooMany("slow down")
        for chunk in self._chunks():
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    async def _astream(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        self.streams += 1
        if self.refusals:
            self.refusals -= 1
            raise _TooMany("slow down")
        for chunk in self._chunks():
            if run_manager is not None:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


def _streaming(inner: _StreamingModel, clock: FakeClock, tpm: int = 1200) -> tuple[Any, RateLimiter]:
    limiter = RateLimiter({"fake": RateLimit(tokens_per_minute=tpm)}, clock=clock, sleep=clock.sleep)
    backoff = Backoff(sleep=clock.sleep, rand=lambda: 1.0)
    return RateLimitedChatModel(inner=inner, limiter=limiter, backoff=backoff, model_name="fake"), limiter


def test_the_rate_limited_model_streams_the_providers_chunks_and_settles_from_its_usage() -> None:
    clock = FakeClock()
    inner = _StreamingModel()
    model, limiter = _streaming(inner, clock)
    chunks = [chunk.text for chunk in model.stream([HumanMessage(content="Weather in Lyon?")])]
    assert [c for c in chunks if c] == ["It ", "is ", "sunny ", "in ", "Lyon ", "today."]  # as they came
    assert inner.streams == 1
    # The provider's 47 tokens were charged, not the counted estimate: 1200 - 47 are left this minute.
    assert limiter.acquire("fake", tokens=1200 - 47) == 0.0
    assert limiter.acquire("fake", tokens=20) == pytest.approx(1.0)  # 20 tokens at 20 a second


def test_a_stream_without_usage_is_charged_its_counted_input_and_text() -> None:
    from langchain_core.messages.utils import count_tokens_approximately

    clock = FakeClock()
    inner = _StreamingModel(usage=False)
    model, limiter = _streaming(inner, clock)
    sent = [HumanMessage(content="Weather in Lyon?")]
    assert "".join(c.text for c in model.stream(sent)) == inner.reply
    used = count_tokens_approximately(sent) + count_tokens_approximately([AIMessage(content=inner.reply)])
    assert limiter.acquire("fake", tokens=1200 - used) == 0.0
    assert limiter.acquire("fake", tokens=1) > 0.0  # exactly what was used had been taken


def test_the_async_stream_and_an_agents_messages_stream_go_through_the_limit() -> None:
    import asyncio

    clock = FakeClock()
    inner = _StreamingModel(refusals=1)
    model, _ = _streaming(inner, clock, tpm=100_000)

    async def main() -> list[str]:
        return [chunk.text async for chunk in model.astream([HumanMessage(content="Weather?")])]

    assert "".join(asyncio.run(main())) == inner.reply
    assert inner.streams == 2 and clock.slept == [pytest.approx(0.5)]  # the 429 was retried
    # LangGraph's "messages" stream mode gets the provider's tokens one by one through the wrapper.
    agent = create_agent(model=model, tools=[], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t1"}}
    tokens = [
        message.text
        for message, _ in agent.stream(
            {"messages": [HumanMessage(content="Weather?")]}, config, stream_mode="messages"
        )
        if isinstance(message, AIMessageChunk)
    ]
    assert tokens[:3] == ["It ", "is ", "sunny "] and inner.streams == 3
