"""Evaluation data: the seeded generator, and reading and writing the long-conversation layout.

The layout (``remem.eval/1``, JSON)::

    {"format": "remem.eval/1", "name": "generated", "seed": 21,
     "conversations": [
       {"id": "en0", "language": "en", "user_id": "user-en0",
        "sessions": [{"id": "en0-s0", "date": "2025-03-10",
                      "turns": [{"id": "en0-s0-t0", "role": "user", "content": "...",
                                 "speaker": "Maya"}, ...]}, ...],
        "questions": [{"id": "en0-q0", "question": "...", "answer": "Lyon", "category": "paraphrase",
                       "evidence": ["en0-s2-t4"], "superseded": [], "distractors": ["en0-s1-t6"]}, ...]}]}

A turn's ``speaker`` (optional) is the name of who said it, kept beside its role: ingestion stores it
with the message, so a question naming the speaker finds their turns. A session's ``date`` is
``YYYY-MM-DD`` or one of the written forms :func:`session_date` reads; its turns are stamped with it.

A question's ``evidence`` are the turns that answer it (all of them, for a multi-hop question);
``superseded`` the turns whose fact a later turn replaced (what must no longer be taken as true);
``distractors`` turns that look like the answer and are not. Categories: ``lexical`` (the question shares
a word with its turn), ``paraphrase`` (it does not), ``temporal`` ("when did ...": the answer is the date
of the evidence's session), ``supersession`` (the fact changed: the later turn answers), ``multi-hop``.

The JSONL equivalent has one object per line, in order: ``{"type": "conversation", "id", "language",
"user_id"}``, then its ``{"type": "session", "conversation", "id", "date"}`` lines, each followed by its
``{"type": "turn", "conversation", "session", "id", "role", "content"}`` lines, and its
``{"type": "question", "conversation", ...question fields}`` lines. :func:`load_dataset` also reads
LoCoMo's own layout (``conversation`` with ``session_N`` / ``session_N_date_time``, ``qa`` with
``evidence``) and the flat layout of ``bench/data/retrieval_*.json``, so a dev set is read as it is.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from remem.errors import ConfigError, NotFoundError
from remem.eval._languages import LANGUAGES

__all__ = [
    "CATEGORIES",
    "FORMAT",
    "LANGUAGE_CODES",
    "dump_jsonl",
    "generate",
    "load_dataset",
    "save_dataset",
    "session_date",
]

FORMAT = "remem.eval/1"
CATEGORIES = ("lexical", "paraphrase", "temporal", "supersession", "multi-hop")
LANGUAGE_CODES = tuple(LANGUAGES)
_START = date(2025, 3, 10)
# The written session dates of public conversation sets, besides ISO: "1:56 pm on 8 May, 2023" (LoCoMo's
# layout), "29.12.2023, 22:42:04" (REALTALK), "March-15-2024" (BEAM), "8 May 2023", "May 8, 2023".
_DATE_FORMATS = (
    "%I:%M %p on %d %B, %Y", "%d.%m.%Y, %H:%M:%S", "%B-%d-%Y", "%d %B %Y", "%d %B, %Y", "%B %d, %Y",
)  # fmt: skip


def session_date(value: object) -> str | None:
    """A session's date as ``YYYY-MM-DD``: an ISO date or date-time, or one of the written forms of
    ``_DATE_FORMATS`` (English month names); None when ``value`` is none of them."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = " ".join(value.split())
    if len(text) >= 10 and text[4] == "-":
        try:
            return date.fromisoformat(text[:10]).isoformat()
        except ValueError:
            return None
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).date().isoformat()
        except ValueError:
            continue
    return None


def _values(rng: random.Random, pools: dict[str, list[str]]) -> dict[str, str]:
    values = {k: rng.choice(v) for k, v in pools.items()}
    values.update({f"{k}2": rng.choice([x for x in v if x != values[k]] or v) for k, v in pools.items()})
    return values


