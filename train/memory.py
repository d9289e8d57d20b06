"""Training memory per GPU, estimated from the config before a job is submitted: the peak of
torch.cuda.max_memory_allocated over a training step, calibrated against H100 measurements
(bench/memory_peaks.csv, checked within 5 % by tests/test_memory.py). The accounting behind each term
(ZeRO's model states, what a GPT-NeoX layer of transformers keeps, autocast copies, the loss's peak) and
its sources: docs/speed.md, "The accounting".
"""
from __future__ import annotations

from dataclasses import dataclass

GiB = 2 ** 30
FIT_FRACTION = 0.9  # usable share of a GPU's memory after context and fragmentation


@dataclass(frozen=True)
class Memory:
    weights: float  # bytes per GPU
    grads: float
    optimizer: float
    activations: float  # saved activations and the step's transient peak (autocast copies, loss backward)

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations

    def fits(self, gpu_bytes: float) -> bool:
        return self.total <= FIT_FRACTION * gpu_bytes


def state_bytes_per_param(engine_kind: str, zero_stage: int, bf16: bool, gpus: int) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per parameter on one GPU."""
    if engine_kind == "torch":
        return 4.0, 4.0 + (4.0 if gpus > 1 else 0.0), 8.0
    w, g, o = (2.0, 2.0, 12.0) if bf16 else (4.0, 4.0, 12.0)
    if zero_stage >= 1:
        o /= gpus
    if zero_stage >= 2:
        g /= gpus
    if zero_stage >= 3:
        w /= gpus
    return w, g, o


def activation_bytes(*, params: int = 0, layers: int, hidden: int, heads: int, vocab: int, seq_len: int,
                     micro_batch: int, checkpointing: bool, attn_implementation: str, compute_bytes: int = 2,
                     residual_bytes: int = 2, autocast: bool = False, loss_chunk: int = 0) -> float:
    """Peak bytes beyond the model states in one training step (docs/speed.md, "The accounting")."""
    s, b, h, a, e, r = seq_len, micro_batch, hidden, heads, compute_bytes, residual_bytes
    sbh, sbV = s * b * h, s * b * vocab
    if attn_implementation == "eager":
        layer = (r + 16 * e) * sbh + (4 + (e if e < 4 else 0)) * a * s * s * b
    else:
        layer = (r + 17 * e) * sbh
    head = (r + e) * sbh
    loss_fwd = (e + 4 + (4 if e < 4 else 0)) * sbV  # logits, their fp32 copy (a no-op in fp32), log-softmax
    loss_bwd = 12 * sbV
    if loss_chunk:
        loss_fwd = loss_bwd = (2 * e + 4) * min(loss_chunk, s * b) * vocab + 4 * vocab * h + (r + e) * sbh
    casts = 2 * (params - vocab * hidden) if autocast else 0  # bf16 copies of every matmul weight
    if checkpointing:
        kept = layers * r * sbh + head
        return kept + max(casts + loss_fwd, (2 * vocab * hidden if autocast else 0) + loss_bwd)
    return layers * layer + head + casts + max(loss_fwd, loss_bwd)


def estimate(*, params: int, layers: int, hidden: int, heads: int, vocab: int, seq_len: int, micro_batch: int,
             engine_kind: str, zero_stage: int, bf16: bool, gpus: int, checkpointing: bool,
             attn_implementation: str, loss_chunk: int = 0) -> Memory:
    w, g, o = state_bytes_per_param(engine_kind, zero_stage, bf16, gpus)
    autocast = bf16 and engine_kind == "torch"  # fp32 weights, bf16 compute; DeepSpeed bf16 holds bf16 weights
    act = activation_bytes(params=params, layers=layers, hidden=hidden, heads=heads, vocab=vocab,
                           seq_len=seq_len, micro_batch=micro_batch, checkpointing=checkpointing,
                           attn_implementation=attn_implementation, compute_bytes=2 if bf16 else 4,
                           residual_bytes=4 if (autocast or not bf16) else 2, autocast=autocast,
                           loss_chunk=loss_chunk if engine_kind == "torch" else 0)
    return Memory(weights=w * params, grads=g * params, optimizer=o * params, activations=act)
