"""rollout=vllm: the tests that build and drop vLLM engines of their own (a resumed run's, one that cannot start).

They are apart from test_vllm_engine.py's module-wide engines on purpose: dropping a vLLM engine tears down
vLLM's process-wide parallel state, so an engine still alive in the same process fails its next generate
("pipeline model parallel group is not initialized"). A module's tests run together, so no engine of the other
module is alive while these run (tests/conftest.py shuffles modules, then the tests inside each).
"""

import gc
from dataclasses import replace

import pytest
import torch

pytest.importorskip("vllm")

from pods.config import settings  # noqa: E402
from pods.models import load_policy, load_tokenizer  # noqa: E402
from pods.rollout import RolloutSettings  # noqa: E402
from pods.rollout.vllm import EngineStartError, VLLMGenerator  # noqa: E402
from tests.conftest import compose_cfg  # noqa: E402
from tests.rollout.test_vllm_engine import engine_matches  # noqa: E402

CPU = torch.device("cpu")


@pytest.mark.slow
@pytest.mark.parametrize("lora", ["false", "true"])
def test_resumed_run_syncs_the_engine_to_the_checkpoint(tmp_path, lora):
    from pods.train import preflight
    from pods.trainer import Trainer
    from tests.conftest import SMOKE

    common = [*SMOKE, "rollout=vllm", f"hardware.lora={lora}", "eval.at_end=false"]
    Trainer(
        preflight(compose_cfg(common, tmp_path)), tmp_path
    ).train()  # checkpoint at step 3 (SMOKE's max_steps)
    gc.collect()
    resumed = Trainer(preflight(compose_cfg([*common, "resume=true"], tmp_path)), tmp_path)
    prompts = resumed.eval_set.prompts[:8]
    base, _ = load_policy(resumed.settings.model, resumed.settings.hardware, CPU)
    assert resumed.step == 3 and not engine_matches(resumed.backend, base, prompts)  # training moved it
    assert engine_matches(resumed.backend, resumed.model, prompts)
    del resumed
    gc.collect()


# --- bad input ------------------------------------------------------------------------------------


def test_an_engine_that_cannot_start_fails_in_one_line_with_its_root_cause(tmp_path):
    cfg = settings(compose_cfg(["rollout=vllm", "hardware=cpu"], tmp_path))
    tok = load_tokenizer(cfg.model)
    cfg = replace(cfg, model=replace(cfg.model, max_prompt_len=1000))  # the tiny model has 256 positions
    model, _ = load_policy(cfg.model, cfg.hardware, CPU)
    with pytest.raises(EngineStartError) as e:
        VLLMGenerator(RolloutSettings.from_config(cfg), model, tok, CPU)
    msg = str(e.value)
    assert "\n" not in msg and e.value.__suppress_context__
    assert msg.startswith("rollout=vllm: the vLLM engine did not start: ValidationError:")
    assert "max_model_len (1048) is greater than the derived max_model_len" in msg
