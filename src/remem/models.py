"""Chat models from configuration, and a deterministic scripted model for demos and tests.

Any OpenAI-compatible endpoint works (OpenAI, Ollama, vLLM, llama.cpp's server): set
``REMEM_LLM_MODEL``, and ``REMEM_LLM_BASE_URL`` / ``REMEM_LLM_API_KEY`` where the endpoint needs them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from remem.config import Settings
from remem.errors import ConfigError
from remem.messages import approximate_token_count

__all__ = [
    "Reply",
    "ScriptedChatModel",
    "chat_model_from_settings",
    "check_chat_model",
    "model_name",
    "require_chat_model",
]

Reply = str | AIMessage | Exception | Callable[[list[BaseMessage]], "str | AIMessage"]

_SET_A_MODEL = (
    "Set REMEM_LLM_MODEL (and REMEM_LLM_BASE_URL for Ollama, vLLM or llama.cpp's server, "
    "REMEM_LLM_API_KEY where the endpoint needs a key), e.g. "
    "REMEM_LLM_MODEL=llama3.2 REMEM_LLM_BASE_URL=http://localhost:11434/v1"
)
_HOW_TO_CONFIGURE = f"no chat model is configured. {_SET_A_MODEL}; `remem demo` runs without one"
_OFFLINE = "To run offline, pass remem.testing.ScriptedChatModel(default=...): deterministic, no endpoint"


def model_name(model: object) -> str:
    """The name a usage record gives a model: its model name where it has one, else its class."""
    return str(getattr(model, "model_name", None) or getattr(model, "model", None) or type(model).__name__)


def chat_model_from_settings(settings: Settings) -> BaseChatModel | None:
    """The configured chat model, or None when ``llm_model`` is not set."""
    if not settings.llm_model:
        return None
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=settings.llm_model,
        base_url=settings.llm_base_url,
        # Local servers (Ollama, llama.cpp) take any key; the client insists on one.
        api_key=settings.llm_api_key or "not-needed",  # type: ignore[arg-type]
        timeout=settings.llm_timeout,
        max_retries=settings.llm_max_retries,
        temperature=settings.llm_temperature,
        stream_usage=True,
    )


def require_chat_model(settings: Settings) -> BaseChatModel:
    """The configured chat model; :class:`ConfigError` saying how to configure one if there is none."""
    model = chat_model_from_settings(settings)
    if model is None:
        raise ConfigError(_HOW_TO_CONFIGURE)
    return model


def check_chat_model(model: object, settings: Settings) -> BaseChatModel:
    """The chat model an agent is built with: ``model``, or when it is None the configured one.

    Refused here, at build time, rather than at the first turn (whose message would then be kept and sent
    again on the next run): no model at all, and an object that is not a chat model.
    """
    if model is None:
        configured = chat_model_from_settings(settings)
        if configured is None:
            raise ConfigError(
                f"build_agent was given no chat model and none is configured. {_SET_A_MODEL}, "
                f"or pass one: build_agent(ChatOpenAI(model=...)). {_OFFLINE}"
            )
        return configured
    if isinstance(model, type):
        raise ConfigError(
            f"build_agent was given the class {model.__name__}, not a chat model; pass an instance "
            f"({model.__name__}(...))"
        )
    if not callable(getattr(model, "invoke", None)):
        raise ConfigError(
            f"build_agent needs a LangChain chat model (an object with invoke), got {type(model).__name__}; "
            f"pass e.g. ChatOpenAI(model=...), or leave it out and set REMEM_LLM_MODEL. {_OFFLINE}"
        )
    # Duck-typed on purpose: a model already bound (llm.bind_tools(...)) is a Runnable, not a
    # BaseChatModel; the agent only calls invoke (and bind_tools, checked where tools are given).
    return cast(BaseChatModel, model)


class ScriptedChatModel(BaseChatModel):
    """A deterministic chat model that replies from a script and records every input.

    Each call takes the next reply: a text, an ``AIMessage`` (e.g. with tool calls), an exception to
    raise, or a function of the input messages. Past the end of the script, ``default`` answers
    (a function or a text). ``calls`` holds the messages of every call, in order.
    """

    replies: list[Any] = Field(default_factory=list)
    default: Any = "OK."
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    model_name: str = "scripted"

    @property
    def _llm_type(self) -> str:
        return "remem-scripted"

    def _next_reply(self, messages: list[BaseMessage]) -> AIMessage:
        index = len(self.calls)
        self.calls.append(list(messages))
        reply = self.replies[index] if index < len(self.replies) else self.default
        if isinstance(reply, Exception):
            raise reply
        if callable(reply):
            reply = reply(messages)
        message = reply if isinstance(reply, AIMessage) else AIMessage(content=str(reply))
        usage = {
            "input_tokens": approximate_token_count(messages),
            "output_tokens": approximate_token_count([message]),
        }
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        return message.model_copy(
            update={"usage_metadata": usage, "response_metadata": {"model_name": self.model_name}}
        )

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._next_reply(messages))])

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        # The script decides on tool calls itself; binding is accepted so agents can be built around it.
        return self
