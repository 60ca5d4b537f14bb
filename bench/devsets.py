"""REALTALK and BEAM (local copies, never committed) in the layout ``remem eval retrieval`` reads.

``bench/retrieval.py`` loads them with ``bench/_shared.py``'s loaders; this writes the same turns and
questions as a ``remem.eval/1`` file, so that the CLI can be run on them::

    python bench/devsets.py --realtalk path/to/realtalk/data --out realtalk.json
    python bench/devsets.py --beam path/to/chats/100K --beam-chats 6 --out beam.json
    remem eval retrieval realtalk.json --out results/

What changes on the way: a session is a run of turns with the same session number and date (REALTALK's
sessions; BEAM's time anchors, its replies in the anchor of the message they answer), dated
``YYYY-MM-DD`` so that ingestion stamps its turns; the first speaker of a REALTALK chat is the ``user``,
the other the ``assistant`` (what ``remem.eval`` does with LoCoMo's two speakers), and each turn keeps
its speaker's name (``speaker``), which ingestion indexes. Write the output outside the repository.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from _shared import load_beam, load_realtalk, speaker_of

from remem.eval import session_date


def to_eval(flat: dict[str, Any]) -> dict[str, Any]:
    """A dev set of ``bench/_shared.py`` (flat turns, questions with ``answers``) as ``remem.eval/1``."""
    conversations = []
    for conv in flat["conversations"]:
        cid, date = conv["id"], None
        sessions: list[tuple[tuple[Any, str | None], dict[str, Any]]] = []  # (session number, date), session
        speakers = {"user": "user", "assistant": "assistant"}  # of two named speakers, the first is the user
        for t in conv["turns"]:
            date = session_date(t.get("date")) or date
            key = (t.get("session"), date)
            if not sessions or sessions[-1][0] != key:
                sessions.append((key, {"id": f"{cid}-s{len(sessions)}", "date": date, "turns": []}))
            role = speakers.setdefault(t["role"], "assistant" if len(speakers) > 2 else "user")
            turn = {"id": t["id"], "role": role, "content": t["content"]}
            sessions[-1][1]["turns"].append({**turn, **({"speaker": n} if (n := speaker_of(t)) else {})})
        questions = [
            {"id": f"{cid}-q{n}", "question": q["question"], "answer": q.get("answer", ""),
             "category": q["type"], "evidence": q["answers"]}
            for n, q in enumerate(conv["questions"])
        ]  # fmt: skip
        conversations.append(
            {"id": cid, "language": "en", "user_id": f"user-{cid}", "sessions": [s for _, s in sessions],
             "questions": questions}
        )  # fmt: skip
    return {"format": "remem.eval/1", "name": flat["name"], "conversations": conversations}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--realtalk", type=Path, help="REALTALK's data folder (Chat_*.json)")
    source.add_argument("--beam", type=Path, help="BEAM's chats/100K folder")
    parser.add_argument("--chats", "--beam-chats", type=int, help="only the first N chats")
    parser.add_argument("--out", type=Path, required=True, help="the remem.eval/1 JSON file to write")
    args = parser.parse_args()
    flat = load_realtalk(args.realtalk) if args.realtalk else load_beam(args.beam)
    flat["conversations"] = flat["conversations"][: args.chats]
    data = to_eval(flat)
    args.out.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    turns = sum(len(s["turns"]) for c in data["conversations"] for s in c["sessions"])
    asked = sum(len(c["questions"]) for c in data["conversations"])
    print(f"{args.out}: {len(data['conversations'])} chats, {turns} turns, {asked} questions")


if __name__ == "__main__":
    main()
