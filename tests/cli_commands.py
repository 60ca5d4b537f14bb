"""Every ``remem`` command, found from the click group itself, and a database full of hostile strings.

The tests that must cover every command (secrets, hostile text, broken files) iterate :func:`all_commands`,
so a command added later is run by them without anyone remembering to add it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click
from click.testing import CliRunner, Result
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from remem.cli import main
from remem.testing import offline_settings

# Stored strings that broke or fooled the CLI before: rich markup (a lone "[/]" raised MarkupError),
# styling that must be shown rather than applied, terminal control sequences, an emoji code, and text
# far past the ~80 characters a table shows.
AGENT_THREAD = "[/]"  # lives only in remem's checkpointer
MEMORY_THREAD = "[red]t[/red]"  # lives only in the memory client's store
USER = "[b]maya"
MARKUP = "[red]alert[/red] and [bold]bold[/b] :smile:"
CONTROL = "bell\x07 esc\x1b[31mred\x1b[0m back\rover"
LONG = "long " + "word " * 400 + "TAILMARK"
TOOL = "lookup[/]"
RAW_CONTROLS = ("\x07", "\x1b", "\r")

# Arguments a command needs besides --db; "{thread}" / "{user}" / "{db}" (the --db URL) are filled in. A command missing here
# still runs (with --db only) in every test below.
ARGS: dict[tuple[str, ...], list[str]] = {
    ("card",): ["{thread}"],
    ("chat",): ["--thread", "{thread}"],
    ("checkpoints", "prune"): ["--thread", "{thread}", "--yes"],
    ("demo",): ["--turns", "2"],
    ("export",): ["{thread}"],
    ("forget",): ["--thread", "{thread}", "--yes"],
    ("history",): ["{thread}"],
    ("import",): ["{db}"],
    ("ingest", "undo"): ["--last"],
    ("queue", "park"): ["--kind", "extraction"],
    ("queue", "retry"): ["--all"],
    ("queue", "reindex"): ["--thread", "{thread}"],
    ("search",): ["alert", "--thread", "{thread}", "--user", "{user}"],
    ("state",): ["{thread}", "--last", "0"],
    ("summary",): ["{thread}"],
    ("usage",): ["--by", "turn"],
    ("worker",): ["--until-empty"],
}
# Commands that change the database; every other command is a read and takes --json.
WRITING = {
    ("chat",),
    ("demo",),
    ("forget",),
    ("checkpoints", "prune"),
    ("import",),
    ("ingest", "undo"),
    ("worker",),
    ("queue", "drain"),
    ("queue", "retry"),
    ("queue", "park"),
    ("queue", "reindex"),
    ("store", "reembed"),
}
CHAT_INPUT = "/state\n/nonsense\n/exit\n"
# chat needs a configured model to start; it is never called (the session only runs local commands).
CHAT_ENV = {
    "REMEM_LLM_MODEL": "m",
    "REMEM_LLM_BASE_URL": "http://127.0.0.1:9/v1",
    "REMEM_LLM_MAX_RETRIES": "0",
}


def _walk(group: click.Group, prefix: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _walk(command, (*prefix, name))
        else:
            yield (*prefix, name), command


# The server's commands: `serve` and `mcp` run until they are stopped, and `keys` prints a new secret by
# design or needs a key's id; tests/test_server*.py run them (real servers, the keys commands on their own
# database, `remem mcp` driven by the mcp package's client).
SERVICE_COMMANDS = {
    ("serve",),
    ("mcp",),
    ("keys", "create"),
    ("keys", "list"),
    ("keys", "revoke"),
    ("keys", "rotate"),
}
# Commands that write files of their own (a dataset, results, a backup copy) and are not about a database's
# contents (or load one: `ingest load`); tests/test_eval.py, test_backup.py and test_ingestion.py run them.
FILE_COMMANDS = {
    ("eval", "generate"),
    ("eval", "retrieval"),
    ("eval", "compaction"),
    ("eval", "qa"),
    ("replay",),
    ("backup",),
    ("ingest", "load"),
}


def all_commands() -> list[tuple[str, ...]]:
    """Every leaf command of ``remem``, the ones that write last (so the reads see the data)."""
    found = [path for path, _ in _walk(main, ()) if path not in SERVICE_COMMANDS | FILE_COMMANDS]
    return sorted(found, key=lambda p: (p in WRITING, p == ("forget",), p))


def command(path: tuple[str, ...]) -> click.Command:
    return dict(_walk(main, ()))[path]


def argv(path: tuple[str, ...], url: str | None, thread: str = AGENT_THREAD, user: str = USER) -> list[str]:
    args = [
        a.replace("{thread}", thread).replace("{user}", user).replace("{db}", url or "memory://")
        for a in ARGS.get(path, [])
    ]
    return [*path, *args, *(["--db", url] if url is not None else [])]


def run(path: tuple[str, ...], url: str | None, env: dict[str, str] | None = None, **kw: Any) -> Result:
    """Run one command the way a person would (chat gets a short session on stdin)."""
    env = {"REMEM_EMBEDDER": "fake", **(CHAT_ENV if path == ("chat",) else {}), **(env or {})}
    stdin = CHAT_INPUT if path == ("chat",) else "y\n"
    return CliRunner().invoke(main, argv(path, url, **kw), env=env, input=stdin)


def seed(url: str) -> None:
    """An agent thread (checkpoints only) and a memory-client thread, both full of hostile strings."""
    from remem import Memory, ScriptedChatModel, build_agent, checkpointer_from_url, run_turn
    from remem.agent import thread_config

    with checkpointer_from_url(url) as saver:
        agent = build_agent(ScriptedChatModel(default=MARKUP), strategy="filter", checkpointer=saver)
        run_turn(agent, AGENT_THREAD, MARKUP + " " + CONTROL)
        call = {"name": TOOL, "args": {"q": "[red]x[/red]"}, "id": "call_1"}
        agent.update_state(
            thread_config(AGENT_THREAD),
            {
                "messages": [
                    AIMessage("", tool_calls=[call]),
                    ToolMessage("[b]result[/b]", tool_call_id="call_1", name=TOOL),
                    HumanMessage(LONG),
                    AIMessage("noted " + MARKUP),
                ]
            },
            as_node="call_model",
        )
    from remem.usage import UsageEvent, open_ledger

    with open_ledger(url) as ledger:  # a ledger row whose strings are hostile too
        ledger.record(
            UsageEvent(
                kind="chat",
                model=MARKUP + CONTROL,
                input_tokens=10,
                output_tokens=2,
                thread_id=AGENT_THREAD,
                user_id=USER,
                turn=1,
                node=TOOL,
            )
        )
    settings = offline_settings()
    with Memory.from_url(url, settings=settings) as memory:
        memory.thread(MEMORY_THREAD, user_id=USER).add_messages(
            [
                {"role": "user", "content": MARKUP + " " + CONTROL, "id": "[/]m1"},
                {"role": "assistant", "content": LONG, "id": "m2"},
                {"role": "user", "content": "what was the alert?", "id": "m3"},
            ]
        )
        memory.store.put(("users", USER, "memories"), "[/]f1", {"content": MARKUP + " fact", "type": "fact"})
        from remem.ingestion import begin_ingestion

        with begin_ingestion(memory, kind="load", source=MARKUP + CONTROL) as ing:  # `ingest list | undo`
            ing.add_messages("[/]loaded", [{"role": "user", "content": "loaded " + MARKUP, "id": "[/]l1"}])
