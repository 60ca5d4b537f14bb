"""The web inspector (``/ui`` of ``remem serve``) driven in a real headless Chromium (Debian's package).

One server (a SQLite file, keys for tenants a and b) and one browser per module. The data is written
through the service's own endpoints with each tenant's key; the ledger rows and a parked job are written
to the database directly, as the agent and the workers do. Screenshots of each page go to the folder of
``REMEM_UI_SCREENSHOTS`` (``make screenshots``: ``docs/ui``, shown in the README), else to a scratch one.

Chromium: ``$REMEM_CHROMIUM`` or ``chromium`` on the PATH; ``make test`` installs Debian's package when it
is missing. Without it these tests skip on a developer's machine and fail under CI (``CI`` set).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from remem.memory import Memory
from remem.server._tenancy import TenantStore
from remem.server.keys import create_key
from remem.store import open_store
from tests.server_process import Server, start_server
from tests.test_injection import ATTEMPTS

pytest.importorskip("fastapi")
pytestmark = pytest.mark.xdist_group("ui")  # one server and one browser for the module, in one worker
expect.set_options(timeout=20_000)  # a page of a busy 2-core machine may take more than the default 5 s

BIG = 10_000
SCRIPT = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def chromium() -> str:
    found = os.environ.get("REMEM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    message = "Debian's chromium is not installed: `make test` installs it (apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@dataclass
class Site:
    server: Server
    a: str
    b: str
    admin: str
    shots: Path
    job: str

    @property
    def url(self) -> str:
        return self.server.url


def _api(site_url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=site_url, headers={"X-Api-Key": key}, timeout=120)


def _add(c: httpx.Client, thread: str, user: str, messages: list[dict[str, object]]) -> None:
    answer = c.post(f"/v1/threads/{thread}/messages", json={"messages": messages, "user_id": user})
    assert answer.status_code == 200, answer.text


def _memory(c: httpx.Client, user: str, key: str, content: str, **more: object) -> None:
    value = {"content": content, "type": "fact", **more}
    body = {"namespace": ["users", user, "memories"], "key": key, "value": value}
    answer = c.put("/store/items", json={**body, "index": ["content"]})
    assert answer.status_code == 204, answer.text


def _seed_ledger(db: str) -> None:
    from remem.usage import Meter, Price, PriceTable, open_ledger

    with open_ledger(db) as ledger:
        meter = Meter(ledger, PriceTable({"gpt-4o-mini": Price(0.15, 0.6)}))
        for turn in range(1, 7):
            meter.record(
                "chat", "gpt-4o-mini", input_tokens=400 * turn, output_tokens=80, cached_tokens=100 * turn,
                thread_id="tenants:a:trip", user_id="tenants:a:maya", turn=turn,
            )  # fmt: skip
        for turn, node in ((3, "memory.summary"), (5, "summarize_conversation")):
            meter.record(
                "summariser", "gpt-4o-mini", input_tokens=900, output_tokens=120,
                thread_id="tenants:a:trip", turn=turn, node=node,
            )  # fmt: skip
        meter.record(
            "chat", "gpt-4o-mini", input_tokens=999_999, output_tokens=1, thread_id="tenants:b:secret-b"
        )


def _seed_job(db: str) -> str:
    from remem.jobs import open_queue

    queue = open_queue(db)
    try:
        job_id = queue.enqueue("extraction", {"thread": "trip"}, thread_id="tenants:a:trip", max_attempts=1)
        job = queue.claim("test-worker")
        assert job is not None
        queue.fail(job, "the model answered 500 <b>bold?</b>", delay=0)
        queue.enqueue("extraction", {"thread": "secret-b"}, thread_id="tenants:b:secret-b")
    finally:
        queue.close()
    return job_id


def _big(start: int) -> list[dict[str, object]]:
    return [
        {"id": f"b{i}", "role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i}"}
        for i in range(start, min(start + 1000, BIG))
    ]


def _seed_big(db: str) -> None:
    """Tenant a's 10,000-message thread, written before the server starts by another process's memory
    client (a store opened without the embedder: the keyword index only, so the test stays fast)."""
    with open_store(db) as store:
        thread = Memory(TenantStore(store, "a")).thread("big", user_id="bulk")
        for start in range(0, BIG, 1000):
            thread.add_messages(_big(start))


def _seed_ingestions(db: str) -> None:
    """A bulk load of memories in each tenant, as `remem ingest load` writes one (through the tenant's view)."""
    from remem.ingestion import begin_ingestion

    with open_store(db) as store:
        for tenant, text in (("a", "Zed keeps bees"), ("b", "B's bulk secret")):
            with begin_ingestion(
                Memory(TenantStore(store, tenant)), kind="load", source="<crm>.jsonl"
            ) as ing:
                ing.add_memories("zed", [text])


def _seed(url: str, a: str, b: str) -> None:
    with _api(url, a) as c:
        _add(c, "trip", "maya", [
            {"id": "m1", "role": "user", "content": "I'm planning a trip to Kyoto and I love green tea."},
            {"id": "m2", "role": "assistant", "content": "Kyoto has wonderful tea houses."},
            {"id": "m3", "role": "user", "content": SCRIPT},
            {"id": "m4", "role": "assistant", "content": "Let me look that up.",
             "metadata": {"tool_calls": [{"id": "call_1", "name": "search", "args": {"q": "tea houses"}}]}},
            {"id": "m5", "role": "tool", "content": "Ippodo Tea: open 10-18. " * 40, "metadata": {"tool_call_id": "call_1"}},
            {"id": "m6", "role": "user", "content": "Which tea house is closest to the station?"},
        ])  # fmt: skip
        _add(
            c,
            "hostile",
            "maya",
            [{"id": f"h{i}", "role": "user", "content": t} for i, t in enumerate(ATTEMPTS)],
        )
        _add(c, "leo-chat", "leo", [{"id": "l1", "role": "user", "content": "I am Leo and I fly kites."}])
        _memory(c, "maya", "tea", "Maya drinks green tea every morning")
        _memory(c, "maya", "kyoto", "Maya is travelling to Kyoto in May")
        _memory(c, "maya", "hostile", SCRIPT + " likes tea")
        _memory(c, "leo", "kites", "Leo flies kites")
        _memory(c, "maya", "drink-old", "Maya drinks coffee", valid=False, status="superseded",
                superseded_by="drink", source_message_ids=["m1"], thread_id="trip")  # fmt: skip
        _memory(c, "maya", "drink", "Maya switched to green tea", supersedes=["drink-old"],
                source_message_ids=["m1"], thread_id="trip")  # fmt: skip
        assert c.post("/threads", json={"thread_id": "trip", "if_exists": "do_nothing"}).status_code == 200
        for text in ("first state", "second state", "third state"):
            update = {"values": {"messages": [{"type": "human", "content": text}]}}
            assert c.post("/threads/trip/state", json=update).status_code == 200
    with _api(url, b) as c:
        _add(
            c, "secret-b", "maya", [{"id": "s1", "role": "user", "content": "B's secret plan: tea smuggling"}]
        )
        _memory(c, "maya", "b-fact", "Tenant B's tea secret")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    chromium()
    folder = tmp_path_factory.mktemp("ui")
    db = f"sqlite:///{folder / 'ui.db'}"
    with open_store(db) as store:
        a, _ = create_key(store, tenant="a")
        b, _ = create_key(store, tenant="b")
        admin, _ = create_key(store, admin=True)
    _seed_ledger(db)
    job = _seed_job(db)
    server = start_server(db, ["--rate-limit", "100000"])
    try:
        _seed_big(db)  # while the server starts
        _seed_ingestions(db)
        server.ready()
    except BaseException:
        server.stop()
        raise
    shots = Path(os.environ.get("REMEM_UI_SCREENSHOTS") or folder / "shots")
    shots.mkdir(parents=True, exist_ok=True)
    try:
        _seed(server.url, a, b)
        yield Site(server, a, b, admin, shots, job)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser(site: Site) -> Iterator[Browser]:
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def _sign_in(browser: Browser, site: Site, key: str) -> tuple[BrowserContext, Page]:
    context = browser.new_context(viewport={"width": 1100, "height": 760}, base_url=site.url)
    page = context.new_page()
    page.goto("/ui/threads")
    expect(page).to_have_url(re.compile(r"/ui/login$"))
    page.get_by_label(re.compile("API key")).fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/ui/threads$"))
    return context, page


@pytest.fixture(scope="module")
def tenant_a(browser: Browser, site: Site) -> Iterator[Page]:
    context, page = _sign_in(browser, site, site.a)
    yield page
    context.close()


def shot(site: Site, page: Page, name: str) -> None:
    page.screenshot(path=str(site.shots / f"{name}.png"))


# ----------------------------------------------------------------------------- signing in


def test_sign_in_keeps_the_key_in_a_strict_http_only_cookie_only(browser: Browser, site: Site) -> None:
    context = browser.new_context(base_url=site.url)
    page = context.new_page()
    page.goto("/ui/login")
    shot(site, page, "login")
    page.get_by_label(re.compile("API key")).fill(site.a[:-3] + "xyz")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("unknown")
    page.get_by_label(re.compile("API key")).fill(site.admin)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("admin key")
    page.get_by_label(re.compile("API key")).fill(site.a)
    with page.expect_response(re.compile(r"/ui/threads$")) as answer:
        page.get_by_role("button", name="Sign in").click()
    headers = answer.value.headers
    assert "script-src 'self'" in headers["content-security-policy"]
    assert "default-src 'none'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"
    session = next(c for c in context.cookies() if c["name"] == "remem_session")
    assert session["value"] == site.a
    assert session["httpOnly"] and session["secure"] and session["sameSite"] == "Strict"
    assert site.a not in page.url
    assert page.evaluate("() => [localStorage.length, sessionStorage.length, document.cookie]") == [0, 0, ""]
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/ui/login$"))
    assert not [c for c in context.cookies() if c["name"] == "remem_session"]
    context.close()


# ----------------------------------------------------------------------------- threads


def test_threads_are_filtered_by_user_sorted_and_paged(tenant_a: Page, site: Site) -> None:
    page = tenant_a
    page.goto("/ui/threads")
    rows = page.locator("table.threads tbody tr")
    expect(rows).to_have_count(4)
    shot(site, page, "threads")
    page.get_by_label("User").select_option("maya")  # applies on change (the small script)
    expect(rows).to_have_count(2)
    expect(page.locator("table.threads")).not_to_contain_text("big")
    page.goto("/ui/threads?sort=size&order=desc")
    expect(rows.first).to_contain_text("big")
    expect(rows.first).to_contain_text("10,000")
    page.goto("/ui/threads?sort=tokens&order=desc")
    expect(rows.first).to_contain_text("trip")
    page.goto("/ui/threads")
    page.get_by_label("Messages at least").fill("100")
    page.get_by_role("button", name="Show").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("big")
    for filters in ("min_tokens=1", "min_cost=0.0001"):  # only trip has spent anything
        page.goto(f"/ui/threads?{filters}")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("trip")
    page.goto("/ui/threads?since=2999-01-01")
    expect(page.locator("main")).to_contain_text("No threads match.")
    page.goto("/ui/threads?since=2000-01-01")
    expect(rows).to_have_count(4)


def test_threads_are_found_by_what_their_messages_say_in_the_tenant_only(
    tenant_a: Page, browser: Browser, site: Site
) -> None:
    page = tenant_a
    page.goto("/ui/threads")
    page.get_by_label("Messages say").fill("kites")
    page.get_by_role("button", name="Show").click()
    rows = page.locator("table.threads tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("leo-chat")
    expect(rows.first).to_contain_text("I am Leo and I fly kites.")  # the matching message
    page.goto("/ui/threads?text=tea")
    expect(page.locator("table.threads")).to_contain_text("trip")
    expect(page.locator("table.threads")).not_to_contain_text("secret-b")  # tenant b's thread
    page.goto("/ui/threads?text=tea&user=leo")
    expect(page.locator("main")).to_contain_text("No threads match.")
    page.goto("/ui/threads?text=station")
    match = page.locator("table.threads tbody tr").first.get_by_role("link", name="#5")
    match.click()
    expect(page).to_have_url(re.compile(r"/ui/thread\?id=trip&page=1#m5$"))
    expect(page.locator("#m5")).to_contain_text("closest to the station")
    context, other = _sign_in(browser, site, site.b)
    other.goto("/ui/threads?text=Kyoto")
    expect(other.locator("main")).to_contain_text("No threads match.")
    other.goto("/ui/threads?text=smuggling")
    expect(other.locator("table.threads tbody tr")).to_have_count(1)
    context.close()


def test_a_thread_shows_its_messages_as_text_with_tool_calls_folded(tenant_a: Page, site: Site) -> None:
    page = tenant_a
    page.goto("/ui/threads")
    page.get_by_role("link", name="trip").click()
    messages = page.locator("article.msg")
    expect(messages).to_have_count(6)
    expect(messages.nth(2)).to_contain_text(SCRIPT)  # shown, not run
    assert page.evaluate("() => window.__pwned") is None
    assert page.evaluate("() => document.scripts.length") == 1  # app.js only
    tool = messages.nth(4).locator("details")
    assert tool.evaluate("d => d.open") is False
    expect(messages.nth(4).locator("summary").first).to_contain_text("tool result")
    expect(messages.nth(3).locator("summary")).to_contain_text("1 tool call")
    shot(site, page, "thread")


def test_the_injection_corpus_renders_as_text(tenant_a: Page) -> None:
    page = tenant_a
    page.goto("/ui/thread?id=hostile")
    texts = page.locator("article.msg pre.text").all_inner_texts()
    assert len(texts) == len(ATTEMPTS)
    for attempt, shown in zip(ATTEMPTS, texts, strict=True):
        assert re.sub(r"[\x00-\x1f]", "", shown) == re.sub(r"[\x00-\x1f]", "", attempt).replace("\r", "")
    for tag in ("system", "summary", "record", "message", "context_card"):
        assert page.locator(tag).count() == 0


def test_time_travel_shows_the_state_at_a_checkpoint(tenant_a: Page, site: Site) -> None:
    page = tenant_a
    page.goto("/ui/thread?id=trip")
    page.get_by_role("link", name="Timeline").click()
    steps = page.locator("ol.timeline li")
    expect(steps).to_have_count(3)
    expect(page.locator("#state article.msg")).to_have_count(3)  # the newest: three messages
    steps.last.get_by_role("link").click()
    expect(steps.last).to_have_attribute("aria-current", "step")
    state = page.locator("#state article.msg")
    expect(state).to_have_count(1)
    expect(state).to_contain_text("first state")
    shot(site, page, "timeline")


def test_the_card_is_shown_as_the_model_gets_it_with_its_budget_bar(tenant_a: Page, site: Site) -> None:
    page = tenant_a
    page.goto("/ui/thread/card?id=trip&recent=3")
    card = page.locator("#card-content")
    expect(card).to_contain_text("<context_card>")
    expect(card).to_contain_text("&lt;script&gt;")  # escaped in the card's XML, shown literally here
    segments = page.locator("svg.bar rect.seg")
    assert segments.count() >= 2
    caption = page.locator("figure.budget figcaption").inner_text()
    used = int(re.match(r"(\d+) of 1500 tokens", caption).group(1))  # type: ignore[union-attr]
    legend = page.locator("ul.legend li").all_inner_texts()
    assert sum(int(re.search(r"(\d+) tokens", t).group(1)) for t in legend) == used  # type: ignore[union-attr]
    assert any(t.startswith("recent messages") for t in legend)
    shot(site, page, "card")


def test_the_chart_shows_tokens_per_turn_and_marks_summaries_and_compactions(
    tenant_a: Page, site: Site
) -> None:
    page = tenant_a
    page.goto("/ui/thread/usage?id=trip")
    chart = page.locator("svg#turn-chart")
    expect(chart).to_be_visible()
    assert chart.locator("circle.cost").count() == 6
    assert chart.locator("rect.output").count() == 6
    marks = chart.locator("text.mark")
    expect(marks).to_have_count(2)
    expect(marks.nth(0)).to_contain_text("S")  # turn 3: the memory's summary revision
    expect(marks.nth(1)).to_contain_text("C")  # turn 5: the agent compacted the conversation
    expect(page.locator("figure.chart tbody tr").nth(4)).to_contain_text("compaction")
    expect(page.locator("figure.chart tbody tr")).to_have_count(6)
    shot(site, page, "tokens")


def test_a_ten_thousand_message_thread_renders_one_page(tenant_a: Page, site: Site) -> None:
    page = tenant_a
    answer = page.goto("/ui/thread?id=big")
    assert answer is not None and answer.ok
    expect(page.locator("article.msg")).to_have_count(50)
    expect(page.locator("article.msg").last).to_contain_text(f"message number {BIG - 1}")
    expect(page.locator("nav.pager").first).to_contain_text("page 200 of 200")
    assert len(answer.body()) < 100_000
    page.locator("nav.pager").first.get_by_role("link", name="First").click()
    expect(page.locator("article.msg").first).to_contain_text("message number 0")


# ----------------------------------------------------------------------------- memories


def test_memory_search_shows_each_signal_and_deletes_with_confirmation(tenant_a: Page, site: Site) -> None:
    page = tenant_a
    page.goto("/ui/memories?user=maya&q=green+tea")
    hits = page.locator("table.hits tbody tr")
    expect(hits.first).to_contain_text("green tea every morning")
    cells = hits.first.locator("td").all_inner_texts()
    keyword, keyword_rank, vector, vector_rank = cells[4:8]
    assert float(keyword) > 0 and keyword_rank.isdigit()
    assert re.fullmatch(r"-?\d\.\d{4}", vector) and vector_rank.isdigit()
    expect(page.locator("table.hits")).to_contain_text(SCRIPT)
    expect(page.locator("table.hits")).not_to_contain_text("Tenant B")
    assert page.evaluate("() => window.__pwned") is None
    shot(site, page, "memories")
    hits.first.get_by_role("link", name="Delete…").click()
    expect(page.locator("main")).to_contain_text("green tea every morning")
    page.get_by_role("button", name="Delete the memory").click()
    expect(page.get_by_role("status")).to_contain_text("deleted")
    page.goto("/ui/memories?user=maya&q=green+tea")
    expect(page.locator("main")).not_to_contain_text("green tea every morning")


def test_a_change_without_the_form_token_or_from_another_site_is_refused(site: Site) -> None:
    cookies = {"remem_session": site.a, "remem_csrf": "x" * 43}
    with httpx.Client(base_url=site.url, cookies=cookies, timeout=30) as c:
        no_token = c.post("/ui/memories/delete", data={"user": "maya", "id": "kyoto"})
        assert no_token.status_code == 403
        elsewhere = c.post(
            "/ui/memories/delete",
            data={"user": "maya", "id": "kyoto", "csrf": "x" * 43},
            headers={"Origin": "https://evil.example"},
        )
        assert elsewhere.status_code == 403
        assert "Maya is travelling to Kyoto" in c.get("/ui/memories", params={"user": "maya"}).text


def test_forget_a_user_shows_the_erasure_report(tenant_a: Page, site: Site) -> None:
    page = tenant_a
    page.goto("/ui/memories?user=leo")
    expect(page.locator("table.hits")).to_contain_text("Leo flies kites")
    page.get_by_role("link", name=re.compile("Forget user leo")).click()
    page.get_by_role("button", name="Forget leo").click()
    expect(page.locator("#erasure-report")).to_contain_text("leo")
    shot(site, page, "erasure")
    page.goto("/ui/threads")
    expect(page.locator("table.threads")).not_to_contain_text("leo-chat")
    page.goto("/ui/memories?user=leo")
    expect(page.locator("main")).to_contain_text("has no long-term memories")


# ----------------------------------------------------------------------------- usage, jobs, tenants


def test_usage_per_day_model_and_thread(tenant_a: Page, site: Site) -> None:
    page = tenant_a
    page.goto("/ui/usage")
    expect(page.locator("main")).to_contain_text("gpt-4o-mini")
    expect(page.locator("main").get_by_role("link", name="trip")).to_be_visible()
    expect(page.locator("main")).not_to_contain_text("999,999")  # tenant b's call
    shot(site, page, "usage")


def test_the_job_queue_shows_parked_jobs_and_retries_them(tenant_a: Page, site: Site) -> None:
    page = tenant_a
    page.goto("/ui/jobs")
    rows = page.locator("table tbody tr")
    expect(rows).to_have_count(1)  # tenant b's queued job is not listed
    expect(rows.first).to_contain_text("parked")
    expect(rows.first).to_contain_text("<b>bold?</b>")
    shot(site, page, "jobs")
    rows.first.get_by_role("button", name="Retry").click()
    expect(page.get_by_role("status")).to_contain_text("queued again")
    expect(rows.first).to_contain_text("queued")


def _zeds_memories(site: Site, key: str) -> list[str]:
    with _api(site.url, key) as c:
        found = c.post("/store/items/search", json={"namespace_prefix": ["users", "zed"], "limit": 10})
        assert found.status_code == 200, found.text
        return [item["value"]["content"] for item in found.json()["items"]]


def test_an_ingestion_is_listed_and_undone_from_its_tenant_only(tenant_a: Page, site: Site) -> None:
    assert _zeds_memories(site, site.a) == ["Zed keeps bees"]
    page = tenant_a
    page.goto("/ui/ingestions")
    rows = page.locator("table tbody tr")
    expect(rows).to_have_count(1)  # tenant b's load is not listed
    expect(rows.first).to_contain_text("<crm>.jsonl")  # the source, as text
    expect(rows.first).to_contain_text("done")
    shot(site, page, "ingestions")
    rows.first.get_by_role("button", name="Undo").click()
    expect(page.get_by_role("status")).to_contain_text("undone")
    expect(rows.first).to_contain_text("undone")
    expect(rows.first.get_by_role("button", name="Undo")).to_have_count(0)
    assert _zeds_memories(site, site.a) == []
    assert _zeds_memories(site, site.b) == ["B's bulk secret"]  # the other tenant's load is untouched


def test_a_key_of_one_tenant_sees_nothing_of_another(browser: Browser, site: Site) -> None:
    context, page = _sign_in(browser, site, site.b)
    rows = page.locator("table.threads tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("secret-b")
    for path in (
        "/ui/thread?id=trip",
        "/ui/thread/timeline?id=trip",
        "/ui/thread/card?id=trip",
        "/ui/thread/usage?id=trip",
    ):
        answer = page.goto(path)
        assert answer is not None and answer.status == 404, path
        expect(page.locator("main")).not_to_contain_text("Kyoto")
    page.goto("/ui/memories?user=maya&q=tea")
    expect(page.locator("table.hits tbody tr")).to_have_count(1)
    expect(page.locator("table.hits")).to_contain_text("Tenant B")
    page.goto("/ui/usage")
    expect(page.locator("main")).not_to_contain_text("trip")
    page.goto("/ui/jobs")
    expect(page.locator("main")).not_to_contain_text("parked")
    context.close()


def test_a_memory_shows_its_sources_and_superseded_chain_and_can_be_edited(
    tenant_a: Page, site: Site
) -> None:
    page = tenant_a
    page.goto("/ui/memories?user=maya&q=switched")
    page.get_by_role("link", name="Maya switched to green tea").click()
    chain = page.locator("ul.chain")
    expect(chain).to_contain_text("supersedes drink-old (superseded): Maya drinks coffee")
    page.locator("ul.chain").get_by_role("link", name="drink-old").click()
    expect(page.locator("ul.chain")).to_contain_text("superseded by drink")
    shot(site, page, "memory")
    page.goto("/ui/memory?user=maya&id=drink")
    page.locator("ul.sources").get_by_role("link").click()
    expect(page.locator("#m0")).to_contain_text("planning a trip to Kyoto")
    page.goto("/ui/memory?user=maya&id=drink")
    page.get_by_label("New content").fill("Maya drinks <b>matcha</b> now")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("saved")
    expect(page.locator("#memory-content")).to_have_text("Maya drinks <b>matcha</b> now")
    page.goto("/ui/memories?user=maya&q=matcha")
    expect(page.locator("table.hits")).to_contain_text("Maya drinks <b>matcha</b> now")


def test_pages_fit_a_phone_and_start_with_a_skip_link(browser: Browser, site: Site) -> None:
    context, page = _sign_in(browser, site, site.a)
    page.set_viewport_size({"width": 390, "height": 800})
    for path in ("/ui/threads", "/ui/thread?id=trip", "/ui/memories?user=maya&q=tea", "/ui/usage"):
        page.goto(path)
        assert page.evaluate("() => document.documentElement.scrollWidth") <= 390, path
    page.keyboard.press("Tab")
    focused = page.evaluate("() => [document.activeElement.className, document.activeElement.textContent]")
    assert focused == ["skip", "Skip to the content"]
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.id") == "main"
    shot(site, page, "phone")
    context.close()
