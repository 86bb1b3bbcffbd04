#!/usr/bin/env python3
"""Issue 61, items 1 and 2: group pods/'s top-level modules by concern, and keep every old path working.

Status (2026-12-08): NOT APPLIED. Written and run clean against 14ba41f (the move then passed the suite but for
the multi-process tests, which failed on that commit alone: fixed in da96d18). Since then main gained
pods/files.py and pods/identity.py (placed below in run/) and moved CONF_DIR into pods/config.py, and
pods.identity imports register_schema, which this move puts in launch/cli.py (a run/ -> launch/ import back
up): the dry run stops on the first of these. Port it (EDITS, CARVED, and where register_schema and identity
go), copy it out of the tree (its rewrite pass covers scripts/, this file's tables too), run the copy on a
clean main, run the whole suite, commit, and delete this script in that commit.

Run from the root of a clean checkout (nothing staged or modified):

    python scripts/move_layout.py            # the move, then ruff (import order, unused imports, format)
    python scripts/move_layout.py --dry-run  # what it would move, and the checks it makes first; changes nothing

What it needs to find, and refuses without (one line each, before anything changes):
  - every module of MOVES at pods/<name>.py, and no pods/<package>/ of the four yet;
  - no other loose module at pods/'s top than ENTRY (a module added on another branch must get a place in
    MOVES first: the script says which);
  - the definitions CARVED moves between modules, as top-level defs/assignments (found by name, so their
    bodies may have changed), and the few lines of EDITS, word for word.

What it does, in order: the carves (functions that move next to what they serve, so that no import runs back up
across packages), the `git mv`s, the packages' __init__.py, the rewrite of every import, dotted module name and
pods/<module>.py path in REWRITE_DIRS, the alias table in pods/__init__.py, the layering test, the alias tests,
README's Layout and docs/extending.md's "Public names", then ruff on the Python files it changed.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

# old top-level module -> the package it goes to
PACKAGES = {
    "core": ["batch", "config", "errors", "hub", "registry", "spelling"],
    "run": [
        "checkpoint",
        "files",
        "history",
        "identity",
        "naming",
        "resume",
        "run_state",
        "runlock",
        "tracking",
    ],
    "loop": [
        "callbacks",
        "collect",
        "distributed",
        "eval",
        "faults",
        "guard",
        "models",
        "multirun",
        "signals",
        "stopping",
        "threads",
        "timing",
        "trainer",
    ],  # fmt: skip
    "launch": ["cli", "components", "memory", "slurm"],
}
MOVES = {m: pkg for pkg, mods in PACKAGES.items() for m in mods}
ENTRY = {"__init__.py", "train.py", "compare.py", "testing.py"}  # what stays at pods/'s top, beside packages

# the packages' faces: what lives there (line 1) and who may import it (line 2)
FACES = {
    "core": (
        "What every part of pods stands on: the typed config, the batch between stages, registries, errors,\n"
        "retired spellings, hub access, devices. It imports nothing of pods outside core/; any module may import it."
    ),
    "run": (
        "A run directory over its life: the run lock, checkpoints and resume, history.jsonl, metrics.jsonl, names.\n"
        "It imports core/ and the stages; loop/, launch/ and the entry points import it."
    ),
    "loop": (
        "The training loop: the Trainer, one step's collection, eval, timers, callbacks, the policy, its processes\n"
        "and how a run stops (signals, deadlines, faults, guards). launch/ and pods.train import it, nothing below."
    ),
    "launch": (
        "From a command line to a started run: Hydra's schema and one-line refusals, preflight (component names,\n"
        "GPU sizing) and Slurm. It imports what stands below it; only the entry points (pods.train) import it."
    ),
}

# definitions that move between modules (old paths), so that no import runs back up across packages:
# (from, [names], to, how) with how = "append", "after:<name>" or "new:<docstring>"
CARVED = [
    # the stages sample through it (rollout/stage.py, eval): it wraps a backend's generate
    ("pods/guard.py", ["_SAMPLING_NONFINITE", "sampling"], "pods/rollout/backend.py", "append"),
    # the rollout backends and the policy's loader both need them; models.py stands above the stages
    (
        "pods/models.py",
        ["DTYPES", "canonical_device", "resolve_dtype"],
        "pods/core/devices.py",
        "new:The torch device and compute dtype a config names, for the policy's loader (pods/loop/models.py) and "
        "the\nrollout backends (pods/rollout/) alike.",
    ),
    # update/optim.py's resume rule and run/history.py both compare configs as dotted keys
    ("pods/history.py", ["flatten"], "pods/config.py", "after:as_container"),
    # it registers the `${pods.kept:...}` resolver, which asks the selector registry: it stands above the stages
    ("pods/config.py", ["register_schema"], "pods/cli.py", "append"),
]
# (old module, name) -> the module it lives in now, for imports and dotted names
NAME_MOVES = {
    ("pods.guard", "_SAMPLING_NONFINITE"): "pods.rollout.backend",
    ("pods.guard", "sampling"): "pods.rollout.backend",
    ("pods.models", "DTYPES"): "pods.core.devices",
    ("pods.models", "canonical_device"): "pods.core.devices",
    ("pods.models", "resolve_dtype"): "pods.core.devices",
    ("pods.history", "flatten"): "pods.core.config",
    ("pods.config", "register_schema"): "pods.launch.cli",
}
# imports the carved code needs where it lands (module, name), on old paths
CARVED_IMPORTS = {
    "pods/rollout/backend.py": [("contextlib", "contextmanager"), ("pods.errors", "NonFiniteError")],
    "pods/core/devices.py": [("torch", None), ("pods.core.config", "HardwareConfig"), ("pods.core.config", "ModelConfig")],
    "pods/cli.py": [("hydra.core.config_store", "ConfigStore"), ("pods.config", "schema")],
}  # fmt: skip

# word-for-word edits (file, old, new) on old paths, before the carves
EDITS = [
    ("pods/config.py", "def register_schema() -> None:\n",
     'def register_schema() -> None:\n    """Store the schema Hydra composes conf/train.yaml on (`pods_schema`) and '
     "register the resolvers the YAML\n    uses (`${pods.run_name:...}`, `${pods.kept:...}`, `${pods.sweep_stamp:...}`: "
     'pods/naming.py)."""\n'),
    ("pods/config.py", '__all__ = ["ConfigError", "TrainConfig", "register_schema", "settings", "validate"]',
     '__all__ = ["ConfigError", "TrainConfig", "settings", "validate"]'),
    # one floor deeper: the repository's conf/ is three up
    ("pods/cli.py", 'CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")',
     'CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")'),
    # a path built in parts, and what config.py imports now that register_schema left it
    ("tests/test_components.py", '(ROOT / "pods" / "config.py")', '(ROOT / "pods" / "core" / "config.py")'),
    ("tests/test_components.py", 'assert pods_modules == ["pods.errors", "pods.naming"], pods_modules',
     'assert pods_modules == ["pods.errors"], pods_modules'),
    ("tests/test_components.py", 'assert eval(out.stdout) == ["pods.config", "pods.errors"]',
     'assert eval(out.stdout) == ["pods.core", "pods.config", "pods.errors"]'),
    ("pods/config.py", "(registered below as `pods_schema`)", "(registered as `pods_schema` by pods/cli.py)"),
    ("pods/cli.py", "traceback. pods.train's main() calls `run_hydra(task)` once; everything here is about Hydra's ways of\n"
     "reporting, nothing about training.",
     "traceback. pods.train registers the schema Hydra composes on (`register_schema`) and calls `run_hydra(task)`\n"
     "once; everything here is about Hydra, nothing about training."),
    ("pods/guard.py", "(torch.multinomial's refusal, named: `sampling`)",
     "(torch.multinomial's refusal; pods/rollout/backend.py)"),
]  # fmt: skip

