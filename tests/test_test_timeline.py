"""scripts/test_timeline.py reads a PODS_TEST_TIMELINE file: each worker's units in the order it ran them, the
busy share, the slowest units and tests; a malformed line is refused naming its line."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/test_timeline.py", str(path), "--top", "2"], cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip


def test_units_in_order_and_the_busy_share(tmp_path):
    tl = tmp_path / "tl.tsv"
    tl.write_text(
        "gw0\t100\t130\ttests/slurm/test_slurm.py::a\n"
        "gw0\t130\t150\ttests/slurm/test_slurm_distributed.py::b\n"  # the same unit: tests/slurm/
        "gw1\t100\t112\ttests/test_x.py::c\n"
        "gw1\t112\t140\ttests/test_y.py::d\n"
    )
    r = run(tl)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "## gw0: busy 50 s, idle from 50 s of 50 s" in out and "tests/slurm/" in out
    assert out.index("tests/test_x.py") < out.index("tests/test_y.py")  # the order gw1 ran them
    assert "2 workers busy 90 of 100 worker-s (90%)" in out
    units = out.split("slowest 2 units:")[1].split("slowest 2 tests:")[0]
    assert units.split() == ["50.0", "s", "tests/slurm/", "28.0", "s", "tests/test_y.py"]
    assert out.split("slowest 2 tests:")[1].split()[2] == "tests/slurm/test_slurm.py::a"


def test_a_malformed_line_is_named(tmp_path):
    tl = tmp_path / "tl.tsv"
    tl.write_text("gw0\t1\t2\ttests/a.py::x\nnot a timeline line\n")
    r = run(tl)
    assert r.returncode != 0 and f"{tl}:2: expected worker, start, end, node id" in r.stderr


def test_cpu_columns_and_the_load_file(tmp_path):
    """Lines with the CPU columns: each unit's CPU (own + children's); <file>.load: busy cores per minute."""
    tl = tmp_path / "tl.tsv"
    tl.write_text(
        "gw0\t100\t130\ttests/test_x.py::a\t2.5\t10.0\n"
        "gw0\t130\t150\ttests/test_x.py::b\t1.0\t0.5\n"
        "gw1\t100\t170\ttests/test_y.py::c\t30.0\t0.0\n"
    )
    (tmp_path / "tl.tsv.load").write_text("105\t1.50\n160\t2.00\n170\t1.00\n")
    r = run(tl)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "44 in all" in out
    costly = out.split("costliest 2 units:")[1].split("\n\n")[0].split()
    assert costly[:6] == ["30.0", "CPU-s", "in", "70.0", "s", "tests/test_y.py"]
    assert costly[6] == "14.0" and costly[-1] == "tests/test_x.py"
    minutes = out.split("the units running then:")[1].strip().splitlines()
    assert minutes[0].split()[:3] == ["0", "s", "1.75"] and "tests/test_x.py, tests/test_y.py" in minutes[0]
    assert minutes[1].split()[:3] == ["60", "s", "1.00"]


def test_a_malformed_load_line_is_named(tmp_path):
    tl = tmp_path / "tl.tsv"
    tl.write_text("gw0\t1\t2\ttests/a.py::x\n")
    (tmp_path / "tl.tsv.load").write_text("3\t1.0\nbusy\n")
    r = run(tl)
    assert r.returncode != 0 and "tl.tsv.load:2: expected time, busy cores" in r.stderr


def test_outcomes_name_the_failures(tmp_path):
    """Lines with the outcome column: the counts, and each failed or errored test with when and where."""
    tl = tmp_path / "tl.tsv"
    tl.write_text(
        "gw0\t100\t130\ttests/test_x.py::a\t1.0\t0.0\tpassed\n"
        "gw1\t100\t140\ttests/test_x.py::b\t1.0\t0.0\tfailed\n"
        "gw0\t130\t135\ttests/test_y.py::c\t1.0\t0.0\terror\n"
        "gw1\t140\t141\ttests/test_y.py::d\t0.0\t0.0\tskipped\n"
    )
    r = run(tl)
    assert r.returncode == 0, r.stderr
    out = r.stdout.split("outcomes: ")[1]
    assert out.startswith("1 passed, 1 failed, 1 skipped, 1 error\n")
    assert out.splitlines()[1:3] == [  # in the order they ended
        "  error at 35 s on gw0: tests/test_y.py::c",
        "  failed at 40 s on gw1: tests/test_x.py::b",
    ]
    tl.write_text("gw0\t1\t2\ttests/a.py::x\t0\t0\tflaky\n")
    r = run(tl)
    assert r.returncode != 0 and "outcome: passed/failed/skipped/error" in r.stderr


def test_the_suite_writes_each_outcome(tmp_path):
    """tests/conftest.py's hooks, run by a pytest inside this one: a pass, a failing call, a failing setup and a
    skip each end their own line with the outcome."""
    (tmp_path / "conftest.py").write_text(
        "import pytest\nfrom tests.conftest import pytest_runtest_makereport, pytest_runtest_protocol  # noqa\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('setup')\n"
    )
    (tmp_path / "test_cases.py").write_text(
        "import pytest\n"
        "def test_ok(): pass\n"
        "def test_bad(): assert False\n"
        "def test_setup(broken): pass\n"
        "def test_skip(): pytest.skip('no')\n"
    )
    tl = tmp_path / "tl.tsv"
    env = {**os.environ, "PODS_TEST_TIMELINE": str(tl), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "test_cases.py"],
                   cwd=tmp_path, env=env, capture_output=True, text=True)  # fmt: skip
    got = {line.split("\t")[3].split("::")[1]: line.split("\t")[6] for line in tl.read_text().splitlines()}
    assert got == {"test_ok": "passed", "test_bad": "failed", "test_setup": "error", "test_skip": "skipped"}
