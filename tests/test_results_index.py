"""The results index checker on a tiny fabricated repository: an entry goes stale when the code its command
runs (or imports) changes as code after its commit, not when a comment does; missing files are reported."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from bench.results_index import check, report

INDEX = """# Index

| path | what | commit | command | status |
|---|---|---|---|---|
| `a.md` | uses pods/b.py through pods/a.py | {c1} | `python scripts/run_a.py` | current |
| `c/` (`out.md`, `.json`) | does not import b | {c1} | `python -m pods.c` | current |
| `gone.md` | its file was deleted | {c1} | `python scripts/run_a.py` | current |
| `old.md` | known stale | first {c1}, then {c2} | `bash scripts/all.sh` | **stale**: b changed |
| `later.md` | measured after the change | {c3} | `python scripts/run_a.py` | current |
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def commit(repo: Path, files: dict[str, str], msg: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", msg)
    return git(repo, "rev-parse", "--short", "HEAD")


def test_stale_missing_and_current_entries(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    c1 = commit(repo, {
        "pods/__init__.py": "", "pods/a.py": "def f():\n    from pods.b import g\n    return g()\n",
        "pods/b.py": "def g():\n    return 1\n", "pods/c.py": "X = 1\n",
        "scripts/run_a.py": "from pods.a import f\n", "scripts/all.sh": "python -m pods.c\npython scripts/run_a.py\n",
        "results/a.md": "a", "results/c/out.md": "c", "results/c/out.json": "{}", "results/gone.md": "x",
        "results/old.md": "o", "results/later.md": "l",
    }, "measure")  # fmt: skip
    c2 = commit(repo, {"pods/b.py": '"""Docs."""\n\n\ndef g():  # a comment\n    return 1\n'}, "cosmetic")
    commit(repo, {"pods/b.py": "def g():\n    return 2\n"}, "b returns 2")
    (repo / "results/gone.md").unlink()
    c3 = commit(repo, {}, "remove gone.md")
    index = repo / "results" / "README.md"
    index.write_text(INDEX.format(c1=c1, c2=c2, c3=c3))

    by = {e.path: e for e in check(index, repo)}
    assert by["a.md"].code == {"scripts/run_a.py", "pods/a.py", "pods/b.py", "pods/__init__.py"}
    assert by["a.md"].changed == ["pods/b.py"] and by["a.md"].problem  # says current, b's code changed
    assert by["c/"].verdict == "current" and not by["c/"].problem
    assert by["c/"].files == ["results/c", "results/c/out.md", "results/c/out.json"]
    assert by["gone.md"].missing == ["results/gone.md"] and by["gone.md"].problem
    assert by["old.md"].commit == c2 and by["old.md"].changed == ["pods/b.py"] and not by["old.md"].problem
    assert by["later.md"].verdict == "current"  # b changed before its commit

    # a comment and a docstring alone do not make an entry stale
    index.write_text(INDEX.format(c1=c2, c2=c2, c3=c3))
    git(repo, "checkout", "-q", c2)
    assert check(index, repo)[0].verdict == "current"
    assert "| `a.md` |" in report(check(index, repo))


def test_the_script_exits_1_on_a_problem_and_0_without(tmp_path):
    import sys

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    c1 = commit(repo, {"results/a.md": "a", "scripts/run_a.py": "X = 1\n"}, "measure")
    index = repo / "results" / "README.md"
    script = Path(__file__).resolve().parents[1] / "scripts" / "check_results_index.py"
    row = "| path | commit | command | status |\n|---|---|---|---|\n| `{}` | {} | `python scripts/run_a.py` | current |\n"
    codes = []
    for path in ("a.md", "nope.md"):
        index.write_text(row.format(path, c1))
        env = {**os.environ, "PYTHONPATH": str(script.parents[1])}  # bench/ is not installed: the root
        done = subprocess.run(
            [sys.executable, str(script), "--index", str(index)], capture_output=True, text=True, env=env
        )
        codes.append(done.returncode)
    assert codes == [0, 1]


def test_a_moved_module_is_not_a_change_of_code(tmp_path):
    """Moving a module (and importing it by its new name) keeps an entry current; changing it after does not."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    helper = "def g():\n    return 1\n" + "".join(f"\n\ndef h{i}():\n    return {i}\n" for i in range(8))
    c1 = commit(repo, {
        "pods/__init__.py": "", "pods/helper.py": helper, "scripts/run.py": "from pods.helper import g\n",
        "results/a.md": "a",
    }, "measure")  # fmt: skip
    git(repo, "mv", "pods/helper.py", "lab_helper.py")
    commit(
        repo, {"scripts/run.py": "from lab_helper import g\n", "lab/__init__.py": '"""The lab."""\n'}, "move"
    )
    index = repo / "results" / "README.md"
    row = "| path | commit | command | status |\n|---|---|---|---|\n| `a.md` | {} | `python scripts/run.py` | current |\n"
    index.write_text(row.format(c1))
    [entry] = check(index, repo)
    assert entry.code == {"scripts/run.py", "lab_helper.py"} and entry.changed == []
    commit(repo, {"lab_helper.py": helper.replace("return 1", "return 2")}, "change it")
    [entry] = check(index, repo)
    assert entry.changed == ["lab_helper.py"]


def test_code_a_script_launches_counts_as_its_code(tmp_path):
    """A module a script launches (`"-m", "pods.train"` in a subprocess command) and a script it runs by a
    joined path (`ROOT / "tests" / "worker.py"`) are its code, as an import is: changing either makes the
    entry stale (results/threads/ launches pods.train and was read as current through such a change). A
    dotted string that names no module of the repository is not code."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    runner = (
        "import subprocess, sys\nfrom pathlib import Path\nROOT = Path(__file__).parents[1]\n"
        "subprocess.run([sys.executable, '-m', 'pods.train'])\n"
        "subprocess.run([sys.executable, str(ROOT / 'tests' / 'worker.py')])\nNOTE = 'results.md or torch.nn'\n"
    )
    c1 = commit(repo, {
        "pods/__init__.py": "", "pods/train.py": "X = 1\n", "tests/worker.py": "Y = 1\n",
        "scripts/run.py": runner, "results/a.md": "a",
    }, "measure")  # fmt: skip
    index = repo / "results" / "README.md"
    row = "| path | commit | command | status |\n|---|---|---|---|\n| `a.md` | {} | `python scripts/run.py` | current |\n"
    index.write_text(row.format(c1))
    [entry] = check(index, repo)
    assert entry.code == {"scripts/run.py", "pods/__init__.py", "pods/train.py", "tests/worker.py"}
    commit(repo, {"pods/train.py": "X = 2\n", "tests/worker.py": "Y = 2\n"}, "change both")
    [entry] = check(index, repo)
    assert entry.changed == ["pods/train.py", "tests/worker.py"] and entry.problem
