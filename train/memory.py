"""Training memory per GPU, estimated from the config before a job is submitted.

Model states (Rajbhandari et al. 2020, "ZeRO", §3.1 and Fig. 1), per parameter:
* DeepSpeed in bf16 (mixed precision): 2 B bf16 weights + 2 B bf16 gradients + 12 B Adam states
  (fp32 master weights, momentum, variance). ZeRO-1 shards the 12 B over the GPUs of the run, ZeRO-2
  also the gradients, ZeRO-3 also the weights. DeepSpeed in fp32: 4 + 4 + 12 (its fp32 partition copy
  of the weights, then the two moments).
* Torch engine (fp32 weights, autocast computes in bf16): 4 B weights + 4 B gradients + 8 B Adam
  moments, all replicated; DDP (more than one GPU) adds its 4 B/param gradient buckets.
Activations (bf16) of one micro-batch of b sequences of s tokens, hidden size h, a heads, L layers,
vocabulary V (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
§4.1: 34sbh + 5as^2b bytes per layer, without tensor parallelism):
* Pythia trains without dropout: minus the two sbh dropout masks -> 32sbh; of the 5as^2b for the
  attention scores (softmax output 2, dropout mask 1, dropout output 2) eager attention keeps the 2;
  SDPA's flash / memory-efficient kernels (bf16 on GPU) store no score matrix -> 0.
* With activation checkpointing each layer keeps only its input (2sbh) and one layer at a time is
  recomputed in full: L x 2sbh + one layer's activations.
* The head: bf16 logits, their fp32 copy and the fp32 log-softmax cross-entropy saves: 10sbV.
Not counted: the CUDA context and the allocator's fragmentation (typically 1-3 GB), temporary buffers
of the optimizer step and of ZeRO's gathers. Hence the planner's 90 % fit threshold.
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
    activations: float

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


def activation_bytes(*, layers: int, hidden: int, heads: int, vocab: int, seq_len: int, micro_batch: int,
                     checkpointing: bool, attn_implementation: str) -> float:
    s, b, h, a = seq_len, micro_batch, hidden, heads
    scores = 2.0 * a * s * s * b if attn_implementation == "eager" else 0.0
    layer = 32.0 * s * b * h + scores
    head = 10.0 * s * b * vocab
    if checkpointing:
        return layers * 2.0 * s * b * h + layer + head
    return layers * layer + head


def estimate(*, params: int, layers: int, hidden: int, heads: int, vocab: int, seq_len: int, micro_batch: int,
             engine_kind: str, zero_stage: int, bf16: bool, gpus: int, checkpointing: bool,
             attn_implementation: str) -> Memory:
    w, g, o = state_bytes_per_param(engine_kind, zero_stage, bf16, gpus)
    act = activation_bytes(layers=layers, hidden=hidden, heads=heads, vocab=vocab, seq_len=seq_len,
                           micro_batch=micro_batch, checkpointing=checkpointing,
                           attn_implementation=attn_implementation)
    return Memory(weights=w * params, grads=g * params, optimizer=o * params, activations=act)
