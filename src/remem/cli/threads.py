"""Commands for threads: config, chat, threads, state, history, demo."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from remem.cli._options import api_key_option, database_url, db_option, full_option, json_option
from remem.config import STRATEGY_NAMES

if TYPE_CHECKING:
    from remem.cli._sources import Database
    from remem.inspection import HistoryRow, ThreadSnapshot
    from remem.memory import Memory

CHAT_COMMANDS = {
    "/state": "show the thread's messages, summary and usage",
    "/history": "list the thread's checkpoints",
    "/summary": "show the thread's summary (as `remem summary`)",
    "/card": "show the thread's context card (as `remem card`)",
    "/usage": "show what the thread's model calls cost, turn by turn (as `remem usage --thread`)",
    "/help": "show these commands",
    "/exit": "leave (also /quit, or Ctrl-D)",
}


@click.command("config")
@db_option
@json_option
def config_command(database_url: str | None, as_json: bool) -> None:
    """Print the effective settings, secrets masked (--db: as that database URL would make them).

    Example: REMEM_STRATEGY=trim remem config
    """
    from remem.cli._render import emit_json, show_table
    from remem.config import load_settings

    settings = load_settings()
    rows = (settings.replace(database_url=database_url) if database_url else settings).describe()
    if as_json:
        emit_json({name: value for name, value, _ in rows})
        return
    show_table("remem settings", ["setting", "value", "what it is"], rows)


@click.command("threads")
@db_option
@api_key_option
@json_option
def threads_command(database_url: str | None, as_json: bool) -> None:
    """List the threads in a database, newest first: the agents' (checkpoints) and the memory client's.

    Example: remem threads --db sqlite:///.remem/remem.db
    """
    from remem.cli._render import emit_json, say, show_table
    from remem.cli._sources import REMOTE_KIND, inspect_database, open_checkpointer, open_memory, open_remote
    from remem.config import load_settings
    from remem.layout import thread_id_of, thread_meta, threads_root
    from remem.memory._remote import RemoteMemory

    db = inspect_database(_url(database_url))
    where: dict[str, list[str]] = {}
    if db.kind == REMOTE_KIND:  # the server's checkpointed threads of the key's tenant
        with open_remote(db) as remote:
            for stats in remote.checkpoint_stats()["threads"]:
                where.setdefault(stats["thread_id"], []).append("checkpoints")
    with open_checkpointer(db) as saver:
        if saver is not None:
            from remem.checkpoint import list_threads

            for thread_id in list_threads(saver):
                where.setdefault(thread_id, []).append("checkpoints")
    with open_memory(db, load_settings()) as memory:
        if isinstance(memory, RemoteMemory):
            for info in memory.thread_infos():
                where.setdefault(info.thread_id, []).append("memory store")
        elif memory is not None:
            for namespace in memory.store.list_namespaces(
                prefix=threads_root(), max_depth=3, limit=1_000_000
            ):
                owner = thread_id_of(namespace)
                if owner is not None and namespace == thread_meta(owner):
                    where.setdefault(owner, []).append("memory store")
    if db.has_stock_checkpoints and not where:
        raise _no_checkpoints(db)
    if as_json:
        emit_json({"database": db.shown, "threads": [{"thread": t, "in": w} for t, w in where.items()]})
        return
    show_table(f"threads in {db.shown}", ["thread", "in"], ((t, ", ".join(w)) for t, w in where.items()))
    if db.has_stock_checkpoints:
        say(
            "this database was also written by LangGraph's stock checkpointer; "
            f"`remem import {db.shown}` copies those threads into remem"
        )
    elif not where:
        say(f"no threads yet in {db.shown}")


def _url(given: str | None) -> str:
    return database_url(given)


def _snapshot_json(snapshot: ThreadSnapshot, last: int, source: str) -> dict[str, Any]:
    from remem.cli._render import message_json

    shown = snapshot.messages[-last:] if last else snapshot.messages
    return {
        "source": source,
        "thread": snapshot.thread_id,
        "checkpoint": snapshot.checkpoint_id,
        "created_at": snapshot.created_at,
        "next": list(snapshot.next),
        "message_count": len(snapshot.messages),
        "messages": [message_json(m) for m in shown],
        "summary": snapshot.summary,
        "usage": [dict(u) for u in snapshot.usage[-last:]] if last else [dict(u) for u in snapshot.usage],
        "input_tokens": snapshot.input_tokens,
        "output_tokens": snapshot.output_tokens,
    }


def show_snapshot(snapshot: ThreadSnapshot, last: int = 10, *, full: bool = False, source: str = "") -> None:
    from remem.cli._render import message_row, say, show_table

    say(
        f"thread {snapshot.thread_id}  checkpoint {snapshot.checkpoint_id}  at {snapshot.created_at}"
        + (f"  (read from {source})" if source else "")
    )
    say(f"messages in state: {len(snapshot.messages)}   next: {', '.join(snapshot.next) or '(none)'}")
    shown = snapshot.messages[-last:] if last else snapshot.messages
    first = len(snapshot.messages) - len(shown) + 1
    show_table(
        f"messages (last {len(shown)} of {len(snapshot.messages)})",
        ["#", "role", "id", "content"],
        (message_row(first + i, m, full=full) for i, m in enumerate(shown)),
    )
    say("summary: " + (snapshot.summary or "(none yet)"))
    show_table(
        "usage (model calls)",
        ["turn", "node", "model", "input tokens", "output tokens", "latency ms"],
        (
            (u["turn"], u["node"], u["model"], u["input_tokens"], u["output_tokens"], u["latency_ms"])
            for u in (snapshot.usage[-last:] if last else snapshot.usage)
        ),
    )
    say(
        f"total: {len(snapshot.usage)} calls, {snapshot.input_tokens} input tokens, "
        f"{snapshot.output_tokens} output tokens"
    )


def show_history(thread_id: str, rows: Sequence[HistoryRow]) -> None:
    from remem.cli._render import show_table

    show_table(
        f"history of {thread_id} (newest first)",
        ["step", "messages", "next", "source", "checkpoint", "created"],
        ((r.step, r.message_count, ", ".join(r.next), r.source, r.checkpoint_id, r.created_at) for r in rows),
    )


@contextmanager
def _hint_memory_thread(db: Database, thread_id: str) -> Iterator[None]:
    """A thread the checkpoints lack may be the memory client's: say so, and which commands show it."""
    from remem.cli._sources import open_memory
    from remem.config import load_settings
    from remem.errors import NotFoundError

    try:
        yield
    except NotFoundError as exc:
        with open_memory(db, load_settings()) as memory:
            if memory is None or not _has_thread(memory, thread_id):
                raise
        raise NotFoundError(
            f"thread {thread_id!r} is the memory client's (in the memory store of {db.shown}), not an agent's: "
            f"it has no checkpoints; `remem summary`, `remem card` and `remem search --thread` show it"
        ) from exc


