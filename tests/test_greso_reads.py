"""scripts/greso_reads.py on an archive laid out as scripts/device/greso_v1.sh writes it: run dirs named by the
launcher (`seed-6001_arm-..._dataset.train_size-6000`), each run's own name in its run_info.json. The read looked
runs up by the directory's name and printed nan in every total; here each total must be a number."""

import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PILOT = ROOT / "results/greso_v1/pilot/pilot.tgz"


@pytest.fixture(scope="module")
def confirm_like(tmp_path_factory) -> Path:
    """The GRESO v1 pilot's DS and GRESO runs at N = 6,000 (one seed each): a confirm call's two arms."""
    if not PILOT.is_file():
        pytest.skip(f"{PILOT} not in the tree (slim_tree.sh out?)")
    root = tmp_path_factory.mktemp("gv1")
    with tarfile.open(PILOT) as tar:
        tar.extractall(root, filter="data")
    out = root / "confirm"
    out.mkdir()
    for d in (root / "pilot").iterdir():
        if d.is_dir() and d.name.endswith("train_size-6000"):
            shutil.copytree(d, out / d.name)
    assert len(list(out.iterdir())) == 2
    return out


def read(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts/greso_reads.py"), *map(str, args)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip


def test_totals_are_numbers_on_the_scripts_layout(confirm_like):
    r = read(confirm_like, "--grid-step", 10, "--x-max", 360)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| ") and "+none-n16-m16 |" in line]
    assert len(rows) == 2, r.stdout
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        # variant, seeds, T*, rollouts to T*, generation s to T*, rollouts, generation s, skipped, effective
        assert cells[1] == "1", row
        for cell in cells[5:9]:
            assert "nan" not in cell, row
        assert float(cells[5].replace(",", "")) > 0, row  # rollouts over the window
    greso = next(r for r in rows if r.startswith("| greso+"))
    assert float(greso.split("|")[8].strip().rstrip("%")) > 0  # GRESO skipped some prompts before rollout


def test_two_dirs_of_one_run_are_refused(confirm_like, tmp_path):
    twice = tmp_path / "twice"
    shutil.copytree(confirm_like, twice / "a")
    shutil.copytree(confirm_like, twice / "b")
    r = read(twice, "--grid-step", 10, "--x-max", 360)
    assert r.returncode != 0
    assert "two run dirs hold run" in r.stderr
