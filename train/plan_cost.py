"""The parts of `train.plan`'s cost that are not 6ND at one utilisation: model-FLOPs utilisation per
model size from a table the user can override, and the probing every checkpoint costs.

Utilisation (MFU) is measured, not assumed: `bench/bench_gpu.py` on one H100 80GB (torch engine, bf16,
32 x 2048-token batches, micro-batches of 8) gave pythia-160m 20.7 %, pythia-410m 28.8 % and pythia-1.4b
41.6 % of the H100's dense bf16 peak (989 TFLOP/s). Small models keep a GPU busy for a smaller share of the
time, so one figure for every size (the plan used 40 % of an A100 for all) undercounts the small ones
twice over. A size not in the table takes the figure of the nearest measured size by parameter count,
and the plan says so. `--mfu 0.35` sets one figure for all; `--mfu pythia-410m=0.33` overrides one row.

Probing: each checkpoint scores both sentences of every sampled pair, a forward pass (2N FLOPs per
token). Pairs per checkpoint follow from probes.benchmarks and max_pairs_per_paradigm with the
benchmarks' sizes below (tests/test_plan_cost.py checks them against the registry); tokens per pair are
ZhoBLiMP's, measured with the 8,000-piece sentencepiece (868,233 tokens / 35,400 pairs), used for every
benchmark. The scoring forward runs at the training MFU of its size (stated). probes.final_all_pairs
adds every pair at the last checkpoint. A benchmark not in the table is named and left out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

H100_BF16_PEAK_TFLOPS = 989.0  # NVIDIA H100 SXM dense bf16 tensor-core peak
# bench/bench_gpu.py on one H100 80GB (README "Speed"): model name -> (parameters measured, MFU)
MEASURED_MFU = {"pythia-160m": (162_322_944, 0.207), "pythia-410m": (405_334_016, 0.288),
                "pythia-1.4b": (1_414_647_808, 0.416)}
# registry name -> (paradigms, pairs per paradigm): probes/benchmarks/registry.json's counts
BENCHMARK_SIZES = {"zhoblimp": (118, 300), "blimp": (67, 1000), "climp": (16, 1000), "babylm_blimp": (67, 894)}
TOKENS_PER_PAIR = 868_233 / 35_400  # both sentences with the start token's successors, ZhoBLiMP, 8k spm


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
