"""The layer order of DESIGN.md, pinned: no module imports a module of a higher layer.

Every import counts, at any depth of the module (a lazy import inside a function, or one under
``TYPE_CHECKING``, is still a dependency). A module with no layer in the table fails the test, so that a
new module is placed on purpose.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import remem
import remem.layout

SRC = Path(remem.__file__).parent

# DESIGN.md, "Layers", lowest first. A prefix covers its submodules; the longest prefix wins.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "foundation",
        (
            "remem.errors",
            "remem.config",
            "remem._clock",
            "remem._url",
            "remem._secrets",
            "remem._files",
            "remem._sqlite",
            "remem._pgpool",
            "remem._backup",
            "remem._lazy",
        ),
    ),
    ("messages", ("remem.messages",)),
    # The rate limiter needs only the foundation, and the models the settings build use it.
    ("models", ("remem.models", "remem.embeddings", "remem.testing", "remem.usage.ratelimit")),
    (
        "layout",
        ("remem.layout", "remem._statements", "remem._migrate", "remem._lease", "remem._lease_target"),
    ),  # the contract storage shares
    ("strategies", ("remem.strategies",)),
    ("summarisers", ("remem.summarize",)),
    ("checkpointing", ("remem.checkpoint",)),
    ("long-term store", ("remem.store",)),
    ("usage ledger", ("remem.usage",)),  # model calls, prices, budgets: next to the thread's storage
    ("extraction", ("remem.extraction",)),
    # Erasure sits above every storage package it erases from (checkpoints, store, ledger) and beside the
    # memory client and the job queue: it removes a user's queued jobs (remem.jobs, whose handlers run the
    # memory client), and the memory client's remote twin returns its reports.
    ("memory client", ("remem.memory", "remem.erasure", "remem.jobs", "remem.ingestion")),
    ("agent", ("remem.agent", "remem._turn", "remem.middleware", "remem.inspection", "remem.eval")),
    ("surfaces", ("remem.cli", "remem.server", "remem.demo")),
    ("package", ("remem",)),  # the package's __init__ re-exports the public API of every layer
]
# DESIGN.md's "Layers" table as written there, lowest first: each layer and the modules it names.
DESIGN_LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("remem.errors", "remem.config", "remem._clock")),
    ("messages", ("remem.messages",)),
    ("models", ("remem.models", "remem.embeddings")),
    ("layout", ("remem.layout",)),
    ("strategies", ("remem.strategies",)),
    ("summarisers", ("remem.summarize",)),
    ("checkpointing", ("remem.checkpoint",)),
    ("long-term store", ("remem.store",)),
    ("extraction", ("remem.extraction",)),
    ("memory client", ("remem.memory",)),
    ("agent", ("remem.agent", "remem.middleware")),
    ("surfaces", ("remem.cli", "remem.server")),
]
# The layers LAYERS adds to DESIGN.md's: the usage ledger (between store and extraction) and the package.
EXTRA_LAYERS = ("usage ledger", "package")
RANK = {prefix: rank for rank, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes}


def layer_of(module: str) -> int | None:
    """The rank of ``module``'s layer, by its longest listed prefix."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        rank = RANK.get(".".join(parts[:n]))
        if rank is not None and (n > 1 or module == "remem"):
            return rank
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


ALL_MODULES = {module_name(p) for p in _modules()}


