"""The house rules on imports, read from the source (ast), not by running it:
- layers: core imports nothing of ours above it; sim and backend import core only;
  calibration imports core, sim and backend; experiments (the commands) sits on top;
- no circles between modules, counting imports under TYPE_CHECKING and module names
  given as strings (importlib, "module:Class");
- an import inside a function body says why it is lazy, in a comment on its line (or a
  "# lazy: ..." line above it), for a heavy dependency (torch, matplotlib, dask, scipy,
  ...) that must stay unloaded."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Lower layers may not import higher ones; equal layers in different folders may not
# import each other (sim and backend are two worlds over the same core).
LAYERS = {"core": 0, "sim": 1, "backend": 1, "calibration": 2, "experiments": 3}
MODULE_STRING = re.compile(r"batchlab(\.\w+)+(:\w+)?")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["batchlab", *parts])


def _sources() -> dict[str, Path]:
    found = {}
    for folder in LAYERS:
        for path in (ROOT / folder).rglob("*.py"):
            found[_module_name(path)] = path
    return found


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _inside(node: ast.AST, parents: dict, kinds: tuple) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, kinds):
            return True
    return False


def _imports(name: str, path: Path, modules: set[str]):
    """(target module, line, inside a function) for each import of ours in one file."""
    tree = ast.parse(path.read_text())
    parents = _parents(tree)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            subs = [f"{base}.{a.name}" for a in node.names]
            # `from package import submodule` depends on the submodule, not on the package
            targets = subs if all(s in modules for s in subs) else [base, *subs]
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and MODULE_STRING.fullmatch(node.value) and node.value.split(":")[0] in modules):
            yield node.value.split(":")[0], node.lineno, False
            continue
        else:
            continue
        lazy = _inside(node, parents, (ast.FunctionDef, ast.AsyncFunctionDef))
        for target in targets:
            if target in modules and target != name:
                yield target, node.lineno, lazy


def _graph():
    sources = _sources()
    modules = set(sources)
    return sources, {name: list(_imports(name, path, modules)) for name, path in sources.items()}


def _layer(module: str) -> str:
    return module.split(".")[1]


def test_no_import_against_the_layers():
    _, graph = _graph()
    wrong = [f"{m} imports {t} (line {line})" for m, edges in graph.items() for t, line, _ in edges
             if _layer(m) != _layer(t) and LAYERS[_layer(t)] >= LAYERS[_layer(m)]]
    assert wrong == []


def test_no_import_circles():
    _, graph = _graph()
    edges = {m: {t for t, _, _ in out} for m, out in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert circles == []


def _unexplained_lazy_imports(path: Path) -> list[str]:
    """Imports inside a function body with no comment on their first line, nor a
    "# lazy" line above."""
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text)
    parents = _parents(tree)
    return [f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{node.lineno}: "
            f"{lines[node.lineno - 1].strip()}"
            for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
            and _inside(node, parents, (ast.FunctionDef, ast.AsyncFunctionDef))
            and "#" not in lines[node.lineno - 1]
            and not lines[node.lineno - 2].strip().startswith("# lazy")]


def test_a_lazy_import_says_why():
    unexplained = [u for path in _sources().values() for u in _unexplained_lazy_imports(path)]
    assert unexplained == []


def test_a_lazy_import_without_a_reason_is_seen(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    import torch\n\n\ndef g():\n    import torch  # heavy\n\n\n"
                     "def h():\n    # lazy: torch\n    import torch\n")
    assert _unexplained_lazy_imports(probe) == ["probe.py:2: import torch"]


def test_the_checks_see_what_they_check(tmp_path):
    """A TYPE_CHECKING import, a lazy one and a module named in a string are all edges."""
    sources, graph = _graph()
    assert len(sources) > 200
    assert any(t == "batchlab.core.request" for t, _, _ in graph["batchlab.sim.engine"])
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n"
                     "    from batchlab.core.request import Request\n"
                     "def f():\n"
                     "    import batchlab.core.kv\n"
                     "X = 'batchlab.core.batch:Batch'\n")
    found = set(_imports("batchlab.probe", probe, set(sources)))
    assert found == {("batchlab.core.request", 3, False), ("batchlab.core.kv", 5, True),
                     ("batchlab.core.batch", 6, False)}
