"""What stops a run that would go on measuring something other than its config says.

Each check sits where its fault first shows, and stops the run in one line naming what and at which step
(IntegrityError: `pods: error: ...`, exit 2):

    reward     a reward function's NaN or inf (pods/reward/registry.py raises; `at` adds the step)
    rollout    NaN or inf token probabilities while sampling (torch.multinomial's refusal, named: `sampling`)
    update     a non-finite loss or gradient norm (the norm clipping computes anyway), then a weight norm that is
               not finite in float32: weights that large make the next forward NaN (optim.lr=1e30 does it in
               one step, with a finite loss and gradient)
    save       no checkpoint is written from non-finite weights, so `latest` keeps naming the last finite one
    resume     a checkpoint with non-finite weights is refused before its first rollout
    empty      a step that rolled out nothing (the pre-rollout filter skipped every prompt) is a warning and
               saves no checkpoint; max_empty_steps of them in a row, or a run that would end on one, stop it
"""

from __future__ import annotations

import logging
import math
from contextlib import contextmanager

import torch

from pods.errors import IntegrityError, NonFiniteError

log = logging.getLogger("pods")


def nonfinite_param(model, dist) -> str | None:
    """The name of a trainable parameter whose norm is not finite (NaN, inf, or too large for float32), None
    when all are; one fused norm per tensor and one host sync. On every rank (FSDP: each checks its shards,
    then all agree)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    local = [p.to_local() if hasattr(p, "to_local") else p for _, p in named]  # FSDP: this rank's shard
    with torch.no_grad():
        norms = [x.float() for x in torch._foreach_norm([t.detach() for t in local])] if local else []
    norms = torch.stack(norms).cpu() if norms else torch.zeros(0)
    bad = (~torch.isfinite(norms)).nonzero()
    if dist.sum(float(len(bad))) == 0:  # a collective: every rank takes the same branch
        return None
    return named[int(bad[0])][0] if len(bad) else "(on another rank's shard)"


# what torch.multinomial says when the probabilities it samples from hold NaN or inf (HF generate samples with it)
_SAMPLING_NONFINITE = "probability tensor contains either `inf`, `nan`"


@contextmanager
def sampling(what: str):
    """Around a backend's generate: NaN or inf token probabilities (the policy's logits) are a NonFiniteError
    naming `what` was sampled, not a traceback from inside the backend."""
    try:
        yield
    except RuntimeError as e:
        if _SAMPLING_NONFINITE not in str(e):
            raise
        raise NonFiniteError(
            "token probabilities", f"the policy's logits hold NaN or inf while sampling {what}"
        ) from None


class RunGuard:
    """`optim`: the run's optimizer settings (named in the messages); `max_empty_steps`: steps without
    rollouts in a row that stop the run."""

    def __init__(self, model, dist, optim, max_empty_steps: int):
        self.model, self.dist, self.optim, self.max_empty = model, dist, optim, max_empty_steps
        self.empty = 0  # steps in a row that rolled out nothing, up to now

    def hint(self) -> str:
        o = self.optim
        return f"optim.lr={o.lr:g}, optim.grad_clip={o.grad_clip:g}"

    @contextmanager
    def at(self, step: int, phase: str = ""):
        """Names the step (and phase) in a NonFiniteError a stage raises inside the block."""
        try:
            yield
        except NonFiniteError as e:
            if e.step is not None:
                raise
            where = f" ({phase})" if phase else ""
            raise NonFiniteError(e.what, f"{e.detail}{where}; the run stops here", step) from None

    def after_update(self, step: int, rec: dict) -> None:
        """The update's loss and gradient norm (update/*), then the weights the optimizer wrote."""
        loss, gnorm = rec.get("update/loss", 0.0), rec.get("update/grad_norm", 0.0)
        if rec.get("update/nonfinite_grad_steps", 0.0) or not math.isfinite(gnorm):
            raise NonFiniteError(
                "gradient norm",
                f"update/grad_norm={gnorm} (update/loss={loss}; {self.hint()}); the weights were not "
                "changed by it and no checkpoint is written from this step",
                step,
            )
        if not math.isfinite(loss):
            raise NonFiniteError("loss", f"update/loss={loss} ({self.hint()}); the run stops here", step)
        hint = self.hint()
        self._weights_finite(
            lambda name: (
                f"the norm of {name} is not finite after the optimizer step ({hint}: too large a step?); "
                "no checkpoint is written from it"
            ),
            step,
        )

    def after_step(self, step: int, rollouts: int) -> None:
        """Count a step that rolled out nothing: a warning, and max_empty_steps in a row stop the run."""
        if rollouts:
            self.empty = 0
            return
        self.empty += 1
        log.warning(
            "step %d rolled out nothing (the pre-rollout filter kept no prompt): %d of max_empty_steps=%d in a row",
            step,
            self.empty,
            self.max_empty,
        )
        if self.empty >= self.max_empty:
            raise self._empty_error(step)

    def may_save(self) -> bool:
        """A periodic checkpoint waits for a step that trained on something."""
        return self.empty == 0

    def at_end(self, step: int) -> None:
        """A run may not end on steps that rolled out nothing: its final checkpoint and eval would pass for
        training."""
        if self.empty:
            raise self._empty_error(step)

    def _empty_error(self, step: int) -> IntegrityError:
        first = step - self.empty + 1
        steps = f"steps {first}-{step}" if self.empty > 1 else f"step {step}"
        return IntegrityError(
            f"{steps} rolled out nothing ({self.empty} in a row, max_empty_steps={self.max_empty}): the "
            "pre-rollout filter kept no prompt; the run stops without saving them (loosen the prefilter's "
            "settings, or check the data)"
        )

    def before_save(self, step: int) -> None:
        """Never write a checkpoint from non-finite weights."""
        self._weights_finite(lambda name: f"{name} before the checkpoint of step {step}; not saved", step)

    def after_restore(self, path: str) -> None:
        """A checkpoint written with non-finite weights (by a pods that did not check) cannot be resumed."""
        self._weights_finite(
            lambda name: (
                f"checkpoint {path} holds them ({name}); resume from an older checkpoint (move this one "
                "aside) or start the run over"
            )
        )

    def _weights_finite(self, detail, step: int | None = None) -> None:
        """NonFiniteError("weights", detail(name)) for the first non-finite parameter's name, if there is one (a
        function, not a format string: a checkpoint's path may hold braces)."""
        name = nonfinite_param(self.model, self.dist)
        if name is not None:
            raise NonFiniteError("weights", detail(name), step)
