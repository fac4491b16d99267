"""Prompt templates kept as package data: one TOML file beside the stage that uses them, read once.

Each entry of the file is a template string; ``$name`` (or ``${name}``) is filled by :meth:`Templates.render`
(:class:`string.Template`, so the JSON braces and ``{Column}`` references prompts are full of need no
escaping; ``$$`` is a dollar sign). :attr:`Templates.digest` hashes the file's text: a cache of LM outputs
keys on it, so editing a prompt retires the outputs the old wording produced.
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from string import Template
from typing import Any


@dataclass(frozen=True)
class Templates:
    texts: dict[str, Any]
    digest: str  # sha256 of the file's text

    def __getitem__(self, name: str) -> Any:
        return self.texts[name]

    def render(self, name: str, **values: object) -> str:
        """The template ``name`` with its ``$placeholders`` filled (a missing value is a KeyError)."""
        return Template(self.texts[name]).substitute(values)


@lru_cache(maxsize=None)
def load_templates(package: str, filename: str = "prompts.toml") -> Templates:
    """The templates of ``package`` (``tagql.text2sql`` -> ``tagql/text2sql/prompts.toml``), read once."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    return Templates(tomllib.loads(text), hashlib.sha256(text.encode("utf-8")).hexdigest())