def imports_of(path: Path) -> set[str]:
    """The remem modules ``path`` imports, relative imports resolved."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # ``from remem import layout`` imports the module remem.layout; ``from remem import Memory``
            # imports the package itself.
            submodules = {f"{target}.{a.name}" for a in node.names} & ALL_MODULES
            found.update(submodules)
            if len(submodules) < len(node.names):
                found.add(target)
    return {m for m in found if m == "remem" or m.startswith("remem.")}


def test_every_module_has_a_layer() -> None:
    unplaced = [module_name(p) for p in _modules() if layer_of(module_name(p)) is None]
    assert unplaced == [], f"add these modules to LAYERS (and to DESIGN.md): {unplaced}"


def upward(source: str, targets: set[str]) -> list[str]:
    """The imports of ``source`` that reach a higher layer than its own."""
    own = layer_of(source)
    assert own is not None, source
    out = []
    for target in sorted(targets):
        rank = layer_of(target)
        if rank is not None and rank > own:
            out.append(f"{source} ({LAYERS[own][0]}) imports {target} ({LAYERS[rank][0]})")
    return out


def test_no_module_imports_a_higher_layer() -> None:
    graph = {module_name(p): imports_of(p) for p in _modules()}
    assert sum(len(t) for t in graph.values()) > 100, "the import graph is nearly empty: imports are missed"
    assert "remem.layout" in graph["remem.memory._records"]  # a known edge is seen
    assert "remem.checkpoint._ops" in graph["remem.checkpoint._base"]  # ``from remem.checkpoint import _ops``
    violations = [v for source, targets in graph.items() for v in upward(source, targets)]
    assert violations == [], "\n".join(violations)


def test_the_check_refuses_an_upward_import() -> None:
    assert upward("remem.store._core", {"remem.memory.client", "remem.errors"}) == [
        "remem.store._core (long-term store) imports remem.memory.client (memory client)"
    ]
    assert upward("remem.memory._records", {"remem.layout", "remem.store"}) == []
    assert upward("remem.agent", {"remem"}) == ["remem.agent (agent) imports remem (package)"]
    assert layer_of("remem.messages.derived") == layer_of("remem.messages")
    assert layer_of("rememx") is None and layer_of("remem.unknown") is None


def test_erasure_sits_above_the_storage_it_erases() -> None:
    erasure = layer_of("remem.erasure._run")
    assert erasure is not None
    for storage in ("remem.checkpoint", "remem.store", "remem.usage", "remem._lease", "remem.layout"):
        rank = layer_of(storage)
        assert rank is not None and rank < erasure, storage


# Names remem.layout gives to data of a layer above the store: the memory client's thread records, the
# users' data, extraction's state and the erasure journal. The store deletes what it is told (prefixes,
# keys, value matches); remem.erasure decides what a user's or a thread's data is.
ABOVE_THE_STORE = {
    "ERASURE_JOURNAL_TABLE",
    "ERASURE_REGISTRY_TABLE",
    "EXTRACTION_STATE_KEY",
    "INTERNAL_ROOT",
    "THREADS_ROOT",
    "THREAD_META_KEY",
    "USERS_ROOT",
    "extraction_root",
    "extraction_state",
    "is_thread_messages",
    "thread_id_of",
    "thread_messages",
    "thread_meta",
    "thread_order",
    "thread_root",
    "thread_summaries",
    "threads_root",
    "user_memories",
    "user_root",
    "users_root",
}


def layout_names_used(path: Path) -> set[str]:
    """The names of remem.layout that ``path`` imports or reads as ``layout.NAME``."""
    used: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "remem.layout":
            used.update(a.name for a in node.names)
        elif (
            isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "layout"
        ):
            used.add(node.attr)
    return used


def test_the_store_names_no_data_of_a_higher_layer() -> None:
    assert set(remem.layout.__all__) >= ABOVE_THE_STORE  # every name is one the layout still has
    assert "threads_root" in layout_names_used(SRC / "erasure" / "_scopes.py")  # a known use is seen
    found = {
        module_name(p): sorted(layout_names_used(p) & ABOVE_THE_STORE)
        for p in sorted((SRC / "store").rglob("*.py"))
    }
    assert {m: names for m, names in found.items() if names} == {}


def test_the_table_keeps_the_order_of_design_md() -> None:
    # LAYERS may add layers and modules, never reorder DESIGN.md's or move a module it names.
    assert [name for name, _ in LAYERS if name not in EXTRA_LAYERS] == [name for name, _ in DESIGN_LAYERS]
    ours = dict(LAYERS)
    for name, modules in DESIGN_LAYERS:
        assert set(modules) <= set(ours[name]), f"DESIGN.md places {modules} in {name!r}"


def test_contributing_md_states_the_same_order() -> None:
    text = (SRC.parent.parent / "CONTRIBUTING.md").read_text(encoding="utf-8")
    line = re.search(r"- Layers: (.*?); a lower layer", text, re.S)
    assert line is not None, "CONTRIBUTING.md lost its layer line"
    steps = [step.strip() for step in " ".join(line.group(1).split()).split("<")]
    ranks = [{layer_of(f"remem.{name}") for name in step.split("/")} for step in steps]
    assert all(len(rank) == 1 and None not in rank for rank in ranks), dict(zip(steps, ranks, strict=True))
    order = [rank.pop() for rank in ranks]
    assert order == sorted(order) and len(set(order)) == len(order), dict(zip(steps, order, strict=True))


# What an import loads at run time, which the AST walk above cannot see: a package's ``__init__`` runs
# before any of its modules, so an eager ``__init__`` would pull a higher layer into a lower one's import.
LOADED_CHECKS = ("remem.errors", "remem.config", "remem.messages", "remem.usage.ratelimit", "remem.models")


def loaded_by(module: str, packages: tuple[str, ...] = ("remem",)) -> set[str]:
    """The modules of ``packages`` a fresh interpreter has loaded once ``import module`` returns."""
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        f"import {module}\n"
        f"packages = {packages!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in packages)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return set(json.loads(out.stdout))


def test_an_import_loads_no_module_of_a_higher_layer() -> None:
    problems = []
    for module in LOADED_CHECKS:
        loaded = loaded_by(module)
        assert module in loaded
        problems += [
            f"import {module} loads {other}"
            for other in sorted(loaded)
            # a package runs before its modules: itself allowed, what it loads is checked
            if not module.startswith(f"{other}.") and (layer_of(other) or 0) > (layer_of(module) or 0)
        ]
    assert problems == [], "\n".join(problems)


def test_the_rate_limiter_loads_no_ledger() -> None:
    # The models layer needs the rate limiter only; remem.usage's __init__ loads its names on first use.
    assert loaded_by("remem.usage.ratelimit") <= {
        "remem",
        "remem._lazy",
        "remem.errors",
        "remem.usage",
        "remem.usage.ratelimit",
    }


def test_erasure_and_the_queue_load_no_language_model() -> None:
    # ``remem forget`` needs the queue only to remove a user's jobs; the job handlers (extraction, and with it
    # LangChain's language models and tracers) load when a worker asks for them, not on every erasure. The
    # ``language_models`` package itself is lazy and loaded by ``langchain_core.messages``; its models are not.
    heavy = (
        "remem.jobs._handlers",
        "remem.extraction",
        "langchain_core.language_models.base",
        "langchain_core.tracers",
    )
    for module in ("remem.erasure", "remem.jobs"):
        loaded = loaded_by(module, ("remem", "langchain_core"))
        assert module in loaded
        assert sorted(m for m in loaded if m.startswith(heavy)) == [], module


def test_one_statement_protocol() -> None:
    # remem._statements holds the one statement type, flow shape and sync/async drivers: it loads no other
    # remem module, and every package that runs SQL drives its programs with it.
    assert loaded_by("remem._statements") == {"remem", "remem._lazy", "remem._statements"}
    graph = {module_name(p): imports_of(p) for p in _modules()}
    drivers = (
        "remem._migrate",
        "remem.checkpoint._sync",
        "remem.checkpoint._async",
        "remem.store._base",
        "remem.store._async",
        "remem.store.postgres",
    )
    assert [m for m in drivers if "remem._statements" not in graph[m]] == []


def test_the_library_imports_no_test_fake() -> None:
    # ``remem.testing`` is for tests and users' tests; the library's own code (``embedder="fake"`` included)
    # takes what it needs from the module that owns it.
    graph = {module_name(p): imports_of(p) for p in _modules()}
    assert "remem.models" in graph["remem.testing"]  # a known edge is seen
    importers = sorted(
        m for m, targets in graph.items() if "remem.testing" in targets and m != "remem.testing"
    )
    assert importers == [], f"these modules import remem.testing: {importers}"
