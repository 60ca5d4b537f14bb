"""``remem eval generate`` (a seeded dataset), ``remem eval retrieval DATA`` (how well remem retrieves) and
``remem eval compaction DATA`` (what each strategy sends the model, and which planted facts it keeps)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from remem.cli._options import json_option

__all__ = ["COMMANDS", "eval_group"]

_Command = TypeVar("_Command", bound=Callable[..., Any])


@click.group("eval")
def eval_group() -> None:
    """Evaluate remem on long multi-session conversations (generated here, or yours)."""


@eval_group.command("generate")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    metavar="FILE",
    help="Where to write it: FILE.json (the layout) or FILE.jsonl (one object per line).",
)
@click.option("--seed", type=int, default=21, show_default=True, help="The same seed gives the same set.")
@click.option(
    "--per-language",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    metavar="N",
    help="Conversations per language.",
)
@click.option(
    "--languages",
    default="en,fr,zh,ko",
    show_default=True,
    metavar="CODES",
    help="Comma-separated: en, fr, zh, ko.",
)
@click.option(
    "--sessions",
    type=click.IntRange(min=3),
    default=6,
    show_default=True,
    metavar="N",
    help="Dated sessions per conversation.",
)
@click.option(
    "--facts",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    metavar="N",
    help="Planted facts per conversation (besides the changing, dated and two-hop ones).",
)
def generate_command(
    out: Path, seed: int, per_language: int, languages: str, sessions: int, facts: int
) -> None:
    """Write a seeded set of long conversations with planted facts and questions about them.

    Each conversation has dated sessions of turns with ids; planted facts asked in paraphrase or with a
    shared word, each with a distractor about someone else; a fact that changes later (the new one
    answers, the old one is superseded); a dated event ("when did ..."); a two-hop fact. Each question
    names its evidence turns and its category (lexical, paraphrase, temporal, supersession, multi-hop).

    Example: remem eval generate --out eval.json --seed 21 --per-language 2
    """
    from remem.cli._render import say
    from remem.eval import generate, save_dataset

    codes = [c.strip() for c in languages.split(",") if c.strip()]
    dataset = generate(seed=seed, per_language=per_language, languages=codes, sessions=sessions, facts=facts)
    save_dataset(dataset, out)
    questions = sum(len(c["questions"]) for c in dataset["conversations"])
    say(f"wrote {len(dataset['conversations'])} conversations, {questions} questions to {out}")


def _progress() -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from remem.cli._render import console

    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console(), transient=True,
    )  # fmt: skip


def _phases(bar: Any) -> Any:
    """A ``progress(phase, done, total)`` callback drawing one bar per phase."""
    tasks: dict[str, Any] = {}

    def progress(phase: str, done: int, total: int) -> None:
        if phase not in tasks:
            tasks[phase] = bar.add_task(phase, total=total)
        bar.update(tasks[phase], completed=done, total=total)

    return progress


def _config_option(what: str) -> Callable[[_Command], _Command]:
    return click.option(
        "--config",
        "config",
        type=click.Path(dir_okay=False, path_type=Path),
        metavar="TOML",
        help=f"The remem.toml to run with ({what}; default: the usual settings).",
    )


def _settings(config: Path | None) -> Any:
    from remem.config import load_settings

    return load_settings(config_file=config) if config else load_settings()


def _results(out: Path | None, name: str, result: dict[str, Any], text: str, as_json: bool) -> None:
    """Write NAME.json and NAME.md into ``out`` (when given), then show the result as JSON or as text."""
    import json

    from remem.cli._render import console, emit_json

    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(
            json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        (out / f"{name}.md").write_text(text, encoding="utf-8")
    if as_json:
        emit_json(result)
    else:
        console().print(text, markup=False, highlight=False)


@eval_group.command("retrieval")
@click.argument("data", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--db",
    "database_url",
    metavar="URL",
    help="Where to ingest (default: a new SQLite file, removed after). Use an empty database.",
)
@_config_option("database, embedder, search")
@click.option(
    "--compare",
    "configs",
    nargs=2,
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="A.toml B.toml",
    help="Run two configurations and give B - A with a 95% paired interval.",
)
@click.option(
    "--budget",
    "budgets",
    type=click.IntRange(min=1),
    multiple=True,
    metavar="TOKENS",
    help="A context card budget to check the evidence against (repeatable; default 250, 500, 1000).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Write retrieval.json, retrieval.md and retrieval.png there.",
)
@json_option
def retrieval_command(
    data: Path,
    database_url: str | None,
    config: Path | None,
    configs: tuple[Path, Path] | None,
    budgets: tuple[int, ...],
    out: Path | None,
    as_json: bool,
) -> None:
    """Ingest DATA through the memory client and report recall@1/5/10/25 per category and search mode.

    Also: the share of questions whose evidence is in the context card at each budget, search latency
    p50/p95 per mode, the cards' tokens and what the usage ledger recorded (calls, tokens, cost). DATA is
    the layout `remem eval generate` writes (JSON or JSONL) or LoCoMo's.

    Example: remem eval retrieval eval.json --out results/ ;  remem eval retrieval eval.json --compare a.toml b.toml
    """
    from remem.errors import RememUsageError
    from remem.eval import BUDGETS, compare, evaluate_retrieval, load_dataset, markdown, write_chart

    if configs and (config or database_url):
        raise RememUsageError(
            "--compare runs each configuration on its own new database: drop --config and --db"
        )
    dataset = load_dataset(data)
    options: dict[str, Any] = {"budgets": budgets or BUDGETS}
    with _progress() as bar:
        options["progress"] = _phases(bar)
        if configs:
            comparison = compare(dataset, configs[0], configs[1], **options)
            report, result = comparison.a, comparison.as_dict()
        else:
            comparison = None
            report = evaluate_retrieval(dataset, url=database_url, config=config, **options)
            result = report.as_dict()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_chart(report, out / "retrieval.png", comparison)
    _results(out, "retrieval", result, markdown(report, comparison), as_json)


@eval_group.command("compaction")
@click.argument("data", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--conversation", metavar="ID", help="The conversation to replay (default: the first).")
@click.option(
    "--strategy",
    "strategies",
    type=click.Choice(["filter", "delete", "trim", "summary"]),
    multiple=True,
    help="A strategy to run (repeatable; default: all four).",
)
@_config_option("the sizes the strategies use: keep_messages, max_tokens, summary_trigger_messages")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Write compaction.json, compaction.md and compaction.png there.",
)
@json_option
def compaction_command(
    data: Path,
    conversation: str | None,
    strategies: tuple[str, ...],
    config: Path | None,
    out: Path | None,
    as_json: bool,
) -> None:
    """Replay one conversation of DATA through the agent with each memory strategy: tokens sent per turn,
    and the share of planted facts (the questions' answers) still in front of the model at each turn.

    Offline: a scripted model answers with the conversation's own replies; summaries are extractive.

    Example: remem eval compaction eval.json --out results/ --strategy filter --strategy summary
    """
    from remem.config import STRATEGY_NAMES
    from remem.eval import compaction_markdown, evaluate_compaction, load_dataset, write_compaction_chart

    dataset = load_dataset(data)
    with _progress() as bar:
        task = bar.add_task("strategies", total=len(strategies or STRATEGY_NAMES))
        report = evaluate_compaction(
            dataset,
            conversation=conversation,
            strategies=strategies or STRATEGY_NAMES,
            settings=_settings(config),
            progress=lambda _, done, total: bar.update(task, completed=done, total=total),
        )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_compaction_chart(report, out / "compaction.png")
    _results(out, "compaction", report.as_dict(), compaction_markdown(report), as_json)


@eval_group.command("qa")
@click.argument("data", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--model", "model_name", metavar="M", help="The answering model (default: llm_model).")
@click.option("--judge", "judge_name", metavar="J", help="The judging model (default: the answering one).")
@_config_option("endpoint, embedder")
@click.option("--budget", type=click.IntRange(min=1), default=1000, show_default=True, metavar="TOKENS",
              help="The context card's token budget.")  # fmt: skip
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Write qa.json, qa.md and qa.calls.jsonl (every call: messages, reply, tokens, cost) there.",
)
@json_option
def qa_command(
    data: Path,
    model_name: str | None,
    judge_name: str | None,
    config: Path | None,
    budget: int,
    out: Path | None,
    as_json: bool,
) -> None:
    """Answer each question of DATA from the context card remem builds for it, judge the answers with a
    model, and report accuracy per category, tokens, cost and latency per question.

    Needs a chat model at an OpenAI-compatible endpoint (llm_base_url, llm_model or --model).

    Example: remem eval qa eval.json --model gpt-4o-mini --judge gpt-4o --out results/
    """
    from remem.errors import ConfigError
    from remem.eval import evaluate_qa, load_dataset, qa_markdown, save_calls
    from remem.models import chat_model_from_settings

    settings = _settings(config)
    name = model_name or settings.llm_model
    if not name:
        raise ConfigError("eval qa needs a chat model: pass --model M, or set llm_model (REMEM_LLM_MODEL)")
    model = chat_model_from_settings(settings.replace(llm_model=name))
    judge = chat_model_from_settings(settings.replace(llm_model=judge_name or name))
    assert model is not None and judge is not None  # llm_model is set
    dataset = load_dataset(data)
    with _progress() as bar:
        report = evaluate_qa(
            dataset, model=model, judge=judge, settings=settings, budget=budget, progress=_phases(bar)
        )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        save_calls(report, out / "qa.calls.jsonl")
    _results(out, "qa", report.as_dict(), qa_markdown(report), as_json)


@click.command("replay")
@click.argument("transcript", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--model", "model_name", required=True, metavar="M", help="The chat model to replay with.")
@_config_option("endpoint, strategy, sizes")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    metavar="DIR",
    help="Where to write replay.json, replay.md, the replay's database and its transcript.",
)
@json_option
def replay_command(transcript: Path, model_name: str, config: Path | None, out: Path, as_json: bool) -> None:
    """Replay the user turns of an exported transcript (`remem export THREAD > FILE`) through the agent with
    model M: each turn's answers, tokens, cost and latency side by side with the original's.

    The replay runs on a new database in DIR (replay.db); the transcript of every call it made is saved
    next to the results (replay.transcript.jsonl, the `remem export` format).

    Example: remem replay t1.jsonl --model gpt-4o-mini --out replay-4o-mini/
    """
    import json

    from remem.cli.usage import transcript_of
    from remem.errors import ConfigError
    from remem.eval import read_transcript, replay, replay_markdown
    from remem.models import chat_model_from_settings

    turns = read_transcript(transcript)
    settings = _settings(config).replace(llm_model=model_name)
    model = chat_model_from_settings(settings)
    if model is None:  # pragma: no cover - llm_model is set just above
        raise ConfigError("no chat model: set llm_base_url (REMEM_LLM_BASE_URL) and try again")
    out.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{out / 'replay.db'}"
    with _progress() as bar:
        task = bar.add_task("turns", total=len(turns))
        report = replay(
            turns, model, url=url, settings=settings, progress=lambda d, t: bar.update(task, completed=d)
        )
    head, records = transcript_of(url, report.thread_id)
    (out / "replay.transcript.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in [head, *records]), encoding="utf-8"
    )
    _results(out, "replay", report.as_dict(), replay_markdown(report), as_json)


COMMANDS: list[click.Command] = [eval_group, replay_command]
