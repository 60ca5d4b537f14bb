"""The chat model from configuration, driven over real HTTP against a local OpenAI-compatible server."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from remem import ConfigError, ModelError, build_agent, chat_model_from_settings, run_turn
from remem.agent import ledger_of, thread_config
from remem.config import load_settings
from remem.models import require_chat_model
from tests.openai_server import openai_compatible_server


def settings_for(url: str, **more: str) -> dict[str, str]:
    return {"REMEM_LLM_MODEL": "local-model", "REMEM_LLM_BASE_URL": url, "REMEM_LLM_MAX_RETRIES": "0", **more}


def test_no_model_configured_says_how_to_configure_one() -> None:
    settings = load_settings(environ={}, config_file=None)
    assert chat_model_from_settings(settings) is None
    with pytest.raises(ConfigError, match="Set REMEM_LLM_MODEL"):
        require_chat_model(settings)


def test_agent_talks_to_an_openai_compatible_endpoint() -> None:
    with openai_compatible_server(["Hello Ada.", "You said your name is Ada."]) as server:
        settings = load_settings(
            environ=settings_for(server.url, REMEM_LLM_API_KEY="sk-test-key"), config_file=None
        )
        agent = build_agent(require_chat_model(settings), strategy="filter", checkpointer=InMemorySaver())
        assert run_turn(agent, "t", "My name is Ada.").text == "Hello Ada."
        assert run_turn(agent, "t", "What did I just say?").text == "You said your name is Ada."

    first, second = server.requests
    assert first["model"] == "local-model"
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert second["messages"][0]["content"] == "My name is Ada."
    assert {k.lower(): v for k, v in server.headers[0].items()}["authorization"] == "Bearer sk-test-key"
    ledger = ledger_of(agent)
    assert ledger is not None
    usage = ledger.events(thread_id="t")
    # The endpoint's own counts are what gets recorded.
    assert usage[1].input_tokens == sum(len(m["content"]) // 4 + 3 for m in second["messages"])
    assert usage[1].output_tokens == len(["You", "said", "your", "name", "is", "Ada."])
    assert usage[1].model == "local-model" and usage[1].source == "provider"


def test_a_keyless_local_server_works() -> None:
    with openai_compatible_server(["fine"]) as server:
        settings = load_settings(environ=settings_for(server.url), config_file=None)
        agent = build_agent(require_chat_model(settings), strategy="filter", checkpointer=InMemorySaver())
        assert run_turn(agent, "t", "hi").text == "fine"


def test_a_failing_endpoint_is_a_model_error_and_the_message_is_kept() -> None:
    with openai_compatible_server(["never"], status=503) as server:
        settings = load_settings(environ=settings_for(server.url), config_file=None)
        agent = build_agent(require_chat_model(settings), strategy="filter", checkpointer=InMemorySaver())
        with pytest.raises(ModelError, match="your message is kept"):
            run_turn(agent, "t", "anyone there?")
    assert agent.get_state(thread_config("t")).values["messages"][-1].text == "anyone there?"


@pytest.mark.parametrize(
    ("status", "check"),
    [(401, "refused the key .*check REMEM_LLM_API_KEY"), (404, "no such model or path .*REMEM_LLM_MODEL")],
)
def test_a_refused_key_or_an_unknown_model_names_the_endpoint_and_what_to_check(
    status: int, check: str
) -> None:
    with openai_compatible_server(["never"], status=status) as server:
        environ = {**settings_for(server.url), "REMEM_LLM_API_KEY": "sk-test-Secret-9876543210"}
        settings = load_settings(environ=environ, config_file=None)
        agent = build_agent(require_chat_model(settings), strategy="filter", checkpointer=InMemorySaver())
        with pytest.raises(ModelError, match=check) as raised:
            run_turn(agent, "t", "hi")
    assert server.url in str(raised.value) and "Secret-98765" not in str(raised.value)


def test_an_unreachable_endpoint_names_its_url_masked() -> None:
    environ = {
        **settings_for("http://me:Pw-77-hidden@127.0.0.1:9/v1?key=Qk-hidden-99"),
        "REMEM_LLM_MAX_RETRIES": "0",
    }
    settings = load_settings(environ=environ, config_file=None)
    agent = build_agent(require_chat_model(settings), strategy="filter", checkpointer=InMemorySaver())
    with pytest.raises(
        ModelError, match=r"cannot reach the chat model endpoint at http://me:\*\*\*@127\.0\.0\.1:9/v1"
    ) as raised:
        run_turn(agent, "t", "hi")
    assert "hidden" not in str(raised.value) and "REMEM_LLM_BASE_URL" in str(raised.value)
