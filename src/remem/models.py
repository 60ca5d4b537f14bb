"""Chat models from configuration, and a deterministic scripted model for demos and tests.

Any OpenAI-compatible endpoint works (OpenAI, Ollama, vLLM, llama.cpp's server): set
``REMEM_LLM_MODEL``, and ``REMEM_LLM_BASE_URL`` / ``REMEM_LLM_API_KEY`` where the endpoint needs them.
The configured model keeps to the ``[remem.rate_limits]`` of the settings (one limiter per process, shared
by its threads) and retries a provider's 429 with exponential backoff and jitter, honouring Retry-After
(:mod:`remem.usage.ratelimit`); a wait longer than ``rate_limit_max_wait`` is a ``RateLimitError``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableBinding
from langchain_core.tools import BaseTool
from pydantic import Field

from remem.config import Settings
from remem.errors import ConfigError, ModelError
from remem.messages import approximate_token_count

if TYPE_CHECKING:
    from remem.usage.ratelimit import Backoff, RateLimiter

__all__ = [
    "RateLimitedChatModel",
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
    """The configured chat model, or None when ``llm_model`` is not set.

    It is a :class:`RateLimitedChatModel` around ``ChatOpenAI``: the client's own retries are off, so that
    remem's retries (``llm_max_retries`` of them, backoff with jitter, Retry-After honoured, never longer
    than ``rate_limit_max_wait``) are the only ones.
    """
    if not settings.llm_model:
        return None
    from langchain_openai import ChatOpenAI

    from remem.usage.ratelimit import Backoff, shared_limiter

    client = ChatOpenAI(
        model=settings.llm_model,
        base_url=settings.llm_base_url,
        # Local servers (Ollama, llama.cpp) take any key; the client insists on one.
        api_key=settings.llm_api_key or "not-needed",  # type: ignore[arg-type]
        timeout=settings.llm_timeout,
        max_retries=0,
        temperature=settings.llm_temperature,
        stream_usage=True,
    )
    return RateLimitedChatModel(
        inner=client,
        limiter=shared_limiter(settings),
        backoff=Backoff.from_settings(settings),
        model_name=settings.llm_model,
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


class _StreamTally:
    """What a stream used: the provider's usage chunks summed (some send input and output apart), else
    the counted input and the streamed text counted."""

    def __init__(self, counted: int) -> None:
        self.counted = counted
        self.usage = 0
        self.text: list[str] = []

    def add(self, chunk: ChatGenerationChunk) -> None:
        usage = getattr(chunk.message, "usage_metadata", None)
        if usage:
            self.usage += int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))
        self.text.append(chunk.text)

    def used(self) -> int:
        if self.usage:
            return self.usage
        return self.counted + approximate_token_count([AIMessage(content="".join(self.text))])


def _used_tokens(result: ChatResult) -> int | None:
    for generation in result.generations:
        usage = getattr(getattr(generation, "message", None), "usage_metadata", None)
        if usage:
            return int(
                usage.get("total_tokens") or usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
            )
    return None


def endpoint_error(exc: BaseException) -> ModelError | None:
    """A :class:`ModelError` saying where the call went (masked) and what to check, for the errors a user
    fixes in the configuration: a refused key, an unknown model or path, an endpoint that cannot be reached
    or does not answer in time. None for any other error (it goes up unchanged)."""
    try:
        import openai
    except ImportError:  # pragma: no cover - langchain-openai depends on it
        return None
    if not isinstance(exc, openai.APIError):
        return None
    from remem._secrets import mask_secrets

    request = getattr(exc, "request", None)
    url = str(getattr(request, "url", "") or "")
    where = f" at {mask_secrets(url)}" if url else ""
    said = mask_secrets(" ".join(str(exc).split())[:300])
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
        return ModelError(
            f"the chat model endpoint{where} refused the key ({said}); check REMEM_LLM_API_KEY (or "
            "OPENAI_API_KEY) and that it is valid for this endpoint and model"
        )
    if isinstance(exc, openai.NotFoundError):
        return ModelError(
            f"the chat model endpoint{where} has no such model or path ({said}); check REMEM_LLM_MODEL and "
            "that REMEM_LLM_BASE_URL is the API's root (it usually ends in /v1)"
        )
    if isinstance(exc, openai.APITimeoutError):
        return ModelError(
            f"the chat model endpoint{where} did not answer in time ({said}); check that the server is up, "
            "or raise REMEM_LLM_TIMEOUT"
        )
    if isinstance(exc, openai.APIConnectionError):
        return ModelError(
            f"cannot reach the chat model endpoint{where} ({said}); check REMEM_LLM_BASE_URL and that the "
            "server is running and reachable from here"
        )
    return None


def _reraise(exc: Exception) -> None:
    """Raise :func:`endpoint_error`'s error for ``exc`` when it has one (call it in an ``except`` block,
    which re-raises ``exc`` itself otherwise)."""
    explained = endpoint_error(exc)
    if explained is not None:
        raise explained from exc


class RateLimitedChatModel(BaseChatModel):
    """A chat model that waits for its rate limit before each call and retries a provider's 429.

    ``limiter`` (a :class:`~remem.usage.ratelimit.RateLimiter`, None: no limit of ours) is charged one
    request and the counted input before the call, then corrected with the provider's token count;
    ``backoff`` (a :class:`~remem.usage.ratelimit.Backoff`) says how 429s are retried. ``bind_tools`` and
    ``with_structured_output`` keep the calls going through this model.
    """

    inner: BaseChatModel
    limiter: Any = None
    backoff: Any = None
    model_name: str = ""

    @property
    def _llm_type(self) -> str:
        return f"remem-rate-limited-{self.inner._llm_type}"

    def _name(self) -> str:
        return self.model_name or model_name(self.inner)

    def _limits(self) -> tuple[RateLimiter | None, Backoff]:
        from remem.usage.ratelimit import Backoff

        return self.limiter, self.backoff or Backoff()

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        from remem.usage.ratelimit import call_with_retries

        limiter, backoff = self._limits()
        name, counted = self._name(), approximate_token_count(messages)
        if limiter is not None:
            limiter.acquire(name, counted)
        try:
            result = call_with_retries(
                lambda: self.inner._generate(messages, stop=stop, run_manager=run_manager, **kwargs),
                model=name,
                backoff=backoff,
            )
        except Exception as exc:
            _reraise(exc)
            raise
        self._settle(limiter, name, counted, result)
        return result

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        from remem.usage.ratelimit import acall_with_retries

        limiter, backoff = self._limits()
        name, counted = self._name(), approximate_token_count(messages)
        if limiter is not None:
            await limiter.aacquire(name, counted)
        try:
            result = await acall_with_retries(
                lambda: self.inner._agenerate(messages, stop=stop, run_manager=run_manager, **kwargs),
                model=name,
                backoff=backoff,
            )
        except Exception as exc:
            _reraise(exc)
            raise
        self._settle(limiter, name, counted, result)
        return result

    def _should_stream(
        self,
        *,
        async_api: bool,
        run_manager: CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> bool:
        # Streams when the inner model would (it may not implement streaming, or have it turned off).
        return self.inner._should_stream(async_api=async_api, run_manager=run_manager, **kwargs)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        """The inner model's chunks, passed through once the limit allows the call; a 429 before the first
        chunk is retried; the limiter is corrected with what the stream used when it ends."""
        from remem.usage.ratelimit import call_with_retries

        limiter, backoff = self._limits()
        name, counted = self._name(), approximate_token_count(messages)
        if limiter is not None:
            limiter.acquire(name, counted)

        def start() -> tuple[ChatGenerationChunk | None, Iterator[ChatGenerationChunk]]:
            chunks = self.inner._stream(messages, stop=stop, run_manager=run_manager, **kwargs)
            return next(chunks, None), chunks

        try:
            first, rest = call_with_retries(start, model=name, backoff=backoff)
        except Exception as exc:
            _reraise(exc)
            raise
        tally = _StreamTally(counted)
        try:
            if first is not None:
                tally.add(first)
                yield first
            for chunk in rest:
                tally.add(chunk)
                yield chunk
        finally:
            if limiter is not None:
                limiter.settle(name, counted, tally.used())

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        """Async version of :meth:`_stream`."""
        from remem.usage.ratelimit import acall_with_retries

        limiter, backoff = self._limits()
        name, counted = self._name(), approximate_token_count(messages)
        if limiter is not None:
            await limiter.aacquire(name, counted)

        async def start() -> tuple[ChatGenerationChunk | None, AsyncIterator[ChatGenerationChunk]]:
            chunks = self.inner._astream(messages, stop=stop, run_manager=run_manager, **kwargs)
            return await anext(chunks, None), chunks

        try:
            first, rest = await acall_with_retries(start, model=name, backoff=backoff)
        except Exception as exc:
            _reraise(exc)
            raise
        tally = _StreamTally(counted)
        try:
            if first is not None:
                tally.add(first)
                yield first
            async for chunk in rest:
                tally.add(chunk)
                yield chunk
        finally:
            if limiter is not None:
                limiter.settle(name, counted, tally.used())

    @staticmethod
    def _settle(limiter: RateLimiter | None, name: str, counted: int, result: ChatResult) -> None:
        used = _used_tokens(result)
        if limiter is not None and used is not None:
            limiter.settle(name, counted, used)

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        # The inner model formats the tools its own way; the binding is moved onto this model so that
        # every call still waits for the limit (the inner _generate receives the same keyword arguments).
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        bound = self.inner.bind_tools(tools, **kwargs)
        if isinstance(bound, RunnableBinding) and bound.bound is self.inner:
            return RunnableBinding(bound=self, kwargs=bound.kwargs, config=bound.config)
        raise ConfigError(  # pragma: no cover - every LangChain chat model binds with RunnableBinding
            f"{type(self.inner).__name__}.bind_tools did not return a binding of the model; pass the model "
            "without remem's rate limit (rate limits apply to the models remem builds from the settings)"
        )
