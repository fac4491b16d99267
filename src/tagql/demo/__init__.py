"""The bundled demo database: BIRD's ``superhero`` (CC BY-SA 4.0, see ATTRIBUTION.md)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def demo_database_path() -> Path:
    return Path(str(files("tagql.demo") / "data" / "superhero.sqlite"))
