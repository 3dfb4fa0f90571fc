"""The house's rules, read from the code: rooms, imports that point down only, no circles.

Rooms (``docs/architecture.md``): ``sim`` imports nothing above it; ``content`` imports ``sim``;
``api`` imports ``sim`` and ``content``; ``jobs`` (work run after an answer: background responses,
files, batches) imports ``api``, ``content`` and ``sim``; ``server`` imports every room below it. The
modules on top (the plugin, the handles, the command line) import anything. Imports under
``TYPE_CHECKING`` and inside functions count. Read with ``ast``: nothing is imported or run.
"""

from __future__ import annotations

import ast
import functools
import gc
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_llmsim"

ALLOWED = {
    "sim": {"sim"},
    "content": {"content", "sim"},
    "api": {"api", "content", "sim"},
    "jobs": {"jobs", "api", "content", "sim"},
    "server": {"server", "jobs", "api", "content", "sim"},
}
# What the server may import of api/: the shapes every API shares and the one list of routes, never an API.
SERVER_SEES_OF_API = {"pytest_llmsim.api", "pytest_llmsim.api.base", "pytest_llmsim.api.routing",
                      "pytest_llmsim.api.catalog", "pytest_llmsim.api.validation"}
# The modules that sit on top of the rooms, by design.
TOP = {"__init__", "plugin", "backend", "remote", "cli", "isolation", "pool", "assertions", "gc_pacing",
       "verdicts",  # the handles' verdicts on the client, read from their request logs (as assertions are)
       "calibration", "sdk_environment",  # the handles' env(): the SDKs' variables, beside the handles
       "gevent_serve",  # `llmsim serve --io gevent`: the command line, run after gevent's patching
       "recording"}  # `llmsim record` and `llmsim replay`: a proxy to a real provider and its cassettes' replay
# Modules still on top that belong in a room. This set may only shrink: a module added on top fails the test.
NOT_YET_IN_A_ROOM: set[str] = set()


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


@pytest.fixture(autouse=True)
def _no_garbage_left() -> None:
    """What earlier tests left is finalized now, before any parse (see ``_parse``)."""
    gc.collect()


