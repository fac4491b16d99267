"""``tagql serve`` (the REST service), ``tagql mcp`` (the MCP server over stdio) and ``tagql token``
(service accounts): parse, build from :mod:`tagql.service`, run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from tagql.cli.output import console, user_errors
from tagql.config import Settings, load_settings
from tagql.errors import ConfigError

ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML configuration (default: $TAGQL_CONFIG or "
                                                                 "~/.config/tagql/config.toml)")]
DbsOpt = Annotated[list[str] | None, typer.Option("--db", metavar="NAME=PATH_OR_URL",
                                                               help="register a database (repeat)")]
CollectionsOpt = Annotated[list[str] | None, typer.Option("--collection", metavar="NAME",
                                                                         help="register a collection (repeat)")]
LlmOpt = Annotated[str | None, typer.Option("--llm", help="local | openai (default: from config)")]

token_app = typer.Typer(no_args_is_help=True, help="Service accounts: bearer tokens with a role.")


def service_settings(config: Path | None, dbs: list[str] | None = None,
                     collections: list[str] | None = None) -> Settings:
    """The settings with ``--config`` read and ``--db`` / ``--collection`` registered over the file's."""
    if config is not None:
        if not config.is_file():
            raise ConfigError(f"config file {config} does not exist", "check the path")
        os.environ["TAGQL_CONFIG"] = str(config)
    settings = load_settings()
    for item in dbs or []:
        name, sep, target = item.partition("=")
        if not sep or not name or not target:
            raise ConfigError(f"--db wants NAME=PATH_OR_URL, got '{item}'", "e.g. --db heroes=superhero.sqlite")
        settings.service.databases[name] = target
    for name in collections or []:
        if name not in settings.service.collections:
            settings.service.collections.append(name)
    return settings


def serve(
    host: Annotated[str | None, typer.Option("--host", help="address to bind (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option("--port", help="port (default 8000)")] = None,
    config: ConfigOpt = None, db: DbsOpt = None, collection: CollectionsOpt = None, llm: LlmOpt = None,
) -> None:
    """Serve the registered databases over HTTP (REST + SSE; OpenAPI docs at /docs). See docs/service.md."""
    import uvicorn

    from tagql.service.app import create_app

    with user_errors():
        settings = service_settings(config, db, collection)
        host = host or settings.service.host
        port = port or settings.service.port
        app = create_app(settings, llm=llm, host=host)
    uvicorn.run(app, host=host, port=port, log_level="info")


def mcp_command(config: ConfigOpt = None, db: DbsOpt = None, collection: CollectionsOpt = None,
                llm: LlmOpt = None) -> None:
    """Serve the registered databases as MCP tools over stdio (for AI agents). See docs/service.md."""
    from tagql.service.core import Registry
    from tagql.service.mcp import build_server

    with user_errors():
        settings = service_settings(config, db, collection)
        registry = Registry(settings, databases=settings.service.databases,
                            collections=settings.service.collections, llm=llm)
        server = build_server(settings, registry)
    server.run("stdio")


def _store(config: Path | None):  # noqa: ANN202 - a StateStore, imported lazily
    from tagql.config import user_config_dir
    from tagql.service.state import StateStore, default_state_url

    settings = service_settings(config)
    return StateStore(settings.service.state_url or default_state_url(user_config_dir()))


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="who the token is for")],
    role: Annotated[str, typer.Option("--role", help="reader | expert | reviewer | admin")] = "reader",
    config: ConfigOpt = None,
) -> None:
    """Create a token and print it once (only its hash is kept)."""
    with user_errors():
        token = _store(config).create_token(name, role)
    typer.echo(token)


@token_app.command("list")
def token_list(config: ConfigOpt = None) -> None:
    """The token names and roles (never the tokens)."""
    with user_errors():
        for t in _store(config).list_tokens():
            typer.echo(f"{t['name']}\t{t['role']}\t{t['created_at']}")


@token_app.command("revoke")
def token_revoke(name: Annotated[str, typer.Argument()], config: ConfigOpt = None) -> None:
    """Delete a token: requests carrying it get 401 from now on."""
    from tagql.errors import TagqlError

    with user_errors():
        if not _store(config).revoke_token(name):
            raise TagqlError(f"no token named '{name}'", "tagql token list shows them")
    console.print(f"revoked {name}")


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("mcp")(mcp_command)
    app.add_typer(token_app, name="token")