REWRITE_DIRS = ["pods", "tests", "scripts", "bench", "conf", "docs", "notebooks", ".ci", "README.md"]
TEXT = {".py", ".md", ".yaml", ".yml", ".ipynb", ".sh", ".toml", ".txt", ".cfg", ".json", ""}


def die(msg: str) -> None:
    sys.exit(f"move_layout: {msg}")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


# ---------------------------------------------------------------- checks


def check_tree() -> None:
    if not Path("pods/__init__.py").exists() or not Path(".git").exists():
        die("run it from a repository root that holds pods/")
    if git("status", "--porcelain", "--untracked-files=no").strip():
        die(
            "the checkout has changes: commit or stash them first (git checkout . && git clean -fd pods tests)"
        )
    missing = [m for m in MOVES if not Path(f"pods/{m}.py").exists()]
    if missing:
        die(f"no pods/<name>.py for {', '.join(missing)}: has the move run already, or a module gone?")
    there = [p for p in PACKAGES if Path(f"pods/{p}").exists()]
    if there:
        die(f"pods/{there[0]}/ exists already")
    loose = sorted(p.name for p in Path("pods").glob("*.py") if p.name not in ENTRY and p.stem not in MOVES)
    if loose:
        die(f"loose module(s) this script does not place: {', '.join(loose)}: add each to PACKAGES")
    for src, names, dst, how in CARVED:
        tree = ast.parse(Path(src).read_text())
        for name in names:
            if top_node(tree, name) is None:
                die(f"{src} has no top-level {name}: update CARVED")
        if how.startswith("after:") and top_node(ast.parse(Path(dst).read_text()), how[6:]) is None:
            die(f"{dst} has no top-level {how[6:]} to put {', '.join(names)} after")
    for m in MOVES:  # a module that finds files by its own place must be told it is one floor deeper (EDITS)
        uses = len(
            re.findall(r"(?:Path|dirname)\(__file__\)|__file__\)\.parent", Path(f"pods/{m}.py").read_text())
        )
        told = sum(path == f"pods/{m}.py" and "__file__" in old for path, old, _ in EDITS)
        if uses != told:
            die(
                f"pods/{m}.py finds files by its own path ({uses} places, {told} in EDITS): it moves a floor down"
            )
    pending = {}
    for path, old, _ in EDITS:
        pending[path] = pending.get(path, Path(path).read_text())
        if pending[path].count(old) != 1:
            die(f"{path}: expected this text once, found it {pending[path].count(old)} times: {old!r}")


