"""Check results/README.md's index against the code at HEAD: do the files and commands it names exist, and
has the code that produced each entry changed since the entry's commit?

An entry is one table row with a `path`, a `commit` and a `status` column (and optionally `command`).
- Its commit is the newest of the hashes in its commit cell (the last time it was measured or rewritten).
- Its code is what its command runs: the scripts/*.py|sh and `-m` modules it names, what those shell
  scripts run in turn, and every module of this repository they import (followed through the source, lazy
  imports too). A run of pods.train depends on conf/ as well.
- It is *stale* when `git diff --name-only <commit> HEAD` names a file of its code that changed as code:
  a Python file's syntax tree without docstrings (comments and formatting do not count), other files' text.
  A file git sees as moved (`git diff -M`) is compared with its old self, and an import of a moved module
  under its new name is the same import: a move is not a change of code.
An entry whose status says current but is stale, or whose files are gone, is a problem:
`scripts/check_results_index.py` lists it and exits 1.
"""

from __future__ import annotations

import ast
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

HASH = re.compile(r"\b[0-9a-f]{7,40}\b")
TICKED = re.compile(r"`([^`]+)`")
ENTRY = re.compile(r"((?:scripts|results)/[\w/.-]+\.(?:py|sh))|-m\s+([\w.]+)")


@dataclass
class Entry:
    path: str  # as the index writes it, relative to the index's folder
    files: list[str]  # every file or folder it names, relative to the repository root
    commit_cell: str
    command: str
    status: str  # the index's words
    commit: str | None = None  # the newest hash of the commit cell that the repository has
    missing: list[str] = field(default_factory=list)
    code: set[str] = field(default_factory=set)
    changed: list[str] = field(default_factory=list)  # files of its code changed since its commit

    @property
    def said_current(self) -> bool:
        return said(self.status) == "current"

    @property
    def verdict(self) -> str:
        if self.missing:
            return "missing: " + ", ".join(self.missing)
        if self.commit is None:
            return "unchecked: no commit in its commit cell"
        if not self.code:
            return "unchecked: its command names no script or module"
        return "stale: " + ", ".join(self.changed) if self.changed else "current"

    @property
    def problem(self) -> bool:
        return bool(self.missing) or (self.said_current and bool(self.changed))


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def read_index(index: Path, repo: Path) -> list[Entry]:
    """The rows of every table with path, commit and status columns."""
    base = index.parent.resolve().relative_to(repo.resolve())
    entries, header = [], None
    for line in index.read_text().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if set(line) <= set("|-: ") or not {"path", "commit", "status"} <= set(header):
            continue
        row = dict(zip(header, cells))
        named = TICKED.findall(row["path"])
        if not named:
            continue
        entries.append(
            Entry(named[0], _files(named, base), row["commit"], row.get("command", ""), row["status"])
        )
    return entries


def _files(named: list[str], base: Path) -> list[str]:
    """Repository paths of a path cell: `dir/` (`a.md`, `b.json`, `.log`) names dir/, dir/a.md, dir/b.json and
    dir/b.log: a name that starts with '.' or '_' extends the one before it."""
    folder = named[0] if named[0].endswith("/") else ""
    out, last = [named[0]], named[0]
    for name in named[1:]:
        if name[0] in "._":
            name = last[: -len(Path(last).suffix)] + name if Path(last).suffix else last + name
        else:
            name = folder + name
        out.append(name)
        last = name
    return [str(Path(base.parent, f[3:]) if f.startswith("../") else Path(base, f)) for f in out]


def entry_points(text: str, repo: Path) -> set[str]:
    """Files a command runs: scripts it names, `-m` modules, and (for shell scripts) what they run."""
    out: set[str] = set()
    todo = [text]
    while todo:
        for script, module in ENTRY.findall(todo.pop()):
            path = script or module_file(module, repo)
            if path and path not in out and (repo / path).is_file():
                out.add(path)
                if path.endswith(".sh"):
                    todo.append((repo / path).read_text())
    return out


def module_file(module: str, repo: Path) -> str | None:
    parts = module.split(".")
    for candidate in ("/".join(parts) + ".py", "/".join(parts) + "/__init__.py"):
        if (repo / candidate).is_file():
            return candidate
    return None


DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")


def imports(path: str, repo: Path) -> set[str]:
    """Repository files that one Python file imports (anywhere in it: lazy imports count) or launches: a
    string naming a repository module (`"-m", "bench.scaling_rank"` in a subprocess command) and a path
    joined from string parts (`ROOT / "tests" / "e2e" / "update_ranks.py"`)."""
    tree = ast.parse((repo / path).read_text())
    names: set[str] = set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED.fullmatch(node.value):
            if module_file(node.value, repo):
                names.add(node.value)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            joined = "/".join(_path_parts(node))
            if joined.endswith(".py") and (repo / joined).is_file():
                found.add(joined)
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # the package's __init__ runs too
            f = module_file(".".join(parts[:i]), repo)
            if f:
                found.add(f)
    return found