class _Builder:
    """One conversation: planted lines per session, then sessions filled with small talk and replies."""

    def __init__(self, cid: str, language: str, rng: random.Random, sessions: int) -> None:
        self.cid, self.language, self.rng, self.sessions = cid, language, rng, sessions
        self.spec = LANGUAGES[language]
        self.planted: dict[int, list[tuple[str, str]]] = {}  # session -> (tag, text)
        self.questions: list[dict[str, Any]] = []
        self.ids: dict[str, str] = {}  # tag -> turn id
        self.dates: dict[str, str] = {}  # tag -> session date

    def plant(self, session: int, tag: str, text: str) -> None:
        self.planted.setdefault(session, []).append((tag, text))

    def before_last(self) -> int:
        return self.rng.randrange(self.sessions - 1)

    def build(self, small_talk: int) -> dict[str, Any]:
        rng, spec = self.rng, self.spec
        sessions = []
        for s in range(self.sessions):
            day = _START + timedelta(days=9 * s + rng.randrange(3))
            lines: list[tuple[str | None, str]] = [
                (None, rng.choice(spec["small_talk"])) for _ in range(small_talk)
            ]
            for item in self.planted.get(s, []):
                lines.insert(rng.randrange(len(lines) + 1), item)
            turns: list[dict[str, str]] = []
            for tag, text in lines:
                tid = f"{self.cid}-s{s}-t{len(turns)}"
                turns.append({"id": tid, "role": "user", "content": text})
                if tag is not None:
                    self.ids[tag], self.dates[tag] = tid, day.isoformat()
                turns.append(
                    {
                        "id": f"{self.cid}-s{s}-t{len(turns)}",
                        "role": "assistant",
                        "content": rng.choice(spec["replies"]),
                    }
                )
            sessions.append({"id": f"{self.cid}-s{s}", "date": day.isoformat(), "turns": turns})
        questions = []
        for n, q in enumerate(self.questions):
            answer = q["answer"] if q["category"] != "temporal" else self.dates[q["evidence"][0]]
            questions.append(
                {
                    "id": f"{self.cid}-q{n}",
                    "question": q["question"],
                    "answer": answer,
                    "category": q["category"],
                    "evidence": [self.ids[t] for t in q["evidence"]],
                    "superseded": [self.ids[t] for t in q.get("superseded", [])],
                    "distractors": [self.ids[t] for t in q.get("distractors", [])],
                }
            )
        return {
            "id": self.cid,
            "language": self.language,
            "user_id": f"user-{self.cid}",
            "sessions": sessions,
            "questions": questions,
        }


def _conversation(
    cid: str, language: str, rng: random.Random, sessions: int, facts: int, small_talk: int
) -> dict[str, Any]:
    b = _Builder(cid, language, rng, sessions)
    spec = b.spec
    pools = spec["pools"]
    for n, f in enumerate(rng.sample(range(len(spec["facts"])), min(facts, len(spec["facts"])))):
        statement, distractor, paraphrase, lexical, slot = spec["facts"][f]
        values = _values(rng, pools)
        style = rng.choice(["paraphrase", "lexical"])
        b.plant(b.before_last(), f"f{n}", statement.format(**values))
        b.plant(rng.randrange(sessions), f"d{n}", distractor.format(**values))
        b.questions.append(
            {
                "question": paraphrase if style == "paraphrase" else lexical,
                "answer": values[slot],
                "category": style,
                "evidence": [f"f{n}"],
                "distractors": [f"d{n}"],
            }
        )
    first, later, question, slot = rng.choice(spec["moves"])
    values = _values(rng, pools)
    early = rng.randrange(sessions - 2)
    b.plant(early, "m0", first.format(**values))
    b.plant(rng.randrange(early + 1, sessions - 1), "m1", later.format(**values))
    b.questions.append(
        {"question": question, "answer": values[slot], "category": "supersession", "evidence": ["m1"],
         "superseded": ["m0"], "distractors": ["m0"]}
    )  # fmt: skip
    event, question = rng.choice(spec["events"])
    b.plant(b.before_last(), "e0", event.format(**_values(rng, pools)))
    b.questions.append({"question": question, "answer": "", "category": "temporal", "evidence": ["e0"]})
    bridge, fact, other, question, slot = rng.choice(spec["hops"])
    values = _values(rng, pools)
    b.plant(b.before_last(), "h0", bridge.format(**values))
    b.plant(b.before_last(), "h1", fact.format(**values))
    b.plant(b.before_last(), "h2", other.format(**values))
    b.questions.append(
        {"question": question, "answer": values[slot], "category": "multi-hop", "evidence": ["h0", "h1"],
         "distractors": ["h2"]}
    )  # fmt: skip
    return b.build(small_talk)


