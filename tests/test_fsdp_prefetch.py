"""update.fsdp_prefetch's plan: which layers each layer's forward and backward start gathering."""

from __future__ import annotations

import pytest

from pods.distributed import prefetch_plan


@pytest.mark.parametrize("layers,ahead", [(1, 1), (4, 1), (4, 2), (5, 3), (3, 8)])
def test_forward_reaches_the_next_layers_and_backward_the_previous_nearest_first(layers, ahead):
    plan = prefetch_plan(layers, ahead)
    assert len(plan) == layers
    for i, (fwd, bwd) in enumerate(plan):
        assert fwd == [j for j in range(layers) if i < j <= i + ahead]
        assert bwd == sorted((j for j in range(layers) if i - ahead <= j < i), reverse=True)


def test_one_ahead_is_a_chain():
    assert prefetch_plan(3, 1) == [([1], []), ([2], [0]), ([], [1])]
