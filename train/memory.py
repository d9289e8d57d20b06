"""Training memory per GPU, estimated from the config before a job is submitted: the peak of
torch.cuda.max_memory_allocated over a training step, calibrated against H100 measurements
(bench/memory_peaks.csv, checked within 5 % by tests/test_memory.py).

Model states (Rajbhandari et al. 2020, "ZeRO", §3.1 and Fig. 1), per parameter:
* DeepSpeed in bf16 (mixed precision): 2 B bf16 weights + 2 B bf16 gradients + 12 B Adam states
  (fp32 master weights, momentum, variance). ZeRO-1 shards the 12 B over the GPUs of the run, ZeRO-2
  also the gradients, ZeRO-3 also the weights. DeepSpeed in fp32: 4 + 4 + 12 (its fp32 partition copy
  of the weights, then the two moments).
* Torch engine (fp32 weights, autocast computes in bf16): 4 B weights + 4 B gradients + 8 B Adam
  moments, all replicated; DDP (more than one GPU) adds its 4 B/param gradient buckets.

Activations of one micro-batch of b sequences of s tokens, hidden size h, a heads, L layers, vocabulary
V, in bytes. Korthikanti et al. 2022 ("Reducing Activation Recomputation", §4.1: 34sbh + 5as^2b per
layer) count every tensor in 2 bytes; what a GPT-NeoX layer of transformers really keeps for backward
differs, and the difference is what the uncalibrated plan missed (it was 15-19 % low on the H100):
* e = bytes of the compute dtype (2 in bf16, 4 in fp32); r = bytes of the residual stream: 4 under
  autocast, whose fp32 weights make the embedding and every residual sum fp32; 2 for bf16 weights.
* Per layer (parallel residual, no dropout: Pythia trains with p = 0, which allocates no mask):
  the shared LayerNorm input r; the QKV input e; the fused QKV output 3e (rotary makes new q and k,
  but v is a view that keeps the whole QKV tensor alive); the rotated q, k 2e; the attention output
  e (sdpa's own) plus its contiguous copy e for the dense layer; the MLP input e, its 4h output 4e
  and the GELU's 4e: r + 17e per sbh (38sbh under autocast, where Korthikanti without dropout has 32).
* Eager attention keeps no sdpa output but the softmax in fp32 (transformers asks for it) and its cast
  to e: (4 + e) as^2b per layer, or 4as^2b in fp32.
* Head: the final LayerNorm input r and output e (sbh); logits e, their fp32 copy and log-softmax
  output: (e + 8) sbV in the forward; in the backward of the loss the saved log-softmax, the NLL
  gradient and the log-softmax gradient, all fp32: 12 sbV, the step's peak.
* Autocast copies: under autocast every matmul weight is cast to bf16 once per forward and kept (the
  autocast cache, and backward's saved tensors) until the backward has passed its layer: 2 B per
  parameter that is not the input embedding (a lookup, not cast).
* Chunked loss (engine.loss_chunk = c tokens, train/loss.py): one chunk's logits (bf16, fp32, its bf16
  gradient: (2e + 4) cV), the head weight's fp32 gradient 4Vh and the hidden states' gradient and bf16
  copy (r + e) sbh replace both loss terms.
* Activation checkpointing: each layer keeps only its input (r sbh); the peak is the larger of the
  forward's end (every autocast copy still cached, head forward) and the loss backward (the head's
  copy only); one layer recomputed at a time adds less than the loss backward's 12sbV frees.
Not counted: the CUDA context and the allocator's fragmentation (max_memory_allocated excludes both;
typically 1-3 GB), temporary buffers of ZeRO's gathers. Hence the planner's 90 % fit threshold.
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
    """Peak bytes beyond the model states in one training step (module docstring)."""
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
