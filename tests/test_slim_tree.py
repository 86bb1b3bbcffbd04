"""scripts/device/slim_tree.sh in a scratch repository: large tracked files under results/ leave the tree and
come back byte for byte; a second `out` before `back` and an overwrite on `back` are refused."""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def sh(repo: Path, *args: str, stash: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "STASH": str(stash), "MIN_BYTES": "1000"}
    return subprocess.run(
        ["bash", "scripts/device/slim_tree.sh", *args], cwd=repo, env=env, capture_output=True, text=True
    )


def test_out_and_back(tmp_path):
    repo, stash = tmp_path / "repo", tmp_path / "stash"
    (repo / "scripts/device").mkdir(parents=True)
    shutil.copy(ROOT / "scripts/device/slim_tree.sh", repo / "scripts/device/")
    big = {"results/a/run.tgz": b"x" * 5000, "results/b c/d.tgz": b"y" * 2000}
    small = {"results/a/README.md": b"small", "code.py": b"z" * 5000}  # small, or not under results/
    for p, data in {**big, **small}.items():
        (repo / p).parent.mkdir(parents=True, exist_ok=True)
        (repo / p).write_bytes(data)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)

    r = sh(repo, "out", stash=stash)
    assert r.returncode == 0, r.stderr
    assert "moved 2 files" in r.stdout
    assert not any((repo / p).exists() for p in big) and all((repo / p).exists() for p in small)
    again = sh(repo, "out", stash=stash)
    assert again.returncode == 1 and "put the last stash back first" in again.stderr

    (repo / "results/a/run.tgz").write_bytes(b"new")  # something made in the meantime is not overwritten
    clash = sh(repo, "back", stash=stash)
    assert clash.returncode == 1 and "results/a/run.tgz is in the tree again" in clash.stderr
    (repo / "results/a/run.tgz").unlink()

    r = sh(repo, "back", stash=stash)
    assert r.returncode == 0, r.stderr
    assert all((repo / p).read_bytes() == data for p, data in {**big, **small}.items())
    assert sh(repo, "back", stash=stash).returncode == 1  # nothing left to put back