def generate(
    *,
    seed: int = 21,
    per_language: int = 2,
    languages: Sequence[str] = LANGUAGE_CODES,
    sessions: int = 6,
    facts: int = 4,
    small_talk: int = 5,
) -> dict[str, Any]:
    """A seeded set of long multi-session conversations in the layout above (the same seed, the same set).

    Per conversation: ``facts`` planted facts (asked in paraphrase or with a shared word, each with a
    distractor about someone else), a fact that changes later (supersession), a dated event (temporal)
    and a two-hop fact, among ``small_talk`` lines of small talk per session, every user turn answered.
    """
    unknown = [code for code in languages if code not in LANGUAGES]
    if unknown:
        raise ConfigError(f"unknown language(s) {unknown}; use some of {', '.join(LANGUAGE_CODES)}")
    if sessions < 3:
        raise ConfigError(
            f"a conversation needs at least 3 sessions (a fact, its change, the questions); got {sessions}"
        )
    rng = random.Random(seed)
    conversations = [
        _conversation(f"{code}{n}", code, rng, sessions, facts, small_talk)
        for code in languages
        for n in range(per_language)
    ]
    return {"format": FORMAT, "name": "generated", "seed": seed, "conversations": conversations}


# ----------------------------------------------------------------------------- files


def dump_jsonl(dataset: dict[str, Any]) -> Iterator[str]:
    """The dataset as JSONL lines (the layout's line form)."""
    for c in dataset["conversations"]:
        yield json.dumps(
            {
                "type": "conversation",
                "id": c["id"],
                "language": c.get("language"),
                "user_id": c.get("user_id"),
            },
            ensure_ascii=False,
        )
        for s in c["sessions"]:
            yield json.dumps(
                {"type": "session", "conversation": c["id"], "id": s["id"], "date": s.get("date")},
                ensure_ascii=False,
            )
            for t in s["turns"]:
                yield json.dumps(
                    {"type": "turn", "conversation": c["id"], "session": s["id"], **t}, ensure_ascii=False
                )
        for q in c["questions"]:
            yield json.dumps({"type": "question", "conversation": c["id"], **q}, ensure_ascii=False)


