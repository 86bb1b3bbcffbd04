"""Rollout: generate n completions per prompt.

Backends register with `@register_backend("name")` (pods/rollout/backend.py) and are found by
`rollout.name`; every module of this package is imported here, so a new backend file registers itself.
Shipped: hf (transformers generate, hf.py) and vllm (a colocated engine, vllm.py).
"""

from __future__ import annotations

from pods.registry import import_submodules
from pods.rollout.backend import (
    BACKENDS,
    Backend,
    Generator,
    RolloutSettings,
    backend_class,
    build_backend,
    build_generator,
    check_backend,
    check_generate_signature,
    register_backend,
)
from pods.rollout.hf import HFGenerator, use_compiled

import_submodules(__name__)

__all__ = [
    "BACKENDS",
    "Backend",
    "Generator",
    "HFGenerator",
    "RolloutSettings",
    "backend_class",
    "build_backend",
    "build_generator",
    "check_backend",
    "check_generate_signature",
    "register_backend",
    "use_compiled",
]
