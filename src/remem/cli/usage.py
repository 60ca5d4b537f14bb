"""``remem usage`` (the ledger: what every model call cost) and ``remem export`` (a thread's transcript).

``remem export THREAD --format jsonl`` writes one JSON object per line, in order (format ``remem.transcript/1``):

    {"type": "thread", "format": "remem.transcript/1", "thread": "t1", "source": "checkpoints in ..."}
    {"type": "message", "turn": 1, "id": "...", "role": "user", "content": "..."}
    {"type": "message", "turn": 1, "role": "assistant", "content": "", "tool_calls": [{"name": ..., "args": ...}]}
    {"type": "message", "turn": 1, "role": "tool", "content": "...", "tool_call_id": "...", "name": "..."}
    {"type": "turn", "turn": 1, "calls": 2, "models": ["gpt-4o-mini"], "input_tokens": 812,
     "output_tokens": 95, "cached_tokens": 0, "cost": 0.00018, "unpriced_calls": 0, "latency_ms": 950.2}

On a thread whose memory strategy removed messages (summary, delete), the turns that left the state come
first, after the ``thread`` line: one record naming them, then their ledger totals, so that every ledger row
of the thread is in the transcript::

    {"type": "summary", "replaces_turns": [1, 60], "content": "the rolling summary"}
    {"type": "turn", "turn": 1, "in_state": false, "calls": 1, ...}

(``{"type": "removed", "turns": [1, 60]}`` instead when no summary holds them: the delete strategy.)

A turn starts at a user message that follows another role, and its ``turn`` line follows its messages;
it carries the ledger's totals for that turn (all zero, cost null, when the ledger recorded nothing for it).
Turns are numbered as the agent numbers them in the ledger: counted back from the turn number the state
records (``remem_turn``), so a thread that kept its last 5 turns of 65 shows turns 61 to 65; a history
without it (a stock graph, the memory client's thread) holds every turn, counted from 1. ``role`` is
user, assistant, tool or system; to replay against another model, send the messages up to each user
message and compare with what follows. Readers skip record types they do not know.
``--format md`` renders the same as Markdown: the summary and the removed turns' totals first, then a
heading per turn with its model, tokens, cost and latency, then the messages (text literal, in fenced
blocks).
"""

from __future__ import annotations

import csv
import io
import json
import time
from typing import TYPE_CHECKING, Any

import click

from remem.cli._options import api_key_option, database_url, db_option, json_option

if TYPE_CHECKING:
    from remem.usage import Totals

__all__ = ["COMMANDS", "export_command", "terminal_chart", "transcript_of", "usage_command", "write_plot"]

FORMAT = "remem.transcript/1"
_COLUMNS = ("calls", "input_tokens", "output_tokens", "cached_tokens", "tokens", "cost", "latency_ms")