# ---------------------------------------------------------------- carving


def top_node(tree: ast.Module, name: str):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return node
    return None


def span(lines: list[str], node) -> tuple[int, int]:
    """The node's lines (0-based, end exclusive) with its decorators and the comment lines right above it."""
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return start, node.end_lineno


def cut(path: Path, names: list[str]) -> str:
    """Take the named top-level definitions out of `path`; their source, in the file's order."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    spans = sorted(span(lines, top_node(tree, n)) for n in names)
    pieces = ["".join(lines[s:e]).rstrip() + "\n" for s, e in spans]
    for s, e in reversed(spans):
        del lines[s:e]
    path.write_text(re.sub(r"\n{4,}", "\n\n\n", "".join(lines)))
    return "\n\n".join(pieces)


def add_imports(path: Path, wanted: list[tuple[str, str | None]]) -> None:
    """Add `from module import name` (or `import module` for name None) to the top-level imports of `path`,
    into a `from module import ...` that is there already; ruff sorts them after."""
    for module, name in wanted:
        text = path.read_text()
        lines = text.splitlines(keepends=True)
        tree = ast.parse(text)
        imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        if name is None:
            if any(isinstance(n, ast.Import) and any(a.name == module for a in n.names) for n in imports):
                continue
            new, at = f"import {module}\n", None
        else:
            same = [
                n for n in imports if isinstance(n, ast.ImportFrom) and n.module == module and not n.level
            ]
            if same and any(a.name == name for a in same[0].names):
                continue
            if same:
                node = same[0]
                names = [a.name + (f" as {a.asname}" if a.asname else "") for a in node.names] + [name]
                lines[node.lineno - 1 : node.end_lineno] = [f"from {module} import {', '.join(names)}\n"]
                path.write_text("".join(lines))
                continue
            new, at = f"from {module} import {name}\n", None
        if imports:
            at = imports[-1].end_lineno
        else:  # after the docstring
            at = tree.body[0].end_lineno if tree.body and isinstance(tree.body[0], ast.Expr) else 0
        lines[at:at] = [new]
        path.write_text("".join(lines))


def still_used(text: str, name: str) -> bool:
    """Whether the code (not a string or comment) of `text` names `name`."""
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(ast.parse(text)))


def carve() -> set[Path]:
    touched = set()
    for src, names, dst, how in CARVED:
        s, d = Path(src), Path(dst)
        code = cut(s, names)
        touched |= {s, d}
        if how == "append":
            d.write_text(d.read_text().rstrip() + "\n\n\n" + code)
        elif how.startswith("after:"):
            text = d.read_text()
            lines = text.splitlines(keepends=True)
            end = top_node(ast.parse(text), how[6:]).end_lineno
            lines[end:end] = ["\n\n", code, "\n"]
            d.write_text("".join(lines))
        else:  # a new module
            d.parent.mkdir(parents=True, exist_ok=True)
            d.write_text(f'"""{how[4:]}"""\n\nfrom __future__ import annotations\n\n\n{code}')
        add_imports(d, CARVED_IMPORTS.get(dst, []))
        # what the old module still uses of what left it
        left = s.read_text()
        new_module = ".".join(Path(dst).with_suffix("").parts)
        add_imports(s, [(new_module, n) for n in names if still_used(left, n)])
    return touched


def edit() -> set[Path]:
    for path, old, new in EDITS:
        p = Path(path)
        text = p.read_text()
        if text.count(old) != 1:
            die(f"{path}: expected this text once: {old!r}")
        p.write_text(text.replace(old, new))
    return {Path(p) for p, _, _ in EDITS}


# ---------------------------------------------------------------- moving


def move() -> None:
    for pkg, mods in PACKAGES.items():
        Path(f"pods/{pkg}").mkdir(exist_ok=True)
        for m in mods:
            git("mv", f"pods/{m}.py", f"pods/{pkg}/{m}.py")
        face = Path(f"pods/{pkg}/__init__.py")
        face.write_text(f'"""{FACES[pkg]}"""\n')
        git("add", str(face))
    git("add", "pods/core/devices.py")


# ---------------------------------------------------------------- rewriting

NAME = r"[A-Za-z_]\w*(?:[ \t]+as[ \t]+[A-Za-z_]\w*)?"
FROM = re.compile(
    rf"(?P<lead>^[ \t]*|;[ \t]*)from (?P<mod>pods(?:\.\w+)?) import "
    rf"(?P<names>\([^)]*\)|{NAME}(?:[ \t]*,[ \t]*{NAME})*)",
    re.M,
)
ALT = "|".join(sorted(MOVES, key=len, reverse=True))
DOTTED = re.compile(rf"(?<![\w.])pods\.({ALT})(?!\w)")
PATH = re.compile(rf"(?<![\w.-])pods/({ALT})\.py\b")
NAMED = re.compile(
    r"(?<![\w.])("
    + "|".join(re.escape(f"{mod}.{name}") for mod, name in sorted(NAME_MOVES, key=lambda k: -len(k[1])))
    + r")(?!\w)"
)


def where(mod: str, name: str) -> str:
    """The module `from mod import name` reads `name` from after the move (an old path where nothing moved)."""
    if mod == "pods" and name in MOVES:
        return f"pods.{MOVES[name]}"
    return NAME_MOVES.get((mod, name), mod)


def split_from(m: re.Match) -> str:
    mod, raw = m["mod"], m["names"]
    items = [
        i.strip() for i in re.sub(r"#[^\n]*", "", raw).strip("()").replace("\n", " ").split(",") if i.strip()
    ]
    groups: dict[str, list[str]] = {}
    for item in items:
        groups.setdefault(where(mod, item.split()[0]), []).append(item)
    if list(groups) == [mod]:
        return m[0]
    lead = m["lead"]
    sep = "; " if lead.startswith(";") else "\n" + lead
    return lead + sep.join(f"from {dest} import {', '.join(names)}" for dest, names in groups.items())


def rename(line: str) -> str:
    line = NAMED.sub(lambda m: NAME_MOVES[tuple(m[1].rsplit(".", 1))] + "." + m[1].rsplit(".", 1)[1], line)
    line = DOTTED.sub(lambda m: f"pods.{MOVES[m[1]]}.{m[1]}", line)
    return PATH.sub(lambda m: f"pods/{MOVES[m[1]]}/{m[1]}.py", line)


def rewrite(text: str, suffix: str = ".py") -> str:
    """Imports split by where their names went, then dotted names and paths; a comment or docstring line the
    longer names leave past LIMIT is wrapped into the lines of its paragraph (an aligned table is left as it is)."""
    lines = FROM.sub(split_from, text).split("\n")
    grown = []
    for i, line in enumerate(lines):
        lines[i] = rename(line)
        if len(lines[i]) > LIMIT and lines[i] != line:
            grown.append(i)
    if suffix in (".py", ".yaml", ".yml"):
        for i in reversed(grown):  # bottom up: a wrap inserts lines below it only
            wrap(lines, i, suffix == ".py")
    return "\n".join(lines)


# ---------------------------------------------------------------- wrapping what the longer names pushed past 110

LIMIT = 110


def docstrings(text: str) -> dict[int, tuple[int, int]]:
    """0-based line -> (the docstring's last line, its continuation indent) for every line of a string
    statement (docstrings); {} where the text does not parse."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    out = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            for i in range(node.lineno - 1, node.end_lineno):
                out[i] = (node.end_lineno - 1, node.col_offset)
    return out


def prose(text: str) -> bool:
    """Running text, not an aligned table, a code example or a list item."""
    t = text.strip()
    return bool(t) and "  " not in t and not t.startswith((">>>", "- ", "* ", "|", "$ ", "python ", "```"))


def split_at(line: str, start: int) -> tuple[str, str] | None:
    """The line cut at its last space by LIMIT (not inside `code`), past `start`: (head, the words after)."""
    for pos in range(min(LIMIT, len(line) - 1), start, -1):
        before, after = line[:pos].split(" ")[-1], line[pos + 1 :].split(" ")[0]
        if "=" in before and "=" in after:  # not between two arguments of one command
            continue
        if line[pos] == " " and line[:pos].count("`") % 2 == 0 and line[:pos].strip():
            return line[:pos].rstrip(), line[pos + 1 :].strip()
    return None


def trailing_comment(lines: list[str], i: int) -> int | None:
    """The column of the comment that ends code line i, if it has one."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
            if tok.type == tokenize.COMMENT and tok.start[0] == i + 1 and tok.line[: tok.start[1]].strip():
                return tok.start[1]
    except (tokenize.TokenError, SyntaxError):
        pass
    return None


def wrap(lines: list[str], i: int, python: bool) -> None:
    """Cut line i at LIMIT and push the rest into the next line of its paragraph (or a new line), on down."""
    comment = re.match(r"^([ \t]*# )", lines[i])
    docs = docstrings("\n".join(lines)) if python and not comment else {}
    col = trailing_comment(lines, i) if python and not comment and i not in docs else None
    if col is not None:  # a code line's own comment goes on a line of its own above it, wrapped there
        indent = re.match(r"[ \t]*", lines[i])[0]
        text = lines[i][col:].lstrip("#").strip()
        if text.startswith(("noqa", "fmt:", "type:", "pragma")) or len(lines[i][:col].rstrip()) > LIMIT:
            return
        lines[i : i + 1] = [f"{indent}# {text}", lines[i][:col].rstrip()]
        wrap(lines, i, python)
        return
    if comment:
        prefix = comment[1]
        if not prose(lines[i][len(prefix) :]):
            return
    elif i in docs:
        prefix = " " * docs[i][1]
        if not prose(lines[i].strip().strip('"')):
            return
    else:
        return
    while len(lines[i]) > LIMIT:
        cut = split_at(lines[i], len(prefix))
        if cut is None:
            return
        head, tail = cut
        lines[i] = head
        j = i + 1
        if comment:
            follows = j < len(lines) and lines[j].startswith(prefix) and prose(lines[j][len(prefix) :])
        else:
            follows = (
                j <= docs[i][0]
                and lines[j].startswith(prefix)
                and not lines[j][len(prefix) :].startswith(" ")
                and prose(lines[j])
                and not lines[j].strip().startswith('"""')
            )
        if follows and not tail.endswith('"""'):
            lines[j] = prefix + tail + " " + lines[j][len(prefix) :].lstrip()
        else:
            lines.insert(j, prefix + tail)
            if not comment:
                docs = docstrings("\n".join(lines))
        i = j


