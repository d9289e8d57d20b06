"""`python -m train.plan <overrides>`: what a run or a grid would cost, printed, nothing launched.

Takes the overrides of `python -m train -m ...` (the grid expanded by train/grid.py as the launcher expands
it; `-m` changes nothing) and prints per run: parameters, steps (from the budget alone, as
train/sequences.py cuts it), tokens, checkpoints, GPU-hours, checkpoint storage and memory per GPU
(estimate), then the grid's totals and the assumptions behind each figure, printed with it (format_plan).
The MFU is measured per size because small models keep a GPU busy for a smaller share of the time (one
figure for all undercounts them); tests/test_plan_cost.py checks BENCHMARK_SIZES against the registry.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from train.config import TrainConfig
from train.corpus import _collect_files, corpus_identity, load_documents
from train.grid import compose_run, expand, hydra_context, run_subdir
from train.model import pad_vocab, parameters_of
from train.schedule import checkpoint_steps
from train.start_token import document_tokens
from train.summary import planned_steps_of, recipe_warnings
from train.tokenizer import (load_tokenizer, prepare_tokenizer, pretrained_dir, tokenizer_label, tokenizer_length,
                             trained_dir)

GB = 1e9
GiB = 2 ** 30
H100_BF16_PEAK_TFLOPS = 989.0  # NVIDIA H100 SXM dense bf16 tensor-core peak
A100_BF16_PEAK_TFLOPS = 312.0  # NVIDIA A100 dense bf16 peak: the GPU `train slurm` sizes time limits for
# bench/bench_gpu.py on one H100 80GB (README "Speed"): model name -> (parameters measured, MFU)
MEASURED_MFU = {"pythia-160m": (162_322_944, 0.207), "pythia-410m": (405_334_016, 0.288),
                "pythia-1.4b": (1_414_647_808, 0.416)}
# registry name -> (paradigms, pairs per paradigm): probes/benchmarks/registry.json's counts
BENCHMARK_SIZES = {"zhoblimp": (118, 300), "blimp": (67, 1000), "climp": (16, 1000), "babylm_blimp": (67, 894)}
TOKENS_PER_PAIR = 868_233 / 35_400  # both sentences with the start token's successors, ZhoBLiMP, 8k spm

# Training memory per GPU: the peak of torch.cuda.max_memory_allocated over a training step, calibrated
# against H100 measurements (bench/memory_peaks.csv, within 5 % by tests/test_memory.py); the accounting
# behind each term and its sources: docs/speed.md, "The accounting".
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
    if engine_kind == "torch":  # (weights, gradients, optimizer) bytes per parameter on one GPU
        w, g, o = 4.0, 4.0 + (4.0 if gpus > 1 else 0.0), 8.0
    else:  # ZeRO-1 shards Adam's states over the GPUs, 2 also the gradients, 3 also the weights
        w, g, o = (2.0, 2.0, 12.0) if bf16 else (4.0, 4.0, 12.0)
        w, g, o = w / (gpus if zero_stage >= 3 else 1), g / (gpus if zero_stage >= 2 else 1), o / (
            gpus if zero_stage >= 1 else 1)
    autocast = bf16 and engine_kind == "torch"  # fp32 weights, bf16 compute; DeepSpeed bf16 holds bf16 weights
    act = activation_bytes(params=params, layers=layers, hidden=hidden, heads=heads, vocab=vocab,
                           seq_len=seq_len, micro_batch=micro_batch, checkpointing=checkpointing,
                           attn_implementation=attn_implementation, compute_bytes=2 if bf16 else 4,
                           residual_bytes=4 if (autocast or not bf16) else 2, autocast=autocast,
                           loss_chunk=loss_chunk if engine_kind == "torch" else 0)
    return Memory(weights=w * params, grads=g * params, optimizer=o * params, activations=act)


@dataclass
class Utilisation:
    """MFU per model name; `everything` overrides the table for all sizes."""
    table: dict[str, float] = field(default_factory=lambda: {k: v for k, (_, v) in MEASURED_MFU.items()})
    everything: Optional[float] = None

    def of(self, name: str, params: int) -> tuple[float, str]:
        """(MFU, where it comes from) for a model."""
        if self.everything is not None:
            return self.everything, "--mfu"
        if name in self.table:
            return self.table[name], ("measured, H100" if name in MEASURED_MFU
                                      and self.table[name] == MEASURED_MFU[name][1] else "--mfu")
        nearest = min(MEASURED_MFU, key=lambda k: abs(MEASURED_MFU[k][0] - params))
        return self.table[nearest], f"{nearest}'s, not measured"


def parse_mfu(values: list[str]) -> Utilisation:
    """`--mfu 0.35` (all sizes) and/or `--mfu NAME=0.3` (one row); ValueError naming a bad one."""
    util = Utilisation()
    for value in values:
        name, _, number = value.rpartition("=")
        try:
            mfu = float(number)
        except ValueError:
            raise ValueError(f"--mfu {value}: expected a fraction or NAME=fraction") from None
        if not 0 < mfu <= 1:
            raise ValueError(f"--mfu {value}: expected a fraction in (0, 1]")
        if name:
            util.table[name] = mfu
        else:
            util.everything = mfu
    return util


def _entries(probes) -> list[tuple[str, Optional[int]]]:
    """(benchmark name, max pairs per paradigm) of each in-loop benchmark entry."""
    out = []
    for entry in probes.benchmarks or []:
        if isinstance(entry, str):
            out.append((entry, probes.max_pairs_per_paradigm))
        else:
            get = entry.get if hasattr(entry, "get") else (lambda k, d=None, e=entry: getattr(e, k, d))
            out.append((get("name"), get("max_pairs_per_paradigm", probes.max_pairs_per_paradigm)))
    return out


def probe_pairs(probes) -> tuple[int, int, list[str]]:
    """(pairs scored at every checkpoint, pairs added at the last, benchmarks not in the table)."""
    if not probes.enabled:
        return 0, 0, []
    each = last = 0
    unknown = []
    for name, k in _entries(probes):
        if name not in BENCHMARK_SIZES:
            unknown.append(name)
            continue
        paradigms, per = BENCHMARK_SIZES[name]
        each += paradigms * (per if k is None else min(k, per))
        if probes.final_all_pairs:
            last += paradigms * per
    return each, last, unknown


def probe_flops(params: int, probes, checkpoints: int) -> tuple[float, int, list[str]]:
    """(FLOPs of all in-loop probing of a run, pairs per checkpoint, benchmarks left out)."""
    each, last, unknown = probe_pairs(probes)
    tokens = (each * checkpoints + last) * TOKENS_PER_PAIR
    return 2.0 * params * tokens, each, unknown


@dataclass
class Hardware:
    gpu: str = "H100 (bf16)"  # the GPU the utilisation table was measured on (MEASURED_MFU)
    peak_tflops: float = H100_BF16_PEAK_TFLOPS
    mfu: Optional[float] = None  # one utilisation for every size; None: the per-size table
    gpus: int = 1  # GPUs (ranks) per run: ZeRO shards over them
    mfu_table: dict = field(default_factory=dict)  # model name -> MFU, over the measured defaults

    def utilisation(self) -> Utilisation:
        util = Utilisation(everything=self.mfu)
        util.table.update(self.mfu_table)
        return util


@dataclass(frozen=True)
class CorpusSize:
    tokens: Optional[int]  # stream tokens (every document's tokens and its start/end tokens); None: unknown
    how: str  # where the figure comes from, for the plan's footnote
    estimate: bool = False


@dataclass
class RunPlan:
    name: str  # the run directory under the sweep dir
    overrides: list[str]
    preset: str
    budget: int  # data.budget_tokens
    params: int
    tokenizer: str  # beside the size name: the parameter count depends on it (vocab_size: null)
    seq_len: int
    global_batch: int
    steps: int
    tokens: int  # tokens trained on = steps x global batch x seq_len
    checkpoints: int
    gpu_hours: float  # training
    storage_bytes: int
    memory: Memory  # per GPU
    setup: str  # engine, ZeRO stage, micro-batch, checkpointing: what the memory depends on
    probe_hours: float = 0.0  # in-loop probing of every checkpoint (probe_flops)
    probe_pairs: int = 0  # pairs scored at each checkpoint
    mfu: float = 0.0
    mfu_source: str = ""
    probes_left_out: tuple = ()  # benchmarks whose size the plan does not know
    warnings: tuple = ()  # recipes too short to mean anything, naming the keys (train/summary.py)
    cannot_start: str = ""  # why the run would stop at start (its budget is above the corpus), else ""
    corpus: Optional[CorpusSize] = None
    cfg: Optional[TrainConfig] = field(default=None, repr=False)  # what train.slurm sizes resources from


def planned_steps(cfg: TrainConfig) -> int:
    """Optimizer steps of a run, from its budget (train.summary.planned_steps_of, refusing a null budget)."""
    if cfg.data.budget_tokens is None:
        raise ValueError("data.budget_tokens is null (the whole corpus): the plan needs a budget to count "
                         "steps without the corpus; set data.budget_tokens or budget=<10M|100M|1B|3B>")
    return planned_steps_of(cfg)


def parameter_count(cfg: TrainConfig) -> int:
    """All parameters of the model, by arithmetic (train.model.parameters_of: no torch, no model built)."""
    # model.vocab_size=null: the tokenizer's length padded to 128 (build_model pads), as in a real run
    vocab = None if cfg.model.vocab_size is not None else tokenizer_length(cfg.tokenizer)
    return parameters_of(cfg.model, vocab)


def storage_bytes(cfg: TrainConfig, params: int, checkpoints: int) -> int:
    with_resume = min(cfg.schedule.keep_resume, checkpoints)
    # Probe-only checkpoints: fp32, or bf16 with schedule.weights_dtype=bf16; resume ones stay fp32.
    probe_weights = (2 if cfg.schedule.weights_dtype == "bf16" else 4) * params
    resume = 8 * params if cfg.engine.kind == "torch" else (12 + 2) * params
    return (checkpoints - with_resume) * probe_weights + with_resume * (4 * params + resume)


# Measured: ../shared/corpora/zh (26 files) is 2,587,054 stream tokens under the grid's 49,953-piece tokenizer:
# the bytes per token an estimate divides by. A smaller vocabulary cuts finer (6,000 pieces: 3.9 bytes a token),
# so the estimate says it is one and --count-tokens counts.
ZH_BYTES, ZH_TOKENS = 15_516_591, 2_587_054
BYTES_PER_TOKEN = ZH_BYTES / ZH_TOKENS


def corpus_size(cfg: TrainConfig, count: bool = False) -> CorpusSize:
    """The run's corpus in tokens: its token store's (count=True: built now), else estimated from bytes."""
    d = cfg.data
    if d.source != "files":
        return CorpusSize(None, f"data.source={d.source}: generated at start, not sized")
    try:
        groups = _collect_files(d)
    except (FileNotFoundError, ValueError) as e:
        return CorpusSize(None, f"not checked ({e})")
    cache = Path(d.cache_dir).expanduser()
    corpus_id = corpus_identity(d, groups)
    if count:
        from train.token_store import build_or_load  # imports datasets: only when counting
        docs, corpus_id = load_documents(d)
        build_or_load(docs, prepare_tokenizer(cfg.tokenizer, docs, corpus_id, cache), corpus_id, cache, d.num_proc)
    store = _cached_store(cfg, corpus_id, cache)
    if store is not None:
        return CorpusSize(*store)
    text = sum(f.stat().st_size for fmt in ("text", "jsonl") for f in groups.get(fmt, []))
    if "parquet" in groups or not text:
        return CorpusSize(None, "parquet files: --count-tokens counts them")
    from train.sequences import HELDOUT_MAX_FRACTION
    tokens = text / BYTES_PER_TOKEN
    tokens -= min(d.heldout_tokens, HELDOUT_MAX_FRACTION * tokens)  # the held-out split is never trained on
    return CorpusSize(round(tokens), estimate=True, how=f"an estimate: {text / 1e6:.1f} MB of text at "
                      f"{BYTES_PER_TOKEN:.2f} bytes a token (../shared/corpora/zh under the grid's tokenizer); "
                      f"--count-tokens counts it (it trains the tokenizer and builds the token store, cached for the runs)")


def _cached_store(cfg: TrainConfig, corpus_id: str, cache: Path) -> Optional[tuple[int, str]]:
    """(stream tokens, where from) of the token store a run of cfg would load, if it is built."""
    from train.token_store import TokenStore, store_fingerprint
    t = cfg.tokenizer
    tdir = pretrained_dir(t) if t.kind == "pretrained" else trained_dir(t, corpus_id, cache)
    if not (tdir / "tokenizer.json").is_file() and not (tdir / "tokenizer_config.json").is_file():
        return None
    path = cache / "stores" / store_fingerprint(corpus_id, tdir)
    if not (path / "meta.json").is_file():
        return None
    import numpy as np

    from train.sequences import split_order

    store = TokenStore(path)
    frame = 1 + (document_tokens(load_tokenizer(tdir))[1] is not None)  # start (and end) token per document
    n_tokens, n_docs = int(store.meta["n_tokens"]), int(store.meta["n_docs"])
    # the stream a run trains from: the held-out documents (data.heldout_tokens) are never in it
    lengths = np.diff(store.doc_offsets) + frame
    order, held = split_order(lengths, cfg.data.order_seed, cfg.data.heldout_tokens)
    return int(lengths[order].sum()), (f"counted: {n_tokens:,} tokens + the start/end tokens of {n_docs:,} documents"
                                       + (f", less {len(held):,} held-out documents ({int(lengths[held].sum()):,} "
                                          f"tokens, data.heldout_tokens)" if len(held) else "") + f" (token store {path})")


def plan_run(overrides: Sequence[str], hw: Hardware, _params_cache: Optional[dict] = None,
             count_tokens: bool = False) -> RunPlan:
    cfg, choices = compose_run(overrides)
    cache = {} if _params_cache is None else _params_cache
    d = cfg.data
    corpus_key = ("corpus", tuple(d.paths), d.source, d.format, d.text_field, d.cache_dir, repr(cfg.tokenizer),
                  d.order_seed, d.heldout_tokens)
    if corpus_key not in cache:
        cache[corpus_key] = corpus_size(cfg, count_tokens)
    corpus = cache[corpus_key]
    view = math.ceil(d.budget_tokens / d.epochs) if d.budget_tokens else 0
    # train/sequences.py's check at start: a budget's view (start tokens included) must fit the corpus
    cannot_start = (f"budget {_si(d.budget_tokens)} needs a corpus of {_si(view)} tokens, it has "
                    f"{'~' if corpus.estimate else ''}{_si(corpus.tokens)}"
                    if corpus.tokens is not None and view > corpus.tokens else "")
    key = repr(cfg.model) + repr(cfg.tokenizer if cfg.model.vocab_size is None else None)
    if key not in cache:
        cache[key] = parameter_count(cfg)
    params = cache[key]
    seq_len = cfg.data.seq_len or cfg.model.max_position_embeddings
    steps = planned_steps(cfg)
    if steps < 1:
        raise ValueError(f"run {' '.join(overrides)}: budget {cfg.data.budget_tokens} tokens is not one "
                         f"step of optim.global_batch={cfg.optim.global_batch} x seq_len={seq_len}")
    tokens = steps * cfg.optim.global_batch * seq_len
    n_ckpt = len(checkpoint_steps(cfg.schedule, steps, cfg.optim.global_batch * seq_len))
    mfu, mfu_source = hw.utilisation().of(cfg.model.name, params)
    per_hour = hw.peak_tflops * 1e12 * mfu * 3600.0
    gpu_hours = 6.0 * params * tokens / per_hour
    probing, probe_pairs, left_out = probe_flops(params, cfg.probes, n_ckpt)
    memory, setup = memory_per_gpu(cfg, params, seq_len, hw.gpus)
    t = cfg.tokenizer
    tokenizer = tokenizer_label(t.kind, t.vocab_size, t.path, t.model_type, tokenizer_length(t))
    return RunPlan(name=run_subdir(cfg), overrides=list(overrides), preset=choices.get("optim", "?"),
                   budget=cfg.data.budget_tokens, params=params, tokenizer=tokenizer, seq_len=seq_len,
                   global_batch=cfg.optim.global_batch, steps=steps,
                   tokens=tokens, checkpoints=n_ckpt, gpu_hours=gpu_hours,
                   storage_bytes=storage_bytes(cfg, params, n_ckpt), memory=memory, setup=setup,
                   probe_hours=probing / per_hour, probe_pairs=probe_pairs, mfu=mfu, mfu_source=mfu_source,
                   probes_left_out=tuple(left_out), warnings=tuple(recipe_warnings(cfg, steps, seq_len)),
                   cannot_start=cannot_start, corpus=corpus, cfg=cfg)


def memory_per_gpu(cfg: TrainConfig, params: int, seq_len: int, gpus: int) -> tuple[Memory, str]:
    """Training memory on one of `gpus` GPUs (auto precision = bf16), and a label of what it depends on."""
    e, m = cfg.engine, cfg.model
    vocab = m.vocab_size if m.vocab_size is not None else pad_vocab(cfg.tokenizer.vocab_size)
    stage = e.zero_stage if e.kind == "deepspeed" else 0
    memory = estimate(params=params, layers=m.num_hidden_layers, hidden=m.hidden_size,
                      heads=m.num_attention_heads, vocab=vocab, seq_len=seq_len,
                      micro_batch=cfg.optim.micro_batch, engine_kind=e.kind, zero_stage=stage,
                      bf16=e.precision != "fp32", gpus=gpus, checkpointing=m.gradient_checkpointing,
                      attn_implementation=m.attn_implementation, loss_chunk=e.loss_chunk)
    engine = f"ds-z{stage}" if e.kind == "deepspeed" else ("ddp" if gpus > 1 else "torch")
    setup = (f"{engine} mb{cfg.optim.micro_batch}{' ckpt' if m.gradient_checkpointing else ''}"
             f"{' lc' if e.loss_chunk else ''}")
    return memory, setup


def plan(overrides: Sequence[str], hw: Optional[Hardware] = None, count_tokens: bool = False) -> list[RunPlan]:
    hw = hw or Hardware()
    cache: dict = {}
    with hydra_context():
        return [plan_run(run, hw, cache, count_tokens) for run in expand(overrides)]


def _si(n: float) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.4g}{unit}"
    return f"{n:.3g}"


def format_plan(plans: list[RunPlan], hw: Hardware) -> str:
    head = f"{'run':<28} {'preset':<9} {'params':>13} {'tokenizer':<26} {'batch':>9} {'steps':>9} {'tokens':>8} " \
           f"{'ckpts':>5} {'MFU':>6} {'train-h':>9} {'probe-h':>8} {'storage':>10}"
    lines = [head, "-" * len(head)]
    for p in plans:
        lines.append(f"{p.name:<28} {p.preset:<9} {p.params:>13,} {p.tokenizer:<26} {f'{p.global_batch}x{p.seq_len}':>9} "
                     f"{p.steps:>9,} {_si(p.tokens):>8} {p.checkpoints:>5} {p.mfu:>6.1%} {p.gpu_hours:>9.2f} "
                     f"{p.probe_hours:>8.2f} {p.storage_bytes / GB:>8.1f}GB{'  CANNOT START' if p.cannot_start else ''}")
    lines.append("-" * len(head))
    lines.append(f"{'total: ' + str(len(plans)) + ' runs':<38} {'':>51} {sum(p.steps for p in plans):>9,} "
                 f"{_si(sum(p.tokens for p in plans)):>8} {sum(p.checkpoints for p in plans):>5} {'':>6} "
                 f"{sum(p.gpu_hours for p in plans):>9.1f} {sum(p.probe_hours for p in plans):>8.1f} "
                 f"{sum(p.storage_bytes for p in plans) / GB:>8.1f}GB")
    by_budget: dict[int, set[int]] = {}
    for p in plans:
        by_budget.setdefault(p.budget, set()).add(p.checkpoints)
    lines.append("checkpoints per run by budget (step 0 and the last step included): " + ", ".join(
        f"{_si(b)}: {'/'.join(map(str, sorted(c)))}" for b, c in sorted(by_budget.items())))
    lines += _format_corpus(plans)
    lines += _format_cpu(plans)
    lines += ["", _format_memory(plans, hw)]
    lines += [
        "",
        _format_cost(plans, hw),
        "steps: from each budget (tokens trained on = steps x batch x seq_len <= budget); the corpus must "
        "hold the budget (see corpus above).",
        "storage: every checkpoint's weights (fp32; bf16 off the last keep_resume with "
        "schedule.weights_dtype=bf16) + resume state (optimizer, RNG) on the last schedule.keep_resume only.",
    ]
    return "\n".join(lines)


def _format_corpus(plans: list[RunPlan]) -> list[str]:
    """The corpus each run reads, in tokens, and the runs it is too small for (they stop at start)."""
    lines = []
    for corpus in dict.fromkeys(p.corpus for p in plans if p.corpus is not None):
        runs = [p for p in plans if p.corpus == corpus]
        paths = " ".join(runs[0].cfg.data.paths) if runs[0].cfg else "?"
        size = "" if corpus.tokens is None else f"{'~' if corpus.estimate else ''}{_si(corpus.tokens)} tokens, "
        lines.append(f"corpus {paths}: {size}{corpus.how}")
        stopped = [p for p in runs if p.cannot_start]
        for reason in dict.fromkeys(p.cannot_start for p in stopped):
            names = [p.name for p in stopped if p.cannot_start == reason]
            lines.append(f"CANNOT START ({len(names)} of {len(plans)} runs, marked above): {reason}; a larger corpus: "
                         "data.paths or $SYNTAX_DYNAMICS_CORPUS (docs/zhoblimp_grid.md)")
    return lines


# On a CPU: the laptop grid (experiment=zhoblimp_mini) measured 2,159 CPU-s for 86,448 GFLOP of training
# (6*N*D over its 12 runs; one thread each, tokenizer, token store and probing included; docs/report.md)
CPU_GFLOP_PER_S, CPU_SIZED_PARAMS = 86_448 / 2_159, 20e6


def _format_cpu(plans: list[RunPlan]) -> list[str]:
    """CPU-seconds for the runs small enough to train on a CPU (0.00 GPU-h says nothing to a laptop's user)."""
    small = [6 * p.params * p.tokens / (CPU_GFLOP_PER_S * 1e9) for p in plans if p.params < CPU_SIZED_PARAMS]
    if not small:
        return []
    return [f"cpu: {sum(small):,.0f} CPU-s ({sum(small) / 3600:.2f} CPU-h; the longest run {max(small):,.0f}) for "
            f"the {len(small)} runs under {_si(CPU_SIZED_PARAMS)} parameters, at {CPU_GFLOP_PER_S:.1f} GFLOP of 6*N*D "
            f"per CPU-second: the laptop grid's, measured with tokenizer, token store and probing (docs/report.md)"]


def _format_cost(plans: list[RunPlan], hw: Hardware) -> str:
    """The GPU-hour assumptions: MFU per size and where each figure comes from, and the probing."""
    sizes = {}
    for p in plans:
        sizes.setdefault(p.name.split("-b")[0], (p.mfu, p.mfu_source))
    mfu = ", ".join(f"{name} {m:.1%} ({src})" for name, (m, src) in sizes.items())
    pairs = sorted({p.probe_pairs for p in plans})
    left_out = sorted({b for p in plans for b in p.probes_left_out})
    return (f"train-h: 6*N*D FLOPs at the MFU per size of a {hw.gpu} ({hw.peak_tflops:g} TFLOP/s peak): {mfu}. "
            f"Defaults measured by bench/bench_gpu.py on one H100 (pythia-160m 20.7 %, 410m 28.8 %, 1.4b 41.6 %); "
            f"--mfu 0.35 or --mfu NAME=0.3 overrides. probe-h: a forward pass over both sentences of "
            f"{'/'.join(f'{n:,}' for n in pairs)} pairs at every checkpoint (+ every pair at the last with "
            f"probes.final_all_pairs), {TOKENS_PER_PAIR:.1f} tokens per pair, at the training MFU (a lower bound: "
            f"short sentences in batches of probes.batch_size run below it)"
            + (f"; not counted: {', '.join(left_out)} (size unknown to the plan)" if left_out else "")
            + f". Checkpoint I/O not included. `train slurm` sizes time limits for an A100-80GB "
              f"({A100_BF16_PEAK_TFLOPS:g} TFLOP/s): --gpu A100 --peak-tflops {A100_BF16_PEAK_TFLOPS:g} prints its hours.")


def _format_memory(plans: list[RunPlan], hw: Hardware) -> str:
    head = (f"memory per GPU (GiB), {hw.gpus} GPU{'s' if hw.gpus > 1 else ''} per run\n"
            f"{'run':<28} {'setup':<16} {'weights':>7} {'grads':>6} {'Adam':>6} {'activ':>6} {'total':>6}"
            f"  A100-40GB  A100-80GB")
    lines = [head]
    for p in plans:
        m = p.memory
        fit = ["fits" if m.fits(cap * GiB) else "no" for cap in (40, 80)]  # 40 and 80 GiB cards
        lines.append(f"{p.name:<28} {p.setup:<16} {m.weights / GiB:>7.1f} {m.grads / GiB:>6.1f} "
                     f"{m.optimizer / GiB:>6.1f} {m.activations / GiB:>6.1f} {m.total / GiB:>6.1f}"
                     f"  {fit[0]:>9}  {fit[1]:>9}")
    lines.append("memory: weights + gradients + Adam states (ZeRO paper: 2+2+12 B/param in bf16, sharded "
                 "by ZeRO-1/2/3; torch engine 4+4+8, DDP +4) + activations of one micro-batch "
                 "(Korthikanti et al. 2022 as transformers keeps them: 38sbh per layer under autocast, 36 in bf16; "
                 "eager attention +6as^2b; checkpointing: the layer inputs; the loss backward 12sbV; autocast's "
                 "bf16 weight copies 2 B/param; within 5 % of H100 peaks, bench/memory_peaks.csv). 'fits': total <= 90 % of the "
                 "GPU's memory (CUDA context and fragmentation not counted). See train/plan.py.")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train.plan", description=__doc__.split("\n")[0])
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for python -m train -m")
    parser.add_argument("-m", "--multirun", action="store_true",
                        help="accepted as in python -m train -m; the plan always expands the sweep")
    parser.add_argument("--mfu", action="append", default=[], metavar="[NAME=]FRACTION",
                        help="model FLOPs utilisation: one figure for every size, or NAME=fraction for one "
                             "model (repeatable); default: measured per size on an H100 (train/plan.py)")
    parser.add_argument("--peak-tflops", type=float, default=H100_BF16_PEAK_TFLOPS)
    parser.add_argument("--gpu", default="H100 (bf16)", help="name printed with the assumptions")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs per run (ZeRO shards states over them)")
    parser.add_argument("--count-tokens", action="store_true",
                        help="count the corpus's tokens exactly: train the tokenizer and build the token store "
                             "where no run has (minutes; both cached for the runs). Default: a built store's "
                             "count, else an estimate from the files' bytes")
    args = parser.parse_args(argv)
    try:
        util = parse_mfu(args.mfu)
    except ValueError as e:
        parser.error(str(e))
    if args.gpus < 1:
        parser.error(f"--gpus={args.gpus}: expected at least 1")
    hw = Hardware(gpu=args.gpu, peak_tflops=args.peak_tflops, mfu=util.everything, gpus=args.gpus,
                  mfu_table={k: v for k, v in util.table.items()})
    try:
        plans = plan(args.overrides, hw, args.count_tokens)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_plan(plans, hw))
    runs: dict[str, list[str]] = {}  # the start-up warnings the runs would print, one line naming its runs
    for p in plans:
        for message in p.warnings:
            runs.setdefault(message, []).append(p.name)
    for message, names in runs.items():
        print(f"warning: {', '.join(names)}: {message}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
