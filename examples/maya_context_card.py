"""The Oracle Agent Memory guide's Maya scenario, on remem: a prebuilt agent whose prompt is compacted
with a context card once it passes a token trigger.

Run it with no model and no key (a scripted model answers from what it is shown):

    python examples/maya_context_card.py [DATABASE_URL]

DATABASE_URL defaults to a SQLite file in a temporary folder; ``memory://`` and ``postgresql://...``
work too. With REMEM_LLM_MODEL set (and REMEM_LLM_BASE_URL for a local server), the configured chat
model answers instead of the scripted one.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from remem import Memory, load_settings
from remem.memory import is_card_message
from remem.middleware import ContextCardMiddleware
from remem.models import ScriptedChatModel, chat_model_from_settings

SYSTEM_PROMPT = "You are a helpful engineering assistant. Answer briefly."


def _answer_from_prompt(messages: list[BaseMessage]) -> str:
    """The scripted model's reply: what the prompt it was given says about the user (deterministic)."""
    seen = "\n".join(m.text for m in messages)
    last = messages[-1].text if messages else ""
    if "who am I" not in last:
        return "Noted."
    name = re.search(r"I'm (\w+)\.", seen)
    workflow = re.search(r"migrating our (.+?) from", seen)
    step = re.search(r"failing step right now is ([\w\s-]+?) after", seen)
    return (
        f"You're {name.group(1) if name else 'someone I do not know'}, migrating your "
        f"{workflow.group(1) if workflow else 'unknown workflow'}, and the failing step is "
        f"{step.group(1) if step else 'unknown'}."
    )


def build_model() -> BaseChatModel:
    configured = chat_model_from_settings(load_settings())
    return configured or ScriptedChatModel(default=_answer_from_prompt)


def run(url: str, model: BaseChatModel | None = None) -> tuple[str, str, BaseChatModel]:
    """Play the three turns; return the final answer, the injected card and the model used."""
    model = model or build_model()
    settings = load_settings(embedder="fake", config_file=None)
    memory = Memory.from_url(url, settings=settings)
    middleware = ContextCardMiddleware(
        memory,
        thread_id="langgraph_short_term_demo",
        user_id="user_123",
        agent_id="assistant_456",
        compaction_token_trigger=80,  # tiny, so that three turns are enough to compact
        kept_message_count=3,
        context_summary_update_frequency=4,
    )
    agent = create_agent(model=model, tools=[], system_prompt=SYSTEM_PROMPT, middleware=[middleware])
    messages: list[BaseMessage] = []

    def run_turn(user_text: str) -> str:
        messages.append(HumanMessage(content=user_text))
        result = agent.invoke({"messages": messages})
        messages[:] = list(result["messages"])
        reply = next(m for m in reversed(messages) if isinstance(m, AIMessage))
        return reply.text

    try:
        run_turn(
            "I'm Maya. I'm migrating our nightly invoice reconciliation workflow from cron jobs to LangGraph."
        )
        run_turn("The failing step right now is ledger enrichment after reconciliation.")
        final_answer = run_turn("What workflow am I migrating, which step is failing, and who am I?")
    finally:
        memory.close()
    card = next((m.text for m in messages if is_card_message(m)), "")
    return final_answer, card, model


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        url = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{Path(folder) / 'maya.db'}"
        final_answer, card, _ = run(url)
    print(card or "<context_card>\n  No injected context card yet.\n</context_card>")
    print()
    print(final_answer)


if __name__ == "__main__":
    main()
