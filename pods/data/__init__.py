"""Prompts: load a task's train/eval examples, format them with the task's template, sample batches."""

from pods.data.prompts import PromptSet, load_prompt_sets
from pods.data.sampler import PromptSampler
from pods.data.tasks import DataError, Example, load_examples
from pods.data.templates import format_prompt

__all__ = [
    "DataError",
    "Example",
    "PromptSampler",
    "PromptSet",
    "format_prompt",
    "load_examples",
    "load_prompt_sets",
]