def _has_thread(memory: Memory, thread_id: str) -> bool:
    from remem.errors import NotFoundError

    try:
        memory.get_thread(thread_id)
    except NotFoundError:
        return False
    return True


def _no_checkpoints(db: Database) -> Exception:
    """No remem checkpoints in ``db``: when LangGraph's stock saver wrote it, the way to read them."""
    from remem.errors import NotFoundError

    if db.has_stock_checkpoints:
        return NotFoundError(
            f"{db.shown} holds only LangGraph's stock saver's checkpoints; remem reads its own tables: "
            f"`remem import {db.shown}` copies the threads into remem"
        )
    return NotFoundError(
        f"{db.shown} holds no checkpoints; `remem threads --db URL` shows what a database holds"
    )


@click.command("state")
@click.argument("thread_id")
@click.option("--checkpoint", "checkpoint_id", help="Show the state at this checkpoint (time travel).")
@click.option(
    "--last",
    default=10,
    show_default=True,
    type=click.IntRange(min=0),
    help="Latest messages to show (0: all).",
)
@db_option
@api_key_option
@full_option
@json_option
def state_command(
    thread_id: str, checkpoint_id: str | None, last: int, database_url: str | None, full: bool, as_json: bool
) -> None:
    """Show a thread's messages (tool calls with their arguments), summary, next nodes and usage.

    Example: remem state demo-20261129-101500 --last 5 --full
    """
    from remem.cli._render import emit_json
    from remem.cli._sources import REMOTE_KIND, inspect_database, open_checkpointer, open_remote
    from remem.inspection import ThreadSnapshot, reader_graph, thread_snapshot

    db = inspect_database(_url(database_url))
    if db.kind == REMOTE_KIND:
        with open_remote(db) as remote, _hint_memory_thread(db, thread_id):
            found = remote.checkpoint_state(thread_id, checkpoint_id)
        names = ("thread_id", "checkpoint_id", "created_at", "messages", "summary", "usage")
        snapshot = ThreadSnapshot(**{n: found[n] for n in names}, next=tuple(found["next"]))
    else:
        with open_checkpointer(db) as saver:
            if saver is None:
                raise _no_checkpoints(db)
            with _hint_memory_thread(db, thread_id):
                snapshot = thread_snapshot(reader_graph(saver), thread_id, checkpoint_id)
    source = f"checkpoints in {db.shown}"
    if as_json:
        emit_json(_snapshot_json(snapshot, last, source))
    else:
        show_snapshot(snapshot, last, full=full, source=source)


