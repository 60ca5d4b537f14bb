"""Compaction benchmark: what each memory strategy sends to the model over a long conversation (no LLM).

    python bench/compaction.py [--turns 300] [--budget 2000] [--thread-messages 10000] [--memories 100000]

Part 1 plays one scripted conversation (user and assistant turns, facts planted throughout and asked about
later) through four strategies, and counts the tokens each would send to the model every turn:

- naive: the whole history;
- trim: the newest messages that fit the prompt budget (``remem.strategies.TrimStrategy``);
- rolling summary: older messages folded into an extractive summary (``SummaryStrategy``);
- card: LangChain's ``create_agent`` with ``remem.middleware.ContextCardMiddleware`` (external tail: card
  + the last raw messages), without and with per-turn recall; the tokens counted are those the (scripted)
  model was actually sent.

For every planted fact, at the turn it is asked about: is its source turn in what the model sees (raw, or
recalled verbatim in the card), and is the fact itself there (in any form, e.g. a summary)?

Part 2 times card builds on a SQLite store holding a thread of ``--thread-messages`` messages and
``--memories`` long-term memories (all of one user, then spread over 100 users), one turn at a time
(two new messages, then a card), and reports p50/p95.
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.store.base import PutOp

from remem import Memory
from remem.messages import approximate_token_count
from remem.middleware import ContextCardMiddleware
from remem.models import ScriptedChatModel
from remem.store import SqliteStore
from remem.strategies import SummaryStrategy, TrimStrategy, build_view
from remem.summarize import ExtractiveSummarizer
from remem.testing import FakeEmbedder

SYSTEM = SystemMessage(content="You are a helpful assistant. Answer from what you know about the user.")
_WORDS_TEXT = """project plan meeting budget report deadline team review design code test release feature bug
customer support ticket email call schedule weekend travel train coffee lunch dinner weather rain
sunny garden book movie music concert gym running bike walk kitchen recipe bread soup salad market
price invoice payment bank account ledger workflow database server cloud backup network laptop phone
screen keyboard printer office desk chair window door street city park river bridge museum school
lesson course exam homework notes idea question answer problem solution option choice reason detail
summary draft version update change request approval decision policy rule process step task list
morning evening afternoon night today tomorrow yesterday week month year season holiday trip hotel
flight ticket bag map guide photo camera video podcast article news story chapter page topic"""
WORDS = _WORDS_TEXT.split()
_RELATIONS_TEXT = """sister dentist landlord manager neighbour accountant coach cousin mentor plumber uncle teacher
doctor lawyer barber tailor banker pharmacist gardener architect editor nurse pilot chef baker
florist vet optician therapist trainer"""
RELATIONS = _RELATIONS_TEXT.split()
_NAMES_TEXT = """Ingrid Tomasz Aiko Bongani Carmela Dariusz Esperanza Fintan Gulnara Hamish Ilse Joaquim Kalinda
Leocadio Marisol Nnamdi Oksana Pasquale Quilla Radovan Saoirse Teodoro Ulrika Vasco Wanjiru Xiomara
Yannick Zuzanna Anselm Beatriz"""
NAMES = _NAMES_TEXT.split()
_CITIES_TEXT = """Trondheim Ljubljana Valparaiso Timisoara Arequipa Tromso Gdansk Brasov Cuenca Aarhus Bergamo Cluj
Debrecen Esbjerg Faro Graz Haarlem Innsbruck Jyvaskyla Kaunas Leuven Maribor Nantes Olomouc Porto
Rijeka Salzburg Tartu Uppsala Vilnius"""
CITIES = _CITIES_TEXT.split()


@dataclass(frozen=True)
class Fact:
    index: int
    planted_turn: int
    asked_turn: int
    statement: str
    question: str
    answer: str


@dataclass
class Turn:
    user: str
    reply: str
    plants: Fact | None = None
    asks: Fact | None = None


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def conversation(turns: int, facts: int, seed: int = 7) -> tuple[list[Turn], list[Fact]]:
    """A scripted conversation: chit-chat, with ``facts`` facts planted and each asked 15-120 turns later."""
    rng = random.Random(seed)
    script = [
        Turn(user=_sentence(rng, rng.randint(25, 45)), reply=_sentence(rng, rng.randint(40, 70)))
        for _ in range(turns)
    ]
    planted: list[Fact] = []
    spacing = max((turns - 20) // max(facts, 1), 1)
    for i in range(facts):
        plant = 2 + i * spacing
        ask = min(plant + rng.randint(15, 120), turns - 1)
        while script[ask].asks is not None or script[ask].plants is not None:
            ask = ask - 1 if ask > plant + 1 else ask + 1
        if ask >= turns or script[plant].asks is not None:
            continue
        rel, name, city = RELATIONS[i % len(RELATIONS)], NAMES[i % len(NAMES)], CITIES[i % len(CITIES)]
        fact = Fact(
            i,
            plant,
            ask,
            statement=f"By the way, my {rel} {name} moved to {city} last month, please remember that.",
            question=f"Quick check: where did my {rel} {name} move to?",
            answer=city,
        )
        script[plant].user = fact.statement + " " + script[plant].user
        script[plant].plants = fact
        script[ask].user = fact.question
        script[ask].asks = fact
        planted.append(fact)
    return script, planted


# --- strategies: each returns what the model would see for this turn -----------------------------


class Naive:
    name = "naive (full history)"

    def __init__(self) -> None:
        self.state: list[BaseMessage] = [SYSTEM]

    def view(self) -> list[BaseMessage]:
        return list(self.state)

    def turn(self, user: HumanMessage, reply: AIMessage) -> list[BaseMessage]:
        """What the model sees for ``user``; then ``reply`` is the model's answer."""
        self.state.append(user)
        seen = self.view()
        self.after(reply)
        return seen

    def after(self, reply: AIMessage) -> None:
        self.state.append(reply)


