"""The import structure of ``src/tagql``, read with ``ast`` (every import, inside functions too).

Layers, bottom to top: foundations (``errors``, ``config``, ``embeddings``) and the stage packages
(``db``, ``llm``, ``knowledge``, ``routing``, ``text2sql``, ``tag``, ...), then the orchestrator
(``pipeline``, ``api``), the answering methods that drive a session (``methods``), and the interfaces
(``cli``, ``service``). A stage never imports what sits above it, and no two sub-packages import each
other, directly or round a loop.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "tagql"

# above the stages: the orchestrator, what drives it, and the interfaces
ABOVE = {"tagql", "tagql.pipeline", "tagql.api", "tagql.methods"}
ABOVE_PACKAGES = ("tagql.cli", "tagql.service")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _type_checking_only(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def imports(module: str, *, typing_too: bool = True) -> set[str]:
    """The tagql modules ``module`` imports anywhere in its file (``typing_too``: also the imports under
    ``if TYPE_CHECKING:``, which never run)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip: set[int] = set()
    if not typing_too:
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _type_checking_only(node):
                skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # ``from tagql.tag import cascade`` imports the module tagql.tag.cascade
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:  # ``import tagql.db.connection.x`` -> the module
                name = name.rpartition(".")[0]
            if name.startswith("tagql") and name != module:
                found.add(name)
    return found


def is_above(module: str) -> bool:
    return module in ABOVE or any(module == p or module.startswith(p + ".") for p in ABOVE_PACKAGES)


def unit(module: str) -> str:
    """The sub-package (or top-level module) a module belongs to."""
    parts = module.split(".")
    return ".".join(parts[:2])


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that returns to its start, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_the_checker_reads_imports_inside_functions_and_finds_cycles():
    # tagql.methods imports the pipeline at module level and numpy-backed embeddings inside functions
    assert "tagql.pipeline" in imports("tagql.methods")
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_between_sub_packages():
    graph: dict[str, set[str]] = defaultdict(set)
    for module in MODULES:
        for target in imports(module):
            a, b = unit(module), unit(target)
            if a != b and a != "tagql" and b != "tagql":  # the root package re-exports the public API
                graph[a].add(b)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


@pytest.mark.parametrize("package", ["tagql.routing", "tagql.text2sql", "tagql.tag", "tagql.knowledge", "tagql.db"])
def test_no_import_cycle_between_modules_of_a_package(package):
    """Inside a package too (imports that run; ``if TYPE_CHECKING:`` names are for annotations only)."""
    graph = {m: {t for t in imports(m, typing_too=False) if t.startswith(package + ".")}
             for m in MODULES if m.startswith(package + ".")}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_no_stage_imports_the_orchestrator_or_an_interface():
    bad = sorted(f"{m} imports {t}" for m in MODULES if not is_above(m) for t in imports(m) if is_above(t))
    assert bad == []


def test_text_to_sql_does_not_depend_on_tag():
    """Plain text-to-SQL is below the TAG methods: tag plans reuse its SQL checks, not the other way."""
    bad = sorted(f"{m} imports {t}" for m in MODULES if m.startswith("tagql.text2sql")
                 for t in imports(m) if t.startswith("tagql.tag"))
    assert bad == []


ENTRY_POINTS = {"tagql.api", "tagql.config"}  # config defines it; api is where a Python caller enters
ENTRY_PACKAGES = ("tagql.cli", "tagql.service")


def _names_used(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    return names


def test_only_entry_points_read_the_environment_for_settings():
    """``load_settings()`` reads environment variables and the config file; below the entry points a
    stage takes the settings it is given (or the built-in defaults), so nothing changes behaviour
    because of a variable its caller cannot see."""
    below = [m for m in MODULES if m not in ENTRY_POINTS and not m.startswith(ENTRY_PACKAGES)]
    assert "tagql.pipeline" in below and "tagql.llm" in below
    bad = sorted(m for m in below if "load_settings" in _names_used(m))
    assert bad == []


def test_a_stage_given_no_settings_ignores_the_environment(monkeypatch, tmp_path):
    from tagql.config import default_settings, load_settings
    from tagql.knowledge.store import default_store_path
    from tagql.routing.collection import collection_dir

    monkeypatch.setenv("TAGQL_KNOWLEDGE_DIR", str(tmp_path / "kb"))
    monkeypatch.setenv("TAGQL_COLLECTIONS_DIR", str(tmp_path / "coll"))
    assert load_settings().knowledge_dir == tmp_path / "kb"  # the entry point sees the variable
    assert default_store_path("x") == default_settings().knowledge_dir / "x.kb" != tmp_path / "kb" / "x.kb"
    assert collection_dir("c") == default_settings().collections_dir / "c"
    assert collection_dir("c", load_settings()) == tmp_path / "coll" / "c"
