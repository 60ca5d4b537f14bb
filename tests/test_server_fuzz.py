"""The OpenAPI document of ``remem serve``, fuzzed with schemathesis against the real server (SQLite, one
process, a tenant's key): every operation, with inputs that fit the document and inputs that do not. No
answer is a 500; a refused input is a 4xx whose body names the field. Bounded: a fixed number of examples
per operation, derandomized, so the run is the same each time and takes seconds."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
schemathesis = pytest.importorskip("schemathesis")
pytestmark = pytest.mark.xdist_group("server_fuzz")  # the module's server starts once, in one worker

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis.generation import GenerationMode  # noqa: E402

from remem.server.keys import create_key  # noqa: E402
from remem.store import open_store  # noqa: E402
from tests.server_process import running_server  # noqa: E402

EXAMPLES = 3  # per operation and mode: about 200 requests in all


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    db = f"sqlite:///{Path(tmp_path_factory.mktemp('fuzz')) / 'f.db'}"
    with open_store(db) as store:
        key, _ = create_key(store, tenant="fuzz")
    with running_server(db, ["--rate-limit", "0"]) as server:
        yield server.url, key


@pytest.fixture(scope="module")
def api(served: tuple[str, str]) -> Any:
    url, _ = served
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", timeout=60)
    schema.config.generation.update(
        modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=EXAMPLES, deterministic=True
    )
    return schema


def _names_the_field(body: dict[str, Any]) -> bool:
    if body.get("error") == "RequestValidationError":
        return bool(body.get("errors")) and all(p.get("field") for p in body["errors"])
    return bool(body.get("detail"))


def _problem(case: Any, session: Any, key: str) -> str | None:
    """What is wrong with the server's answer to ``case``, or None."""
    response = case.call(session=session, headers={"X-Api-Key": key}, timeout=60)
    where = f"{case.method} {case.formatted_path} {case.query or ''} {str(case.body)[:200]}"
    if response.status_code >= 500 or "Traceback" in response.text:
        return f"{where}: {response.status_code} {response.text[:300]}"
    if 400 <= response.status_code < 500 and response.status_code not in (401, 403, 404, 405, 501):
        body = response.json()
        if not _names_the_field(body):
            return f"{where}: {response.status_code} names no field: {body}"
    return None


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_input_the_document_allows_or_refuses_is_a_500(
    api: Any, served: tuple[str, str], mode: GenerationMode
) -> None:
    import requests

    _, key = served
    problems: list[str] = []
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) > 30  # the whole document: /v1, the LangGraph routes, operations
    with requests.Session() as session:
        for operation in operations:

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=EXAMPLES,
                derandomize=True,
                deadline=None,
                database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def run(case: Any) -> None:
                found = _problem(case, session, key)
                if found:
                    problems.append(found)

            with contextlib.suppress(Unsatisfiable):  # nothing breaks its document (no parameters, no body)
                run()
    assert problems == [], "\n".join(problems[:20])