class Trim(Naive):
    name = "trim (last messages in budget)"

    def __init__(self, budget: int) -> None:
        super().__init__()
        self.strategy = TrimStrategy(max_tokens=budget)

    def view(self) -> list[BaseMessage]:
        return build_view(self.strategy.view_plan(self.state))


class RollingSummary(Naive):
    name = "rolling summary (extractive)"

    def __init__(self, budget: int) -> None:
        super().__init__()
        self.summary = ""
        self.summarizer = ExtractiveSummarizer(max_tokens=budget // 3)
        self.strategy = SummaryStrategy(keep=4, trigger_messages=0, trigger_tokens=budget - budget // 3 - 200)

    def view(self) -> list[BaseMessage]:
        return build_view(self.strategy.view_plan(self.state, self.summary), self.summary)

    def after(self, reply: AIMessage) -> None:
        self.state.append(reply)
        plan = self.strategy.compaction_plan(self.state, self.summary)
        if plan is not None:
            self.summary = self.summarizer.summarize(self.summary, plan.summarize).text
            self.state = [*plan.system, *plan.kept]


class Card(Naive):
    """LangChain's create_agent with remem's ContextCardMiddleware; the view is what the model was sent."""

    def __init__(self, memory: Memory, budget: int, card_budget: int, recall: int = 0) -> None:
        super().__init__()
        self.name = "context card (remem)" + (f" + recall {recall}/turn" if recall else "")
        recall_budget = 300 if recall else 0
        self.model = ScriptedChatModel(default=lambda _: self.next_reply)
        self.next_reply = ""
        middleware = ContextCardMiddleware(
            memory,
            thread_id=f"bench-{recall}",
            user_id="bench-user",
            compaction_token_trigger=budget - card_budget - recall_budget,
            kept_message_count=4,
            card_token_budget=card_budget,
            max_relevant_results=5,
            context_summary_update_frequency=4,
            recall_results=recall,
            recall_token_budget=recall_budget or 1,
        )
        self.agent = create_agent(
            model=self.model, tools=[], system_prompt=str(SYSTEM.content), middleware=[middleware]
        )
        self.state = []  # the system prompt is the agent's, not the state's

    def turn(self, user: HumanMessage, reply: AIMessage) -> list[BaseMessage]:
        self.next_reply = str(reply.content)
        self.state = self.agent.invoke({"messages": [*self.state, user]})["messages"]
        return list(self.model.calls[-1])


# --- part 1 -------------------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    tokens: list[int] = field(default_factory=list)
    source_seen: int = 0
    fact_seen: int = 0


def _text(view: Sequence[BaseMessage]) -> str:
    return "\n".join(m.text for m in view)


def play(strategies: Sequence[Naive], script: Sequence[Turn]) -> list[Result]:
    results = [Result(s.name) for s in strategies]
    for n, turn in enumerate(script):
        user = HumanMessage(content=turn.user, id=f"u{n}")
        reply = AIMessage(content=turn.reply, id=f"a{n}")
        for strategy, result in zip(strategies, results, strict=True):
            view = strategy.turn(user, reply)
            result.tokens.append(approximate_token_count(view))
            if turn.asks is not None:
                seen = _text(view)
                result.source_seen += turn.asks.statement in seen
                result.fact_seen += turn.asks.answer in seen
    return results


def _embedder() -> tuple[Any, str]:
    try:
        from remem.embeddings import default_embedder

        embedder = default_embedder()
        embedder.embed_query("warm up")
        return embedder, "MiniLM-L6-v2 int8 (ONNX)"
    except Exception as exc:  # no model files: say so and fall back
        print(f"(MiniLM unavailable: {exc}; using the fake embedder)", file=sys.stderr)
        return FakeEmbedder(dims=384), "FakeEmbedder"


def part_one(turns: int, facts: int, budget: int, card_budget: int, folder: Path) -> None:
    script, planted = conversation(turns, facts)
    embedder, embedder_name = _embedder()
    index = {"dims": int(embedder.dims), "embed": embedder, "fields": ["content"]}
    with SqliteStore.from_conn_string(str(folder / "conversation.db"), index=index) as store:
        memory = Memory(store)
        strategies = [
            Naive(),
            Trim(budget),
            RollingSummary(budget),
            Card(memory, budget, card_budget),
            Card(memory, budget, card_budget, recall=3),
        ]
        started = time.perf_counter()
        results = play(strategies, script)
        elapsed = time.perf_counter() - started
    naive_total = sum(results[0].tokens)
    print(
        f"\n## Part 1: {turns} turns ({2 * turns} messages), {len(planted)} planted facts, prompt budget {budget} "
        f"tokens (card {card_budget}), embedder {embedder_name}, approximate token counts; ran in {elapsed:.1f} s\n"
    )
    print(
        "| strategy | total tokens | vs naive | mean/turn | max/turn | turns over budget | source turn in view | fact in view |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        total = sum(r.tokens)
        over = sum(t > budget for t in r.tokens)
        print(
            f"| {r.name} | {total:,} | {100 * (total - naive_total) / naive_total:+.1f}% | {total / len(r.tokens):,.0f} | "
            f"{max(r.tokens):,} | {over} | {r.source_seen}/{len(planted)} | {r.fact_seen}/{len(planted)} |"
        )
    marks = sorted({1, *range(50, turns + 1, 50), turns})
    print("\nTokens sent at turn:\n")
    print("| strategy | " + " | ".join(str(m) for m in marks) + " |")
    print("|---|" + "---:|" * len(marks))
    for r in results:
        print(f"| {r.name} | " + " | ".join(f"{r.tokens[m - 1]:,}" for m in marks) + " |")


# --- part 2 -------------------------------------------------------------------------------------------


class _CachedFake(FakeEmbedder):
    """The fake embedder with its word vectors cached, so that loading 100k texts takes seconds."""

    @functools.cache  # noqa: B019 - one instance per run
    def _word_vector(self, word: str) -> Any:
        return super()._word_vector(word)


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def part_two(
    thread_messages: int, memories: int, users: int, rounds: int, folder: Path
) -> tuple[float, float, float, float, float]:
    """Card build p50, p95, then p50, p95 without the relevant-information search, and the load time."""
    rng = random.Random(11)
    embedder = _CachedFake(dims=384)
    index = {"dims": 384, "embed": embedder, "fields": ["content"]}
    with SqliteStore.from_conn_string(str(folder / f"scale-{users}.db"), index=index) as store:
        load = time.perf_counter()
        batch: list[PutOp] = []
        for i in range(memories):
            user = f"user-{i % users}"
            text = f"{_sentence(rng, rng.randint(6, 14))} {RELATIONS[i % len(RELATIONS)]} {NAMES[i % len(NAMES)]}"
            batch.append(PutOp(("users", user, "memories"), f"mem-{i}", {"content": text, "type": "fact"}))
            if len(batch) == 5000:
                store.batch(batch)
                batch = []
        if batch:
            store.batch(batch)
        memory = Memory(store)
        thread = memory.thread("big", user_id="user-0", context_summary_update_frequency=4)
        for start in range(0, thread_messages, 1000):
            thread.add_messages(
                [
                    {
                        "role": "user" if j % 2 == 0 else "assistant",
                        "content": _sentence(rng, rng.randint(20, 50)),
                        "id": f"m{j}",
                    }
                    for j in range(start, min(start + 1000, thread_messages))
                ]
            )
        thread.get_context_card(except_last_messages=4)  # the first summary of the whole thread
        loaded = time.perf_counter() - load
        times: list[float] = []
        bare: list[float] = []
        for r in range(rounds):
            thread.add_messages(
                [
                    {
                        "role": "user",
                        "content": f"Where does my {RELATIONS[r % 30]} {NAMES[r % 30]} live? "
                        + _sentence(rng, 8),
                        "id": f"q{r}",
                    },
                    {"role": "assistant", "content": _sentence(rng, 30), "id": f"r{r}"},
                ]
            )
            t = time.perf_counter()
            card = thread.get_context_card(except_last_messages=4, token_budget=800)
            times.append((time.perf_counter() - t) * 1000)
            assert card.token_count <= 800
            t = time.perf_counter()
            thread.get_context_card(except_last_messages=4, token_budget=800, max_relevant_results=0)
            bare.append((time.perf_counter() - t) * 1000)
    return (
        _percentile(times, 0.5),
        _percentile(times, 0.95),
        _percentile(bare, 0.5),
        _percentile(bare, 0.95),
        loaded,
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--facts", type=int, default=30)
    parser.add_argument("--budget", type=int, default=2000, help="prompt budget in tokens")
    parser.add_argument("--card-budget", type=int, default=700, help="token budget of the card")
    parser.add_argument("--thread-messages", type=int, default=10_000)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=60, help="timed card builds")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        part_one(args.turns, args.facts, args.budget, args.card_budget, folder)
        print(
            f"\n## Part 2: card build time, SQLite store, {args.thread_messages:,} thread messages and "
            f"{args.memories:,} long-term memories (fake embedder, 384 dims), {args.rounds} turns timed\n"
        )
        print(
            "| memories belong to | card build p50 | card build p95 | without the search p50 | "
            "without the search p95 | load + first summary |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for users in (1, 100):
            p50, p95, b50, b95, loaded = part_two(
                args.thread_messages, args.memories, users, args.rounds, folder
            )
            who = "the thread's user" if users == 1 else f"{users} users (1/{users} to the thread's user)"
            print(f"| {who} | {p50:.1f} ms | {p95:.1f} ms | {b50:.1f} ms | {b95:.1f} ms | {loaded:.0f} s |")
        embedder, name = _embedder()
        if name.startswith("MiniLM"):
            samples = []
            for i in range(30):
                t = time.perf_counter()
                embedder.embed_query(f"where does my cousin number {i} live now?")
                samples.append((time.perf_counter() - t) * 1000)
            print(
                f"\nQuery embedding with {name} (not in the timings above): p50 {_percentile(samples, 0.5):.1f} ms"
            )


if __name__ == "__main__":
    main()
