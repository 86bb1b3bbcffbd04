"""update.fsdp_unit_params's plan: which decoder layers share an FSDP unit."""

from __future__ import annotations

import pytest

from pods.distributed import unit_plan


@pytest.mark.parametrize(
    "layers,size,target",
    [(24, 15_000_000, 100_000_000), (36, 77_000_000, 100_000_000), (28, 233_000_000, 100_000_000), (5, 10, 25),
     (7, 10, 10**9), (1, 10, 1), (24, 15, 0)],
)  # fmt: skip
def test_units_cover_every_layer_once_in_order_and_near_equal(layers, size, target):
    plan = unit_plan(layers, size, target)
    assert [i for unit in plan for i in unit] == list(range(layers))  # contiguous, in forward order
    assert all(unit for unit in plan)
    lengths = [len(u) for u in plan]
    assert max(lengths) - min(lengths) <= 1
    if target == 0:
        assert lengths == [1] * layers
    else:  # as many units as whole multiples of the target the layers hold, between 1 and one per layer
        assert len(plan) == min(layers, max(1, layers * size // target))


def test_shapes_of_the_shipped_models():
    assert [len(u) for u in unit_plan(24, 14_912_384, 100_000_000)] == [8, 8, 8]  # Qwen2.5-0.5B: 3 units
    assert len(unit_plan(28, 233_000_000, 100_000_000)) == 28  # a 7B layer is already past the target
    assert unit_plan(5, 10, 25) == [[0, 1, 2], [3, 4]]  # 50 // 25 = 2 units, the first one layer longer
