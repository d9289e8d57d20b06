"""The probe hook: after a checkpoint is whole, every rank scores a contiguous shard of the pairs and rank 0 writes
``<run>/evals/step<N>/<benchmark>.parquet``. ``ProbesConfig`` types the run's ``probes`` section: the minimal
pairs' keys plus one section per registered family (probes/families.py); its ``build`` gives the hooks."""
from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from probes.benchmarks.registry import benchmark_configs, load_benchmark
from probes.evals.config import BenchmarkConfig
from probes.families import Family, families
from probes.evals.files import ALL_SUFFIX, eval_done, eval_path, pair_set
from probes.scoring.evaluate import ScoreOptions, evaluate_checkpoint, ids_fingerprint
from train.files import checkpoint_dir, manifest_hash
from probes.benchmarks.pairs import Pair

if TYPE_CHECKING:  # `train plan` types this config without pandas
    import pandas as pd

_ENTRY_KEYS = {f.name for f in fields(BenchmarkConfig)}


@dataclass
class PairsConfig:
    """What the probe hook scores at every checkpoint. ``benchmarks``: registry names and/or mappings of
    ``BenchmarkConfig`` fields (``[zhoblimp,{name: mine, path: /data/mine.jsonl}]``); the top-level
    ``max_pairs_per_paradigm`` and ``subsample_seed`` fill what an entry does not set."""
    # what the run's config.yaml records, so the section names its type wherever it is read back
    _target_: str = f"{__name__}.ProbesConfig"
    enabled: bool = True
    # each entry: a registry name (str) or a mapping of BenchmarkConfig fields (see above);
    # Any because OmegaConf lists hold one element type and users type bare names
    benchmarks: list[Any] = field(default_factory=list)
    max_pairs_per_paradigm: Optional[int] = 50  # for entries that do not set it; null = all pairs
    subsample_seed: int = 0
    batch_size: int = 64
    bf16: bool = False  # bfloat16 autocast: faster on GPUs, lps move by ~1e-2 nats
    # true: the run's LAST checkpoint is also scored on every pair, as evals/step<last>/<name>_all.parquet: the
    # curve keeps one sample at every checkpoint, the report's scaling grid gets the full benchmark
    final_all_pairs: bool = False
    # true: every eval file also gets ulp_good / ulp_bad from the run's token store (SLOR, MORCELA without the model)
    unigram: bool = True
    # true: every eval file also gets a sidecar <name>.tokens.parquet with each token's lp (probes/scoring/tokens.py)
    per_token: bool = False
    families: ClassVar[tuple[Family, ...]] = ()  # the families whose hooks `build` gives (probes_config)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"probes.batch_size must be >= 1, got {self.batch_size}")
        if self.max_pairs_per_paradigm is not None and self.max_pairs_per_paradigm < 1:
            raise ValueError(f"probes.max_pairs_per_paradigm must be >= 1 or null, got {self.max_pairs_per_paradigm}")
        self.resolved_benchmarks()  # a bad entry fails when the config is built

    def resolved_benchmarks(self) -> list[BenchmarkConfig]:
        """One BenchmarkConfig per entry of ``benchmarks``, defaults filled in (class doc)."""
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        out = []
        for i, entry in enumerate(self.benchmarks):
            where = f"probes.benchmarks[{i}]"
            if isinstance(entry, BenchmarkConfig):
                out.append(entry)
                continue
            if isinstance(entry, str):
                entry = {"name": entry}
            if OmegaConf.is_config(entry):
                entry = OmegaConf.to_container(entry)
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ValueError(f"{where}: expected a benchmark name or a mapping with a 'name', got {entry!r}")
            if unknown := sorted(set(entry) - _ENTRY_KEYS):
                raise ValueError(f"{where}: unknown key(s) {unknown}; known: {sorted(_ENTRY_KEYS)}")
            name, path = entry["name"], entry.get("path")
            try:
                # the registry check: a name that is neither known nor given a path fails here
                (base,) = benchmark_configs([name], self.max_pairs_per_paradigm, self.subsample_seed,
                                            {name: path} if path is not None else None)
                merged = OmegaConf.merge(OmegaConf.structured(base), entry)
                out.append(OmegaConf.to_object(merged))
            except OmegaConfBaseException as e:
                raise ValueError(f"{where}.{getattr(e, 'full_key', '')}: {getattr(e, 'msg', str(e))}") from None
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
        return out

    def build(self, ctx) -> list:
        """The checkpoint hooks (train.hooks.Hook), built on every rank from a train.hooks.HookContext: one per
        family whose section is enabled, then the curves at the end of the run."""
        if not self.enabled:
            return []
        hooks = []
        for fam in self.families:
            section = self if fam.key is None else getattr(self, fam.key)
            if fam.hook and section.enabled:
                hooks.append(fam.load("hook")(section, ctx))
        from probes.analysis.curves import CurvesHook

        return hooks + [CurvesHook()]