def rewrite_tree() -> set[Path]:
    files = git("ls-files", "--cached", "--others", "--exclude-standard", *REWRITE_DIRS).split("\n")
    changed = set()
    for f in filter(None, files):
        p = Path(f)
        if not p.is_file() or p.suffix not in TEXT or p == Path("pods/__init__.py"):
            continue
        if "assets" in p.parts and p.suffix != ".md":  # the shipped model's files
            continue
        try:
            text = p.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite(text, p.suffix)
        if new != text:
            p.write_text(new)
            changed.add(p)
    return changed


# ---------------------------------------------------------------- the alias table

ALIASES = '''

# Modules that left pods/'s top level for core/, run/, loop/ and launch/ (issue 61): each old name still
# imports, for one release, as the very same module, with a FutureWarning naming the new one (a plugin, a
# script, a saved config's `_target_`). docs/extending.md ("Public names") says what to import from where.
MOVED = {
%s
}


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves the old names of MOVED: imports the new module and hands it back, so the import system registers
    it under the old name too (sys.modules, and the attribute of pods); warns once, at the first import."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        old, new = spec.name, MOVED[spec.name]
        # the warning names the importer: warnings passes over importlib's _bootstrap frames, not import_module's
        level, frame = 2, sys._getframe(1)
        while frame is not None and "importlib" in frame.f_code.co_filename:
            level, frame = level + ("_bootstrap" not in frame.f_code.co_filename), frame.f_back
        message = f"{old} moved to {new}: import it from there ({old} goes in the next release)"
        warnings.warn(message, FutureWarning, stacklevel=level)
        return importlib.import_module(new)

    def exec_module(self, module) -> None:
        """Nothing to run: the new module ran when it was imported."""


# first: an installed copy of an older pods must not answer for an old name
if not any(type(f).__name__ == "_MovedFinder" for f in sys.meta_path):
    sys.meta_path.insert(0, _MovedFinder())
'''


