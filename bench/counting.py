"""Counting benchmark: how far remem's token estimates are from an exact tokenizer, on a corpus with tool calls.

    python bench/counting.py [--encodings o200k_base,cl100k_base]

The corpus (built here, deterministic, offline): the 65-turn demo conversation bundled with remem (prose),
and around it the tool rounds an agent makes: AI messages calling tools with JSON arguments, tool results
(JSON records, tables, logs, code), a system prompt, and some non-English text. The reference is the exact
BPE count (bpe-openai, the same files as tiktoken's) of what an OpenAI-compatible request carries for each
message: its role, its content, for a tool call the function name, the id and the JSON arguments, for a
tool result its tool_call_id, plus the 3 tokens per message of the chat format that OpenAI documents.
Compared, in one run, with:

- ``approximate``: remem's default (LangChain's ``count_tokens_approximately``: characters / 4, 3 per message);
- ``exact text``: remem's ``exact_token_counter`` (``REMEM_TOKEN_COUNTER=o200k``): the exact count of
  the content, tool name and arguments as text, 3 per message; no roles, ids or JSON;
- ``chat``: remem's ``chat_token_counter``, which BudgetMiddleware uses where the model's encoding is known
  (``counter_for_model``): the same documented format as the reference, so its error checks the
  implementation; what neither can see offline is how a provider renders tool calls and schemas inside.

Also shown: the MiniLM tokenizer remem ships (exact for the embedder, not for any chat model), to show how
much tokenizers differ. Error = estimate / reference - 1 (positive: counts high).
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from remem.messages import approximate_token_count, chat_token_counter, exact_token_counter

CITIES = ["Lyon", "Zürich", "São Paulo", "Kraków", "Osaka", "Reykjavík", "Nairobi", "Montréal"]
NON_ENGLISH = [
    "Bonjour, je voudrais réserver une table pour quatre personnes demain soir à 20 heures.",
    "Können Sie mir bitte sagen, wann der nächste Zug nach München abfährt?",
    "明天下午三点在会议室开会，请准备好季度报告。",
    "Привет! Напомни мне, пожалуйста, позвонить маме в субботу.",
    "¿Cuál es la temperatura media en Sevilla durante el mes de agosto?",
    "東京の天気は明日晴れるでしょうか。傘を持っていくべきですか。",
]
CODE = '''def moving_average(values: list[float], window: int = 3) -> list[float]:
    """Mean of each run of `window` values."""
    if window <= 0:
        raise ValueError(f"window must be positive, got {window}")
    return [sum(values[i : i + window]) / window for i in range(len(values) - window + 1)]
'''


def _tool_round(rng: random.Random, n: int) -> list[BaseMessage]:
    city = rng.choice(CITIES)
    call_id = f"call_{rng.getrandbits(64):016x}"
    kind = n % 4
    if kind == 0:
        args: dict[str, Any] = {"city": city, "days": rng.randint(1, 7), "units": "metric"}
        result = json.dumps(
            {
                "city": city,
                "forecast": [
                    {
                        "day": d,
                        "high_c": rng.randint(-5, 35),
                        "low_c": rng.randint(-15, 20),
                        "rain_mm": rng.random(),
                    }
                    for d in range(args["days"])
                ],
            }
        )
        name = "get_weather"
    elif kind == 1:
        args = {
            "query": f"SELECT id, name, total FROM orders WHERE city = '{city}' ORDER BY total DESC LIMIT 5"
        }
        rows = [
            f"| {rng.randint(1000, 9999)} | customer-{rng.randint(1, 500)} | {rng.random() * 900:.2f} |"
            for _ in range(5)
        ]
        result = "| id | name | total |\n|---|---|---|\n" + "\n".join(rows)
        name = "run_sql"
    elif kind == 2:
        args = {"path": f"/srv/app/logs/{city.lower()}-{n}.log", "tail": 6}
        result = "\n".join(
            f"2026-11-{rng.randint(10, 28)}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z "
            f"{rng.choice(['INFO', 'WARN', 'ERROR'])} worker-{rng.randint(1, 9)} request {rng.getrandbits(32):08x} "
            f"took {rng.randint(3, 900)} ms"
            for _ in range(6)
        )
        name = "read_log"
    else:
        args = {"language": "python", "task": "a moving average with a window"}
        result = CODE
        name = "write_code"
    return [
        AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}]),
        ToolMessage(content=result, tool_call_id=call_id, name=name),
    ]


def corpus() -> dict[str, list[BaseMessage]]:
    """Messages by category: prose, tool calls, tool results, non-English, system prompt."""
    rng = random.Random(12)
    data = json.loads(resources.files("remem").joinpath("data/demo_conversation.json").read_text("utf-8"))
    groups: dict[str, list[BaseMessage]] = {
        "system prompt": [
            SystemMessage(
                content="You are a careful assistant. Use the tools when a question needs live data; "
                "answer in the user's language; never invent numbers. " * 3
            )
        ],
        "prose (demo turns)": [],
        "tool calls (AI)": [],
        "tool results": [],
        "non-English": [],
    }
    for i, turn in enumerate(data["turns"]):
        groups["prose (demo turns)"].append(HumanMessage(content=turn["user"]))
        if turn.get("assistant"):  # the demo's later turns are answered by its responder, not scripted
            groups["prose (demo turns)"].append(AIMessage(content=turn["assistant"]))
        if i % 2 == 0:
            call, result = _tool_round(rng, i)
            groups["tool calls (AI)"].append(call)
            groups["tool results"].append(result)
    for text in NON_ENGLISH:
        groups["non-English"] += [HumanMessage(content=text), AIMessage(content=text)]
    return groups


def wire_values(message: BaseMessage) -> list[str]:
    """The values an OpenAI-compatible request carries for ``message`` (written here on its own, from the
    API's message format, so that it checks remem's counter rather than repeating it)."""
    role = {"human": "user", "ai": "assistant"}.get(message.type, message.type)
    values = [role, str(message.text)]
    if message.name:
        values.append(message.name)
    for call in getattr(message, "tool_calls", None) or []:
        values += [call["id"] or "", call["name"], json.dumps(call["args"], ensure_ascii=False)]
    if isinstance(message, ToolMessage):
        values.append(message.tool_call_id)
    return values


def reference_counter(encoding: Any) -> Callable[[Sequence[BaseMessage]], int]:
    # OpenAI's documented count: 3 per message plus the tokens of each value.
    def count(messages: Sequence[BaseMessage]) -> int:
        return sum(sum(len(encoding.encode(v)) for v in wire_values(m)) + 3 for m in messages)

    return count


def minilm_counter() -> Callable[[Sequence[BaseMessage]], int]:
    from tokenizers import Tokenizer

    path = resources.files("remem").joinpath("data/minilm/tokenizer.json")
    tokenizer = Tokenizer.from_str(path.read_text("utf-8"))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def count(messages: Sequence[BaseMessage]) -> int:
        return sum(
            sum(len(tokenizer.encode(v, add_special_tokens=False).ids) for v in wire_values(m)) + 3
            for m in messages
        )

    return count


def tiktoken_from_bpe_openai(name: str) -> Any:
    """tiktoken's own encoding ``name``, its BPE file read from bpe-openai's copy instead of downloaded and
    checked against the SHA-256 tiktoken expects for it (so a match means the very same ranks)."""
    import gzip
    import hashlib

    import tiktoken
    import tiktoken.load
    import tiktoken_ext.openai_public as public

    data = resources.files("bpe_openai").joinpath(f"data/{name}.tiktoken.gz").read_bytes()
    checked: list[str] = []

    def read(blobpath: str, expected_hash: str | None = None) -> bytes:
        raw = gzip.decompress(data)
        if expected_hash is None or hashlib.sha256(raw).hexdigest() != expected_hash:
            raise SystemExit(f"bpe-openai's {name} is not the file tiktoken expects")
        checked.append(expected_hash)
        return raw

    real = tiktoken.load.read_file_cached
    tiktoken.load.read_file_cached = read
    try:
        spec = getattr(public, name)()
    finally:
        tiktoken.load.read_file_cached = real
    assert checked, "tiktoken read no file"
    return tiktoken.Encoding(**spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encodings", default="o200k_base,cl100k_base")
    args = parser.parse_args()
    import bpe_openai

    groups = corpus()
    groups["all"] = [m for messages in groups.values() for m in messages]
    minilm = minilm_counter()
    for name in args.encodings.split(","):
        reference = reference_counter(bpe_openai.get_encoding(name))
        exact, chat = exact_token_counter(name), chat_token_counter(name)
        same = reference_counter(tiktoken_from_bpe_openai(name))
        agree = sum(same([m]) == reference([m]) for m in groups["all"])
        print(
            f"\n{name}: tiktoken (hash-checked file) and bpe-openai agree on {agree}/{len(groups['all'])} messages"
        )
        print(
            f"\n{name}: tokens per category (reference: exact BPE count of the request's values + 3/message)\n"
        )
        print(
            "| category | messages | reference | approximate | error | exact text | error | chat | error "
            "| MiniLM | vs ref |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for category, messages in groups.items():
            ref = reference(messages)
            counts = [approximate_token_count(messages), exact(messages), chat(messages), minilm(messages)]
            cells = " | ".join(f"{c:,} | {c / ref - 1:+.1%}" for c in counts)
            print(f"| {category} | {len(messages)} | {ref:,} | {cells} |")
        # Per message: how often the approximate count is low, and by how much at worst.
        every = groups["all"]
        errors = [approximate_token_count([m]) / reference([m]) - 1 for m in every]
        low = [e for e in errors if e < 0]
        print(
            f"\nper message ({len(every)}): approximate error from {min(errors):+.1%} to {max(errors):+.1%}, "
            f"median {sorted(errors)[len(errors) // 2]:+.1%}; low on {len(low)} message(s)"
        )


if __name__ == "__main__":
    main()
