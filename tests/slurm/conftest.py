"""The Slurm tests run on a real Slurm (.ci/slurm.sh starts one as root: partition `debug` of one node, and
where this machine can make network namespaces, partition `multi` of two); without one they skip, saying why.

Every wait on a job is bounded and fails naming the job and its state (`submit`, `wait_gone`): a job ended
from outside (scancel, a lost node) leaves no result, and without accounting submitit would wait for one
forever. After each test, its jobs still queued are cancelled (`cancel_this_session_s_jobs`)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest


def slurm_missing() -> str | None:
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return (
            "no Slurm on this machine (sbatch/sinfo not on PATH); `sudo .ci/slurm.sh` installs and starts one"
        )
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"sinfo failed: {e}"
    states = out.stdout.split()
    if out.returncode != 0 or not any(s.rstrip("*") in ("idle", "mixed", "allocated") for s in states):
        return f"Slurm is not up (sinfo: {(out.stderr or out.stdout).strip()[:200] or 'no nodes'}); run .ci/slurm.sh"
    return None


@pytest.fixture(scope="session")
def slurm():
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)


def two_nodes_missing() -> str | None:
    """None if partition `multi` has two nodes up, else why not (sinfo's reason for a drained node)."""
    reason = slurm_missing()
    if reason:
        return reason
    out = subprocess.run(["sinfo", "-h", "-N", "-p", "multi", "-o", "%N %T %E"], capture_output=True, text=True,
                         timeout=20)  # fmt: skip
    rows = [line.split(maxsplit=2) for line in out.stdout.splitlines() if line.strip()]
    if not rows:
        return (
            "no two-node partition `multi` (.ci/slurm.sh makes one where it can create network namespaces; "
            "see its output)"
        )
    down = [" ".join(r) for r in rows if r[1].rstrip("*~#") not in ("idle", "mixed", "allocated")]
    if len(rows) < 2 or down:
        up = ", ".join(r[0] for r in rows if " ".join(r) not in down)
        return f"partition `multi` does not have two nodes up: {'; '.join(down) or f'only {up}'}"
    return None


@pytest.fixture(scope="session")
def slurm_two_nodes():
    reason = two_nodes_missing()
    if reason:
        pytest.skip(reason)


# --- bounded waits on jobs -------------------------------------------------------------------------------


def queued() -> set[str] | None:
    """Ids of the jobs in the queue (an array's own id for its tasks), or None if squeue cannot say."""
    try:
        out = subprocess.run(["squeue", "-h", "-o", "%F"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(out.stdout.split()) if out.returncode == 0 else None


def job_state(job: str) -> str:
    """ "RUNNING (reason None)", "CANCELLED (reason None)", ...: slurmctld's word on the job (it keeps ended
    jobs MinJobAge, 300 s)."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    fields = dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)
    if out.returncode != 0 or "JobState" not in fields:
        return "unknown to slurmctld"
    return f"{fields['JobState']} (reason {fields.get('Reason', '?')})"


def wait_gone(jobs: set[str], timeout: float, logs=lambda: "") -> None:
    """Until `jobs` have left the queue; past `timeout` seconds, fail naming each and its state."""
    deadline = time.monotonic() + timeout
    while (left := queued()) is None or jobs & left:
        if time.monotonic() > deadline:
            states = "; ".join(f"job {j}: {job_state(j)}" for j in sorted(jobs & (left or jobs)))
            pytest.fail(f"Slurm {states}, still queued after {timeout:.0f} s\n{logs()[-3000:]}")
        time.sleep(0.5)


def sweep_jobs(sweep: Path) -> set[str]:
    """The jobs submitit submitted for a sweep (its `.submitit/<job>[_<task>]` folders)."""
    return {p.name.split("_")[0] for p in (sweep / ".submitit").glob("*") if p.name.split("_")[0].isdigit()}


def wait_submitter(proc: subprocess.Popen, sweep: Path, timeout: float, logs=lambda: "", grace: float = 60):
    """Until the submitting command (`pods.train -m hydra/launcher=slurm ...`) ends; its exit status. Fails
    naming the sweep's jobs and their states past `timeout` seconds, or `grace` seconds after the jobs left
    the queue with the command still waiting (a job ended from outside: no result, and no sacct to ask)."""
    deadline, gone_since = time.monotonic() + timeout, None
    while proc.poll() is None:
        jobs, left = sweep_jobs(sweep), queued()
        now = time.monotonic()
        gone_since = (gone_since or now) if jobs and left is not None and not jobs & left else None
        why = None
        if now > deadline:
            why = f"still waiting after {timeout:.0f} s"
        elif gone_since is not None and now - gone_since > grace:
            why = (
                f"the jobs left the queue {grace:.0f} s ago but the submitter still waits for their result (a "
                "job ended from outside leaves none)"
            )
        if why:
            states = "; ".join(f"job {j}: {job_state(j)}" for j in sorted(jobs)) or "no job submitted yet"
            proc.kill()
            pytest.fail(f"{why}: {states}\n{logs()[-3000:]}")
        time.sleep(0.5)
    return proc.returncode


def submit(cmd: list[str], sweep: Path, timeout: float = 600, **popen) -> subprocess.CompletedProcess:
    """subprocess.run for a submitting command, bounded as `wait_submitter` says; the sweep's jobs are
    cancelled and the command killed whatever happens."""
    return Submitted(cmd, sweep, timeout, **popen).result()


class Submitted:
    """A submitting command started now and waited for later (`result()`, bounded as `wait_submitter` says
    from then on), so that a test's jobs run beside each other. `stop()` (in a `finally`: a test that fails
    before its `result()`) kills the command and cancels the sweep's jobs; `result()` does it too."""

    def __init__(self, cmd: list[str], sweep: Path, timeout: float = 600, **popen):
        import tempfile

        self.cmd, self.sweep, self.timeout = cmd, sweep, timeout
        self.out, self.err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # noqa: SIM115 (stop())
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.err, text=True, **popen)

    def result(self) -> subprocess.CompletedProcess:
        try:
            rc = wait_submitter(
                self.proc, self.sweep, self.timeout, lambda: _read(self.err) + _job_logs(self.sweep)
            )
            return subprocess.CompletedProcess(self.cmd, rc, _read(self.out), _read(self.err))
        finally:
            self.stop()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        cancel(sweep_jobs(self.sweep))
        self.out.close()
        self.err.close()


def _read(f) -> str:
    f.seek(0)
    return f.read()


def _job_logs(sweep: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((sweep / ".submitit").rglob("*_log.*")))


def cancel(jobs) -> None:
    if jobs:
        subprocess.run(["scancel", *sorted(jobs)], check=False, capture_output=True, timeout=60)


def jobs_under(base: Path | str, states: set[str] | None = None) -> set[str] | None:
    """Ids of the jobs slurmctld knows (queued, or ended less than MinJobAge ago) whose script or output lies
    under `base` (an array's own id for its tasks), only those in `states` if given; None if scontrol cannot
    say. Another test's jobs (another xdist worker's, in other directories) are never among them."""
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    found, prefix = set(), str(base).rstrip("/") + "/"  # not a sibling directory whose name goes on
    for line in out.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        paths = (fields.get("Command", ""), fields.get("StdOut", ""))
        if any(p.startswith(prefix) for p in paths) and (states is None or fields.get("JobState") in states):
            found.add(fields.get("ArrayJobId") or fields["JobId"])
    return found


@pytest.fixture(autouse=True)
def cancel_this_session_s_jobs(request, tmp_path_factory):
    """After each test on Slurm: cancel the jobs still queued whose script or output lies in this pytest
    session's temporary directories (no one else's), so that no test leaves a job running into the next."""
    yield
    if not {"slurm", "slurm_two_nodes"} & set(request.fixturenames) or shutil.which("scontrol") is None:
        return
    cancel(jobs_under(tmp_path_factory.getbasetemp(), LIVE) or set())


LIVE = {
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "CONFIGURING",
    "SUSPENDED",
    "RESIZING",
}
