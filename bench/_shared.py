"""What bench/retrieval.py and bench/cards.py share: BEAM's loader and embeddings kept on disk between runs
(BEAM's long turns take minutes to embed).

Only numpy and ``remem.embeddings``, so that ``bench/cards.py --before`` can use it with an older checkout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np


class DiskCache:
    """An embedder wrapper that keeps every embedding it computed in ``folder/name.npz`` (keyed by the
    text's SHA-256, no text stored), so a second run of a long set (BEAM) embeds nothing again."""

    def __init__(self, inner: Any, folder: Path, name: str) -> None:
        from remem.embeddings import text_hash

        self.inner, self.dims, self._hash = inner, inner.dims, text_hash
        self.path = folder / f"{name}.npz"
        self._rows: dict[bytes, Any] = {}
        if self.path.is_file():
            with np.load(self.path) as saved:
                self._rows = dict(zip((bytes(k) for k in saved["keys"]), saved["rows"], strict=True))
        self._saved = len(self._rows)

    def embed_array(self, texts: list[str]) -> Any:
        keys = [self._hash(t) for t in texts]
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in self._rows}
        if missing:
            from remem.embeddings import embed_array

            self._rows.update(zip(missing, embed_array(self.inner, list(missing.values())), strict=True))
            if len(self._rows) - self._saved >= 2000:
                self.save()
        return np.vstack([self._rows[k] for k in keys]) if keys else np.zeros((0, self.dims), np.float32)

    def save(self) -> None:
        if len(self._rows) == self._saved:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = np.array(list(self._rows), dtype="S32")
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=keys, rows=np.vstack(list(self._rows.values())))
        tmp.replace(self.path)
        self._saved = len(self._rows)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text])[0].tolist()  # type: ignore[no-any-return]


BEAM_ANSWERS = (
    "answer",
    "ideal_answer",
    "preference_being_tested",
    "instruction_being_tested",
    "ideal_summary",
)
"""A BEAM question's fields that say what its source turns hold, the first one it has: the answer, or
for preference and instruction following the preference or instruction stated."""


def _beam_answer(question: dict[str, Any]) -> str:
    """What a BEAM question's source turns should show (``BEAM_ANSWERS``), or ""."""
    return next((str(question[k]) for k in BEAM_ANSWERS if question.get(k)), "")


def _beam_ids(refs: Any) -> list[int]:
    if isinstance(refs, dict):  # knowledge updates: the updated turn answers; else every listed turn
        refs = refs.get(
            "updated_info", [v for vs in refs.values() for v in (vs if isinstance(vs, list) else [vs])]
        )
    out: list[int] = []
    for r in refs if isinstance(refs, list) else [refs]:
        if isinstance(r, list):
            out.extend(int(x) for x in r)
        elif isinstance(r, int | str) and str(r).isdigit():
            out.append(int(r))
    return out


def load_beam(path: Path) -> dict[str, Any]:
    """BEAM chats (each folder holding ``chat.json`` and ``probing_questions/probing_questions.json``) as a
    dev set: one conversation per chat, every turn by its id, questions with their source turns."""
    convs = []
    for chat in sorted(p for p in path.iterdir() if (p / "chat.json").is_file()):
        cid = f"beam{chat.name}"
        turns = []
        for batch in json.loads((chat / "chat.json").read_text(encoding="utf-8")):
            for group in batch.get("turns", []):
                for m in group:
                    text = m.get("content") or ""
                    if text.strip():
                        turns.append(
                            {
                                "id": f"{cid}-{m['id']}",
                                "role": m["role"],
                                "content": text,
                                "date": m.get("time_anchor") or batch.get("time_anchor"),
                            }
                        )
        questions = []
        probing = chat / "probing_questions" / "probing_questions.json"
        if probing.is_file():
            for kind, asked in json.loads(probing.read_text(encoding="utf-8")).items():
                for q in asked:
                    answers = [f"{cid}-{i}" for i in _beam_ids(q.get("source_chat_ids", []))]
                    if answers:  # abstention questions have no source turn
                        questions.append(
                            {"question": q["question"], "type": kind, "answers": answers,
                             "answer": _beam_answer(q)}
                        )  # fmt: skip
        convs.append({"id": cid, "turns": turns, "questions": questions})
    if not convs:
        sys.exit(f"no BEAM chats (folders with chat.json) under {path}")
    return {"name": "beam", "conversations": convs}


def load_realtalk(path: Path) -> dict[str, Any]:
    """REALTALK's chats (the ``data/Chat_*.json`` files of the public REALTALK repository: 21 days of real
    messaging between two people) as a dev set: one conversation per chat, every message by its
    ``dia_id``, questions with the evidence messages that are in the chat (questions with none dropped)."""
    convs = []
    for chat in sorted(path.glob("Chat_*.json")):
        data = json.loads(chat.read_text(encoding="utf-8"))
        cid = f"realtalk{chat.stem.split('_')[1]}"
        turns, ids = [], set()
        sessions = sorted(
            (k for k, v in data.items() if k.startswith("session_") and isinstance(v, list)),
            key=lambda k: int(k.split("_")[1]),
        )
        for name in sessions:
            for m in data[name]:
                text = m.get("clean_text") or ""
                if text.strip() and m["dia_id"] not in ids:
                    ids.add(m["dia_id"])
                    turns.append(
                        {
                            "id": f"{cid}-{m['dia_id']}",
                            "session": int(name.split("_")[1]),
                            "role": str(m.get("speaker", "user")),
                            "content": text,
                            "date": data.get(f"{name}_date_time"),
                        }
                    )
        questions = []
        for q in data.get("qa", []):
            answers = [f"{cid}-{e}" for e in q.get("evidence", []) if e in ids]
            if answers:
                questions.append(
                    {"question": q["question"], "type": f"category {q.get('category')}", "answers": answers,
                     "answer": str(q.get("answer") or "")}
                )  # fmt: skip
        convs.append({"id": cid, "turns": turns, "questions": questions})
    if not convs:
        sys.exit(f"no REALTALK chats (Chat_*.json files) under {path}")
    return {"name": "realtalk", "conversations": convs}


def speaker_of(turn: dict[str, Any]) -> str | None:
    """The name of who said a flat turn: REALTALK's turns carry it as their role; a plain role is no name."""
    return turn.get("speaker") or (None if turn["role"] in ("user", "assistant", "system") else turn["role"])


def from_eval(dataset: dict[str, Any], name: str) -> dict[str, Any]:
    """A ``remem.eval`` dataset (``remem eval generate``'s layout: sessions of turns, questions with
    evidence) in the flat layout of bench/retrieval.py's dev sets."""
    convs = []
    for conv in dataset["conversations"]:
        turns = [
            {**t, "session": n, "date": s.get("date")}
            for n, s in enumerate(conv["sessions"])
            for t in s["turns"]
        ]
        questions = [
            {"question": q["question"], "type": f"{conv.get('language') or ''} {q['category']}".strip(),
             "answers": list(q["evidence"]), "answer": str(q.get("answer") or "")}
            for q in conv["questions"]
            if q["evidence"]
        ]  # fmt: skip
        convs.append({"id": conv["id"], "turns": turns, "questions": questions})
    return {"name": name, "conversations": convs}
