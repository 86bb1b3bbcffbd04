"""Prompts: load a task's train/eval examples, format them with the task's template, sample batches."""

from pods.data.sampler import PromptSampler
from pods.data.tasks import DataError, Example, load_examples
from pods.data.templates import format_prompt

__all__ = ["DataError", "Example", "PromptSampler", "format_prompt", "load_examples"]
