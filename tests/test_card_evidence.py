"""Cards that carry the evidence: candidates from both sides of the search, the turns beside a hit, the
budget held while they come along (issue 23 point 4)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remem import Memory
from remem.memory import MemoryRecord, _search
from remem.memory._card import RECORD_MAX_TOKENS
from remem.memory._search import deal
from remem.testing import offline_settings

SETTINGS = offline_settings()


def _hit(name: str, keyword: int | None = None, vector: int | None = None) -> MemoryRecord:
    signals = {}
    if keyword is not None:
        signals["keyword_rank"] = float(keyword)
    if vector is not None:
        signals["vector_rank"] = float(vector)
    return MemoryRecord(id=name, type="message", content=name, score=0.0, signals=signals)


def test_each_side_deals_its_best_records_into_the_first_places() -> None:
    # fused order a..f; the keyword side ranks e first, the vector side f first (both low in fused order)
    fused = [
        _hit("a", keyword=2, vector=2),
        _hit("b", keyword=3, vector=3),
        _hit("c", vector=4),
        _hit("d", keyword=4),
        _hit("e", keyword=1),
        _hit("f", vector=1),
    ]
    assert [r.id for r in deal(fused, "f")] == ["a", "b", "c", "d", "e", "f"]
    assert [r.id for r in deal(fused, "fkv")] == ["a", "e", "f", "b", "d", "c"]
    assert [r.id for r in deal(fused, "ffkv")] == ["a", "b", "e", "f", "c", "d"]
    # a record with no rank from a side (a stock store's hit) is dealt by the fused order alone
    plain = [_hit("x"), _hit("y")]
    assert [r.id for r in deal(plain, "fkv")] == ["x", "y"]


@settings(max_examples=50, deadline=None)
@given(
    ranks=st.lists(
        st.tuples(st.one_of(st.none(), st.integers(1, 40)), st.one_of(st.none(), st.integers(1, 40))),
        max_size=30,
    ),
    pattern=st.sampled_from(["f", "fk", "fv", "fkv", "ffkv", "kv"]),
)
def test_dealing_keeps_every_record_once(ranks: list[tuple[int | None, int | None]], pattern: str) -> None:
    fused = [_hit(f"r{i}", k, v) for i, (k, v) in enumerate(ranks)]
    dealt = deal(fused, pattern)
    assert sorted(r.id for r in dealt) == sorted(r.id for r in fused)
    if fused and "f" in pattern[:1]:
        assert dealt[0].id == fused[0].id  # the fused best stays first


def _chat(memory: Memory) -> list[str]:
    """A chat between two people: the hit ("the puppy from the shelter") is a statement, the turn after
    it says what the question asks (no question mark between them: no question and its answer)."""
    thread = memory.thread("chat", user_id="emi")
    said = [
        ("Emi", "How was your weekend at the coast with your sister"),
        ("Paola", "Lovely, we walked along the cliffs for hours."),
        ("Emi", "I finally adopted the puppy from the shelter on Saturday."),
        ("Paola", "His name is Biscuit and he is a beagle mix."),
        ("Emi", "Thanks!"),
        *((("Emi", "Paola")[i % 2], f"Filler line {i} about groceries and the weather.") for i in range(20)),
    ]
    thread.add_messages(
        [
            {
                "role": "user" if who == "Emi" else "assistant",
                "content": text,
                "id": f"c{i}",
                "metadata": {"speaker": who},
                "timestamp": f"2024-01-{1 + i // 5:02d}T10:00:00Z",
            }
            for i, (who, text) in enumerate(said)
        ]
    )
    card = thread.get_context_card(
        query="adopted the puppy from the shelter on Saturday", max_relevant_results=1, token_budget=2000
    )
    return [r.id for r in card.records]


def test_a_hit_comes_with_the_turns_beside_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # By default only the other half of a question and its answer comes along: a statement and its reply
    # are no exchange. With "both" (measured, not chosen), the turns before and after it come, in the
    # order they were said; "Thanks!" says nothing and never comes along.
    assert _chat(Memory.from_url("memory://", settings=SETTINGS)) == ["c2"]
    monkeypatch.setattr(_search, "CARD_NEIGHBOURS", "both")
    assert _chat(Memory.from_url("memory://", settings=SETTINGS)) == ["c1", "c2", "c3"]
    monkeypatch.setattr(_search, "CARD_NEIGHBOURS", "next")
    assert _chat(Memory.from_url("memory://", settings=SETTINGS)) == ["c2", "c3"]


def test_the_card_holds_the_turns_beside_a_hit_only_as_far_as_the_budget_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_search, "CARD_NEIGHBOURS", "both")
    memory = Memory.from_url("memory://", settings=SETTINGS)
    _chat(memory)
    thread = memory.get_thread("chat")
    sizes = set()
    for budget in range(60, 400, 10):
        card = thread.get_context_card(
            query="adopted the puppy from the shelter on Saturday",
            max_relevant_results=1,
            token_budget=budget,
        )
        assert card.token_count <= budget
        ids = [r.id for r in card.records]
        assert ids in ([], ["c2"], ["c1", "c2", "c3"])  # the hit with its neighbours, or alone
        sizes.add(len(ids))
    assert sizes == {0, 1, 3}  # every case was reached


def test_a_turn_within_the_record_size_is_shown_whole_and_active_records_carry_no_status() -> None:
    memory = Memory.from_url("memory://", settings=SETTINGS)
    thread = memory.thread("long", user_id="u")
    # about 80 tokens: shown whole (at the 60 tokens a record took before, cut to its sentences)
    turn = (
        "We drove to the lake on Sunday and the car broke down twice on the way there. "
        "The mechanic said the fuel pump was failing and ordered a new one for Thursday. "
        "Meanwhile my brother lent me his old bicycle, which has a flat tyre and no brakes. "
        "So I walked to work on Monday and it took me an hour and a half each way."
    )
    assert 60 < memory.count_text(turn) <= RECORD_MAX_TOKENS
    thread.add_messages([{"role": "user", "content": turn, "id": "t0"}, {"role": "user", "content": "ok"}])
    card = thread.get_context_card(query="fuel pump mechanic", max_relevant_results=1, token_budget=1000)
    assert [r.id for r in card.records] == ["t0"]
    assert f"user: {turn}</record>" in card.content
    assert 'status="' not in card.content and 'type="message"' in card.content
