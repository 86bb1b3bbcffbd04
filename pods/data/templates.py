"""Prompt templates live with the data: the dataset config says how a question becomes a prompt."""

from __future__ import annotations

from pods.data.tasks import Example

# The reasoning format the paper's prompts ask for (our wording): think first, then answer in tags.
THINK_ANSWER_SYSTEM = (
    "You are a careful problem solver. First reason step by step inside <think> </think> tags, "
    "then give only the final answer inside <answer> </answer> tags."
)


def format_prompt(
    example: Example, template: str, system_prompt: str | None, tokenizer, use_chat: bool
) -> str:
    """Render one prompt string. With a chat template the system prompt and user turn are wrapped by the
    tokenizer (generation prompt added); without one the template is used verbatim."""
    user = template.replace("{question}", example.question)
    if not use_chat:
        return user
    messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) + [
        {"role": "user", "content": user}
    ]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
