"""Messages: token counts, provider validity, safe cut points, escaping and the derived-message marker."""

from remem.messages.derived import (
    DERIVED_KEY,
    DERIVED_SOURCES,
    DerivedSource,
    derived_source,
    is_derived,
    mark_derived,
)
from remem.messages.history import (
    DEFAULT_MAX_MESSAGE_CHARS,
    check_can_append,
    check_provider_valid,
    coerce_messages,
    history_problems,
    is_provider_valid,
    last_human_index,
    safe_cut_at_or_before,
    system_prefix_length,
)
from remem.messages.markup import escape_attribute, escape_text
from remem.messages.tokens import (
    TokenCounter,
    approximate_token_count,
    chat_token_counter,
    counter_for_model,
    encoding_for_model,
    exact_token_counter,
    token_counter,
)

__all__ = [
    "DEFAULT_MAX_MESSAGE_CHARS",
    "DERIVED_KEY",
    "DERIVED_SOURCES",
    "DerivedSource",
    "TokenCounter",
    "approximate_token_count",
    "chat_token_counter",
    "check_can_append",
    "check_provider_valid",
    "coerce_messages",
    "counter_for_model",
    "derived_source",
    "encoding_for_model",
    "escape_attribute",
    "escape_text",
    "exact_token_counter",
    "history_problems",
    "is_derived",
    "is_provider_valid",
    "last_human_index",
    "mark_derived",
    "safe_cut_at_or_before",
    "system_prefix_length",
    "token_counter",
]
