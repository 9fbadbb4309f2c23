"""The import graph of src/infertune: no circle, and no earlier layer importing a later one.

A small AST walk (no third-party graph library): every ``import`` and ``from ... import``
anywhere in a module counts, function-local and ``TYPE_CHECKING`` ones too, because a circle
hidden inside a function is still a circle in the design. The layer order is DESIGN.md's
"Package layout": a package may import only packages listed before it (and itself).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
ROOT = "infertune"

# DESIGN.md, "Package layout", from the ground floor up; durations.py (duration strings such as
# "5m", used by config and the CLI), libraries.py (quiets third-party logging in infertune's
# own processes: commands and serve's model workers), jsonfile.py (the one JSON file reader
# and writer) and serial.py (the one dataclass serialisation) are ground-floor helpers beside
# errors.py. artifacts (a run folder's typed files and their one reader, RunDir) sits above the
# layers whose types it returns and below serve/, the lowest layer that reads a run folder.
LAYERS = ("errors", "durations", "libraries", "jsonfile", "serial", "config", "hardware", "data",
          "models", "measure", "quality", "artifacts", "serve", "loadgen", "optimize", "report",
          "rollout", "export", "cli")


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules(src: Path = SRC) -> dict[str, Path]:
    return {module_name(p, src): p for p in sorted((src / ROOT).rglob("*.py"))}


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    # a package's own __init__ is its level-1 anchor; a plain module's anchor is its parent
    anchor = base if is_package else base[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join(anchor + ([node.module] if node.module else []))


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest known module that ``name`` names (``a.b.Thing`` -> ``a.b``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node)
            # "from pkg import sub" imports the module pkg.sub when it exists
            targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
        for target in targets:
            if target == ROOT or target.startswith(ROOT + "."):
                resolved = _resolve(target, modules)
                if resolved is not None and resolved != module:
                    found.add(resolved)
    return found


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    modules = all_modules(src)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop()
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    rank = {name: i for i, name in enumerate(LAYERS)}
    problems = []
    for module, targets in sorted(graph.items()):
        src_layer = layer_of(module)
        for target in sorted(targets):
            dst_layer = layer_of(target)
            if not src_layer or not dst_layer or src_layer == dst_layer:
                continue
            if rank[dst_layer] > rank[src_layer]:
                problems.append(f"{module} imports {target} ({src_layer} is below {dst_layer})")
    return problems


# docs/layout.md, "optimize/": served/ imports neither search/ nor stages/, search/ does not
# import stages/ (stages/ uses both)
OPTIMIZE_BANS = {"served": ("search", "stages"), "search": ("stages",)}


def optimize_direction_violations(graph: dict[str, set[str]]) -> list[str]:
    def part(module: str) -> str:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[1] == "optimize" else ""

    return [f"{module} imports {target} (optimize/{part(module)}/ may not import "
            f"optimize/{part(target)}/)"
            for module, targets in sorted(graph.items())
            for target in sorted(targets)
            if part(target) in OPTIMIZE_BANS.get(part(module), ())]


# ---- the checker checks what it should (synthetic trees) ----------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / ROOT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def test_a_circle_through_a_function_local_import_is_found(tmp_path: Path) -> None:
    src = _tree(tmp_path, {
        "__init__.py": "",
        "optimize/__init__.py": "",
        "optimize/a.py": "from infertune.optimize.b import thing\n",
        "optimize/b.py": "def thing():\n    from infertune.optimize import a\n    return a\n",
        "optimize/c.py": "from . import a\n",
    })
    assert find_cycles(import_graph(src)) == [["infertune.optimize.a", "infertune.optimize.b"]]


def test_relative_imports_resolve_and_a_chain_is_not_a_circle(tmp_path: Path) -> None:
    src = _tree(tmp_path, {
        "__init__.py": "",
        "models/__init__.py": "from .base import Adapter\n",
        "models/base.py": "from ..errors import E\nAdapter = 1\n",
        "errors.py": "E = 1\n",
    })
    graph = import_graph(src)
    assert graph["infertune.models"] == {"infertune.models.base"}
    assert graph["infertune.models.base"] == {"infertune.errors"}
    assert find_cycles(graph) == []


def test_an_earlier_layer_importing_a_later_one_is_reported(tmp_path: Path) -> None:
    src = _tree(tmp_path, {
        "__init__.py": "",
        "serve/__init__.py": "",
        "serve/app.py": "import infertune.report.schema\n",
        "report/__init__.py": "",
        "report/schema.py": "from infertune.serve import app\n",
    })
    graph = import_graph(src)
    assert layer_violations(graph) == [
        "infertune.serve.app imports infertune.report.schema (serve is below report)"]


def test_optimize_served_importing_search_or_search_importing_stages_is_reported(
        tmp_path: Path) -> None:
    files = {"__init__.py": "", "optimize/__init__.py": "", "optimize/state.py": ""}
    for sub in ("served", "search", "stages"):
        files[f"optimize/{sub}/__init__.py"] = ""
    files["optimize/served/traffic.py"] = "from infertune.optimize.search import timing\n"
    files["optimize/search/timing.py"] = ("from infertune.optimize import state\n"
                                          "from infertune.optimize.stages import build\n")
    files["optimize/stages/build.py"] = ("from infertune.optimize.search import timing\n"
                                         "from infertune.optimize.served import traffic\n")
    assert optimize_direction_violations(import_graph(_tree(tmp_path, files))) == [
        "infertune.optimize.search.timing imports infertune.optimize.stages.build "
        "(optimize/search/ may not import optimize/stages/)",
        "infertune.optimize.served.traffic imports infertune.optimize.search.timing "
        "(optimize/served/ may not import optimize/search/)"]


def test_every_package_has_a_place_in_the_layer_order() -> None:
    unknown = sorted({layer_of(m) for m in all_modules()} - set(LAYERS) - {""})
    assert unknown == [], f"add {unknown} to DESIGN.md's package layout and LAYERS here"


# ---- the real tree ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_no_import_circle_in_src(graph: dict[str, set[str]]) -> None:
    assert len(graph) > 50  # the walk saw the package, not an empty folder
    cycles = find_cycles(graph)
    assert cycles == [], "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_earlier_layer_imports_a_later_one(graph: dict[str, set[str]]) -> None:
    assert layer_violations(graph) == []


def test_optimize_imports_go_one_way(graph: dict[str, set[str]]) -> None:
    assert optimize_direction_violations(graph) == []