def alias_table() -> Path:
    init = Path("pods/__init__.py")
    rows = "\n".join(f'    "pods.{m}": "pods.{MOVES[m]}.{m}",' for pkg in PACKAGES for m in PACKAGES[pkg])
    init.write_text(init.read_text().rstrip() + "\n" + ALIASES % rows)
    add_imports(init, [("importlib.abc", None), ("importlib.util", None), ("sys", None), ("warnings", None)])
    return init


# ---------------------------------------------------------------- tests

LAYERS = '''

# pods's floors, the ground first: a module imports its own floor or those below it, never one above (a lazy
# import inside a function included). The stages stand in the loop's order, testing.py (their conformance
# checks) on them; then a run's directory (run/), the loop, the command line (launch/), the analysis of
# finished runs, and the entry points on top. The root package (pods/__init__.py) hands names on and stands
# apart.
FLOORS = (
    ("pods.core",),
    ("pods.data",),
    ("pods.prefilter",),
    ("pods.rollout",),
    ("pods.reward",),
    ("pods.selector",),
    ("pods.update",),
    ("pods.testing",),
    ("pods.run",),
    ("pods.loop",),
    ("pods.launch",),
    ("pods.analysis",),
    ("pods.compare", "pods.train"),
)
TOP = {"__init__.py", "train.py", "compare.py", "testing.py"}  # the only modules at pods/'s top


def floor(name: str) -> int | None:
    return next((i for i, f in enumerate(FLOORS) for p in f if name == p or name.startswith(p + ".")), None)


def back_up(graph: dict[str, set[str]]) -> list[str]:
    """Every import that runs from a floor to one above it, as `importer -> imported`."""
    return sorted(
        f"{a} -> {b}" for a, bs in graph.items() for b in bs if "pods" not in (a, b) and floor(b) > floor(a)
    )


def test_the_checker_finds_an_import_that_runs_back_up():
    graph = {"pods.core.config": {"pods.run.naming"}, "pods.run.naming": {"pods.selector", "pods.core.config"}}
    assert back_up(graph) == ["pods.core.config -> pods.run.naming"]


def test_every_module_stands_on_a_floor():
    assert [name for name in modules() if name != "pods" and floor(name) is None] == []


def test_no_import_runs_back_up():
    known = modules()
    graph = {name: imports(name, file, known) for name, file in known.items()}
    assert back_up(graph) == []


def test_the_top_level_holds_only_the_entry_points_beside_packages():
    entries = {p.name for p in PODS.iterdir() if p.name != "__pycache__"}
    assert len(entries) <= 16, sorted(entries)
    assert {e for e in entries if not (PODS / e).is_dir()} <= TOP
    assert all((PODS / e / "__init__.py").exists() for e in entries if (PODS / e).is_dir() and e != "assets")
'''

