"""The batch record: selection keeps rows, rewards, correctness and sampling together and trims padding;
rounds concatenate onto one layout."""

from __future__ import annotations

import torch

from pods.batch import Rollouts, Sampling, zero_variance

SAMPLING = Sampling(0.8)


def batch(prompt_lens, comp_lens, group_size, sampling=SAMPLING) -> Rollouts:
    """Rows with left-padded prompts of `prompt_lens` (width 4) and completions of `comp_lens` (width 3);
    token ids encode (row, column) so a test can see which cells survive."""
    B, lp, lc = len(prompt_lens), 4, 3
    ids = torch.arange(B * (lp + lc)).view(B, lp + lc)
    am = torch.zeros(B, lp + lc, dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompt_lens, comp_lens)):
        am[i, lp - p : lp + c] = 1
    cm = am[:, lp:].clone()
    P = B // group_size
    rewards = torch.arange(B, dtype=torch.float32).view(P, group_size)
    return Rollouts(
        ids, am, lp, cm, [f"t{i}" for i in range(B)], list(range(10, 10 + P)), group_size, sampling,
        rewards=rewards, correct=(rewards % 2 == 0).float(),
    )  # fmt: skip


def test_select_keeps_columns_per_group_with_rewards_correctness_and_sampling():
    b = batch([2, 3, 1, 1], [1, 3, 2, 1], 2)
    kept = b.select(torch.tensor([[1], [0]]))  # group 0 keeps row 1, group 1 keeps row 2
    assert kept.texts == ["t1", "t2"] and kept.group_size == 1 and kept.prompt_ids == [10, 11]
    assert kept.rewards.tolist() == [[1.0], [2.0]] and kept.correct.tolist() == [[0.0], [1.0]]
    assert kept.sampling == Sampling(0.8)
    # trimmed: prompt width 3 (the longest kept prompt), completion width 3 (the longest kept completion)
    assert kept.prompt_len == 3 and kept.completion_mask.shape == (2, 3)
    assert torch.equal(kept.input_ids[0], b.input_ids[1, 1:7])


def test_select_groups_and_concat_relayout():
    b = batch([2, 3, 1, 1], [1, 3, 2, 1], 2)
    g = b.select_groups([1])
    assert g.prompt_ids == [11] and g.rewards.tolist() == [[2.0, 3.0]] and g.prompt_len == 1
    both = Rollouts.concat([g, b.select_groups([0])], pad_id=-1)
    assert both.prompt_ids == [11, 10] and both.prompt_len == 3 and both.completion_mask.shape[1] == 3
    assert both.rewards.tolist() == [[2.0, 3.0], [0.0, 1.0]] and both.correct.shape == (2, 2)
    assert both.input_ids[0, 0].item() == -1  # left padding added to the narrower part
    assert torch.equal(both.attention_mask.sum(1), b.attention_mask[[2, 3, 0, 1]].sum(1))
    assert both.sampling == b.sampling


def test_zero_variance_is_every_reward_of_the_group_equal():
    """Against brute force, and against the four spellings it replaced (dynamic sampling's two, the
    advantages' and the selector metrics'): the same booleans on binary, continuous, tied, signed-zero and
    large-offset rewards."""
    g = torch.Generator().manual_seed(0)
    cases = [
        (torch.rand(64, 4, generator=g) > 0.5).float(),
        torch.rand(16, 8, generator=g),
        torch.tensor([[0.0, -0.0], [1e10, 1e10 + 1], [3.0, 3.0], [-1.0, 2.0]], dtype=torch.float64),
        torch.full((3, 5), 0.25),
    ]
    for r in cases:
        got = zero_variance(r)
        assert got.tolist() == [len(set(row)) == 1 for row in r.tolist()]
        assert torch.equal(got, ~(r.max(1).values - r.min(1).values > 0))
        assert torch.equal(got, r.max(1).values == r.min(1).values)
        assert torch.equal(
            got, r.amax(dim=1, keepdim=True).squeeze(1) == r.amin(dim=1, keepdim=True).squeeze(1)
        )
        assert torch.equal(got, r.max(1).values - r.min(1).values == 0)
    assert zero_variance(torch.zeros(0, 4)).shape == (0,)