_CLASSES: dict[tuple, type] = {}


def probes_config() -> type:
    """The dataclass of the ``probes`` section: PairsConfig's keys plus one section per family of the registry
    that has one (``probes.syntax_qa.enabled=true``); made once per registry."""
    fams = tuple(families())
    if fams not in _CLASSES:
        cls = make_dataclass("ProbesConfig", [(f.key, f.config, field(default_factory=f.config)) for f in fams if f.key],
                             bases=(PairsConfig,), namespace={"families": fams, "__doc__": PairsConfig.__doc__})
        cls.__module__ = __name__
        _CLASSES[fams] = cls
    return _CLASSES[fams]


def __getattr__(name: str):
    # ProbesConfig, the `_target_` of configs/config.yaml, as the registry has it now: a family registered
    # since this module was imported (a plug-in, a test) has its section too
    if name == "ProbesConfig":
        return probes_config()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pair_hooks(cfg: PairsConfig, ctx) -> "ProbeHook":
    """The minimal pairs' checkpoint hook (probes/families.py)."""
    unigram = None
    if cfg.unigram and ctx.token_store is not None:  # SLOR / MORCELA need the corpus's own unigram counts
        from probes.scoring.unigram import from_counts, token_counts

        counts = token_counts(ctx.token_store, len(ctx.tokenizer))
        unigram = (from_counts(counts, len(ctx.tokenizer)), f"token_store:{Path(ctx.token_store).name}")
    return ProbeHook(cfg, ctx.tokenizer, ctx.run_dir, final_step=ctx.final_step, unigram=unigram)


def summary_metrics(df, benchmark: str) -> dict[str, float]:
    """MLP accuracy of a benchmark and of each of its phenomena, keyed for the logger (the key names the measure:
    a W&B chart of `acc` alone did not say whether it was MLP or sum-LP)."""
    from probes.scoring.primitive import accuracy, correct  # torch: `plan` types this config without it

    by_phenomenon = correct(df, "mlp").groupby(df["phenomenon"], sort=True).mean()
    return {f"probe/{benchmark}/acc_mlp": accuracy(df, "mlp"),
            **{f"probe/{benchmark}/{ph}/acc_mlp": float(acc) for ph, acc in by_phenomenon.items()}}


class ProbeHook:
    """Called by the trainer on every rank after a checkpoint is whole. ``pairs`` (benchmark name -> pairs):
    instead of loading ``cfg.benchmarks``."""

    def __init__(self, cfg: PairsConfig, tokenizer, run_dir: Path, *,
                 pairs: Optional[dict[str, list[Pair]]] = None, final_step: Optional[int] = None,
                 unigram=None):
        self.cfg, self.tokenizer, self.run_dir = cfg, tokenizer, Path(run_dir)
        self.unigram = unigram  # (log unigram probabilities per id, source) or None: no ulp columns
        self.final_step = final_step  # the run's last step (cfg.final_all_pairs scores all pairs there)
        self._all_pairs: Optional[dict[str, list[Pair]]] = None if pairs is None else dict(pairs)
        self.benchmarks = {} if not cfg.enabled else dict(pairs) if pairs is not None else _load_benchmarks(cfg)
        for name, ps in self.benchmarks.items():
            eval_path(self.run_dir, 0, name)  # fail now, not at the first checkpoint, on a bad name
            if not ps:
                raise ValueError(f"benchmark {name!r} has no pairs")
        self._pair_sets = {name: pair_set(ps) for name, ps in self.benchmarks.items()}
        # the tokenizer is the one saved in every checkpoint of this run: hash it once
        self.fingerprint = ids_fingerprint(tokenizer) if self.benchmarks else ""

    def post_checkpoint_saved(self, ckpt_dir: Path, step: int, tokens: int, model) -> dict[str, float]:
        """Score every benchmark (collective: every rank calls it) and write the eval files; a file already done
        is kept, its summary still returned so the logger sees every checkpoint."""
        metrics: dict[str, float] = {}
        rank, world = _rank_world()
        benchmarks = self.benchmarks
        if self.cfg.final_all_pairs and self.final_step is not None and step == self.final_step:
            if self._all_pairs is None:  # loaded once, at the last checkpoint only
                self._all_pairs = _load_benchmarks(self.cfg, all_pairs=True)
            benchmarks = {**benchmarks, **{f"{name}{ALL_SUFFIX}": self._all_pairs[name] for name in self.benchmarks}}
        manifest = manifest_hash(ckpt_dir)
        opts = ScoreOptions(batch_size=self.cfg.batch_size, bf16=self.cfg.bf16, per_token=self.cfg.per_token)
        for name, pairs in benchmarks.items():
            path = eval_path(self.run_dir, step, name)
            if name not in self._pair_sets:  # the <name>_all sets, hashed once when first needed
                self._pair_sets[name] = pair_set(pairs)
            # rank 0 decides, so every rank takes the same branch of the collective below
            done = _broadcast(rank == 0 and eval_done(path, self._pair_sets[name], manifest, self.cfg.per_token), world)
            if done:
                if rank == 0:
                    from probes.scoring.store import read_pairs  # pandas: here, so `train plan` need not import it
                    metrics.update(summary_metrics(read_pairs(path)[0], name))
                continue
            ev = evaluate_checkpoint(model, self.tokenizer, pairs, name=name, step=step, tokens=tokens,
                                     ckpt_dir=ckpt_dir, run_dir=self.run_dir, opts=opts,
                                     fingerprint=self.fingerprint, score=self._score, world_size=world,
                                     **({} if self.unigram is None else {"unigram": self.unigram[1]}))
            if ev is not None:  # rank 0
                metrics.update(summary_metrics(ev.df, name))
        return metrics

    def describe(self) -> str:
        """What each checkpoint is probed on, for the trainer's start-up summary."""
        parts = [f"{name} ({len(pairs):,} pairs)" for name, pairs in self.benchmarks.items()]
        if self.cfg.final_all_pairs and self.benchmarks:
            parts.append("all pairs at the last checkpoint (probes.final_all_pairs)")
        return ", ".join(parts) or "nothing (no benchmark)"

    def _score(self, model, tokenizer, pairs: list[Pair], opts: ScoreOptions) -> Optional[pd.DataFrame]:
        """The pairs scored across ranks; with ``unigram`` also ulp_good / ulp_bad (SLOR, MORCELA)."""
        df = score_sharded(model, tokenizer, pairs, opts)
        if df is None or self.unigram is None:
            return df
        from probes.scoring.unigram import add_unigram_columns

        return add_unigram_columns(df, tokenizer, self.unigram[0])

    def missing(self, step: int) -> bool:
        """Some eval file of `step` is not done for the checkpoint now on disk: the trainer probes it again."""
        manifest = manifest_hash(checkpoint_dir(self.run_dir, step))
        return any(not eval_done(eval_path(self.run_dir, step, name), self._pair_sets[name], manifest,
                                 self.cfg.per_token)
                   for name in self.benchmarks)

    def close(self) -> None:
        self.benchmarks = {}