def _path_parts(node: ast.AST) -> list[str]:
    """The string constants of a `a / "b" / "c"` chain, in order (a non-string part contributes nothing)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _path_parts(node.left) + _path_parts(node.right)
    return [node.value] if isinstance(node, ast.Constant) and isinstance(node.value, str) else []


def code_of(command: str, repo: Path) -> set[str]:
    todo, seen = list(entry_points(command, repo)), set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        if f.endswith(".py"):
            todo += imports(f, repo) - seen
    return seen


def check(index: Path, repo: Path, head: str = "HEAD") -> list[Entry]:
    """Fill in each entry's commit, missing files, code and the code changed since its commit."""
    entries = read_index(index, repo)
    for e in entries:
        e.missing = [f for f in e.files if not any(repo.glob(f))]  # a name may be a glob (`x.*`)
        e.missing += [
            p
            for p in re.findall(r"(?:scripts|results)/[\w/.-]+\.(?:py|sh)", e.command)
            if not (repo / p).exists()
        ]
        known = [h for h in HASH.findall(e.commit_cell) if _is_commit(repo, h)]
        if known:
            e.commit = max(
                known, key=lambda h: int(git(repo, "rev-list", "--count", h))
            )  # the most history: newest
        e.code = code_of(e.command, repo)
        if e.commit and e.code:
            diff = git(repo, "diff", "--name-only", e.commit, head).split()
            conf = "pods/train.py" in e.code
            touched = [f for f in diff if f in e.code or (conf and f.startswith("conf/"))]
            moved = renames(repo, e.commit, head)
            e.changed = sorted(f for f in touched if _code_changed(repo, f, e.commit, head, moved))
    return entries


def renames(repo: Path, old: str, new: str) -> dict[str, str]:
    """New path -> old path of each file git sees as moved between two commits."""
    out = {}
    for line in git(repo, "diff", "-M", "--name-status", old, new).splitlines():
        status, *paths = line.split("\t")
        if status.startswith("R"):
            out[paths[1]] = paths[0]
    return out


def module_name(path: str) -> str:
    """The dotted module of a repository file.

    >>> module_name("pods/bench.py"), module_name("pods/reward/__init__.py")
    ('pods.bench', 'pods.reward')
    """
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _code_changed(repo: Path, path: str, old: str, new: str, moved: dict[str, str] | None = None) -> bool:
    """Whether `path` differs between two commits as code: Python by its syntax tree without docstrings
    (comments and formatting do not count), anything else by its text. `moved` (new -> old path): a moved
    file is read at its old path, and imports of moved modules by their old names count as the new ones."""
    moved = moved or {}
    texts = []
    for rev, p in ((old, moved.get(path, path)), (new, path)):
        done = subprocess.run(["git", "show", f"{rev}:{p}"], cwd=repo, capture_output=True, text=True)
        texts.append(done.stdout if done.returncode == 0 else None)  # None: absent at that commit
    if (
        path.endswith(".py") and None in texts
    ):  # added or deleted: code only if it holds more than a docstring
        texts = [t if t is not None else "" for t in texts]
    if None in texts or not path.endswith(".py"):
        return texts[0] != texts[1]
    modules = {module_name(o): module_name(n) for n, o in moved.items() if n.endswith(".py")}
    try:
        return _bare_ast(texts[0], modules) != _bare_ast(texts[1])
    except SyntaxError:
        return texts[0] != texts[1]


def _bare_ast(source: str, modules: dict[str, str] | None = None) -> str:
    """The syntax tree without docstrings; imports of `modules` (old name -> new name) renamed."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if modules and isinstance(node, ast.ImportFrom) and node.module in modules:
            node.module = modules[node.module]
        if modules and isinstance(node, ast.Import):
            for a in node.names:
                a.name = modules.get(a.name, a.name)
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            node.body = body[1:] or ([] if isinstance(node, ast.Module) else [ast.Pass()])
    return ast.dump(tree)


def _is_commit(repo: Path, h: str) -> bool:
    done = subprocess.run(["git", "cat-file", "-e", f"{h}^{{commit}}"], cwd=repo, capture_output=True)
    return done.returncode == 0


def said(status: str) -> str:
    """The index's status in one word: current, stale or superseded ('-' when it says none of them)."""
    m = re.search(r"current|stale|superseded", status.lower())
    return m.group(0) if m else "-"


def report(entries: list[Entry]) -> str:
    """A markdown table: each entry, its commit, what the index says and what HEAD says."""
    lines = ["| path | commit | index says | at HEAD | |", "|---|---|---|---|---|"]
    for e in entries:
        verdict = e.verdict
        if len(e.changed) > 4:
            verdict = f"stale: {len(e.changed)} files, {', '.join(e.changed[:4])}, ..."
        flag = "**check**" if e.problem else ""
        lines.append(f"| `{e.path}` | {e.commit or '-'} | {said(e.status)} | {verdict} | {flag} |")
    return "\n".join(lines) + "\n"