def _parse(path: Path) -> ast.Module:
    """``ast.parse`` with the garbage collector held off: a finalizer that runs during it can break CPython
    3.11.7's AST recursion count (see tests/conftest.py)."""
    gc.disable()
    try:
        return ast.parse(path.read_text(), str(path))
    finally:
        gc.enable()


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's own modules ``name`` imports (a package import counts as its ``__init__``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(_parse(path)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            module = node.module or ""
            if node.level:
                module = f"{base}.{module}".rstrip(".") if module else base
            targets = [f"{module}.{alias.name}" for alias in node.names] + [module]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _room(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "top"
    return parts[1] if (PACKAGE / parts[1]).is_dir() else "top"


@functools.cache  # one parse of the package for the module's tests (the sources do not change during a run)
def _graph() -> dict[str, frozenset[str]]:
    modules = _modules()
    known = set(modules)
    return {name: frozenset(_imports(name, path, known)) for name, path in modules.items()}


def test_imports_point_down_only() -> None:
    upward = sorted(f"{module} -> {target}" for module, targets in _graph().items() for target in targets
                    if _room(module) in ALLOWED and _room(target) not in ALLOWED[_room(module)])
    assert upward == [], "imports that run back up (a room may import only the rooms below it):\n" + \
        "\n".join(upward)


def test_the_server_imports_no_api_module_by_name() -> None:
    """An API is one module under api/ that the catalog lists: the server registers what the catalog says."""
    named = sorted(f"{module} -> {target}" for module, targets in _graph().items() for target in targets
                   if _room(module) == "server" and _room(target) == "api" and target not in SERVER_SEES_OF_API)
    assert named == []


def test_there_is_no_import_circle() -> None:
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    assert circles == [], f"import circles: {circles}"


def test_every_module_is_in_a_room_or_on_top_by_design() -> None:
    on_top = {name.split(".")[1] if "." in name else "__init__" for name in _modules() if _room(name) == "top"}
    assert on_top - TOP == NOT_YET_IN_A_ROOM, (
        f"new modules on top (put them in a room): {sorted(on_top - TOP - NOT_YET_IN_A_ROOM)}; "
        f"moved into a room (take them off NOT_YET_IN_A_ROOM): {sorted(NOT_YET_IN_A_ROOM - on_top)}")


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_the_rules_see_the_imports(room: str) -> None:
    """The walk finds imports at all (a rule that sees nothing passes for nothing)."""
    graph = _graph()
    members = [name for name in graph if _room(name) == room]
    if not members:
        pytest.skip(f"no {room}/ room yet")
    assert any(graph[name] for name in members)


def test_the_server_never_names_a_fault_kind_or_an_api() -> None:
    """The server carries out a fault's actions and drives an adapter; it never compares their names."""
    from pytest_llmsim.api import ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_COMPLETIONS, OPENAI_RESPONSES
    from pytest_llmsim.sim.faults import FAULT_KINDS

    names = {*FAULT_KINDS, *(api.name for api in (ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_COMPLETIONS,
                                                   OPENAI_RESPONSES))}
    found = []
    for path in sorted((PACKAGE / "server").glob("*.py")):
        for node in ast.walk(_parse(path)):
            if not isinstance(node, ast.Compare):  # a comparison with a name, or a membership test
                continue
            for side in ast.walk(node):
                if isinstance(side, ast.Constant) and side.value in names:
                    found.append(f"{path.name}:{node.lineno}: {side.value!r}")
    assert found == []



def test_no_module_is_over_450_lines() -> None:
    long = {name: lines for name, path in _modules().items()
            if (lines := len(path.read_text().splitlines())) > 450}
    assert long == {}


# Modules whose classes and private fields the package must not build on: werkzeug's development server
# and the standard library's server stack under it (each a break waiting for a release).
SERVER_STACKS = {"werkzeug.serving", "socketserver", "http.server"}
# Private names of other packages the package still reads (never writes). This set may only shrink.
THIRD_PARTY_PRIVATE_READS = {
    "_list",  # werkzeug's Headers storage: one pass over a request's or answer's headers, not a call each
    "_clean_status",  # werkzeug's status-line parser, called on a throwaway Response
    "_sock",  # gevent's socket keeps the plain one it wraps: the calls that must never wait use it
    "_value_",  # an enum member's value without the descriptor call (documented by enum)
    "_exit",  # os._exit, a public function by another name
    "_mergeable_ranks", "_special_tokens",  # tiktoken's rank tables (with a token-by-token scan without them)
}
_MUTATORS = {"append", "extend", "insert", "pop", "clear", "remove", "update", "add", "discard", "setdefault"}


def _own_private_names() -> set[str]:
    """Every ``_name`` the package defines: functions, methods, classes, attributes it assigns, slots."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(_parse(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif (isinstance(node, ast.Assign) and any(isinstance(target, ast.Name) and target.id == "__slots__"
                                                       for target in node.targets)):
                names.update(item.value for item in ast.walk(node.value)
                             if isinstance(item, ast.Constant) and isinstance(item.value, str))
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def test_nothing_is_built_on_a_third_party_servers_privates() -> None:
    """The serving modes share one connection class of their own: no module imports werkzeug's development
    server or the standard library's server stack (so no class derives from theirs), nothing writes another
    package's private name, and the private names still read are the few listed above."""
    own = _own_private_names()
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE.parent)
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.Import):
                found += [f"{where}:{node.lineno}: imports {alias.name}" for alias in node.names
                          if alias.name in SERVER_STACKS]
            elif isinstance(node, ast.ImportFrom) and node.module in SERVER_STACKS:
                found.append(f"{where}:{node.lineno}: imports from {node.module}")
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                if node.attr in own or (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                    continue
                if isinstance(node.ctx, (ast.Store, ast.Del)):
                    found.append(f"{where}:{node.lineno}: writes {node.attr}")
                elif node.attr not in THIRD_PARTY_PRIVATE_READS:
                    found.append(f"{where}:{node.lineno}: reads {node.attr}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS
                  and isinstance(node.func.value, ast.Attribute) and node.func.value.attr.startswith("_")
                  and not node.func.value.attr.startswith("__") and node.func.value.attr not in own):
                found.append(f"{where}:{node.lineno}: changes {node.func.value.attr} in place")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id in ("getattr", "setattr")
                  and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                  and str(node.args[1].value).startswith("_") and node.args[1].value not in own
                  and (node.func.id == "setattr" or node.args[1].value not in THIRD_PARTY_PRIVATE_READS)):
                found.append(f"{where}:{node.lineno}: {node.func.id} {node.args[1].value}")
    assert found == []


def test_the_server_asks_every_api_the_same_way() -> None:
    """An API's optional features are declared on ``WireAPI`` with defaults: the server never probes an
    adapter with ``getattr`` or ``hasattr`` (it did at six sites)."""
    found = []
    for path in sorted((PACKAGE / "server").glob("*.py")):
        for node in ast.walk(_parse(path)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args
                    and "api" in ast.unparse(node.args[0]).lower()):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
