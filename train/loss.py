"""The language-model loss with the output layer fused into the cross-entropy, a chunk of tokens at a time
(engine.loss_chunk; docs/speed.md, after Liger-Kernel, arXiv:2410.10989): the plain loss keeps 12 bytes per
token per vocabulary row alive at its peak (9.2 GiB for 8 x 2048 tokens of Pythia's 50,304 rows). Numerics
follow the plain path: bf16 matmuls under autocast, fp32 log-softmax, fp32 weight gradient sums."""
from __future__ import annotations

from typing import Optional

import torch


class LinearCrossEntropy(torch.autograd.Function):
    """mean over N of cross_entropy(hidden @ weight.T + bias, targets); hidden [N, d], weight [V, d]."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                targets: torch.Tensor, chunk: int, dtype: torch.dtype) -> torch.Tensor:
        n = hidden.shape[0]
        w = weight.to(dtype)  # autocast's copy of the head weight (a no-op in fp32)
        h = hidden.to(dtype)
        b = None if bias is None else bias.to(dtype)
        grad_h = torch.empty_like(hidden)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        grad_b = None if bias is None else torch.zeros(bias.shape, dtype=torch.float32, device=bias.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for a in range(0, n, chunk):
            hc, t = h[a:a + chunk], targets[a:a + chunk]
            logits = (hc @ w.t() if b is None else torch.addmm(b, hc, w.t())).float()
            lse = torch.logsumexp(logits, dim=-1)
            total += (lse - logits.gather(1, t[:, None]).squeeze(1)).sum()
            g = logits.sub_(lse[:, None]).exp_()  # softmax, in place of the logits
            g[torch.arange(len(t), device=g.device), t] -= 1.0
            g = g.to(dtype)
            grad_h[a:a + chunk] = (g @ w).to(hidden.dtype)
            grad_w += (g.t() @ hc).float()
            if grad_b is not None:
                grad_b += g.float().sum(0)
        ctx.save_for_backward(grad_h, grad_w, grad_b if grad_b is not None else torch.empty(0))
        ctx.has_bias, ctx.n = bias is not None, n
        return total / n

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        grad_h, grad_w, grad_b = ctx.saved_tensors
        scale = grad_out / ctx.n
        return ((grad_h * scale).to(grad_h.dtype), grad_w * scale, (grad_b * scale) if ctx.has_bias else None,
                None, None, None)


class ChunkedLMLoss(torch.nn.Module):
    """forward(batch) -> mean next-token loss of a causal LM whose logits are head(body(ids)[0])
    (GPT-NeoX: `gpt_neox` and `embed_out`), through LinearCrossEntropy. A module, so that DDP and
    torch.compile wrap it as they wrap the model: its parameters are the model's."""

    def __init__(self, lm: torch.nn.Module, chunk: int):
        super().__init__()
        if chunk < 1:
            raise ValueError(f"engine.loss_chunk must be >= 1 to chunk the loss, got {chunk}")
        self.lm, self.chunk = lm, chunk
        self.body, self.head = lm.base_model, lm.get_output_embeddings()
        if self.body is lm or not isinstance(self.head, torch.nn.Linear):
            raise ValueError(f"engine.loss_chunk: {type(lm).__name__} has no separate body and linear head")

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        hidden = self.body(input_ids=batch[:, :-1], use_cache=False)[0]
        dtype = torch.get_autocast_dtype(hidden.device.type) if torch.is_autocast_enabled(hidden.device.type) \
            else self.head.weight.dtype
        with torch.autocast(hidden.device.type, enabled=False):  # the function casts as autocast would
            return LinearCrossEntropy.apply(hidden.reshape(-1, hidden.shape[-1]), self.head.weight,
                                            self.head.bias, batch[:, 1:].reshape(-1), self.chunk, dtype)
