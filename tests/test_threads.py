"""hardware.num_threads=0: torch gets the cores other processes leave free, at least one."""

from pods.threads import auto_threads, busy_cores, env_threads, set_threads


def test_auto_threads_uses_the_free_cores():
    assert auto_threads(cores=2, busy=0.0) == 2
    assert auto_threads(cores=2, busy=0.4) == 2
    assert auto_threads(cores=2, busy=0.8) == 1
    assert auto_threads(cores=2, busy=2.0) == 1  # a busy laptop: one thread, not two fighting for a core
    assert auto_threads(cores=2, busy=6.0) == 1
    assert auto_threads(cores=16, busy=3.0) == 13
    assert 1 <= auto_threads() <= 4096


def test_busy_cores_is_a_sane_number():
    assert 0.0 <= busy_cores(0.05) <= 4096


def test_explicit_threads_win_and_gpu_keeps_torch_default():
    import torch

    before = torch.get_num_threads()
    try:
        assert set_threads(1, "cpu") == 1
        torch.set_num_threads(before)
        assert set_threads(0, "cuda") == before
    finally:
        torch.set_num_threads(before)


def test_omp_num_threads_is_the_automatic_choice_where_set(monkeypatch):
    import torch

    assert env_threads({"OMP_NUM_THREADS": "3"}) == 3
    assert env_threads({}) is None
    for bad in ("0", "-2", "two", "", "2,1"):  # not a positive whole number: OpenMP ignores it, so does pods
        assert env_threads({"OMP_NUM_THREADS": bad}) is None, bad
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert set_threads(0, "cpu") == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        assert set_threads(0, "cpu") == 2
        assert set_threads(1, "cpu") == 1  # hardware.num_threads given: it wins over the environment
        monkeypatch.delenv("OMP_NUM_THREADS")
        assert 1 <= set_threads(0, "cpu") <= torch.get_num_threads() <= 4096  # the free cores again
    finally:
        torch.set_num_threads(before)
