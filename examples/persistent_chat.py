"""One turn of a chat whose thread lives in a database, so the next process can go on with it.

    python examples/persistent_chat.py --db sqlite:///chat.db --thread t1 "My name is Ada."
    python examples/persistent_chat.py --db sqlite:///chat.db --thread t1 "What did I just say?"

The model is remem's offline scripted model, so this runs with no key; it prints, as JSON, the
messages the model was sent, which shows that the second process saw the first one's turn.
"""

from __future__ import annotations

import argparse
import json

from remem import ScriptedChatModel, build_agent, checkpointer_from_url, run_turn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", required=True, help="database URL")
    parser.add_argument("--thread", required=True, help="thread id")
    parser.add_argument("message")
    args = parser.parse_args()

    model = ScriptedChatModel(default=lambda messages: f"I was sent {len(messages)} messages.")
    with checkpointer_from_url(args.db) as saver:
        agent = build_agent(model, strategy="filter", checkpointer=saver)
        reply = run_turn(agent, args.thread, args.message)
    print(json.dumps({"reply": reply.text, "model_input": [[m.type, m.text] for m in model.calls[-1]]}))


if __name__ == "__main__":
    main()