MOVED_TESTS = '''"""The modules that left pods/'s top level (issue 61) still import under their old names for one release:
the same module, with a FutureWarning naming the new place (MOVED, pods/__init__.py); a config saved before
the move, naming an old `_target_`, still instantiates; nothing of pods imports an old name itself."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

import pods
from pods import MOVED

ROOT = Path(__file__).resolve().parents[1]

# pods/'s top-level modules before the move, by the package each went to
LEFT = {
%s
}


def test_the_table_covers_every_module_that_left_the_top_level():
    assert {f"pods.{m}": f"pods.{pkg}.{m}" for pkg, mods in LEFT.items() for m in mods} == MOVED
    for old, new in MOVED.items():
        assert not (ROOT / "pods" / f"{old.split('.')[1]}.py").exists(), old
        assert (ROOT / Path(*new.split("."))).with_suffix(".py").exists(), new


# in a fresh interpreter: a process that imported a module under its old name once is not warned again
PROBE = """
import importlib, sys, warnings
from pods import MOVED
for old, new in MOVED.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(new) is sys.modules[old], old
    said = [str(w.message) for w in caught if w.category is FutureWarning and " moved to " in str(w.message)]
    assert said == [f"{old} moved to {new}: import it from there ({old} goes in the next release)"], said
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        importlib.import_module(old)
    assert not [w for w in caught if w.category is FutureWarning], old
import pods.multirun
from pods.trainer import Trainer
from pods.batch import Rollouts
from pods.errors import PluginError
from pods import config, history
assert pods.multirun is sys.modules["pods.loop.multirun"]
assert Trainer is importlib.import_module("pods.loop.trainer").Trainer
assert Rollouts is importlib.import_module("pods.core.batch").Rollouts
assert PluginError is importlib.import_module("pods.core.errors").PluginError
assert config.TrainConfig is importlib.import_module("pods.core.config").TrainConfig
assert history.FREE_KEYS is importlib.import_module("pods.run.history").FREE_KEYS
print("ok")
"""


def test_an_old_path_imports_the_same_module_with_one_warning_naming_the_new():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def forget(monkeypatch, old: str) -> None:
    """As a new process would be: `old` not imported yet under its old name (the new module may be)."""
    monkeypatch.delitem(sys.modules, old, raising=False)
    monkeypatch.delattr(pods, old.split(".")[1], raising=False)


def test_a_saved_config_naming_an_old_target_instantiates(tmp_path, monkeypatch):
    # what a Slurm job submitted before the move saved (.hydra/hydra.yaml), read back when it is requeued
    saved = tmp_path / "hydra.yaml"
    saved.write_text("hydra:\\n  callbacks:\\n    submit_check:\\n      _target_: pods.slurm.SubmitCheck\\n")
    forget(monkeypatch, "pods.slurm")
    with pytest.warns(FutureWarning, match=re.escape("pods.slurm moved to pods.launch.slurm")):
        check = instantiate(OmegaConf.load(saved).hydra.callbacks.submit_check)
    from pods.launch.slurm import SubmitCheck

    assert type(check) is SubmitCheck
    forget(monkeypatch, "pods.multirun")
    with pytest.warns(FutureWarning, match=re.escape("pods.multirun moved to pods.loop.multirun")):
        assert instantiate({"_target_": "pods.multirun.hydra_value", "_args_": ["a,b"]}) == "'a,b'"


def test_pods_and_its_configs_name_no_old_path():
    old = set(MOVED)
    found = []
    for root in ("pods", "bench", "scripts", "tests"):
        for f in (ROOT / root).rglob("*.py"):
            if f.name == "test_moved_modules.py":
                continue
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                else:
                    continue
                found += [f"{f.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n in old]
    targets = re.compile(r"_target_:\\s*(pods\\.\\w+)")
    for f in (ROOT / "conf").rglob("*.yaml"):
        found += [f"{f.relative_to(ROOT)} {t}" for t in targets.findall(f.read_text()) if t in old]
    assert found == []

'''


