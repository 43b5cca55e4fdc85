"""The project has no import circle: minicb's modules import one another one way only. And its layers
import downwards only: the core (the engine and everything it is built from) never imports the serving
front (minicb/serve/), the views (minicb/viz/) or the course machinery (the lessons' seam, graders and
CLI); the serving front may import the core, never the views or the course.

The graph is read from the source (ast), not from a running interpreter, so it holds every import
statement wherever it is: at the top of a module, inside a function (a late import does not break a
circle, it only hides it until that function runs) or under `if TYPE_CHECKING:`.

A package's __init__ runs before any of its submodules, but that is so for every import; counting it
would put every module in a circle with minicb/__init__.py, which re-exports the engine. So `import
minicb.a.b` and `from minicb.a import b` (b a module) are edges to minicb.a.b only, and `from minicb.a
import name` (name not a module) is an edge to minicb.a.
"""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from conftest import write_files

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "minicb"

Edges = dict[str, dict[str, int]]   # module -> {module it imports: line of the first such import}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def find_modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    return {module_name(path, root): path for path in sorted((root / package).rglob("*.py"))}


def imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The modules of `known` that one import statement in `module` loads."""
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:   # relative: from the module's own package, one level up per extra dot
            package = module.split(".") if is_package else module.split(".")[:-1]
            anchor = package[:len(package) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    found = []
    for target in targets:
        # `import minicb.a.b` names a module; anything longer is an attribute of the longest known prefix.
        parts = target.split(".")
        while parts and ".".join(parts) not in known:
            parts.pop()
        if parts:
            found.append(".".join(parts))
    return found


def import_statements(modules: dict[str, Path]) -> Iterator[tuple[str, str, int, str]]:
    """(module, module it imports, line, the statement's text) for every import of one known module by another."""
    known = set(modules)
    for module, path in modules.items():
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in imported(node, module, path.name == "__init__.py", known):
                    if target != module:
                        yield module, target, node.lineno, ast.get_source_segment(source, node)


def import_graph(modules: dict[str, Path]) -> Edges:
    graph: Edges = {module: {} for module in modules}
    for module, target, line, _ in sorted(import_statements(modules), key=lambda s: s[2]):
        graph[module].setdefault(target, line)
    return graph


def strongly_connected(graph: Edges) -> list[list[str]]:
    """Tarjan's components (iterative), each sorted; only those that hold a circle (more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def a_circle(graph: Edges, component: list[str]) -> list[str]:
    """One shortest circle through the component's first module, as the modules along it (first repeated last)."""
    members, start = set(component), component[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child in members and child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{component} is not a strongly connected component")


def describe(graph: Edges, modules: dict[str, Path], root: Path, circle: list[str]) -> str:
    """The circle on one line, then where each of its imports is."""
    steps = [f"{a} -> {b} ({modules[a].relative_to(root)}:{graph[a][b]})" for a, b in zip(circle, circle[1:])]
    return "\n  ".join([" -> ".join(circle), *steps])


def circles(root: Path = ROOT, package: str = PACKAGE) -> list[str]:
    """One circle per tangle of modules that import one another, with every module of the tangle."""
    modules = find_modules(root, package)
    graph = import_graph(modules)
    return [describe(graph, modules, root, a_circle(graph, c)) + f"\n  (all tangled: {', '.join(c)})"
            for c in strongly_connected(graph)]


def test_minicb_has_no_import_circle():
    found = circles()
    assert not found, "import circles (each line: the import that closes a step of it):\n" + "\n".join(found)


def test_the_checker_finds_circles_through_late_relative_and_from_imports(tmp_path):
    files = {
        "pkg/__init__.py": "from pkg.a import run\n",
        "pkg/a.py": "from pkg import b\ndef run():\n    return b\n",
        "pkg/b.py": "def late():\n    from .sub import c\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "import pkg.a\nfrom pkg.d import helper\n",
        "pkg/d.py": "import os\nfrom pkg.sub import thing\n",
    }
    write_files(tmp_path, files)
    modules = find_modules(tmp_path, "pkg")
    graph = import_graph(modules)
    assert graph["pkg.b"] == {"pkg.sub.c": 2}                 # inside a function, relative
    assert graph["pkg.a"] == {"pkg.b": 1}                     # `from pkg import b`: the submodule
    assert graph["pkg.d"] == {"pkg.sub": 2}                   # `from pkg.sub import thing`: the package
    assert strongly_connected(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]   # pkg/__init__ is not in it
    [found] = circles(tmp_path, "pkg")
    assert found.startswith("pkg.a -> pkg.b -> pkg.sub.c -> pkg.a\n") and "pkg/b.py:2" in found


# --- layers ---------------------------------------------------------------------------------------------

# The package's layers, lowest first, each by the top-level names inside minicb that it holds ("" is minicb's
# own __init__). A module imports its own layer and those below it, never one above. The core runs up to
# "engine": leaves, KV memory, requests and scheduling, running a batch, stats, then the engine and its front
# `llm`. Above it: the course's lab tools, the serving front, the views, and the course machinery with the CLI.
LAYERS = (
    ("leaves", ("checks", "config", "costs", "sampling", "attention", "model")),
    ("kv", ("kv",)),
    ("scheduler", ("scheduler",)),
    ("runner", ("runner",)),
    ("stats", ("stats",)),
    ("engine", ("engine", "parts", "prompts", "llm", "")),
    ("lab", ("lab",)),
    ("serve", ("serve",)),
    ("viz", ("viz",)),
    ("course", ("course", "cli", "__main__")),
)
RANK = {name: rank for rank, (_, names) in enumerate(LAYERS) for name in names}


def layer(module: str) -> int:
    """A module's layer, by its top-level name inside the package; a name no layer holds is an error."""
    top = module.split(".")[1] if "." in module else ""
    if top not in RANK:
        raise KeyError(f"{module} is in no layer: add minicb.{top} to LAYERS in tests/test_imports.py")
    return RANK[top]


def wrong_way_imports(root: Path = ROOT, package: str = PACKAGE) -> list[str]:
    """Each import that runs up the layers: where it is, the statement, and the rule it breaks."""
    modules = find_modules(root, package)
    found = []
    for module, target, line, statement in import_statements(modules):
        source, destination = layer(module), layer(target)
        if destination > source:
            found.append(f"{modules[module].relative_to(root)}:{line}: `{statement}`: {module} is in layer "
                         f"{LAYERS[source][0]}, below {LAYERS[destination][0]} ({target})")
    return sorted(found)


def test_imports_run_down_the_layers_only():
    found = wrong_way_imports()
    assert not found, "imports up the layers (move the code to the layer that needs it):\n" + "\n".join(found)


def test_every_module_is_in_a_layer_and_every_layer_name_exists():
    """A module left out, or a name left behind by a move, would let an import pass unseen."""
    tops = {module.split(".")[1] if "." in module else "" for module in find_modules()}
    assert tops <= RANK.keys(), f"modules in no layer: {sorted(tops - RANK.keys())}"
    assert not RANK.keys() - tops, f"the layers name modules that are not there: {sorted(RANK.keys() - tops)}"


def test_the_layer_checker_finds_late_type_checking_and_relative_imports_up_the_layers(tmp_path):
    files = {
        "pkg/__init__.py": "",
        "pkg/engine.py": "def late():\n    from pkg.serve import api\n",
        "pkg/kv/__init__.py": "",
        "pkg/kv/pool.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.scheduler import x\n",
        "pkg/scheduler/__init__.py": "from pkg.kv import pool\n",
        "pkg/serve/__init__.py": "",
        "pkg/serve/api.py": "from pkg import engine\nfrom .. import course\n",
        "pkg/course.py": "from pkg.engine import late\nfrom pkg.serve import api\n",
    }
    write_files(tmp_path, files)
    found = wrong_way_imports(tmp_path, "pkg")
    assert [line.split(": ")[0] for line in found] == ["pkg/engine.py:2", "pkg/kv/pool.py:3", "pkg/serve/api.py:2"]
    assert found[0].endswith("`from pkg.serve import api`: pkg.engine is in layer engine, below serve (pkg.serve.api)")
    assert "layer kv, below scheduler" in found[1] and "layer serve, below course" in found[2]
