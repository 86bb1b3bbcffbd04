"""scripts/launch_parallel.py: which device each GPU slot gets, with and without CUDA_VISIBLE_DEVICES."""

import pytest

from scripts.launch_parallel import devices, expand


def test_without_visible_devices_slots_are_0_to_n():
    assert devices(3, None) == ["0", "1", "2"]
    assert devices(2, "") == ["0", "1"]


def test_visible_devices_are_honoured_in_order():
    # GPU 0 busy with other work: the caller lists 1,2,3 and the three slots land there, not on 0..2
    assert devices(3, "1,2,3") == ["1", "2", "3"]
    assert devices(2, "3, 1,2") == ["3", "1"]


def test_more_slots_than_visible_devices_is_an_error():
    with pytest.raises(SystemExit, match="--gpus 4 but CUDA_VISIBLE_DEVICES=1,2,3 lists 3 device"):
        devices(4, "1,2,3")


def test_product_order_seed_first():
    assert expand(["seed=1,2", "arm=a,b"]) == [
        ["seed=1", "arm=a"],
        ["seed=1", "arm=b"],
        ["seed=2", "arm=a"],
        ["seed=2", "arm=b"],
    ]