def score_sharded(model, tokenizer, pairs: list[Pair], opts: ScoreOptions) -> Optional[pd.DataFrame]:
    """``score_pairs`` over the ranks in contiguous shards (a paradigm's shared prefixes mostly on one rank): the
    frame on rank 0, None on the others. Under ZeRO-3 a forward gathers parameters from every rank, so every rank
    runs the same passes: all pairs, unsharded."""
    import torch.distributed as torch_dist

    from probes.scoring.primitive import score_pairs

    def score(part: list[Pair]) -> pd.DataFrame:
        return score_pairs(model, tokenizer, part, batch_size=opts.batch_size, bf16=opts.bf16, device=opts.device,
                           per_token=opts.per_token)

    rank, world = _rank_world()
    if world == 1 or any(hasattr(p, "ds_id") for p in model.parameters()):
        df = score(pairs)
        return df if rank == 0 else None
    bounds = [len(pairs) * r // world for r in range(world + 1)]
    shard = pairs[bounds[rank]:bounds[rank + 1]]
    part = score(shard) if shard else None
    parts: list[Optional[pd.DataFrame]] = [None] * world
    # all_gather rather than gather: gather_object is not supported by NCCL
    torch_dist.all_gather_object(parts, part)
    if rank != 0:
        return None
    frames = [p for p in parts if p is not None]
    # slot columns appear only in shards with region-marked pairs: concat takes their union in
    # first-seen order, NaN where a pair has no such slot, as one process does
    import pandas as pd
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def _load_benchmarks(cfg: PairsConfig, all_pairs: bool = False) -> dict[str, list[Pair]]:
    configs = cfg.resolved_benchmarks()
    if all_pairs:
        configs = [replace(bc, max_pairs_per_paradigm=None) for bc in configs]
    names = [bc.name for bc in configs]
    # checked before loading anything (a real benchmark takes seconds): the name is the eval
    # file's name, so two configs with one name would overwrite each other's files
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ValueError(f"probes.benchmarks[{i}].name: {name!r} is configured twice")
        try:
            eval_path(Path("."), 0, name)
        except ValueError as e:
            raise ValueError(f"probes.benchmarks[{i}].name: {e}") from None
    return {bc.name: load_benchmark(bc) for bc in configs}


def _rank_world() -> tuple[int, int]:
    import torch.distributed as torch_dist

    if torch_dist.is_available() and torch_dist.is_initialized():
        return torch_dist.get_rank(), torch_dist.get_world_size()
    return 0, 1


def _broadcast(value, world: int):
    if world == 1:
        return value
    import torch.distributed as torch_dist

    box = [value]
    torch_dist.broadcast_object_list(box, src=0)
    return box[0]