def _cost(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"


def _key(by: str | None, key: Any) -> list[Any]:
    if by == "turn":
        return list(key)
    return [] if by is None else [key]


def _heads(by: str | None) -> list[str]:
    return {"turn": ["thread", "turn"], None: []}.get(by, [by or ""])


@click.command("usage")
@click.option("--thread", "thread_id", metavar="T", help="Only this thread's calls.")
@click.option("--user", "user_id", metavar="U", help="Only this user's calls.")
@click.option("--since", metavar="AGE", help="Only calls this recent: 30d, 12h, 90m, 45s or 2w.")
@click.option(
    "--by",
    type=click.Choice(["turn", "thread", "model", "day", "user", "kind"]),
    help="One row per turn, thread, model, day, user or call kind (default: one row per call).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "jsonl"]),
    default="table",
    show_default=True,
    help="How to print the rows.",
)
@click.option("--limit", default=200, show_default=True, help="Most calls listed without --by (0: all).")
@click.option(
    "--plot",
    "plot_path",
    metavar="FILE.png",
    type=click.Path(dir_okay=False, writable=True),
    help="Also write a PNG chart of tokens and cost per turn (needs remem[plot]).",
)
@db_option
@api_key_option
@json_option
def usage_command(
    thread_id: str | None,
    user_id: str | None,
    since: str | None,
    by: str | None,
    fmt: str,
    limit: int,
    plot_path: str | None,
    database_url: str | None,
    as_json: bool,
) -> None:
    """What the model calls recorded in the usage ledger spent: tokens, cost, latency, with a total.

    With --by turn, the table is followed by a chart of tokens per turn; --plot FILE.png writes tokens and
    cost per turn as a PNG.

    Example: remem usage --since 7d --by model --db sqlite:///.remem/remem.db
    """
    from remem.cli._render import emit_json, say, show_table
    from remem.cli._sources import inspect_database, open_ledger

    if plot_path is not None:
        _require_matplotlib()  # before reading anything: the error names the extra to install
    db = inspect_database(_url(database_url))
    cutoff = None if since is None else time.time() - _age(since).total_seconds()
    per_turn: list[Totals] = []
    with open_ledger(db) as ledger:
        if ledger is None:
            rows: list[dict[str, Any]] = []
            total: dict[str, Any] = {}
        else:
            filters: dict[str, Any] = {"thread_id": thread_id, "user_id": user_id, "since": cutoff}
            if plot_path is not None or by == "turn":
                per_turn = ledger.totals(by="turn", **filters)
            if by is None:
                events = ledger.events(**filters, limit=limit or None)
                rows = [e.as_dict() for e in events]
            else:
                rows = [_group_row(by, t) for t in ledger.totals(by=by, **filters)]
            total = ledger.totals(**filters)[0].as_dict()
            total.pop("key")
    if plot_path is not None:
        if not per_turn:
            from remem.errors import NotFoundError

            raise NotFoundError(f"no usage recorded in {db.shown} for this selection: nothing to plot")
        write_plot(plot_path, per_turn, title=f"usage in {db.shown}")
        if not as_json and fmt == "table":
            say(f"wrote a chart of {len(per_turn)} turn(s) to {plot_path}")
    if as_json:
        emit_json({"database": db.shown, "by": by, "rows": rows, "total": total})
        return
    if fmt == "jsonl":
        for row in rows:
            emit_line(row)
        return
    if not rows:
        if fmt == "table":
            say(f"no usage recorded in {db.shown}" + (" for this selection" if ledger is not None else ""))
            say(_NOTHING_RECORDED)
        return
    columns = list(rows[0])
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[_csv_cell(row.get(c)) for c in columns] for row in rows])
        click.echo(_clean_text(out.getvalue()), nl=False)
        return
    shown = [c for c in columns if c not in ("call_id", "source", "node")]
    table_rows = [[_cell(c, row.get(c)) for c in shown] for row in rows]
    if total:
        table_rows.append(["total", *[""] * (len(shown) - 1)])
        for i, c in enumerate(shown):
            if c in total:
                table_rows[-1][i] = _cell(c, total[c])
    show_table(f"usage in {db.shown}", shown, table_rows)
    if by == "turn":
        for line in terminal_chart(per_turn):
            say(line)
    if total and total.get("unpriced_calls"):
        say(f"{total['unpriced_calls']} call(s) have no price: add their models under [remem.prices]")


_NOTHING_RECORDED = (
    "model calls are recorded by remem's agent (build_agent) and by BudgetMiddleware(ledger_for(saver)); "
    "for any other graph (a plain StateGraph, create_agent without BudgetMiddleware) pass "
    'config={"callbacks": [UsageRecorder(ledger_for(saver))]} to invoke or stream, or '
    "graph.with_config(callbacks=[...]) (from remem.usage import UsageRecorder, ledger_for; README: Cost control)"
)


def _turn_label(totals: Totals, many_threads: bool) -> str:
    thread, turn = totals.key
    shown = "-" if turn is None else str(turn)
    return f"{thread} #{shown}" if many_threads else f"turn {shown}"


def _labels(per_turn: list[Totals]) -> list[str]:
    many = len({t.key[0] for t in per_turn}) > 1
    return [_turn_label(t, many) for t in per_turn]