CHECKPOINT_TEST = '''

def test_a_checkpoint_names_no_module_of_pods(two_steps):
    """trainer_state.pt (read with weights_only=True) holds tensors, containers and numpy's RNG state, never a
    class of pods by its module path: a checkpoint written before pods' modules moved (issue 61) resumes after."""
    import zipfile

    with zipfile.ZipFile(_state_path(two_steps)) as z:
        pickled = z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))
    assert b"torch._utils" in pickled and b"pods." not in pickled
'''


def tests() -> set[Path]:
    r = Path("tests/test_resume.py")
    if "def two_steps(" not in r.read_text() or "def _state_path(" not in r.read_text():
        die("tests/test_resume.py has no two_steps/_state_path to test a checkpoint's contents with")
    r.write_text(r.read_text().rstrip() + "\n" + CHECKPOINT_TEST)
    t = Path("tests/test_imports.py")
    text = t.read_text()
    if "def imports(" not in text or "def modules(" not in text:
        die("tests/test_imports.py has no modules()/imports() to build the layering test on")
    t.write_text(text.rstrip() + "\n" + LAYERS)
    rows = "\n".join(f"    {pkg!r}: {mods!r}," for pkg, mods in PACKAGES.items()).replace("'", '"')
    m = Path("tests/test_moved_modules.py")
    m.write_text(MOVED_TESTS % rows)
    return {t, m, r}


# ---------------------------------------------------------------- docs

LAYOUT = """```
conf/            Hydra groups: model dataset reward prefilter selector advantage loss hardware rollout logger
                 experiment scale arm debug
pods/            the entry points (train.py, compare.py), testing.py and the packages, ground floor first: each
                 imports only those listed above it (tests/test_imports.py)
  core/            the typed config, the batch between stages, registries, errors, spellings, hub, devices
  data/ prefilter/ rollout/ reward/ selector/ update/   the stages in the loop's order, each with its registry
  run/             a run directory: lock, checkpoints and resume, history.jsonl, metrics.jsonl, names
  loop/            the Trainer: one step's collection, eval, timers, callbacks, the policy, how a run stops
  launch/          Hydra's schema and one-line refusals, preflight (component names, GPU sizing), Slurm
  analysis/        the time-to-peak analysis behind `python -m pods.compare`
bench/ scripts/  benchmarks, model builders, dataset export, launchers; scripts/device/: the GPU calls
results/         committed outputs beside the scripts and notes that made them (results/README.md indexes them)
docs/            configuration, runs, compare, extending, rewards and data, GPUs, vLLM, Slurm
```
"""

