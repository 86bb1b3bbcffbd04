"""Rollouts with transformers' generate: all prompts x n in batches, KV cache on, left padding."""

from __future__ import annotations

import torch

from pods.batch import Rollouts


def completion_mask_from_eos(tokens: torch.Tensor, eos_ids: list[int], pad_id: int) -> torch.Tensor:
    """(B, L) generated tokens -> (B, L) mask of real completion tokens: up to and including the first EOS.

    Tokens after the first EOS are padding that generate() appended once the row had finished.
    """
    is_eos = torch.isin(tokens, torch.tensor(eos_ids, device=tokens.device))
    after_eos = (is_eos.cumsum(1) - is_eos.long()) > 0  # strictly after the first EOS
    return (~after_eos).long()


def eos_ids_for(model, tokenizer) -> list[int]:
    """Token ids that end a completion: the tokenizer's EOS plus the model's generation-config EOS ids."""
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [tokenizer.eos_token_id] + (gen_eos if isinstance(gen_eos, list) else [gen_eos])
    return sorted({i for i in ids if i is not None})


class HFGenerator:
    def __init__(self, model, tokenizer, device, batch_size: int, max_new_tokens: int):
        self.model, self.tok, self.device = model, tokenizer, device
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens
        self.eos_ids = eos_ids_for(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def sync_weights(self, model) -> None:
        """Nothing to push: generation runs on the training model itself."""

    def tokenize(self, prompts: list[str], add_special_tokens: bool) -> tuple[torch.Tensor, torch.Tensor]:
        self.tok.padding_side = "left"
        enc = self.tok(prompts, return_tensors="pt", padding=True, add_special_tokens=add_special_tokens)
        return enc["input_ids"], enc["attention_mask"]

    @torch.no_grad()
    def generate(
        self,
        prompts: list[str],
        prompt_ids: list[int],
        n: int,
        temperature: float,
        top_p: float = 1.0,
        top_k: int = 0,
        add_special_tokens: bool = False,
        batch_size: int | None = None,
    ) -> Rollouts:
        """Generate n completions for each prompt; temperature 0 means greedy. Sequences are generated in
        chunks of `batch_size` (default: the rollout batch size)."""
        bs = batch_size or self.batch_size
        ids, am = self.tokenize(prompts, add_special_tokens)  # (P, Lp)
        ids, am = ids.repeat_interleave(n, 0), am.repeat_interleave(n, 0)  # (P*n, Lp), group-major
        was_training = self.model.training
        self.model.eval()
        chunks = []
        # Sampling exactly at the configured temperature/top-p/top-k: explicit values override a hub model's
        # generation_config defaults (Qwen ships top_k=20, repetition_penalty=1.05), which would otherwise make
        # the behaviour policy differ from the one the loss assumes.
        kwargs = dict(
            do_sample=temperature > 0,
            max_new_tokens=self.max_new_tokens,
            pad_token_id=self.pad_id,
            eos_token_id=self.eos_ids,
            use_cache=True,
            repetition_penalty=1.0,
        )
        if temperature > 0:
            kwargs.update(temperature=temperature, top_p=top_p, top_k=top_k)  # top_k=0 disables it
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        for s in range(0, ids.shape[0], bs):
            b_ids, b_am = ids[s : s + bs].to(self.device), am[s : s + bs].to(self.device)
            out = self.model.generate(input_ids=b_ids, attention_mask=b_am, **kwargs)
            chunks.append(out[:, ids.shape[1] :].cpu())
        if was_training:
            self.model.train()
        width = max(c.shape[1] for c in chunks)
        comp = torch.cat(
            [torch.nn.functional.pad(c, (0, width - c.shape[1]), value=self.pad_id) for c in chunks]
        )
        cmask = completion_mask_from_eos(comp, self.eos_ids, self.pad_id)
        comp = torch.where(cmask.bool(), comp, torch.full_like(comp, self.pad_id))
        texts = self.tok.batch_decode(comp, skip_special_tokens=True)
        return Rollouts(
            input_ids=torch.cat([ids, comp], 1),
            attention_mask=torch.cat([am, cmask], 1),
            prompt_len=ids.shape[1],
            completion_mask=cmask,
            texts=texts,
            prompt_ids=list(prompt_ids),
            group_size=n,
        )