@click.command("history")
@click.argument("thread_id")
@click.option(
    "--limit", default=50, show_default=True, type=click.IntRange(min=1), help="Most checkpoints to list."
)
@db_option
@api_key_option
@json_option
def history_command(thread_id: str, limit: int, database_url: str | None, as_json: bool) -> None:
    """List a thread's checkpoints: step, message count, next node.

    Example: remem history demo-20261129-101500 --limit 20
    """
    from remem.cli._render import emit_json, say
    from remem.cli._sources import REMOTE_KIND, inspect_database, open_checkpointer, open_remote
    from remem.inspection import HistoryRow, reader_graph, thread_history

    db = inspect_database(_url(database_url))
    if db.kind == REMOTE_KIND:
        with open_remote(db) as remote, _hint_memory_thread(db, thread_id):
            found = remote.checkpoint_history(thread_id, limit)
        rows = [HistoryRow(**{**r, "next": tuple(r["next"])}) for r in found]
    else:
        with open_checkpointer(db) as saver:
            if saver is None:
                raise _no_checkpoints(db)
            with _hint_memory_thread(db, thread_id):
                rows = thread_history(reader_graph(saver), thread_id, limit)
    if as_json:
        emit_json(
            {
                "source": f"checkpoints in {db.shown}",
                "thread": thread_id,
                "checkpoints": [
                    {
                        "step": r.step,
                        "checkpoint": r.checkpoint_id,
                        "created_at": r.created_at,
                        "message_count": r.message_count,
                        "next": list(r.next),
                        "source": r.source,
                    }
                    for r in rows
                ],
            }
        )
        return
    show_history(thread_id, rows)
    say(f"read from checkpoints in {db.shown}")


def _chat_help() -> None:
    from remem.cli._render import say

    say("commands: " + "; ".join(f"{name}: {what}" for name, what in CHAT_COMMANDS.items()))
    say("anything else is sent to the model (start a message with // to send one that begins with /)")


def _pending_approval(agent: Any, config: Any) -> dict[str, Any] | None:
    """The estimate of a model call that waits for approval on the thread (an interrupt from
    BudgetMiddleware or remem's agent: ``{"kind": "remem.approval", ...}``), or None."""
    from remem.usage import pending_approval

    return pending_approval(agent.get_state(config))


def _approval_question(estimate: dict[str, Any]) -> str:
    cost = estimate.get("cost")
    spend = "unknown cost (no price)" if cost is None else f"a cost of about {cost:.6g}"
    model = estimate.get("model") or "the model"
    over = estimate.get("over_budget")
    why = f" ({over})" if over else ""  # budget_action=approve: the budget it would pass
    return (
        f"the next call to {model} needs approval: about {estimate.get('input_tokens', 0):,} input tokens, "
        f"{spend}{why}. Send it?"
    )


def _last_ai_text(agent: Any, config: Any) -> str | None:
    from langchain_core.messages import AIMessage

    for message in reversed(agent.get_state(config).values.get("messages", [])):
        if isinstance(message, AIMessage):
            return str(message.text)
    return None


def _answer_approvals(agent: Any, thread_id: str, lease_timeout: float) -> bool:
    """Ask yes/no for each call waiting for approval and resume the graph with the answer.

    True when the thread is left with nothing waiting; False when the input ended before an answer (the
    call still waits: the next ``remem chat`` on the thread asks again). A "no" ends the turn with the
    graph's refusal message; every message is kept either way.
    """
    from remem.agent import resume_turn, thread_config
    from remem.cli._render import clean, say
    from remem.errors import ApprovalPendingError

    config = thread_config(thread_id)
    while (estimate := _pending_approval(agent, config)) is not None:
        try:
            approved = click.confirm(clean(_approval_question(estimate)), default=False)
        except (EOFError, click.Abort):
            say("no answer: the call still waits for approval; run remem chat on this thread again to answer")
            return False
        try:
            resume_turn(agent, thread_id, approved, lease_timeout=lease_timeout)
        except ApprovalPendingError:
            continue  # the turn's next call waits for approval too: ask again
    return True


