"""The output layer of scoring: the head split from the model body, and the logsumexp over the vocabulary
computed once per distinct prefix, in cache-sized blocks on a CPU. Most of the cost of scoring a small
model is here (docs/speed.md); `probes.scoring.primitive.token_logprobs` drives it."""
from __future__ import annotations

import threading
from typing import Optional

import torch


_PLAIN_HEAD_TYPES = ("gpt_neox", "gpt2", "llama")
# rows of the output layer evaluated at once. On a CPU (fp32) the logits come from the weight transposed once
# to [d, vocab] (~30 % faster GEMMs than nn.Linear's weight.t()) in blocks of 512 rows x 512 columns written
# into one reused 1 MB buffer: the block stays in cache for its exp and sum, and no memory is mapped per call
# (fresh logits tensors spent 15 % of scoring in page faults; docs/speed.md). On a GPU bigger pieces keep the
# kernels busy (1024 x 50k x 4 B = 200 MB).
_HEAD_CHUNK = {"cpu": 512}
_HEAD_VOCAB_BLOCK = 512  # CPU only
_HEAD_CHUNK_OTHER = 1024


def _split_head(model):
    """(body, head) when ``model``'s logits are head(body(...).last_hidden_state), else None."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in _PLAIN_HEAD_TYPES:
        return None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    body = getattr(model, "base_model", None)
    # ds_id: DeepSpeed ZeRO-3 holds the weight only inside forward()
    if not isinstance(head, torch.nn.Linear) or body is None or body is model or hasattr(head.weight, "ds_id"):
        return None
    return body, head


def _drop_last(mask: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """The mask without its last column: a sequence's last token is predicted, never a context, so the forward
    leaves it out (on BLiMP 8 % fewer tokens)."""
    if mask is None:
        return None
    mask = mask[:, :-1]
    return None if bool(mask.all()) else mask


def _batch_split(body, head: torch.nn.Linear, lse_head: "_HeadLSE", ids: torch.Tensor,
                 mask: torch.Tensor, call_mask: Optional[torch.Tensor], node: torch.Tensor,
                 lse: torch.Tensor, have: torch.Tensor) -> torch.Tensor:
    """Flat lps of the scored positions of a batch (row-major); ``node``: the prefix id of each position;
    ``lse``/``have`` cache the logsumexp of every prefix already seen."""
    # use_cache=False: scoring never decodes further, and building the KV cache (a concatenation of
    # every layer's keys and values) took ~10 % of the forward on pythia-14m
    hidden = body(input_ids=ids[:, :-1], attention_mask=_drop_last(call_mask), use_cache=False)[0]
    scored = mask[:, 1:].bool()  # position j is scored when token j+1 is real
    h = hidden[scored]  # [N, d], row-major: the order of ``node``
    target = ids[:, 1:][scored]
    weight = head.weight
    logit = (h.float() * weight[target].float()).sum(-1)
    if head.bias is not None:
        logit = logit + head.bias[target].float()
    new = ~have[node]
    if bool(new.any()):
        # one row per distinct new prefix: the first position that has it
        uniq, first = _first_index(node[new])
        idx = new.nonzero().squeeze(-1)[first]
        lse[uniq] = lse_head(h[idx], logit[idx])
        have[uniq] = True
    return logit - lse[node]


class _HeadLSE:
    """logsumexp over the vocabulary of ``head(h)`` per row, fp32, a chunk of rows at a time.

    ``shift`` holds one logit of each row (its target's): exp(logits - shift) sums to at least 1, so it never
    underflows, and overflows only when a token is 80+ nats likelier than the target (then the chunk is redone
    with ``torch.logsumexp``). This skips logsumexp's max pass and temporaries: its exp runs once, in place."""

    def __init__(self, head: torch.nn.Linear, device: torch.device, bf16: bool):
        self.head = head
        self.chunk = _HEAD_CHUNK.get(device.type, _HEAD_CHUNK_OTHER)
        self.wt = None
        if device.type == "cpu" and not bf16 and head.weight.dtype == torch.float32:
            self.wt = head.weight.detach().t().contiguous()  # [d, vocab]: 26 MB for Pythia's 50k x 128
            self.bias = None if head.bias is None else head.bias.detach()
            self.local = threading.local()  # a 1 MB block buffer per thread (chunks may run in workers)

    def __call__(self, h: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        out = torch.empty(len(h), dtype=torch.float32, device=h.device)
        for a in range(0, len(h), self.chunk):
            z = a + self.chunk
            s = shift[a:z].unsqueeze(-1)
            if self.wt is None:
                part = self.head(h[a:z]).float().sub_(s).exp_().sum(-1).log_() + s.squeeze(-1)
            else:
                part = self._blocked(h[a:z], s).log_() + s.squeeze(-1)
            if not bool(torch.isfinite(part).all()):
                part = torch.logsumexp(self.head(h[a:z]).float(), dim=-1)
            out[a:z] = part
        return out

    def _blocked(self, h: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """sum over the vocabulary of exp(h @ W.T + bias - s), one cache-sized block at a time."""
        acc = torch.zeros(len(h), dtype=torch.float32)
        vocab = self.wt.shape[1]
        buf = getattr(self.local, "buf", None)
        if buf is None:
            buf = self.local.buf = torch.empty((self.chunk, _HEAD_VOCAB_BLOCK), dtype=torch.float32)
        for v in range(0, vocab, _HEAD_VOCAB_BLOCK):
            w = min(_HEAD_VOCAB_BLOCK, vocab - v)
            block = buf[:len(h), :w]
            shifted = -s if self.bias is None else self.bias[v:v + w] - s
            torch.addmm(shifted, h, self.wt[:, v:v + w], out=block)
            acc += block.exp_().sum(-1)
        return acc


def _first_index(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted unique values of ``x``, the index of each one's first occurrence in ``x``)."""
    uniq, inverse = torch.unique(x, return_inverse=True)
    pos = torch.arange(len(x), device=x.device)
    first = torch.full((len(uniq),), len(x), dtype=torch.long, device=x.device)
    first.scatter_reduce_(0, inverse, pos, reduce="amin")
    return uniq, first