PUBLIC = """## Public names

What a plugin, a tool or a notebook imports, and from where. The stages' decorators (`pods.selector`,
`pods.reward`, `pods.prefilter`, `pods.rollout`, `pods.update`), `pods.testing`, `pods.compare` and
`python -m pods.train` are where they always were; what stood at pods/'s top now lives in the package of its
concern:

| name | import it from | before |
|---|---|---|
| `Trainer` | `pods.loop.trainer` | `pods.trainer` |
| `Callback` (and `StopOnSignal`) | `pods.loop.callbacks` (`pods.loop.signals`) | `pods.callbacks` |
| `evaluate`, `Evaluator` | `pods.loop.eval` | `pods.eval` |
| `Rollouts`, `Sampling` | `pods.core.batch` | `pods.batch` |
| `PluginError`, `ConfigError`, `NonFiniteError`, ... | `pods.core.errors` | `pods.errors` |
| `TrainConfig`, `validate`, every group's dataclass | `pods.core.config` | `pods.config` |
| `Registry`, `ContractDeprecationWarning` | `pods.core.registry` | `pods.registry` |
| `FREE_KEYS` (what a resume may change) | `pods.run.history` | `pods.history` |
| `read_metrics`, `MetricsLogger` | `pods.run.tracking` | `pods.tracking` |
| `preflight` | `pods.train` | `pods.train` |

Every module that left the top level still imports under its old name for one release, as the same module, with
a FutureWarning naming the new one: `import pods.trainer`, `from pods.batch import Rollouts`, a config saved
before the move whose `_target_` names `pods.slurm.SubmitCheck`. The one table of them is `MOVED` in
pods/__init__.py. A checkpoint needs nothing: trainer_state.pt is read with `weights_only=True` and names no
class. Six names moved between modules, next to what they serve, and are found only in their new place:
`sampling` (was `pods.guard`) in `pods.rollout.backend`; `canonical_device`, `resolve_dtype` and `DTYPES` (was
`pods.models`) in `pods.core.devices`; `flatten` (was `pods.history`) in `pods.core.config`; and
`register_schema` (was `pods.config`) in `pods.launch.cli`.

"""


def docs() -> set[Path]:
    readme = Path("README.md")
    text = readme.read_text()
    m = re.search(r"(## Layout\n\n)```\n.*?```\n", text, re.S)
    if not m:
        die("README.md has no '## Layout' code block")
    readme.write_text(text[: m.start()] + m[1] + LAYOUT + text[m.end() :])
    ext = Path("docs/extending.md")
    text = ext.read_text()
    if "## The recipes" not in text:
        die("docs/extending.md has no '## The recipes' to put 'Public names' before")
    ext.write_text(text.replace("## The recipes", PUBLIC + "## The recipes", 1))
    return {readme, ext}


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--no-ruff", action="store_true", help="leave import order and formatting as written")
    args = ap.parse_args()
    check_tree()
    if args.dry_run:
        for pkg, mods in PACKAGES.items():
            print(f"pods/{pkg}/: {', '.join(mods)}")
        for src, names, dst, _ in CARVED:
            print(f"{src} -> {dst}: {', '.join(names)}")
        return
    touched = edit() | carve()
    move()
    touched = {Path(f"pods/{MOVES[p.stem]}/{p.name}") if p.parent == Path("pods") and p.stem in MOVES else p
               for p in touched}  # fmt: skip
    touched |= rewrite_tree() | {alias_table()} | tests() | docs()
    touched |= {Path(f"pods/{pkg}/__init__.py") for pkg in PACKAGES}
    py = sorted(str(p) for p in touched if p.suffix == ".py")
    if not args.no_ruff:
        subprocess.run(["ruff", "check", "--fix", "--select", "I,F401", "--quiet", *py], check=False)
        subprocess.run(["ruff", "format", "--quiet", *py], check=True)
    git("add", "-A", "pods", "tests", *[d for d in REWRITE_DIRS if Path(d).exists()])
    print(f"move_layout: moved {len(MOVES)} modules into {', '.join(f'pods/{p}/' for p in PACKAGES)}; "
          f"{len(touched)} files changed; review with `git diff --cached --stat`")  # fmt: skip


if __name__ == "__main__":
    main()
