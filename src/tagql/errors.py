"""Errors users see. Each carries a one-line message that says what went wrong and what to do."""

from __future__ import annotations


class TagqlError(Exception):
    """Base class: the message is shown to the user as-is, on one line."""

    hint: str = ""

    def __init__(self, message: str, hint: str | None = None) -> None:
        self.message = message
        if hint is not None:
            self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


def install_hint(extra: str) -> str:
    """How to install an optional extra, printed literally (tagql installs from its checkout)."""
    return f'install it from the tagql checkout with: pip install -e ".[{extra}]"'


class ConfigError(TagqlError):
    """The configuration file or an environment variable is invalid."""


class DatabaseNotFound(TagqlError):
    """The database path does not exist or the URL cannot be reached."""


class NotADatabase(TagqlError):
    """The file exists but is not a database the engine can read."""


class UnsafeQuery(TagqlError):
    """The SQL is not a single read-only SELECT, or tries to write."""


class InvalidQuery(TagqlError):
    """The SQL does not parse, or references tables/columns the schema does not have."""


class QueryFailed(TagqlError):
    """The database rejected the query at execution time."""


class QueryTimeout(TagqlError):
    """The query ran longer than the configured statement timeout."""


class LLMUnavailable(TagqlError):
    """The model pack is not installed, the GGUF is missing, or the endpoint is unreachable."""


class LLMOutputError(TagqlError):
    """The LLM answered, but not with what we asked for (no SQL, not JSON, ...)."""


class ModelIntegrityError(LLMUnavailable):
    """An assembled model file does not match its published size/sha256."""


class UnsafeRole(TagqlError):
    """The database role could write (a superuser, an owner, write grants): refused at connect time."""
