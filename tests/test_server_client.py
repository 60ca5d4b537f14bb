"""``Memory.from_url("http://...", api_key=...)``: remem's own client over a real ``remem serve``, side by
side with the local client on a SQLite file: same methods, same return types, same errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from remem import Memory, load_settings
from remem.errors import ConfigError, InvalidMessagesError, NotFoundError, RememUsageError
from remem.memory import ContextCard, MemoryRecord, Recall, StoredMessage, Summary, ThreadInfo
from remem.server.keys import create_key
from remem.store import open_store
from tests.server_process import Server, running_server

pytest.importorskip("fastapi")
pytestmark = pytest.mark.xdist_group("server_client")  # the module's server starts once, in one worker

CONVERSATION = [
    {"id": "m1", "role": "user", "content": "My sister Ana lives in Porto"},
    {"id": "m2", "role": "assistant", "content": "Porto is lovely"},
    {"id": "m3", "role": "user", "content": "She keeps bees on her roof"},
    {"id": "m4", "role": "assistant", "content": "Bees on a roof, nice"},
    {"id": "m5", "role": "user", "content": "What should I bring her?"},
]


@dataclass
class Served:
    server: Server
    a: str
    b: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    db = f"sqlite:///{tmp_path_factory.mktemp('client') / 'served.db'}"
    with open_store(db) as store:
        a, _ = create_key(store, tenant="a")
        b, _ = create_key(store, tenant="b")
    with running_server(db) as server:
        yield Served(server, a, b)


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Memory]:
    monkeypatch.setenv("REMEM_EMBEDDER", "fake")
    with Memory.from_url(
        f"sqlite:///{tmp_path / 'local.db'}", settings=load_settings(config_file=None)
    ) as memory:
        yield memory


def test_the_remote_client_answers_as_the_local_one(served: Served, local: Memory) -> None:
    remote = Memory.from_url(served.server.url, api_key=served.a)
    results = []
    for memory in (local, remote):
        thread = memory.thread("family", user_id="maya")
        stored = thread.add_messages(CONVERSATION)
        again = thread.add_messages(CONVERSATION[:2])  # a retry stores nothing twice
        card = thread.get_context_card(except_last_messages=1, query="bees Ana")
        summary = thread.get_summary(except_last=1)
        hits = memory.search("Ana bees roof", thread_id="family", k=3)
        results.append((thread, stored, again, card, summary, hits, thread.messages(last=2), thread.info()))
    (lt, ls, la, lc, lsum, lh, ll, li), (rt, rs, ra, rc, rsum, rh, rl, ri) = results
    assert type(rt).__name__ == "RemoteThread" and rt.thread_id == lt.thread_id and rt.user_id == "maya"
    assert all(isinstance(m, StoredMessage) for m in rs) and isinstance(rc, ContextCard)
    assert (
        isinstance(rsum, Summary)
        and all(isinstance(h, MemoryRecord) for h in rh)
        and isinstance(ri, ThreadInfo)
    )
    assert [(m.id, m.seq, m.content) for m in rs] == [(m.id, m.seq, m.content) for m in ls]
    assert [(m.id, m.seq) for m in ra] == [(m.id, m.seq) for m in la] == [("m1", 0), ("m2", 1)]
    assert rc.excluded_message_ids == lc.excluded_message_ids == ("m5",)
    assert [r.id for r in rc.records] == [r.id for r in lc.records]
    assert rc.summary == lc.summary and rc.topics == lc.topics and rc.token_count == lc.token_count
    assert (rsum.text, rsum.covered_count, rsum.revision) == (lsum.text, lsum.covered_count, lsum.revision)
    assert [h.id for h in rh] == [h.id for h in lh] and [h.source_message_ids for h in rh] == [
        h.source_message_ids for h in lh
    ]
    assert [m.id for m in rl] == [m.id for m in ll] == ["m4", "m5"]
    assert (ri.message_count, ri.summary_revision) == (li.message_count, li.summary_revision)
    assert [s.revision for s in rt.summaries()] == [s.revision for s in lt.summaries()]
    (rp, rn), (lp, ln) = rt.message_page(1, 2), lt.message_page(1, 2)
    assert [(m.id, m.seq) for m in rp] == [(m.id, m.seq) for m in lp] and rn == ln == len(CONVERSATION)
    assert served.a not in repr(remote)
    remote.close()


def test_langchain_messages_and_errors_cross_the_wire(served: Served) -> None:
    remote = Memory.from_url(served.server.url, api_key=served.a)
    thread = remote.thread("lc", user_id="lia")
    stored = thread.add_messages([HumanMessage("hi there", id="h1"), AIMessage("hello", id="a1")])
    assert [(m.id, m.role) for m in stored] == [("h1", "user"), ("a1", "assistant")]
    with pytest.raises(NotFoundError):
        remote.get_thread("never-made")
    with pytest.raises(InvalidMessagesError):
        thread.add_messages([{"role": "wizard", "content": "x"}])
    with pytest.raises(RememUsageError):
        remote.search("anything")  # neither a user nor a thread
    with pytest.raises(ConfigError, match="api_key"):
        Memory.from_url(served.server.url, api_key="rmk_wrong").get_thread("lc")
    with pytest.raises(NotFoundError):  # another tenant's thread is not there
        Memory.from_url(served.server.url, api_key=served.b).get_thread("lc")
    with pytest.raises(ConfigError):
        Memory.from_url("sqlite:///x.db", api_key="rmk_x")


def test_forget_over_the_wire_returns_erasure_reports(served: Served) -> None:
    from remem.erasure import ErasureReport

    remote = Memory.from_url(served.server.url, api_key=served.a)
    remote.thread("doomed", user_id="dora").add_messages([{"id": "d1", "role": "user", "content": "bye"}])
    reports = remote.forget(thread_id="doomed")  # type: ignore[attr-defined]
    assert reports and all(isinstance(r, ErasureReport) for r in reports)
    assert sum(r.store.items for r in reports) >= 1
    with pytest.raises(NotFoundError):
        remote.get_thread("doomed")


async def test_the_async_twins(served: Served) -> None:
    remote = Memory.from_url(served.server.url, api_key=served.a)
    thread = await remote.athread("async-t", user_id="ash")
    stored = await thread.aadd_messages([{"id": "x1", "role": "user", "content": "async hello about kites"}])
    assert stored[0].seq == 0
    assert [m.id for m in await thread.amessages()] == ["x1"]
    card = await thread.aget_context_card(query="kites")
    assert isinstance(card, ContextCard)
    assert (await remote.asearch("kites", thread_id="async-t"))[0].id == "x1"
    assert (await thread.ainfo()).message_count == 1


def test_the_cli_reads_a_server_given_as_its_database(served: Served) -> None:
    """`--db http://...` with the key in REMEM_API_KEY: threads, card, summary and search read the tenant's
    memory through the server; another tenant's key sees none of it."""
    from click.testing import CliRunner

    from remem.cli import main

    remote = Memory.from_url(served.server.url, api_key=served.a)
    thread = remote.thread("cli-remote", user_id="maya")
    thread.add_messages(
        [
            {"id": "r1", "role": "user", "content": "my parcel to Lisbon is late"},
            {"id": "r2", "role": "assistant", "content": "I will chase the parcel"},
        ]
    )
    runner = CliRunner()

    def run(*args: str, key: str = served.a) -> Any:
        return runner.invoke(main, [*args, "--db", served.server.url], env={"REMEM_API_KEY": key})

    listed = run("threads", "--json")
    assert listed.exit_code == 0, listed.output
    assert {"thread": "cli-remote", "in": ["memory store"]} in json.loads(listed.stdout)["threads"]
    card = run("card", "cli-remote", "--json")
    assert card.exit_code == 0, card.output
    assert "parcel" in json.loads(card.stdout)["content"]
    found = run("search", "parcel Lisbon", "--thread", "cli-remote", "--json")
    assert found.exit_code == 0, found.output
    assert "r1" in found.stdout
    summary = run("summary", "cli-remote")
    assert summary.exit_code == 0 and "parcel" in summary.output, summary.output
    other = run("card", "cli-remote", key=served.b)
    assert other.exit_code != 0 and "parcel" not in other.output
    assert "cli-remote" not in run("threads", "--json", key=served.b).stdout
    refused = run("card", "cli-remote", key="")
    assert refused.exit_code != 0 and "API key" in refused.output
    usage = run("usage")  # the server's ledger, through its API (tests/test_server_cli.py)
    assert usage.exit_code == 0 and "no usage recorded" in usage.output, usage.output


def test_recall_and_count_text_answer_as_the_local_ones(served: Served, local: Memory) -> None:
    import asyncio

    remote = Memory.from_url(served.server.url, api_key=served.a)
    answers = []
    for memory in (local, remote):
        thread = memory.thread("recalled", user_id="maya")
        thread.add_messages(CONVERSATION)
        answers.append(
            (
                thread.recall("bees on the roof", k=2, exclude_ids=["m3"]),
                memory.count_text("She keeps bees on her roof"),
                asyncio.run(thread.arecall("Porto", k=1, types=["message"])),
            )
        )
    (lr, lc, la), (rr, rc, ra) = answers
    assert isinstance(rr, Recall) and isinstance(ra, Recall)
    assert [r.id for r in rr.records] == [r.id for r in lr.records] and "m3" not in [r.id for r in rr.records]
    assert rr.content == lr.content and rr.token_count == lr.token_count
    assert rc == lc > 0
    assert [r.id for r in ra.records] == [r.id for r in la.records]
    with pytest.raises(NotFoundError):
        Memory.from_url(served.server.url, api_key=served.b).get_thread("recalled")
    remote.close()
