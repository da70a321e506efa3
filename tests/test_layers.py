"""The library's structure: imports go only down the layers (the import-linter contract in
pyproject.toml), no module reaches itself round a circle, and functions import nothing but a heavy
optional dependency (docs/design.md, "Layers")."""

import ast
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("karma", "models", "baselines")
#: imported inside the functions that need them: mpi4py starts MPI when imported; the others take
#: seconds to import and only some commands use them
LAZY = {"mpi4py", "matplotlib", "seaborn", "transformers", "torchvision"}


def test_the_layer_contract_is_kept():
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml")) == 0


def circles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    return out


def test_no_module_imports_itself_round_a_circle():
    graph = grimp.build_graph(*PACKAGES)
    # a package's __init__ is a module of its own: importing a sibling through it is no circle
    assert circles(graph) == []


def inner_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    roots = {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom):
                    roots = {(node.module or "").split(".")[0]}
                else:
                    continue
                if roots - LAZY:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_functions_import_only_heavy_optional_dependencies():
    files = [f for p in (*PACKAGES, "workflow/scripts") for f in sorted((ROOT / p).rglob("*.py"))]
    assert [where for f in files for where in inner_imports(f)] == []


def test_workflow_scripts_import_at_the_top():
    """Nothing imported inside a script's `with logged(...)` block either (no layer is hidden there)."""
    found = []
    for f in sorted((ROOT / "workflow/scripts").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom) and node.col_offset > 0:
                found.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    assert found == []
