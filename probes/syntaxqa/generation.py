"""Greedy generation for the syntax questions (``generate`` with ``do_sample=False``: temperature 0, the paper's).

Each prompt starts with the scoring start token (``sentence_ids``), like every scored sentence; rows are left-padded
(pad id, else the start id, masked) in length-sorted batches so every row's last prompt token sits where generation
starts. A row stops at EOS, its own token budget, or once its text holds one of ``stops``; the decoded text may run
past the stop by the rest of its token: callers cut it."""
from __future__ import annotations

from typing import Sequence


class _StopRows:
    """Per-row stop: the row's text holds a stop string, or it has generated its budget of tokens."""

    def __init__(self, tokenizer, start: int, stops: tuple[str, ...], budgets: list[int]):
        self.tokenizer, self.start, self.stops, self.budgets = tokenizer, start, stops, budgets

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        new = input_ids[:, self.start :]
        texts = self.tokenizer.batch_decode(new, skip_special_tokens=True) if self.stops else [""] * len(new)
        done = [any(s in t for s in self.stops) or new.shape[1] >= b for t, b in zip(texts, self.budgets)]
        return torch.tensor(done, device=input_ids.device)


def greedy_generate(model, tokenizer, prompts: Sequence[str], max_new_tokens: int | Sequence[int],
                    stops: tuple[str, ...] = (), batch_size: int = 16, device=None) -> list[str]:
    """The greedy continuation of each prompt (``max_new_tokens``: one budget, or one per prompt)."""
    import torch
    from transformers import StoppingCriteriaList

    from probes.scoring.primitive import sentence_ids, start_id

    budgets = [int(max_new_tokens)] * len(prompts) if isinstance(max_new_tokens, int) else [int(b) for b in max_new_tokens]
    if len(budgets) != len(prompts):
        raise ValueError(f"greedy_generate: {len(budgets)} token budgets for {len(prompts)} prompts")
    device = device if device is not None else next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start_id(tokenizer)
    eos = tokenizer.eos_token_id
    ids = sentence_ids(tokenizer, list(prompts))
    out_texts = [""] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: (-len(ids[i]), -budgets[i]))
    was_training = model.training
    model.eval()
    try:
        for b in range(0, len(order), batch_size):
            batch = order[b : b + batch_size]
            width = max(len(ids[i]) for i in batch)
            x = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, i in enumerate(batch):
                x[r, width - len(ids[i]) :] = torch.tensor(ids[i])
                mask[r, width - len(ids[i]) :] = 1
            rows = [budgets[i] for i in batch]
            with torch.inference_mode():
                out = model.generate(input_ids=x.to(device), attention_mask=mask.to(device), do_sample=False,
                                     max_new_tokens=max(rows), pad_token_id=pad, eos_token_id=eos,
                                     stopping_criteria=StoppingCriteriaList([_StopRows(tokenizer, width, tuple(stops), rows)]))
            for r, i in enumerate(batch):
                # a row that stopped early is padded to the batch's length: keep only its own budget
                out_texts[i] = tokenizer.decode(out[r, width : width + budgets[i]], skip_special_tokens=True)
    finally:
        model.train(was_training)
    return out_texts
