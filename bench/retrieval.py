"""Retrieval quality of remem's search on long multi-session conversations (recall@1/5/10).

The dev set is generated (seeded) by this script and kept in ``bench/data/retrieval_dev.json``: facts
about a user are planted in one session, asked about sessions later in paraphrase (few shared words),
among hard distractors (the same kind of fact about someone else) and small talk. Each question's answer is
one known user turn. Every turn is indexed as a raw turn, as remem does without an LLM; the script reports
recall@k of keyword, vector and hybrid search for each embedder it can load.

Extracted memories are not scored: extraction needs an LLM, and none runs on this machine (remem's
LLM-free path keeps raw turns, which is what is measured). BEAM and LoCoMo cannot be fetched here.

    python bench/retrieval.py                 # generate (or read) the set, print the table
    python bench/retrieval.py --regenerate    # write bench/data/retrieval_dev.json again
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from langgraph.store.base import PutOp

from remem.store import SqliteStore, hybrid_search
from remem.testing import FakeEmbedder

DATA = Path(__file__).parent / "data" / "retrieval_dev.json"
NAMES = [
    "Carla",
    "Tomas",
    "Ines",
    "Bruno",
    "Marta",
    "Felix",
    "Aiko",
    "Omar",
    "Lena",
    "Pedro",
    "Sofia",
    "Yusuf",
]
CITIES = ["Lyon", "Porto", "Krakow", "Valencia", "Ghent", "Bergen", "Turin", "Leipzig", "Bilbao", "Tallinn"]
ANIMALS = ["beagle", "tabby cat", "parrot", "rabbit", "corgi", "tortoise", "hamster", "greyhound"]
PETS = ["Biscuit", "Pepper", "Mango", "Ziggy", "Noodle", "Olive", "Rocket", "Maple"]
FOODS = ["peanuts", "shellfish", "sesame", "kiwi", "gluten", "mustard", "celery", "lupin"]
JOBS = ["nurse", "welder", "pharmacist", "carpenter", "radiographer", "translator", "electrician", "baker"]
COLORS = ["red", "silver", "dark green", "white", "blue", "black"]
CARS = ["Skoda Octavia", "Toyota Yaris", "Volvo estate", "Fiat Panda", "Renault Zoe", "Mazda 3"]
MONTHS = ["March", "April", "May", "June", "September", "October", "November"]
HOBBIES = ["bouldering", "kayaking", "birdwatching", "salsa dancing", "pottery", "orienteering", "chess"]
LANGS = ["Japanese", "Portuguese", "Polish", "Greek", "Korean", "Swahili", "Dutch", "Turkish"]
DRINKS = ["matcha", "rooibos", "espresso", "chai", "yerba mate", "hot chocolate"]
COUNTRIES = ["Iceland", "Vietnam", "Peru", "Morocco", "New Zealand", "Croatia", "Japan", "Chile"]
BODY = ["left knee", "right ankle", "lower back", "shoulder", "wrist", "hamstring"]
FLOORS = ["third", "fifth", "seventh", "second", "top", "ninth"]
YEARS = ["2015", "2017", "2019", "2020", "2021", "2022"]

# (fact, distractor, paraphrased question, question sharing a word with the fact) per fact type. Slots are filled from the lists above.
FACT_TYPES: list[tuple[str, str, str, str]] = [
    (
        "Big news: my sister {name} finally relocated to {city} last month.",
        "My colleague {name2} says her sister just relocated to {city2}.",
        "Which town is the user's sibling living in these days?",
        "Where does the user's sister live now?",
    ),
    (
        "We adopted a {animal} from the shelter and named it {pet}.",
        "My neighbour got a {animal2} called {pet2}, it barks all night.",
        "What did the user call the animal they took home?",
        "What is the name of the animal the user adopted?",
    ),
    (
        "I can't eat anything with {food} in it, I break out in hives.",
        "My cousin {name2} has a {food2} intolerance, poor guy.",
        "Which ingredient gives the user an allergic reaction?",
        "What can the user not eat?",
    ),
    (
        "I started a new job as a {job} at the regional hospital in {month}.",
        "My friend {name2} just quit being a {job2}.",
        "What does the user do for a living now?",
        "What is the user's new job?",
    ),
    (
        "I finally sold the old car and bought a {color} {car}.",
        "{name2} keeps talking about buying a {color2} {car2}.",
        "What vehicle does the user drive at the moment?",
        "Which car did the user buy?",
    ),
    (
        "On Saturdays I go {hobby} with a group from my street.",
        "My brother tried {hobby2} once and hated it.",
        "How does the user spend their weekend free time?",
        "What does the user do on Saturdays?",
    ),
    (
        "I've been taking {lang} classes twice a week since January.",
        "{name2} speaks fluent {lang2}, I'm jealous.",
        "Which foreign tongue is the user studying?",
        "Which language classes is the user taking?",
    ),
    (
        "Honestly nothing beats a mug of {drink} first thing in the morning.",
        "My partner can't stand {drink2}, more for me I guess.",
        "What beverage does the user like to start the day with?",
        "What does the user drink in the morning?",
    ),
    (
        "We're flying to {country} for our honeymoon in {month}.",
        "{name2} went to {country2} last year and loved it.",
        "Where is the user travelling after the wedding?",
        "Where is the user going for the honeymoon?",
    ),
    (
        "I hurt my {body} playing five-a-side, so no running for a while.",
        "{name2} injured their {body2} skiing.",
        "What injury is keeping the user from jogging?",
        "What did the user hurt?",
    ),
    (
        "Our flat is on the {floor} floor and the lift is broken again.",
        "{name2} lives on the {floor2} floor of the same block.",
        "On which storey is the user's apartment?",
        "Which floor is the user's flat on?",
    ),
    (
        "I stopped eating meat back in {year}, best decision ever.",
        "My dad tried going vegetarian in {year2} but gave up.",
        "Since when has the user been vegetarian?",
        "When did the user stop eating meat?",
    ),
    (
        "Please keep your answers short and use bullet points, I read on my phone.",
        "My boss wants long detailed reports, it's exhausting.",
        "How does the user want replies to be formatted?",
        "How should answers be written for the user?",
    ),
]
SMALL_TALK = [
    "The weather has been grey all week.",
    "Can you suggest a quick pasta recipe for tonight?",
    "I watched a documentary about octopuses yesterday.",
    "What's a good way to learn touch typing?",
    "My laptop fan is making a weird noise.",
    "Any tips for sleeping better?",
    "I'm thinking about repainting the kitchen.",
    "The football match last night was a disaster.",
    "How do I convert Celsius to Fahrenheit in my head?",
    "I need a birthday gift idea for a coworker.",
    "Traffic this morning was unbelievable.",
    "Do you know any good podcasts about history?",
]
REPLIES = [
    "That sounds great, tell me more!",
    "Thanks for sharing that with me.",
    "Good to know, I'll keep it in mind.",
    "Interesting! How do you feel about it?",
    "Here is a short answer: try it step by step.",
    "Oh no, I hope it gets better soon.",
]


def _fill(template: str, rng: random.Random) -> str:
    pools = {
        "name": NAMES, "city": CITIES, "animal": ANIMALS, "pet": PETS, "food": FOODS, "job": JOBS,
        "color": COLORS, "car": CARS, "month": MONTHS, "hobby": HOBBIES, "lang": LANGS, "drink": DRINKS,
        "country": COUNTRIES, "body": BODY, "floor": FLOORS, "year": YEARS,
    }  # fmt: skip
    values = {k: rng.choice(v) for k, v in pools.items()}
    values.update({f"{k}2": rng.choice(v) for k, v in pools.items()})
    return template.format(**values)


def generate(conversations: int = 30, sessions: int = 6, facts: int = 8, seed: int = 11) -> dict[str, Any]:
    rng = random.Random(seed)
    convs = []
    for c in range(conversations):
        chosen = rng.sample(range(len(FACT_TYPES)), facts)
        # each fact goes in a session before the last; its question is asked in the last session
        plan: dict[int, list[int]] = {}
        for f in chosen:
            plan.setdefault(rng.randrange(sessions - 1), []).append(f)
        turns, questions = [], []
        for s in range(sessions):
            user_lines: list[tuple[str, int | None]] = [(rng.choice(SMALL_TALK), None) for _ in range(5)]
            for f in plan.get(s, []):
                user_lines.insert(rng.randrange(len(user_lines) + 1), (_fill(FACT_TYPES[f][0], rng), f))
            for f in rng.sample(chosen, 2):  # hard distractors anywhere
                user_lines.insert(rng.randrange(len(user_lines) + 1), (_fill(FACT_TYPES[f][1], rng), None))
            for text, fact in user_lines:
                tid = f"c{c}-t{len(turns)}"
                turns.append({"id": tid, "session": s, "role": "user", "content": text})
                if fact is not None:
                    style = rng.choice(["paraphrase", "lexical"])
                    question = FACT_TYPES[fact][2 if style == "paraphrase" else 3]
                    questions.append({"question": question, "answer_id": tid, "type": fact, "style": style})
                turns.append(
                    {
                        "id": f"c{c}-t{len(turns)}",
                        "session": s,
                        "role": "assistant",
                        "content": rng.choice(REPLIES),
                    }
                )
        convs.append({"id": f"c{c}", "turns": turns, "questions": questions})
    return {"seed": seed, "conversations": convs}


def embedders() -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = [("fake (seeded bag of words, 384-d)", FakeEmbedder(384))]
    try:
        from remem.embeddings import CachedEmbedder, OnnxEmbedder

        out.append(("all-MiniLM-L6-v2 int8 ONNX (default)", CachedEmbedder(OnnxEmbedder())))
    except Exception as exc:  # the model is an optional install here
        print(f"MiniLM not available: {exc}")
    return out


def evaluate(
    dataset: dict[str, Any], name: str, embedder: Any
) -> list[tuple[str, str, float, float, float, float]]:
    rows = []
    with SqliteStore.from_conn_string(
        ":memory:", index={"dims": embedder.dims, "embed": embedder, "fields": ["content"]}
    ) as store:
        start = time.perf_counter()
        for conv in dataset["conversations"]:
            ns = ("threads", conv["id"], "messages")
            store.batch(
                [PutOp(ns, t["id"], {"content": t["content"], "role": t["role"]}) for t in conv["turns"]]
            )
        load = time.perf_counter() - start
        for mode in ("keyword", "vector", "hybrid"):
            found: list[tuple[str, int | None]] = []
            start = time.perf_counter()
            for conv in dataset["conversations"]:
                for q in conv["questions"]:
                    keys = [
                        h.key
                        for h in hybrid_search(
                            store, ("threads", conv["id"]), q["question"], mode=mode, limit=10
                        )  # type: ignore[arg-type]
                    ]
                    found.append(
                        (q["style"], keys.index(q["answer_id"]) + 1 if q["answer_id"] in keys else None)
                    )
            ms = (time.perf_counter() - start) * 1000 / max(len(found), 1)
            for style in ("all", "paraphrase", "lexical"):
                ranks = [r for s, r in found if style in ("all", s)]
                recall = [sum(1 for r in ranks if r is not None and r <= k) / len(ranks) for k in (1, 5, 10)]
                rows.append((name, mode, style, len(ranks), *recall, ms))
    print(f"  {name}: indexed in {load:.1f} s", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--regenerate", action="store_true", help="write the dev set again")
    args = parser.parse_args()
    if args.regenerate or not DATA.exists():
        DATA.parent.mkdir(parents=True, exist_ok=True)
        DATA.write_text(json.dumps(generate(), indent=1) + "\n", encoding="utf-8")
    dataset = json.loads(DATA.read_text(encoding="utf-8"))
    turns = sum(len(c["turns"]) for c in dataset["conversations"])
    questions = sum(len(c["questions"]) for c in dataset["conversations"])
    print(f"dev set: {len(dataset['conversations'])} conversations, {turns} turns, {questions} questions")
    rows = [row for name, embedder in embedders() for row in evaluate(dataset, name, embedder)]
    print("\n| embedder | mode | questions | n | recall@1 | recall@5 | recall@10 | ms/query |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for name, mode, style, n, r1, r5, r10, ms in rows:
        print(f"| {name} | {mode} | {style} | {n} | {r1:.3f} | {r5:.3f} | {r10:.3f} | {ms:.2f} |")


if __name__ == "__main__":
    main()
