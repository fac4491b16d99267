"""The ``tagql`` typer app: the commands of :mod:`tagql.cli.commands`, the knowledge and route groups, and
``serve`` / ``mcp`` / ``token`` (:mod:`tagql.cli.serve`)."""

from __future__ import annotations

import typer

from tagql.cli import commands, knowledge, route, serve

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Answer questions over relational databases.")
commands.register(app)
app.add_typer(knowledge.app, name="knowledge")
app.add_typer(route.app, name="route")
serve.register(app)