def terminal_chart(per_turn: list[Totals], width: int = 40) -> list[str]:
    """Lines of a bar chart of tokens per turn (input and output), with each turn's cost."""
    if not per_turn:
        return []
    labels = _labels(per_turn)
    pad = max(len(label) for label in labels)
    top = max(t.tokens for t in per_turn) or 1
    lines = [f"tokens per turn (█ input, ▒ output; one cell = {top / width:,.0f} tokens)"]
    for label, t in zip(labels, per_turn, strict=True):
        inp = round(t.input_tokens / top * width)
        out = max(round(t.tokens / top * width) - inp, 0)
        bar = "█" * inp + "▒" * out
        cost = t.priced_cost
        lines.append(f"{label.rjust(pad)} │{bar.ljust(width)} {t.tokens:>9,} tok  cost {_cost(cost)}")
    return lines


def _require_matplotlib() -> None:
    import importlib.util

    from remem.errors import MissingDependencyError

    if importlib.util.find_spec("matplotlib") is None:
        raise MissingDependencyError.for_extra("matplotlib", "plot")


def write_plot(path: str, per_turn: list[Totals], *, title: str = "usage") -> None:
    """A PNG at ``path``: input and output tokens per turn (stacked bars) above the cost per turn."""
    _require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from remem.cli._render import clean

    labels = [clean(label) for label in _labels(per_turn)]
    x = list(range(len(per_turn)))
    figure = Figure(figsize=(max(6.0, min(0.35 * len(x), 30.0)), 6.0), dpi=100)
    FigureCanvasAgg(figure)
    tokens_axes, cost_axes = figure.subplots(2, 1, sharex=True)
    inputs = [t.input_tokens for t in per_turn]
    tokens_axes.bar(x, inputs, label="input tokens", color="#4477aa")
    tokens_axes.bar(
        x, [t.output_tokens for t in per_turn], bottom=inputs, label="output tokens", color="#ee6677"
    )
    tokens_axes.set_ylabel("tokens")
    tokens_axes.legend(loc="upper left")
    tokens_axes.set_title(clean(title), loc="left", fontsize=10)
    cost_axes.bar(x, [t.cost for t in per_turn], color="#228833", label="cost")
    unpriced = [i for i, t in enumerate(per_turn) if t.unpriced]
    if unpriced:
        cost_axes.plot(unpriced, [0.0] * len(unpriced), "x", color="#bb5566", label="calls without a price")
        cost_axes.legend(loc="upper left")
    cost_axes.set_ylabel("cost")
    step = max(1, len(x) // 30)  # at most about 30 labels
    cost_axes.set_xticks(x[::step], labels[::step], rotation=60, ha="right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, format="png")


def _group_row(by: str, totals: Totals) -> dict[str, Any]:
    data = totals.as_dict()
    data.pop("key")
    return {**dict(zip(_heads(by), _key(by, totals.key), strict=True)), **data}


def _cell(column: str, value: Any) -> str:
    if column == "cost":
        return _cost(value)
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _csv_cell(value: Any) -> str:
    return "" if value is None else str(value)


def _clean_text(text: str) -> str:
    from remem.cli._render import clean

    return "\n".join(clean(line) for line in text.split("\n"))


def emit_line(data: Any) -> None:
    """One JSON object on one line (masked, controls escaped)."""
    from remem.cli._render import _masked

    click.echo(json.dumps(_masked(data), ensure_ascii=True, default=str))


def _age(text: str) -> Any:
    from remem.cli.checkpoints import parse_age

    return parse_age(text)


def _url(given: str | None) -> str:
    return database_url(given)


# -- export ----------------------------------------------------------------------------------------


def turn_numbers(messages: list[dict[str, Any]], last_turn: int | None) -> list[int | None]:
    """The turn each message belongs to (None before the first user message of a full history).

    A turn starts at a user message that follows another role (two user messages in a row are one turn, as
    the agent and ``BudgetMiddleware`` count them). ``last_turn`` is the turn number the state records
    (``remem_turn``): the latest turn that reached the model. A strategy that removes messages (summary,
    delete) leaves the latest turns in the state, so the turns are counted back from it; a history without
    that number (a stock graph, the memory client) holds every turn, counted from 1.
    """
    starts = [
        i
        for i, m in enumerate(messages)
        if m["role"] == "user" and (i == 0 or messages[i - 1]["role"] != "user")
    ]
    if not starts:
        return [None] * len(messages)
    newest = len(starts)
    if last_turn is not None:
        # The newest turn has reached the model once something follows its user message; a user message
        # alone at the end is a turn that has not (yet) been answered: the next number.
        answered = any(m["role"] != "user" for m in messages[starts[-1] :])
        newest = max(newest, last_turn if answered else last_turn + 1)
    first = newest - len(starts) + 1
    numbers: list[int | None] = []
    turn: int | None = first - 1 if first > 1 else None  # the kept end of a turn whose start was removed
    for i in range(len(messages)):
        if i in starts:
            turn = first + starts.index(i)
        numbers.append(turn)
    return numbers


def _turn_record(
    n: int, turns: dict[int, Totals], models: dict[int, list[str]], **extra: Any
) -> dict[str, Any]:
    found = turns.get(n)
    data = found.as_dict() if found is not None else {"calls": 0, "cost": None}
    data.pop("key", None)
    return {"type": "turn", "turn": n, "models": models.get(n, []), **data, **extra}


def transcript(
    messages: list[dict[str, Any]],
    turns: dict[int, Totals],
    models: dict[int, list[str]],
    *,
    last_turn: int | None = None,
    summary: str = "",
) -> list[dict[str, Any]]:
    """The transcript's records (after the ``thread`` line): messages, each turn's totals after them.

    Every turn gets its own ledger row, by the number the state gives it (:func:`turn_numbers`). The turns
    no longer in the state come first: one ``summary`` record (or ``removed`` without a summary) naming
    them, then their ``turn`` records (``"in_state": false``), so every ledger row of the thread is shown.
    """
    numbers = turn_numbers(messages, last_turn)
    kept = [n for n in numbers if n is not None]
    first = min(kept) if kept else (last_turn or 0) + 1
    if kept and numbers[0] is not None and numbers[0] == first and messages[0]["role"] != "user":
        first += 1  # the first messages end a turn whose start was removed: that turn is partly gone
    removed = sorted({n for n in range(1, first)} | {n for n in turns if n < first})
    records: list[dict[str, Any]] = []
    if removed:
        span = [removed[0], removed[-1]]
        if summary:
            records.append({"type": "summary", "replaces_turns": span, "content": summary})
        else:
            records.append({"type": "removed", "turns": span})
        records += [_turn_record(n, turns, models, in_state=False) for n in removed if n not in kept]
    for i, message in enumerate(messages):
        number = numbers[i]
        records.append({"type": "message", "turn": number, **message})
        if number is not None and (i + 1 == len(messages) or numbers[i + 1] != number):
            records.append(_turn_record(number, turns, models))
    shown = set(kept) | set(removed)
    records += [_turn_record(n, turns, models, in_state=False) for n in sorted(turns) if n not in shown]
    return records


def _thread_messages(db: Any, thread_id: str) -> tuple[list[dict[str, Any]], str, int | None, str]:
    """The thread's messages as transcript records, the turn number its state records and its rolling
    summary: from the checkpoints (with tool calls), else from the memory client's store."""
    from remem.cli._render import message_json
    from remem.cli._sources import REMOTE_KIND, checkpoint_values, open_checkpointer, open_memory, open_remote
    from remem.config import load_settings
    from remem.errors import NotFoundError

    if db.kind == REMOTE_KIND:  # the server's checkpoints of the thread: its latest state, as below
        with open_remote(db) as remote:
            try:
                state = remote.checkpoint_state(thread_id)
            except NotFoundError:
                state = None
        if state is not None:
            values: dict[str, Any] | None = {
                "messages": state["messages"],
                "remem_turn": state["turn"],
                "summary": state["summary"],
            }
        else:
            values = None
    else:
        with open_checkpointer(db) as saver:
            values = None if saver is None else checkpoint_values(saver, thread_id)
    if values is not None:
        turn, summary = values.get("remem_turn"), values.get("summary")
        return (
            [message_json(m) for m in values.get("messages") or []],
            f"checkpoints in {db.shown}",
            turn if isinstance(turn, int) and not isinstance(turn, bool) else None,
            summary if isinstance(summary, str) else "",
        )
    with open_memory(db, load_settings()) as memory:
        if memory is not None:
            try:
                stored = memory.get_thread(thread_id).messages()
            except NotFoundError:
                pass
            else:
                rows = [{"id": m.id, "role": m.role, "content": m.content} for m in stored]
                return rows, f"memory store in {db.shown}", None, ""
    raise NotFoundError(
        f"thread {thread_id!r} is neither in the checkpoints nor in the memory store of {db.shown}; "
        "`remem threads` lists the threads there"
    )


def _turn_line(record: dict[str, Any]) -> str:
    from remem.cli._render import clean

    return (
        f"model: {clean(', '.join(record.get('models') or []) or '-')} | calls: {record.get('calls', 0)}"
        f" | tokens in/out/cached: {record.get('input_tokens', 0)}/{record.get('output_tokens', 0)}/"
        f"{record.get('cached_tokens', 0)} | cost: {_cost(record.get('cost'))}"
        f" | latency: {record.get('latency_ms', 0)} ms"
    )


def _fenced(text: str) -> list[str]:
    fence = "````" if "```" in text else "```"
    return [fence, text, fence, ""]


def _markdown(thread_id: str, source: str, records: list[dict[str, Any]]) -> str:
    from remem.cli._render import clean

    lines = [f"# Thread {clean(thread_id)}", "", f"Source: {clean(source)}. Format: {FORMAT}.", ""]
    pending: list[str] = []
    for record in records:
        if record["type"] == "message":
            text = clean(record["content"])
            calls = record.get("tool_calls")
            body = text + ("\n" + json.dumps(calls, ensure_ascii=True, default=str) if calls else "")
            pending += [f"**{record['role']}**", "", *_fenced(clean(body))]
        elif record["type"] == "summary":
            low, high = record["replaces_turns"]
            lines += [f"## Summary (replaces turns {low}-{high})", "", *_fenced(clean(record["content"]))]
        elif record["type"] == "removed":
            low, high = record["turns"]
            lines += [f"## Turns {low}-{high}: removed from the state by the memory strategy", ""]
        elif not record.get("in_state", True):
            lines += [f"- turn {record['turn']} (not in the state): {_turn_line(record)}"]
        else:
            if lines[-1].startswith("- turn "):
                lines.append("")
            lines += [f"## Turn {record['turn']}", "", _turn_line(record), "", *pending]
            pending = []
    return "\n".join(lines + pending).rstrip() + "\n"


@click.command("export")
@click.argument("thread_id")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "md"]),
    default="jsonl",
    show_default=True,
    help="Output format.",
)
@db_option
@api_key_option
@json_option
def export_command(thread_id: str, fmt: str, database_url: str | None, as_json: bool) -> None:
    """Print a thread's transcript with each turn's model, tokens, cost and latency from the ledger.

    The format is documented in ``remem.cli.usage`` (``remem.transcript/1``); --json prints the same
    records as one JSON document.

    Example: remem export demo-20261129-101500 --format md > transcript.md
    """
    from remem.cli._render import emit_json

    head, records = transcript_of(_url(database_url), thread_id)
    if as_json:
        emit_json({**head, "records": records})
    elif fmt == "jsonl":
        for record in [head, *records]:
            emit_line(record)
    else:
        click.echo(_markdown(thread_id, head["source"], records), nl=False)


def transcript_of(url: str, thread_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``thread`` line and the records of the thread's transcript (``remem export``; ``remem replay``
    saves the replayed thread's with its results)."""
    from remem.cli._sources import inspect_database, open_ledger

    db = inspect_database(url)
    messages, source, last_turn, summary = _thread_messages(db, thread_id)
    turns: dict[int, Totals] = {}
    models: dict[int, list[str]] = {}
    with open_ledger(db) as ledger:
        if ledger is not None:
            for totals in ledger.totals(by="turn", thread_id=thread_id):
                if totals.key[1] is not None:
                    turns[int(totals.key[1])] = totals
            for event in ledger.events(thread_id=thread_id):
                if event.turn is not None and event.model not in models.setdefault(event.turn, []):
                    models[event.turn].append(event.model)
    head = {"type": "thread", "format": FORMAT, "thread": thread_id, "source": source}
    return head, transcript(messages, turns, models, last_turn=last_turn, summary=summary)


COMMANDS: list[click.Command] = [usage_command, export_command]
