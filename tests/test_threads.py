"""hardware.num_threads=0: torch gets the cores other processes leave free, at least one."""

from pods.threads import auto_threads, busy_cores, set_threads


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
