"""One GEMM for the projections that read the same input: q/k/v and gate/up, in the compiled decode step.

A decode step at batch 16 is bound by kernel launches on a small policy (0.5B shape on an H100: 447 kernels a
token, the k and v projections reading 0.23 MB each in about 4 us, most of it fixed cost). Reading [Wq; Wk; Wv]
in one GEMM and [Wgate; Wup] in another removes three launches a layer and most of their fixed cost.

How, without touching the model's forward (any transformers decoder whose attention calls q_proj, k_proj and
v_proj on the same hidden states, and whose MLP calls gate_proj and up_proj on the same input):

- `fuse_projections(model)` gives each group one weight matrix (and bias), and each nn.Linear of the group is
  replaced by a `FusedSlice`. Its `weight` / `bias` are views of its rows, under the same parameter names, so
  whatever writes the Linear's weights by name (GenerationCopy.sync) writes the fused matrix.
- Eager, a FusedSlice computes exactly the product of the Linear it replaced (its own rows): same numbers, no
  extra work (the prefill runs eagerly).
- Compiled, each FusedSlice of a group computes the whole group's product and keeps its columns. The group
  thus holds identical `linear(x, W, b)` calls, which the compile backend `merge_linears` turns into one
  before inductor sees the graph. Compile a model holding FusedSlices only with that backend: inductor's own
  passes do not merge them, and each slice would read the whole matrix.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class FusedSlice(torch.nn.Module):
    """Rows [start, stop) of a fused linear layer, standing in for the nn.Linear those rows came from."""

    def __init__(self, fused: torch.nn.Linear, start: int, stop: int):
        super().__init__()
        self.start, self.stop = start, stop
        self.in_features, self.out_features = fused.in_features, stop - start
        self.weight = torch.nn.Parameter(fused.weight[start:stop], requires_grad=False)  # a view
        bias = None if fused.bias is None else torch.nn.Parameter(fused.bias[start:stop], requires_grad=False)
        self.bias = bias
        object.__setattr__(self, "fused", fused)  # not a submodule: its parameters are the slices' storage

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():  # the group's product (merged into one by merge_linears)
            return self.fused(x)[..., self.start : self.stop]
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"rows [{self.start}, {self.stop}) of {self.fused.out_features}, in_features={self.in_features}"
        )


def _fusable(linears: list) -> bool:
    first = linears[0]
    return all(
        type(m) is torch.nn.Linear
        and m.in_features == first.in_features
        and (m.bias is None) == (first.bias is None)
        and m.weight.dtype == first.weight.dtype
        and m.weight.device == first.weight.device
        for m in linears
    )


@torch.no_grad()
def fuse_projections(model: torch.nn.Module) -> int:
    """Replace every q/k/v and gate/up group of plain nn.Linear layers under `model` by FusedSlices of one
    fused layer (weights copied in); returns the number of groups fused. A group whose layers differ in input
    width, bias, dtype or device is left as it is. Move or cast the model before fusing, not after: a slice's
    weight is a view of the fused matrix only as long as neither is replaced."""
    count = 0
    for parent in list(model.modules()):
        for names in GROUPS:
            linears = [getattr(parent, n, None) for n in names]
            if any(m is None for m in linears) or not _fusable(linears):
                continue
            first = linears[0]
            rows = [m.out_features for m in linears]
            fused = torch.nn.utils.skip_init(  # no init: nothing drawn from the random streams
                torch.nn.Linear, first.in_features, sum(rows), bias=first.bias is not None,
                device=first.weight.device, dtype=first.weight.dtype,
            ).requires_grad_(False)  # fmt: skip
            start = 0
            for name, m, r in zip(names, linears, rows):
                fused.weight[start : start + r].copy_(m.weight)
                if m.bias is not None:
                    fused.bias[start : start + r].copy_(m.bias)
                setattr(parent, name, FusedSlice(fused, start, start + r))
                start += r
            count += 1
    return count


def merge_identical_linears(graph: torch.fx.Graph) -> int:
    """Replace every `linear(x, w, b)` call of a dynamo graph that repeats an earlier one (same input, weight and
    bias nodes) by that earlier one; returns how many were removed. linear is pure, so this changes no value."""

    def same(a):  # two reads of one attribute are the same value
        return ("get_attr", a.target) if isinstance(a, torch.fx.Node) and a.op == "get_attr" else a

    seen: dict[tuple, torch.fx.Node] = {}
    removed = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in (torch._C._nn.linear, F.linear):
            continue
        key = (tuple(map(same, node.args)), tuple(sorted((k, same(v)) for k, v in node.kwargs.items())))
        if key in seen:
            node.replace_all_uses_with(seen[key])
            graph.erase_node(node)
            removed += 1
        else:
            seen[key] = node
    return removed


def merge_linears(gm: torch.fx.GraphModule, example_inputs):
    """torch.compile backend: inductor, after `merge_identical_linears` (one GEMM per FusedSlice group)."""
    from torch._inductor.compile_fx import compile_fx

    if merge_identical_linears(gm.graph):
        gm.graph.lint()
        gm.recompile()
    return compile_fx(gm, example_inputs)