def save_dataset(dataset: dict[str, Any], path: Path) -> None:
    """Write ``dataset`` as JSON, or as JSONL when ``path`` ends in ``.jsonl``."""
    if path.suffix == ".jsonl":
        path.write_text("\n".join(dump_jsonl(dataset)) + "\n", encoding="utf-8")
    else:
        path.write_text(json.dumps(dataset, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def _from_jsonl(lines: Iterable[str], where: str) -> dict[str, Any]:
    conversations: dict[str, dict[str, Any]] = {}
    sessions: dict[tuple[str, str], dict[str, Any]] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            kind = row.pop("type")
            if kind == "conversation":
                conversations[row["id"]] = {**row, "sessions": [], "questions": []}
            elif kind == "session":
                session = {"id": row["id"], "date": row.get("date"), "turns": []}
                conversations[row["conversation"]]["sessions"].append(session)
                sessions[(row["conversation"], row["id"])] = session
            elif kind == "turn":
                cid, sid = row.pop("conversation"), row.pop("session")
                sessions[(cid, sid)]["turns"].append(row)
            elif kind == "question":
                conversations[row.pop("conversation")]["questions"].append(row)
            else:
                raise ConfigError(
                    f"{where}, line {n}: unknown line type {kind!r}; use conversation, session, turn or question"
                )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(
                f"{where}, line {n}: not a line of the remem.eval JSONL layout ({exc!r}); see `remem eval generate --help`"
            ) from None
    return {"format": FORMAT, "name": Path(where).stem, "conversations": list(conversations.values())}


_LOCOMO_SESSION = re.compile(r"^session_(\d+)$")


def _speaker(name: object) -> dict[str, str]:
    """A turn's ``speaker`` field, when its source names who said it."""
    return {"speaker": " ".join(name.split())} if isinstance(name, str) and name.strip() else {}


def _from_locomo(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """LoCoMo's layout: one sample per conversation, numbered sessions of turns with ``dia_id``."""
    conversations = []
    for n, sample in enumerate(samples):
        conv = sample["conversation"]
        cid = str(sample.get("sample_id", f"c{n}"))
        numbers = sorted(int(m.group(1)) for k in conv if (m := _LOCOMO_SESSION.match(k)))
        sessions = [
            {
                "id": f"{cid}-s{i}",
                "date": conv.get(f"session_{i}_date_time"),
                "turns": [
                    {"id": f"{cid}:{t['dia_id']}", "role": "user" if t.get("speaker") == conv.get("speaker_a") else "assistant",
                     "content": t.get("text", ""), **_speaker(t.get("speaker"))}
                    for t in conv[f"session_{i}"]
                ],
            }
            for i in numbers
        ]  # fmt: skip
        questions = [
            {
                "id": f"{cid}-q{k}",
                "question": qa["question"],
                "answer": str(qa.get("answer", qa.get("adversarial_answer", ""))),
                "category": f"locomo-{qa.get('category')}",
                "evidence": [f"{cid}:{e}" for e in qa.get("evidence", [])],
            }
            for k, qa in enumerate(sample.get("qa", []))
        ]
        conversations.append(
            {
                "id": cid,
                "language": "en",
                "user_id": f"user-{cid}",
                "sessions": sessions,
                "questions": questions,
            }
        )
    return {"format": FORMAT, "name": "locomo", "conversations": conversations}


def _from_flat(data: dict[str, Any]) -> dict[str, Any]:
    """The layout of ``bench/data/retrieval_*.json``: flat turns with a session number and a date,
    questions with ``answers`` (turn ids) and a ``type``."""
    conversations = []
    for conv in data["conversations"]:
        sessions: dict[int, dict[str, Any]] = {}
        for t in conv["turns"]:
            n = int(t.get("session", 0))
            session = sessions.setdefault(n, {"id": f"{conv['id']}-s{n}", "date": t.get("date"), "turns": []})
            session["turns"].append(
                {"id": t["id"], "role": t["role"], "content": t["content"], **_speaker(t.get("speaker"))}
            )
        questions = [
            {"id": f"{conv['id']}-q{k}", "question": q["question"], "answer": q.get("answer", ""),
             "category": str(q.get("type", "question")), "evidence": list(q.get("answers", []))}
            for k, q in enumerate(conv["questions"])
        ]  # fmt: skip
        conversations.append(
            {"id": conv["id"], "language": conv.get("language"), "user_id": f"user-{conv['id']}",
             "sessions": [sessions[n] for n in sorted(sessions)], "questions": questions}
        )  # fmt: skip
    return {"format": FORMAT, "name": str(data.get("name", "dataset")), "conversations": conversations}


def load_dataset(path: str | Path) -> dict[str, Any]:
    """Read a dataset: the layout above (JSON or JSONL) or LoCoMo's; a clear error for anything else."""
    where = Path(path)
    if not where.is_file():
        raise NotFoundError(
            f"there is no dataset at {where}; make one with `remem eval generate --out {where}`"
        )
    text = where.read_text(encoding="utf-8")
    if where.suffix == ".jsonl":
        return _from_jsonl(text.splitlines(), str(where))
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{where} is not JSON ({exc}); give a remem.eval JSON or JSONL file") from None
    if isinstance(data, list) and data and isinstance(data[0], dict) and "conversation" in data[0]:
        return _from_locomo(data)
    if not isinstance(data, dict) or not isinstance(data.get("conversations"), list):
        raise ConfigError(
            f"{where} holds no 'conversations' list; see the layout in `remem eval generate --help`"
        )
    if data["conversations"] and "turns" in data["conversations"][0]:
        return _from_flat(data)
    for c in data["conversations"]:
        if "sessions" not in c or "questions" not in c:
            raise ConfigError(f"{where}: conversation {c.get('id')!r} needs 'sessions' and 'questions'")
    return data
