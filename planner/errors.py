"""The planner's error types for unusable input, and the one-line messages that name the field and object."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

# Fixed by pydantic's JSON parser (jiter: 200 levels below the outermost value); Pulsar's documents nest
# at most 6 levels.
MAX_JSON_DEPTH = 201
_PARSER_DEPTH_MESSAGE = "recursion limit exceeded"


class InputError(ValueError):
    """Input that cannot be used; the message names the object and the field."""


class NotFoundError(InputError):
    """Input that names an object the store does not hold (a plan, snapshot or cluster id)."""


def format_validation_error(error: ValidationError, what: str) -> str:
    """One line naming the object and the path of the first bad field, e.g. `brokers['h:8080'].cpu.usage`."""
    first = error.errors(include_url=False)[0]
    path = ""
    for part in first["loc"]:
        if part == "[key]":
            path += " (key)"
        elif isinstance(part, int) or (isinstance(part, str) and not part.isidentifier()):
            path += f"[{part!r}]"
        else:
            path += f".{part}" if path else str(part)
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "json_invalid":
        return malformed_json_message(message.removeprefix("Invalid JSON: "), what)
    if first["type"] not in {"missing", "value_error"} and "input" in first:
        message += f" (got {_short_repr(first['input'])})"
    more = error.error_count() - 1
    suffix = f" (+{more} more errors)" if more > 0 else ""
    return f"invalid {what}: {path or '<root>'}: {message}{suffix}"


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def malformed_json_message(parser_message: str, what: str) -> str:
    if parser_message.startswith(_PARSER_DEPTH_MESSAGE):
        return f"invalid {what}: JSON nested deeper than the limit of {MAX_JSON_DEPTH} levels ({parser_message})"
    return f"invalid {what}: malformed JSON: {parser_message}"
