"""pods's modules import one another without a cycle, lazy imports inside functions included: a cycle works
only while each side imports the other late, and breaks the day one of them moves an import to the top."""

from __future__ import annotations

import ast
from pathlib import Path

PODS = Path(__file__).resolve().parents[1] / "pods"


def modules(root: Path = PODS) -> dict[str, Path]:
    """Dotted name -> file of every module of the package (a package is its __init__.py)."""
    out = {}
    for f in root.rglob("*.py"):
        parts = list(f.relative_to(root.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def imports(name: str, file: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that `file` imports anywhere in its body (the innermost known module a dotted
    name falls in: `from pods.reward import REWARDS` -> pods.reward)."""
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            names = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for target in names:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root), on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w), on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while not comp or comp[-1] != v:
                    comp.append(stack.pop())
                    on.discard(comp[-1])
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_checker_finds_a_cycle_and_only_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_pods_has_no_import_cycle():
    known = modules()
    graph = {name: imports(name, file, known) for name, file in known.items()}
    assert graph["pods.slurm"] >= {"pods.signals"}  # the reader sees what it should
    assert cycles(graph) == []
