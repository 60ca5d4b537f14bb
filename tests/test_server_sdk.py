"""The real ``langgraph-sdk`` client (sync and async) and ``RemoteGraph`` against ``remem serve``, unchanged.

Two servers, started together: ``keyed`` (tenants a and b) and ``open`` (no keys, loopback), whose
database also holds a thread that an in-process LangGraph graph wrote with remem's checkpointer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from langgraph_sdk import get_client, get_sync_client

from remem.server.keys import create_key
from remem.store import open_store
from tests.server_process import Server, start_server

pytest.importorskip("fastapi")
pytestmark = pytest.mark.xdist_group("server_sdk")  # the module's server starts once, in one worker


@dataclass
class Served:
    keyed: Server
    open: Server
    a: str
    b: str


def _graph_thread(url: str) -> None:
    """An app's graph, run in this process with remem's checkpointer: two turns of thread "app"."""
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from remem import checkpointer_from_url

    def reply(state: MessagesState) -> dict[str, object]:
        return {"messages": [AIMessage(f"echo {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    with checkpointer_from_url(url) as saver:
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "app", "user_id": "maya"}}
        graph.invoke({"messages": [{"role": "user", "content": "hello"}]}, config)
        graph.invoke({"messages": [{"role": "user", "content": "again"}]}, config)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("sdk")
    keyed_db, open_db = f"sqlite:///{folder / 'keyed.db'}", f"sqlite:///{folder / 'open.db'}"
    with open_store(keyed_db) as store:
        a, _ = create_key(store, tenant="a")
        b, _ = create_key(store, tenant="b")
    _graph_thread(open_db)
    keyed, opened = start_server(keyed_db), start_server(open_db)
    try:
        yield Served(keyed.ready(), opened.ready(), a, b)
    finally:
        keyed.stop()
        opened.stop()


def sdk(server: Server, key: str | None) -> object:
    return get_sync_client(url=server.url, api_key=key)


def test_threads_create_get_update_search_count_delete(served: Served) -> None:
    client = get_sync_client(url=served.keyed.url, api_key=served.a)
    made = client.threads.create(thread_id="t-sdk", metadata={"user": "maya", "team": "x"})
    assert made["thread_id"] == "t-sdk" and made["metadata"] == {"user": "maya", "team": "x"}
    assert made["status"] == "idle" and made["values"] == {}
    with pytest.raises(httpx.HTTPStatusError) as conflict:
        client.threads.create(thread_id="t-sdk")
    assert conflict.value.response.status_code == 409
    assert client.threads.create(thread_id="t-sdk", if_exists="do_nothing")["metadata"]["user"] == "maya"
    updated = client.threads.update("t-sdk", metadata={"team": "y"})
    assert updated["metadata"] == {"user": "maya", "team": "y"}
    client.threads.create(thread_id="t-other", metadata={"user": "otto"})
    found = client.threads.search(metadata={"user": "maya"})
    assert [t["thread_id"] for t in found] == ["t-sdk"]
    assert client.threads.count() == 2
    assert client.threads.count(metadata={"user": "otto"}) == 1
    assert len(client.threads.search(limit=1, offset=1)) == 1
    client.threads.delete("t-other")
    with pytest.raises(httpx.HTTPStatusError) as gone:
        client.threads.get("t-other")
    assert gone.value.response.status_code == 404
    fresh = client.threads.create()
    assert len(fresh["thread_id"]) == 36


def test_state_update_history_and_state_at_a_checkpoint(served: Served) -> None:
    client = get_sync_client(url=served.keyed.url, api_key=served.a)
    client.threads.create(thread_id="t-state")
    empty = client.threads.get_state("t-state")
    assert empty["values"] == {} and empty["checkpoint"]["checkpoint_id"] is None
    first = client.threads.update_state(
        "t-state", {"messages": [{"role": "user", "content": "hi", "id": "h1"}]}
    )
    second = client.threads.update_state(
        "t-state",
        {"messages": [{"role": "assistant", "content": "hello", "id": "h2"}], "mood": "ok"},
        as_node="bot",
    )
    state = client.threads.get_state("t-state")
    assert [m["content"] for m in state["values"]["messages"]] == ["hi", "hello"]
    assert state["values"]["mood"] == "ok"
    assert state["checkpoint"]["checkpoint_id"] == second["checkpoint"]["checkpoint_id"]
    assert state["parent_checkpoint"]["checkpoint_id"] == first["checkpoint"]["checkpoint_id"]
    assert state["metadata"]["writes"]["bot"]["mood"] == "ok"
    earlier = client.threads.get_state("t-state", checkpoint=first["checkpoint"])
    assert [m["content"] for m in earlier["values"]["messages"]] == ["hi"]
    by_id = client.threads.get_state("t-state", checkpoint_id=first["checkpoint"]["checkpoint_id"])
    assert by_id["checkpoint"] == earlier["checkpoint"]
    history = client.threads.get_history("t-state")
    assert [h["checkpoint"]["checkpoint_id"] for h in history] == [
        second["checkpoint"]["checkpoint_id"],
        first["checkpoint"]["checkpoint_id"],
    ]
    assert len(client.threads.get_history("t-state", limit=1)) == 1
    older = client.threads.get_history("t-state", before=second["checkpoint"])
    assert [h["checkpoint"]["checkpoint_id"] for h in older] == [first["checkpoint"]["checkpoint_id"]]
    assert client.threads.get("t-state")["values"]["mood"] == "ok"
    copied = client.threads.copy("t-state")
    assert client.threads.get_state(copied["thread_id"])["values"]["mood"] == "ok"
    assert client.threads.prune([copied["thread_id"]])["pruned_count"] == 1


def test_a_tenant_sees_no_thread_or_item_of_another(served: Served) -> None:
    a = get_sync_client(url=served.keyed.url, api_key=served.a)
    b = get_sync_client(url=served.keyed.url, api_key=served.b)
    a.threads.create(thread_id="t-private", metadata={"owner": "a"})
    a.threads.update_state("t-private", {"secret": "swordfish"})
    a.store.put_item(["notes", "maya"], "k1", {"text": "a's note"})
    for call in (
        lambda: b.threads.get("t-private"),
        lambda: b.threads.get_state("t-private"),
        lambda: b.threads.get_history("t-private"),
        lambda: b.threads.delete("t-private"),
        lambda: b.threads.copy("t-private"),
        lambda: b.store.get_item(["notes", "maya"], "k1"),
    ):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            call()
        assert refused.value.response.status_code == 404
    assert all(t["thread_id"] != "t-private" for t in b.threads.search(limit=100))
    assert b.threads.count(metadata={"owner": "a"}) == 0
    assert b.store.search_items(["notes"])["items"] == []
    assert b.store.list_namespaces()["namespaces"] == []
    assert b.threads.prune(["t-private"])["pruned_count"] == 0
    assert a.threads.get_state("t-private")["values"]["secret"] == "swordfish"


def test_store_put_get_search_namespaces_delete(served: Served) -> None:
    client = get_sync_client(url=served.keyed.url, api_key=served.a)
    # the server's store indexes "content" by default (the memory client's field); index= names others
    client.store.put_item(
        ["docs", "tea"], "green", {"text": "green tea is calming", "kind": "tea"}, index=["text"]
    )
    client.store.put_item(
        ["docs", "tea"], "black", {"text": "black tea is strong", "kind": "tea"}, index=["text"], ttl=60
    )
    client.store.put_item(["docs", "coffee"], "espresso", {"text": "espresso is short"}, index=False)
    item = client.store.get_item(["docs", "tea"], "green")
    assert item["value"]["kind"] == "tea" and item["namespace"] == ["docs", "tea"] and item["created_at"]
    hits = client.store.search_items(["docs"], query="calming green tea", limit=5)["items"]
    assert hits[0]["key"] == "green" and "score" in hits[0]
    assert {h["key"] for h in client.store.search_items(["docs"], filter={"kind": "tea"})["items"]} == {
        "green",
        "black",
    }
    assert len(client.store.search_items(["docs"], limit=1, offset=1)["items"]) == 1
    spaces = client.store.list_namespaces(prefix=["docs"])["namespaces"]
    assert sorted(spaces) == [["docs", "coffee"], ["docs", "tea"]]
    assert client.store.list_namespaces(prefix=["docs"], max_depth=1)["namespaces"] == [["docs"]]
    assert client.store.list_namespaces(suffix=["tea"])["namespaces"] == [["docs", "tea"]]
    client.store.delete_item(["docs", "tea"], "green")
    with pytest.raises(httpx.HTTPStatusError) as gone:
        client.store.get_item(["docs", "tea"], "green")
    assert gone.value.response.status_code == 404


def test_remem_roots_are_refused_in_the_store(served: Served) -> None:
    client = get_sync_client(url=served.open.url, api_key=None)
    for root in ("_remem", "tenants"):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            client.store.put_item([root, "x"], "k", {"v": 1})
        assert refused.value.response.status_code == 422 and root in refused.value.response.text
    names = client.store.list_namespaces()["namespaces"]
    assert all(ns[0] not in ("_remem", "tenants") for ns in names)
    # labels LangGraph refuses are a 422 naming the namespace, never a 500 (the SDK checks '.' itself)
    for body in (
        {"namespace": ["a.b"], "key": "k", "value": {}},
        {"namespace": [""], "key": "k", "value": {}},
    ):
        answer = httpx.put(f"{served.open.url}/store/items", json=body, timeout=30)
        assert answer.status_code == 422 and "namespace" in answer.json()["detail"]
    listed = httpx.post(
        f"{served.open.url}/store/namespaces", json={"prefix": ["x"], "suffix": ["a.b"]}, timeout=30
    )
    assert listed.status_code == 422
    got = httpx.get(f"{served.open.url}/store/items", params={"namespace": "../..", "key": "k"}, timeout=30)
    assert got.status_code == 422


def test_runs_and_assistants_answer_501_naming_what_to_use(served: Served) -> None:
    client = get_sync_client(url=served.keyed.url, api_key=served.a)
    with pytest.raises(httpx.HTTPStatusError) as refused:
        client.assistants.search()
    assert refused.value.response.status_code == 501 and "graph" in refused.value.response.json()["detail"]
    with pytest.raises(httpx.HTTPStatusError) as runs:
        client.runs.list("t-any")
    assert runs.value.response.status_code == 501 and "checkpointer" in runs.value.response.json()["detail"]


def test_an_apps_graph_thread_is_read_by_the_sdk_and_remote_graph(served: Served) -> None:
    from langgraph.pregel.remote import RemoteGraph

    client = get_sync_client(url=served.open.url, api_key=None)
    assert "app" in [t["thread_id"] for t in client.threads.search(limit=100)]
    state = client.threads.get_state("app")
    assert [m["content"] for m in state["values"]["messages"]] == ["hello", "echo 1", "again", "echo 3"]
    assert state["values"]["messages"][0]["type"] == "human"
    remote = RemoteGraph("agent", sync_client=client)
    snapshot = remote.get_state({"configurable": {"thread_id": "app"}})
    assert snapshot.values["messages"][-1]["content"] == "echo 3"
    assert snapshot.config["configurable"]["checkpoint_id"] == state["checkpoint"]["checkpoint_id"]
    history = list(remote.get_state_history({"configurable": {"thread_id": "app"}}, limit=3))
    assert len(history) == 3 and history[0].config == snapshot.config
    assert (
        history[1].config["configurable"]["checkpoint_id"]
        == snapshot.parent_config["configurable"]["checkpoint_id"]
    )


async def test_the_async_client_works_too(served: Served) -> None:
    client = get_client(url=served.keyed.url, api_key=served.a)
    made = await client.threads.create(thread_id="t-async", metadata={"via": "async"})
    assert made["thread_id"] == "t-async"
    await client.threads.update_state("t-async", {"n": 1})
    assert (await client.threads.get_state("t-async"))["values"] == {"n": 1}
    await client.store.put_item(["async"], "k", {"v": 2})
    assert (await client.store.get_item(["async"], "k"))["value"] == {"v": 2}