def _load_agent(spec: str, saver: Any, settings: Any) -> Any:
    """The graph ``MODULE:FUNCTION`` builds, called as ``FUNCTION(checkpointer=..., settings=...)``."""
    import importlib

    from remem.errors import ConfigError

    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise ConfigError(f"--agent takes MODULE:FUNCTION (e.g. myapp.agents:build), got {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, "")  # the current directory, as `python -m` and `python -c` put it first
    try:
        factory = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--agent {spec}: cannot load it ({exc}); check the module is importable") from None
    agent = factory(checkpointer=saver, settings=settings)
    if not callable(getattr(agent, "invoke", None)) or not callable(getattr(agent, "get_state", None)):
        raise ConfigError(f"--agent {spec} returned {type(agent).__name__}, not a compiled LangGraph graph")
    return agent


@click.command("chat")
@click.option("--thread", "thread_id", default="default", show_default=True, help="Thread to talk in.")
@click.option(
    "--strategy", type=click.Choice(STRATEGY_NAMES), help="Memory strategy (default: REMEM_STRATEGY)."
)
@click.option(
    "--agent",
    "agent_spec",
    metavar="MODULE:FUNCTION",
    help="Chat with your own graph: FUNCTION(checkpointer=..., settings=...) returns it "
    "(e.g. a create_agent with BudgetMiddleware). Default: remem's agent.",
)
@db_option
def chat_command(
    thread_id: str, strategy: str | None, agent_spec: str | None, database_url: str | None
) -> None:
    """Talk to the configured model with memory. /state, /history, /summary, /card, /usage, /help and /exit
    inside.

    A model call that needs approval (above REMEM_APPROVAL_TOKEN_THRESHOLD or
    REMEM_APPROVAL_COST_THRESHOLD) is shown with its estimate and sent only after a yes.

    Example: REMEM_LLM_MODEL=llama3.2 REMEM_LLM_BASE_URL=http://localhost:11434/v1 remem chat --thread work
    """
    from remem._url import display_url
    from remem.agent import build_agent, run_turn, thread_config
    from remem.checkpoint import checkpointer_from_url
    from remem.cli._render import error_line, say
    from remem.cli._sources import writable
    from remem.config import load_settings
    from remem.errors import ApprovalPendingError, RememError
    from remem.inspection import thread_history, thread_snapshot
    from remem.models import require_chat_model

    settings = load_settings()
    model = None if agent_spec else require_chat_model(settings)  # before anything is opened or created
    url = writable(database_url or settings.database_url)
    config = thread_config(thread_id)
    with checkpointer_from_url(url) as saver:
        if model is None:
            agent = _load_agent(str(agent_spec), saver, settings)
        else:
            agent = build_agent(model, strategy=strategy, checkpointer=saver, settings=settings)
        name = getattr(agent, "name", None) or type(agent).__name__
        say(f"thread {thread_id} on {display_url(url)} ({name}). /help lists the commands")
        lease_timeout = settings.thread_lease_timeout
        answered = _answer_approvals(agent, thread_id, lease_timeout)  # a call left waiting last time
        while answered:
            try:
                line = click.prompt("you", prompt_suffix="> ", default="", show_default=False)
            except (EOFError, click.Abort):
                break
            text = line.strip()
            if text in ("/exit", "/quit"):
                break
            if not text:
                continue
            try:  # the thread is intact after any of these errors: say what happened and go on
                if text == "/state":
                    show_snapshot(thread_snapshot(agent, thread_id))
                elif text == "/history":
                    show_history(thread_id, thread_history(agent, thread_id))
                elif text in ("/summary", "/card", "/usage"):
                    _chat_report(text, thread_id, url)
                elif text.startswith("/") and not text.startswith("//"):
                    if text != "/help":
                        say(f"unknown command {text.split()[0]}; nothing was sent to the model")
                    _chat_help()
                else:
                    message = text[1:] if text.startswith("//") else text
                    text_out: str | None = None
                    try:
                        text_out = run_turn(
                            agent, thread_id, message, max_message_chars=settings.max_message_chars
                        ).text
                    except ApprovalPendingError:  # paused before a call (remem's agent or a middleware's)
                        answered = _answer_approvals(agent, thread_id, lease_timeout)
                        text_out = _last_ai_text(agent, config) if answered else None
                    if text_out is not None:
                        say("assistant> " + text_out)
            except RememError as exc:
                say("Error: " + error_line(exc), style="red")
        values = agent.get_state(config).values
        say(f"bye: {len(values.get('messages', []))} messages in state for thread {thread_id}")


def _chat_report(command: str, thread_id: str, url: str) -> None:
    """``/summary``, ``/card``, ``/usage``: the commands of the same names on this thread and database."""
    from remem.cli.memory import card_command, summary_command
    from remem.cli.usage import usage_command

    context = click.get_current_context()
    if command == "/summary":
        context.invoke(summary_command, thread_id=thread_id, database_url=url)
    elif command == "/card":
        context.invoke(card_command, thread_id=thread_id, database_url=url)
    else:
        context.invoke(usage_command, thread_id=thread_id, by="turn", database_url=url)


def remem_command() -> str:
    """How to run this ``remem`` again: ``remem`` when that is what the PATH finds, else its full path."""
    here = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    on_path = shutil.which("remem")
    if here is not None and here.name == "remem" and here.is_file():
        if on_path and Path(on_path).resolve() == here:
            return "remem"
        return str(here)
    if on_path:
        return "remem"
    beside = Path(sys.executable).parent / "remem"  # run as `python -m` or from a test
    return (
        str(beside) if beside.is_file() and os.access(beside, os.X_OK) else f"{sys.executable} -m remem.cli"
    )


@contextmanager
def _held_warnings() -> Iterator[list[str]]:
    """remem's log warnings while the block runs, kept in the list (printed by the caller when its output
    is laid out) instead of written in the middle of it."""
    import logging

    held: list[str] = []

    class Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            held.append(record.getMessage())

    logger = logging.getLogger("remem")
    handler, propagate = Hold(logging.WARNING), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield held
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


@click.command("demo")
@db_option
@click.option(
    "--strategy", type=click.Choice(STRATEGY_NAMES), help="Memory strategy (default: REMEM_STRATEGY)."
)
@click.option(
    "--turns",
    type=click.IntRange(min=1),
    default=None,
    help="Replay only the first N turns (default: all 65).",
)
def demo_command(database_url: str | None, strategy: str | None, turns: int | None) -> None:
    """Replay a 65-turn conversation through the agent, offline, and show what memory did each turn.

    Example: remem demo --strategy trim
    """
    from remem._url import display_url
    from remem.cli._render import clean, console, error_line, preview, say, show_table
    from remem.cli._sources import writable
    from remem.config import load_settings
    from remem.demo import DemoTurn, run_demo

    overrides: dict[str, Any] = {
        k: v for k, v in {"database_url": database_url, "strategy": strategy}.items() if v
    }
    settings = load_settings(**overrides)
    writable(settings.database_url)
    shown = display_url(settings.database_url)
    say(f"remem demo: strategy {settings.strategy}, database {shown}, no LLM needed")
    say(f"{'turn':>4}  {'in state':>8}  {'tokens sent':>11}  {'full history':>12}  {'summary':<9}  user")

    def show(t: DemoTurn) -> None:
        note = "refreshed" if t.summary_refreshed else ""
        recall = "" if t.recall is None else ("  ✓ recalled" if t.recalled else "  ✗ forgotten")
        say(
            f"{t.turn:>4}  {t.messages_in_state:>8}  {t.tokens_seen:>11}  {t.tokens_full_history:>12}  "
            f"{note:<9}  {preview(t.user, 48)}{recall}"
        )

    with _held_warnings() as held:  # a warning (the demo model has no price) would split the table
        report = run_demo(settings, on_turn=show, turns=turns)
    got, asked = report.recalled
    saved = 1 - report.tokens_seen / max(report.tokens_full_history, 1)
    console().print()
    show_table(
        "final state",
        ["measure", "value"],
        [
            ("thread", report.thread_id),
            ("messages in state", report.messages_in_state),
            ("tokens the model saw", report.tokens_seen),
            ("tokens with full history", report.tokens_full_history),
            ("saved", f"{saved:.0%}"),
            ("facts recalled", f"{got}/{asked}"),
        ],
    )
    say("rolling summary:", style="bold")
    say(report.summary or "(none)")
    for warning in dict.fromkeys(held):
        click.echo(f"Warning: {error_line(warning)}", err=True)
    remem = remem_command()
    # The database again if it was not the configured one: a user is no secret (a password is masked).
    again = shown if shown.startswith("sqlite") else clean(database_url or "")
    db = "" if database_url is None else f" --db {shlex.quote(again)}"
    say("")
    say(f"Inspect it: {remem} state {report.thread_id}{db}   {remem} history {report.thread_id}{db}")


COMMANDS = [config_command, chat_command, threads_command, state_command, history_command, demo_command]
