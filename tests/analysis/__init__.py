"""Helpers shared by the analysis tests."""


def saved_config(variant: str) -> str:
    """The selector part of the config.yaml a pods run saves, for a fixture run of `variant`: plain GRPO
    (down-sampler none, n == m) when the fixture names it none* or grpo*, else PODS 64/16."""
    plain = variant.split("-")[0].lower() in ("none", "grpo")
    return f"selector:\n  name: {'none' if plain else 'max_variance'}\n  n: {16 if plain else 64}\n  m: 16\n"
