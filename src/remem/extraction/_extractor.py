"""The extractor: raw turns indexed for recall, then (with a model) typed memories and the update step."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langgraph.store.base import BaseStore, GetOp, PutOp

from remem._clock import now_iso
from remem.errors import ExtractionError, RememUsageError
from remem.extraction._schema import (
    Candidate,
    Decisions,
    Extraction,
    ExtractionResult,
    extraction_prompt,
    is_extractable,
    memory_value,
    message_id,
    message_text,
    parse_json_reply,
    role_of,
    update_prompt,
)
from remem.layout import (
    EXTRACTION_STATE_KEY,
    INGESTION_INVALIDATED_KEY,
    INGESTION_MEMORY_KEY,
    INGESTION_MESSAGE_KEY,
    extraction_state,
    thread_messages,
    user_memories,
)
from remem.models import model_name
from remem.usage import Meter
from remem.usage._records import call_id_of

logger = logging.getLogger(__name__)


class MemoryExtractor:
    """Turns conversation into long-term memory in a store.

    Every run indexes the new user and assistant turns under ``thread_messages(thread_id)`` (so recall
    works with no model at all). With a ``model`` and ``enabled``, it then asks the model for typed memories
    (fact, preference, instruction, event) with their source message ids and a confidence, and runs an update
    step against similar stored memories: add, update (the old memory is marked invalid and linked to its
    replacement, never overwritten), delete (marked invalid) or no-op. Progress is kept in a watermark per
    thread; a failure leaves it where it was and raises :class:`ExtractionError`, so the next run retries.
    With ``meter`` (a :class:`remem.usage.Meter`), each model call is recorded in the usage ledger (kind
    ``extractor``, node ``extract`` or ``update``) for the run's thread and user.
    """

    def __init__(
        self,
        store: BaseStore | None = None,
        model: BaseChatModel | None = None,
        *,
        enabled: bool = True,
        index_turns: bool = True,
        similar: int = 5,
        meter: Meter | None = None,
    ) -> None:
        self.store = store
        self.model = model
        self.enabled = enabled
        self.index_turns = index_turns
        self.similar = similar
        self.meter = meter

    def _ask(self, prompt: list[BaseMessage], node: str, *, user_id: str, thread_id: str) -> BaseMessage:
        """One model call, recorded in the ledger when there is a meter (a failed call costs nothing)."""
        assert self.model is not None
        started = time.perf_counter()
        reply: BaseMessage = self.model.invoke(prompt)
        if self.meter is not None:
            reply_id = getattr(reply, "id", None)
            self.meter.record_reply(
                "extractor",
                model_name(self.model),
                prompt,
                reply,
                started=started,
                thread_id=thread_id,
                user_id=user_id,
                node=node,
                call_id=call_id_of(thread_id, reply_id),
            )
        return reply

    # ------------------------------------------------------------------ public

    def run(
        self,
        messages: Sequence[BaseMessage],
        *,
        user_id: str,
        thread_id: str,
        store: BaseStore | None = None,
        run_key: str | None = None,
        ingestion: str | None = None,
    ) -> ExtractionResult:
        """Process the messages after the thread's watermark; returns what was done.

        ``run_key`` (a job's id, say) makes the run repeatable: the ids of the memories it adds are
        derived from it, so running it again after a crash writes the same memories, never a second copy.
        ``ingestion``: the id of the ingestion this run is part of (:meth:`remem.ingestion.Ingestion.extract`),
        written on the turns it indexes, the memories it adds and those it invalidates, for its undo.
        """
        store = self._store(store)
        result = ExtractionResult(thread_id=thread_id, user_id=user_id)
        state = self._state(store, thread_id, user_id)
        pending = self._pending(messages, thread_id, state)
        result.new_messages = len(pending)
        turns = [(mid, m) for mid, m in pending if is_extractable(m)]
        result.skipped_messages = len(pending) - len(turns)
        if not pending:
            result.watermark = state.get("watermark")
            return result
        if self.index_turns and turns:
            result.indexed_turns = self._index_turns(store, user_id, thread_id, turns, ingestion)
        watermark = pending[-1][0]
        if self.enabled and self.model is not None and turns:
            try:
                self._extract(
                    store,
                    result,
                    turns,
                    user_id=user_id,
                    thread_id=thread_id,
                    run_key=run_key,
                    ingestion=ingestion,
                )
            except Exception as exc:
                state.update(
                    attempts=int(state.get("attempts", 0)) + 1, last_error=str(exc)[:500], failed_at=now_iso()
                )
                store.put(extraction_state(thread_id), EXTRACTION_STATE_KEY, state, index=False)
                raise ExtractionError(
                    f"extracting memories from thread {thread_id!r} failed ({exc}); the watermark was kept, "
                    "so running extraction again retries these messages"
                ) from exc
        state.update(watermark=watermark, attempts=0, last_error=None, updated_at=now_iso())
        store.put(extraction_state(thread_id), EXTRACTION_STATE_KEY, state, index=False)
        result.watermark = watermark
        return result

    async def arun(
        self,
        messages: Sequence[BaseMessage],
        *,
        user_id: str,
        thread_id: str,
        store: BaseStore | None = None,
        run_key: str | None = None,
        ingestion: str | None = None,
    ) -> ExtractionResult:
        """Async version of :meth:`run`."""
        return await asyncio.to_thread(
            self.run,
            messages,
            user_id=user_id,
            thread_id=thread_id,
            store=store,
            run_key=run_key,
            ingestion=ingestion,
        )

    def watermark(self, thread_id: str, store: BaseStore | None = None) -> dict[str, Any] | None:
        """The thread's extraction state: ``watermark`` (last message id done), ``attempts``, ``last_error``."""
        item = self._store(store).get(extraction_state(thread_id), EXTRACTION_STATE_KEY)
        return None if item is None else dict(item.value)

    # ------------------------------------------------------------------ steps

    def _store(self, store: BaseStore | None) -> BaseStore:
        chosen = store or self.store
        if chosen is None:
            raise RememUsageError("MemoryExtractor needs a store: pass store= to the constructor or to run()")
        return chosen

    def _state(self, store: BaseStore, thread_id: str, user_id: str) -> dict[str, Any]:
        item = store.get(extraction_state(thread_id), EXTRACTION_STATE_KEY)
        state: dict[str, Any] = dict(item.value) if item else {"watermark": None, "attempts": 0}
        state["user_id"] = user_id
        return state

    @staticmethod
    def _pending(
        messages: Sequence[BaseMessage], thread_id: str, state: dict[str, Any]
    ) -> list[tuple[str, BaseMessage]]:
        ids = [message_id(m, thread_id, i) for i, m in enumerate(messages)]
        mark = state.get("watermark")
        start = ids.index(mark) + 1 if mark in ids else 0
        return list(zip(ids, messages, strict=True))[start:]

    @staticmethod
    def _turn_op(
        user_id: str, thread_id: str, mid: str, message: BaseMessage, ingestion: str | None
    ) -> PutOp:
        metadata = {"indexed_by": "remem.extraction"}
        if ingestion is not None:
            metadata[INGESTION_MESSAGE_KEY] = ingestion
        value = {
            "id": mid,
            "role": role_of(message),
            "content": message_text(message),
            "timestamp": now_iso(),
            "thread_id": thread_id,
            "user_id": user_id,
            "metadata": metadata,
        }
        return PutOp(thread_messages(thread_id), mid, value)

    def _index_turns(
        self,
        store: BaseStore,
        user_id: str,
        thread_id: str,
        turns: list[tuple[str, BaseMessage]],
        ingestion: str | None,
    ) -> int:
        """Store the turns not stored yet (the memory client may have stored them); returns how many."""
        found = store.batch([GetOp(thread_messages(thread_id), mid) for mid, _ in turns])
        new = [
            self._turn_op(user_id, thread_id, mid, m, ingestion)
            for (mid, m), item in zip(turns, found, strict=True)
            if item is None
        ]
        if new:
            store.batch(new)
        return len(new)

    def _extract(
        self,
        store: BaseStore,
        result: ExtractionResult,
        turns: list[tuple[str, BaseMessage]],
        *,
        user_id: str,
        thread_id: str,
        run_key: str | None,
        ingestion: str | None,
    ) -> None:
        assert self.model is not None
        result.llm_used = True
        prompt = extraction_prompt([(i, role_of(m), message_text(m)) for i, m in turns])
        reply = self._ask(prompt, "extract", user_id=user_id, thread_id=thread_id)
        candidates = parse_json_reply(reply, Extraction).memories
        known_ids = [i for i, _ in turns]
        user_ids = [i for i, m in turns if role_of(m) == "user"] or known_ids
        for c in candidates:
            c.source_message_ids = [i for i in c.source_message_ids if i in known_ids] or user_ids
        if not candidates:
            return
        neighbours = [self._similar(store, user_id, c) for c in candidates]
        decisions: dict[int, Any] = {}
        if any(neighbours):
            prompt = update_prompt(list(zip(candidates, neighbours, strict=True)))
            reply = self._ask(prompt, "update", user_id=user_id, thread_id=thread_id)
            decisions = {d.candidate: d for d in parse_json_reply(reply, Decisions).decisions}
        source_time = now_iso()
        # Every write waits for the end and goes in one batch: a failure part way leaves nothing written,
        # so the retry from the watermark cannot add the same memories twice.
        writes: list[PutOp] = []

        tag = {} if ingestion is None else {INGESTION_INVALIDATED_KEY: ingestion}

        def put(value: dict[str, Any]) -> str:
            if ingestion is not None:
                value[INGESTION_MEMORY_KEY] = ingestion
            return self._put(writes, user_id, value, None if run_key is None else f"{run_key}:{len(writes)}")

        for n, candidate in enumerate(candidates):
            decision = decisions.get(n)
            action = decision.action if decision else "add"
            allowed = {i for i, _, _ in neighbours[n]}
            target = decision.target_id if decision else None
            if action in ("update", "delete") and target not in allowed:
                action = "add"  # a target the model invented: keep the information, touch nothing else
            common = {"user_id": user_id, "thread_id": thread_id, "source_ids": candidate.source_message_ids}
            if action == "noop":
                result.unchanged += 1
            elif action == "add":
                new_id = put(memory_value(candidate, source_time=source_time, **common))
                result.added.append(new_id)
            elif action == "update":
                assert target is not None and decision is not None
                merged = Candidate(
                    kind=candidate.kind,
                    text=decision.text or candidate.text,
                    confidence=candidate.confidence,
                    source_message_ids=candidate.source_message_ids,
                )
                value = memory_value(merged, source_time=source_time, supersedes=[target], **common)
                new_id = put(value)
                self._invalidate(store, writes, user_id, target, "superseded", superseded_by=new_id, **tag)
                result.updated.append((target, new_id))
            else:
                assert target is not None
                self._invalidate(
                    store,
                    writes,
                    user_id,
                    target,
                    "contradicted",
                    evidence=candidate.source_message_ids,
                    **tag,
                )
                result.deleted.append(target)
        if writes:
            store.batch(writes)

    def _similar(self, store: BaseStore, user_id: str, candidate: Candidate) -> list[tuple[str, str, str]]:
        search = getattr(store, "hybrid_search", None)
        if callable(search):
            hits = search(user_memories(user_id), candidate.text, filter={"valid": True}, limit=self.similar)
        else:
            hits = store.search(
                user_memories(user_id), query=candidate.text, filter={"valid": True}, limit=self.similar
            )
        return [(h.key, str(h.value.get("kind", "")), str(h.value.get("content", ""))) for h in hits]

    @staticmethod
    def _put(writes: list[PutOp], user_id: str, value: dict[str, Any], seed: str | None = None) -> str:
        """Add a new memory to ``writes``; its id is random, or derived from ``seed`` (a repeatable run)."""
        new_id = "mem-" + (
            uuid.uuid4().hex if seed is None else hashlib.sha256(seed.encode()).hexdigest()[:32]
        )
        writes.append(PutOp(user_memories(user_id), new_id, value))
        return new_id

    @staticmethod
    def _invalidate(
        store: BaseStore, writes: list[PutOp], user_id: str, memory_id: str, reason: str, **links: Any
    ) -> None:
        item = store.get(user_memories(user_id), memory_id)
        if item is None:
            return
        value = dict(item.value)
        status = "superseded" if reason == "superseded" else "deleted"
        value.update(valid=False, status=status, invalidated_at=now_iso(), invalid_reason=reason, **links)
        writes.append(PutOp(user_memories(user_id), memory_id, value))  # same text: its embedding is reused
