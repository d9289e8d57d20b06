"""`python -m probes report RUN_DIR... --out DIR`: the whole analysis as report.md + PNGs + tables.

Reads only run directories (never W&B). Every number behind a figure or a table in report.md is
written as CSV (and parquet for the large tables) next to it. Works on one run (the demo) and on a
whole grid (models x budgets x seeds; runs of one model x budget are treated as seeds).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd

from probes.aggregate import bootstrap_paradigm_intervals, bootstrap_phenomenon_intervals, seed_summary
from probes.aoa import AoAConfig, aoa_table
from probes.curves import (GROUP_RUN, colors, finish_legend, new_figure, phenomenon_table, plot_line,
                           safe_name, token_axis)
from probes.evalset import EvalInputError, EvalSet, load_runs
from probes.outputs import save_figure, write_csv, write_parquet, write_table, write_text
from probes.regions import RegionConfig, group_region_curves, plot_regions, u_region_table
from probes.scaling import (ScalingConfig, budget_label, difficulty_groups, final_accuracy, grid_tables,
                            plot_grid)
from probes.ushape import UShapeConfig, find_u_shapes_in_runs


@dataclass
class ReportConfig:
    metric: str = "mlp"  # mlp | sum: the accuracy used by every analysis
    ushape: UShapeConfig = field(default_factory=UShapeConfig)
    aoa: AoAConfig = field(default_factory=AoAConfig)
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    regions: RegionConfig = field(default_factory=RegionConfig)
    wandb: bool = False  # also log figures and tables to W&B (offline unless WANDB_MODE says otherwise)
    wandb_project: str = "syntax-dynamics"


BIG_ROWS = 50_000  # above this a table is written as parquet only: CSV of a whole grid takes minutes


def big_table(stem: Path, df: pd.DataFrame) -> None:
    if len(df) > BIG_ROWS:
        write_parquet(stem.with_suffix(".parquet"), df)
    else:
        write_table(stem, df)


def _group_label(model, budget) -> str:
    return f"{model} · {budget_label(budget)}"


def plot_phenomenon_bands(seeds: pd.DataFrame, boot: pd.DataFrame, benchmark: str, phenomenon: str,
                          metric: str, path: Path) -> Path:
    """One line per model x budget: seed mean with its 95 % interval (bootstrap over pairs if one seed)."""
    s = seeds[(seeds.benchmark == benchmark) & (seeds.phenomenon == phenomenon)]
    ref = seeds.loc[seeds.benchmark == benchmark, "tokens"].to_numpy()
    groups = list(s.groupby(["model", "budget"], dropna=False, sort=True))
    fig, axes = new_figure()
    ax = axes[0, 0]
    kinds = set()
    for ((model, budget), g), c in zip(groups, colors(len(groups))):
        g = g.sort_values("step")
        if (g.n_seeds > 1).all():
            band, n = (g[f"{metric}_lo"].clip(0, 1), g[f"{metric}_hi"].clip(0, 1)), int(g.n_seeds.min())
            kinds.add("95 % interval over seeds")
        else:
            b = boot[(boot.benchmark == benchmark) & (boot.phenomenon == phenomenon) & (boot.model == model)]
            b = b[b.budget.isna()] if pd.isna(budget) else b[b.budget == budget]
            b = b.groupby("step")[[f"{metric}_boot_lo", f"{metric}_boot_hi"]].mean().reindex(g.step)
            band, n = (b.iloc[:, 0].to_numpy(), b.iloc[:, 1].to_numpy()), 1
            kinds.add("95 % bootstrap over pairs")
        label = f"{_group_label(model, budget)} ({n} seed{'s' if n > 1 else ''})"
        plot_line(ax, g.tokens.to_numpy(), g[f"{metric}_mean"].to_numpy(), ref, label, c, band=band)
    token_axis(ax, ref, ylabel=f"accuracy ({'MLP' if metric == 'acc_mlp' else 'sum-LP'})")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{benchmark} · {phenomenon}\nbands: {', '.join(sorted(kinds))}", fontsize=10)
    finish_legend(ax, len(groups), "model · budget")
    return save_figure(fig, path)


def _md_table(df: pd.DataFrame, limit: int = 30, floatfmt: str = "{:.3g}") -> str:
    if df.empty:
        return "_(none)_\n"
    d = df.head(limit).copy()
    for c in d.columns:
        if pd.api.types.is_float_dtype(d[c]):
            d[c] = d[c].map(lambda v: "" if pd.isna(v) else floatfmt.format(v))
    d = d.astype(object).map(lambda v: "" if not isinstance(v, str) and pd.isna(v) else str(v))
    head = "| " + " | ".join(d.columns) + " |\n|" + "---|" * len(d.columns) + "\n"
    body = "".join("| " + " | ".join(r) + " |\n" for r in d.itertuples(index=False))
    more = f"\n_{len(df) - limit} more rows in the CSV._\n" if len(df) > limit else ""
    return head + body + more


def build_report(ev: EvalSet, out: Path, cfg: ReportConfig) -> dict:
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    (out / "figures").mkdir(exist_ok=True)
    (out / "tables").mkdir(exist_ok=True)
    tdir, fdir = out / "tables", out / "figures"
    metric = f"acc_{cfg.metric}"
    for sub in (cfg.ushape, cfg.aoa, cfg.scaling):
        sub.metric = cfg.metric
    figs: list[tuple[str, Path]] = []
    notes = list(ev.problems)

    # 1. accuracies, bootstrap over pairs, seeds
    par = bootstrap_paradigm_intervals(ev.table)
    phen = phenomenon_table(ev.table)
    phen_boot = bootstrap_phenomenon_intervals(ev.table, [*GROUP_RUN, "step", "tokens", "benchmark", "phenomenon"])
    big_table(tdir / "accuracy_paradigm", par)
    big_table(tdir / "accuracy_phenomenon", phen_boot)
    seeds_par = seed_summary(ev.table, ["model", "budget", "benchmark", "phenomenon", "paradigm", "step"])
    seeds_phen = seed_summary(phen, ["model", "budget", "benchmark", "phenomenon", "step"])
    big_table(tdir / "seeds_paradigm", seeds_par)
    big_table(tdir / "seeds_phenomenon", seeds_phen)
    for bench in sorted(phen.benchmark.unique()):
        for ph in sorted(phen.loc[phen.benchmark == bench, "phenomenon"].unique()):
            p = plot_phenomenon_bands(seeds_phen, phen_boot, bench, ph, metric,
                                      fdir / f"curve_{safe_name(bench)}_{safe_name(ph)}.png")
            figs.append((f"Learning curve, {bench} · {ph}", p))

    # 2. U-shapes
    us, u_notes = find_u_shapes_in_runs(ev, cfg.ushape)
    notes += u_notes
    write_csv(tdir / "ushapes.csv", us)

    # 3. AoA and forgettability
    aoa = aoa_table(ev.table, phen, cfg.aoa)
    write_csv(tdir / "aoa.csv", aoa)
    few = aoa[aoa.status == "too_few_checkpoints"]
    if len(few):
        notes.append(f"{len(few)} curve(s) have fewer than {cfg.aoa.min_points} trained checkpoints: no sigmoid "
                     f"fitted, AoA left empty (e.g. {few.iloc[0].run} {few.iloc[0].paradigm or few.iloc[0].phenomenon})")
    aoa_ph = aoa[aoa.level == "phenomenon"].groupby(["model", "budget", "benchmark", "phenomenon"], dropna=False).agg(
        n_runs=("run", "nunique"), aoa_log10_tokens=("aoa_log10_tokens", "mean"),
        aoa_acquired_runs=("aoa_log10_tokens", "count"), forgettability=("forgettability", "mean"),
        best_fitted_acc=("best_fitted_acc", "mean"), final_acc=("final_acc", "mean")).reset_index()
    write_csv(tdir / "aoa_phenomenon_summary.csv", aoa_ph)

    # 4. scaling grid and difficulty groups
    final = final_accuracy(ev.table, ev.runs)
    overall, per_phen = grid_tables(final, metric)
    groups = difficulty_groups(final, cfg.scaling)
    write_csv(tdir / "final_accuracy_paradigm.csv", final)
    write_csv(tdir / "scaling_overall.csv", overall)
    write_csv(tdir / "scaling_phenomenon.csv", per_phen)
    write_csv(tdir / "difficulty_groups.csv", groups)
    for bench in sorted(final.benchmark.unique()):
        a, b = plot_grid(overall, per_phen, bench, metric, fdir)
        figs += [(f"Scaling heatmap, {bench} (model × corpus)", a), (f"Scaling heatmap, {bench} per phenomenon", b)]

    # 5. regions
    par_curves, phen_curves = group_region_curves(ev.table), group_region_curves(phen)
    big_table(tdir / "region_curves_paradigm", par_curves)
    regions_u = u_region_table(us, par_curves, phen_curves, cfg.regions) if len(us) else pd.DataFrame()
    write_csv(tdir / "ushape_regions.csv", regions_u)
    has_regions = par_curves[["delta_critical", "delta_suffix"]].notna().any(axis=1)
    candidates = par_curves[has_regions][["model", "budget", "benchmark", "phenomenon", "paradigm"]].drop_duplicates()
    acc_u = us[us.accepted & (us.level == "paradigm")]
    keyed = acc_u[["model", "budget", "benchmark", "paradigm"]].drop_duplicates()
    with_u = candidates.merge(keyed, on=["model", "budget", "benchmark", "paradigm"])
    pick = pd.concat([with_u, candidates]).drop_duplicates().head(cfg.regions.max_plots)
    for _, k in pick.iterrows():
        sel = ((par_curves.model == k.model) & (par_curves.benchmark == k.benchmark) & (par_curves.paradigm == k.paradigm)
               & (par_curves.budget.isna() if pd.isna(k.budget) else par_curves.budget == k.budget))
        uu = acc_u[(acc_u.model == k.model) & (acc_u.benchmark == k.benchmark) & (acc_u.paradigm == k.paradigm)
                   & (acc_u.budget.isna() if pd.isna(k.budget) else acc_u.budget == k.budget)]
        name = f"regions_{safe_name(k.benchmark)}_{safe_name(k.paradigm)}_{safe_name(k.model)}_{budget_label(k.budget)}.png"
        p = plot_regions(par_curves[sel], f"{k.benchmark} · {k.paradigm} ({_group_label(k.model, k.budget)}); "
                         "U windows shaded", fdir / name, uu, metric)
        figs.append((f"Regions over training, {k.paradigm} ({_group_label(k.model, k.budget)})", p))

    # 6. report.md
    runs = pd.DataFrame([dataclasses.asdict(r) for r in ev.runs])
    write_csv(tdir / "runs.csv", runs)
    if notes:
        write_text(out / "problems.txt", "\n".join(notes) + "\n")
    md = _markdown(ev, cfg, runs, us, aoa_ph, overall, groups, regions_u, figs, notes, out)
    write_text(out / "report.md", md)
    result = {"figures": [p for _, p in figs], "ushapes": us, "aoa": aoa, "groups": groups,
              "notes": notes, "seconds": time.perf_counter() - t0}
    if cfg.wandb:
        _log_wandb(cfg, out, figs)
    return result


def _markdown(ev, cfg, runs, us, aoa_ph, overall, groups, regions_u, figs, notes, out: Path) -> str:
    rel = lambda p: Path(p).relative_to(out).as_posix()  # noqa: E731
    acc = us[us.accepted] if len(us) else us
    L = ["# syntax-dynamics report", "",
         f"{len(ev.runs)} run(s); scoring convention `{ev.convention}`; accuracy = "
         f"{'mean log-prob per token (MLP)' if cfg.metric == 'mlp' else 'sum of log-probs'}, ties wrong; "
         "chance 0.5. Tokens on log axes; step 0 is drawn one decade left of the first trained checkpoint.", "",
         "## Runs", "", _md_table(runs[["name", "model", "budget", "seed", "experiment", "path"]], 60)]
    if notes:
        L += ["## Problems in the input (the data that is there was used)", ""]
        L += [f"- {n}" for n in notes[:40]] + ([f"- … {len(notes) - 40} more in problems.txt"] if len(notes) > 40 else [])
        L.append("")
    L += ["## Figures", ""] + [f"{i + 1}. [{t}]({rel(p)})" for i, (t, p) in enumerate(figs)] + [""]
    L += ["## Learning curves", ""] + [f"![{t}]({rel(p)})" for t, p in figs if t.startswith("Learning")] + [""]
    u = cfg.ushape
    L += ["## U-shapes", "",
          f"Drop and recovery >= {u.delta} on curves smoothed on log10 tokens (local-linear, bandwidth "
          f"{u.bandwidth} decades, at least {u.min_neighbours} neighbours); accepted when the paired bootstrap "
          f"over pairs ({u.n_boot} resamples) puts the drop{' and the recovery' if u.require_recovery else ''} "
          f"above 0 at one-sided level {u.alpha} and at least {u.min_seed_agreement:.0%} of seeds show it. "
          "Kinds: learned_then_lost (peak above chance after the model left its near-random stage), "
          "early_heuristic (peak above chance while the model was still near-random), chance_dip (the peak "
          f"itself is not above chance). {len(acc)} accepted of {len(us)} candidates "
          "(all candidates in tables/ushapes.csv).", ""]
    cols = ["model", "budget", "benchmark", "level", "phenomenon", "paradigm", "kind", "peak_tokens",
            "trough_tokens", "recovery_tokens", "peak_acc", "trough_acc", "depth", "p_drop", "seed_agreement"]
    L += [_md_table(acc[cols].sort_values("depth", ascending=False) if len(acc) else acc), ""]
    if len(regions_u):
        L += ["### Which region's delta moves first", "",
              _md_table(regions_u[["model", "budget", "level", "phenomenon", "paradigm", "kind", "moves_first",
                                   "critical_onset_tokens", "suffix_onset_tokens"]]), ""]
    L += ["## Age of acquisition and forgettability (per phenomenon, mean over seeds)", "",
          f"Sigmoid on log10 tokens; AoA where it crosses halfway between chance and its best accuracy "
          f"(empty: not acquired by {cfg.aoa.min_gain} over chance, no rise above {cfg.aoa.min_rise_rmse}x the fit's RMSE, decreasing, above halfway at the first "
          "checkpoint, or too few checkpoints — per-curve status in tables/aoa.csv). Forgettability: sum of "
          "drops of the smoothed curve.", "",
          _md_table(aoa_ph.sort_values("aoa_log10_tokens")), ""]
    L += ["## Scaling grid", ""] + [f"![{t}]({rel(p)})" for t, p in figs if t.startswith("Scaling")] + [""]
    L += [_md_table(overall), ""]
    s = cfg.scaling
    counts = groups.groupby(["budget", "benchmark", "group"], dropna=False).size().unstack(fill_value=0) \
        if len(groups) else pd.DataFrame()
    L += ["## Difficulty groups", "",
          f"Per budget and paradigm, from the best final accuracy over model sizes and Pearson r between "
          f"accuracy and log10 model size: Easy best >= {s.easy_min_best}; Medium best >= {s.medium_min_best}; "
          f"Difficult near chance with r >= {s.difficult_min_r}; Other near chance otherwise (also when fewer "
          f"than {s.min_sizes_for_r} model sizes make r meaningless). The ZhoBLiMP paper's exact thresholds "
          "were not at hand; these are our documented defaults (probes/scaling.py).", "",
          _md_table(counts.reset_index()) if len(counts) else "_(none)_", "",
          _md_table(groups.drop(columns=["reason"]), 40), ""]
    L += ["## Regions over training", ""] + [f"![{t}]({rel(p)})" for t, p in figs if t.startswith("Regions")] + [""]
    tables = sorted({p.with_suffix("") for p in (out / "tables").iterdir() if p.suffix in (".csv", ".parquet")})
    L += ["## Tables (every number above; .csv and/or .parquet)", ""]
    L += [f"- `{p.relative_to(out).as_posix()}` ({', '.join(sorted(q.suffix for q in p.parent.glob(p.name + '.*')))})"
          for p in tables]
    L += ["", "## Parameters", "", "```", repr(cfg), "```", ""]
    return "\n".join(L)


def _log_wandb(cfg: ReportConfig, out: Path, figs) -> None:
    import os

    import wandb

    os.environ.setdefault("WANDB_MODE", "offline")  # never reach the network unless the user asked for it
    run = wandb.init(project=cfg.wandb_project, job_type="report", dir=str(out))
    run.log({f"report/{Path(p).stem}": wandb.Image(str(p)) for _, p in figs})
    for name in ("ushapes", "aoa_phenomenon_summary", "difficulty_groups", "scaling_overall"):
        run.log({f"report/{name}": wandb.Table(dataframe=pd.read_csv(out / "tables" / f"{name}.csv"))})
    run.finish()


def build_parser() -> argparse.ArgumentParser:
    d = ReportConfig()
    p = argparse.ArgumentParser(prog="python -m probes report",
                                description="Analysis report (curves, U-shapes, AoA, scaling, regions) from run directories.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--metric", choices=["mlp", "sum"], default=d.metric)
    p.add_argument("--delta", type=float, default=d.ushape.delta, help=f"U-shape min drop/recovery (default {d.ushape.delta})")
    p.add_argument("--bandwidth", type=float, default=d.ushape.bandwidth, help="smoothing, decades of tokens")
    p.add_argument("--n-boot", type=int, default=d.ushape.n_boot)
    p.add_argument("--max-region-plots", type=int, default=d.regions.max_plots)
    p.add_argument("--wandb", action="store_true", help="also log figures and tables to W&B (offline by default)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        cfg = ReportConfig(metric=a.metric, wandb=a.wandb,
                           ushape=UShapeConfig(delta=a.delta, bandwidth=a.bandwidth, n_boot=a.n_boot),
                           aoa=AoAConfig(bandwidth=a.bandwidth),
                           regions=RegionConfig(max_plots=a.max_region_plots))
        ev = load_runs(a.run_dirs)
    except (EvalInputError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    res = build_report(ev, a.out, cfg)
    for n in res["notes"]:
        print(f"warning: {n}", file=sys.stderr)
    n_acc = int(res["ushapes"]["accepted"].sum()) if len(res["ushapes"]) else 0
    print(f"report: {a.out / 'report.md'} ({len(res['figures'])} figures in {a.out / 'figures'}, "
          f"tables in {a.out / 'tables'}); {n_acc} accepted U-shape(s); {res['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
