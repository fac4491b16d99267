"""The ``tagql`` typer app: the commands of :mod:`tagql.cli.commands` and the knowledge and route groups."""

from __future__ import annotations

import typer

from tagql.cli import commands, knowledge, route

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Answer questions over relational databases.")
commands.register(app)
app.add_typer(knowledge.app, name="knowledge")
app.add_typer(route.app, name="route")
