"""`python -m probes report RUN_DIR... --out DIR`: the whole analysis as report.md + PNGs + tables (docs/report.md),
from run directories only (never W&B), every number behind a figure or table written beside it; runs of one
model x budget are its seeds."""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from probes.analysis.aggregate import bootstrap_paradigm_intervals
from probes.analysis.aoa import AoAConfig, FitStore, aoa_intervals, start_aoa_table
from probes.analysis.bands import (above_chance, band_caption, change_units, final_bands, paradigm_bands, seed_bands,
                                   shared_pair_var, unit_curves)
from probes.analysis.evalfile import MLP, SUM
from probes.analysis.casestudy import CaseStudyConfig, case_study_section, pick_paradigms
from probes.analysis.curves import phenomenon_table
from probes.analysis.evalset import ALL_SUFFIX, EvalInputError, EvalSet, load_runs
from probes.analysis.figcache import FigureCache
from probes.analysis.formuse import use_sections
from probes.analysis.heldout import final_heldout, heldout_table, plot_heldout
from probes.analysis.normsweep import sweep_paradigms, sweep_summary
from probes.analysis.outputs import (MANIFEST, REPORT_ENTRIES, FigureJobs, check_owned_output, staged_output,
                                     write_csv, write_parquet, write_table, write_text)
from probes.analysis.paper_ushapes import paper_u_table
from probes.analysis.paperfigs import (MAX_PANELS, budget_order, pick, plot_all_phenomena, plot_budgets, plot_overall,
                                       plot_u_gallery)
from probes.analysis.plotting import accuracy_label, safe_name
from probes.analysis.regions import RegionConfig, group_region_curves, plot_regions, u_region_table
from probes.analysis.reportmd import markdown, summary_table
from probes.analysis.scaling import (ScalingConfig, budget_label, difficulty_groups, final_accuracy, grid_tables,
                                     plot_grid_overall, plot_grid_phenomena)
from probes.analysis.table4 import blimp_human, table4, zhoblimp_human
from probes.analysis.ushape import (FALSE_U_BUDGET, U_LEVELS, UShapeConfig, count_text, curve_benchmarks,
                                    find_u_shapes_in_runs, search_config)
from probes.families import families
from train.cli import exit_on_user_error
from train.errors import UserError, check_writable


@dataclass
class ReportConfig:
    metric: str = "mlp"  # mlp | sum: the accuracy used by every analysis
    ushape: UShapeConfig = field(default_factory=UShapeConfig)
    # the paper's U's are phenomenon curves; "paradigm" adds every paradigm (118 more curves per model x
    # budget on ZhoBLiMP), which the false-U budget below then pays for with a stricter per-curve level
    u_levels: tuple = U_LEVELS
    false_u_budget: float = FALSE_U_BUDGET  # at most this many false U's expected in the whole report
    aoa: AoAConfig = field(default_factory=AoAConfig)
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    regions: RegionConfig = field(default_factory=RegionConfig)
    case_study: CaseStudyConfig = field(default_factory=CaseStudyConfig)
    wandb: bool = False  # also log figures and tables to W&B (offline unless WANDB_MODE says otherwise)
    wandb_project: str = "syntax-dynamics"

    def __post_init__(self) -> None:
        bad = set(self.u_levels) - {"phenomenon", "paradigm"}
        if bad or not self.u_levels:
            raise ValueError(f"u_levels: expected phenomenon and/or paradigm, got {list(self.u_levels)}")
        if self.false_u_budget <= 0:
            raise ValueError(f"false_u_budget must be > 0, got {self.false_u_budget}")


CACHE_DIR = ".cache"  # what a later report on unchanged inputs reuses (a dot name: not part of what is read)
# what the AoA worker is sent of the curves (pickling the rest of a grid's table cost the parent 0.1 s)
AOA_COLUMNS = ["run", "model", "budget", "seed", "step", "tokens", "benchmark", "phenomenon", "paradigm", "acc_mlp",
               "acc_sum"]
BIG_ROWS = 10_000  # above this a table is written as parquet only: CSV of a whole grid takes minutes


def big_table(stem: Path, df: pd.DataFrame) -> None:
    if len(df) > BIG_ROWS:
        write_parquet(stem.with_suffix(".parquet"), df)
    else:
        write_table(stem, df)


def final_benchmarks(table: pd.DataFrame) -> list[str]:
    """Per benchmark, the one its final numbers come from: "<name>_all" where the runs have it."""
    have = set(table.benchmark.unique())
    names = sorted({b.removesuffix(ALL_SUFFIX) for b in have})
    return [f"{b}{ALL_SUFFIX}" if f"{b}{ALL_SUFFIX}" in have else b for b in names]


def u_levels_alpha(ev: EvalSet, cfg: ReportConfig) -> tuple[int, float]:
    """The number of curves the U search looks at, and the per-curve level that keeps the expected
    number of false U's in the whole report at most cfg.false_u_budget (ushape.search_config)."""
    n, u = search_config(ev, cfg.ushape, cfg.u_levels, cfg.false_u_budget)
    return n, u.alpha


def report_config(ev: EvalSet, cfg: Optional[ReportConfig] = None, alpha: Optional[float] = None) -> ReportConfig:
    """`cfg` with the U search's per-curve level for the whole report (u_levels_alpha unless `alpha`; bootstrap
    and null draws enough for it) and the report's metric in every section."""
    cfg = cfg or ReportConfig()
    u = search_config(ev, dataclasses.replace(cfg.ushape, metric=cfg.metric), cfg.u_levels, cfg.false_u_budget,
                      alpha)[1]
    return dataclasses.replace(cfg, ushape=u, aoa=dataclasses.replace(cfg.aoa, metric=cfg.metric),
                               scaling=dataclasses.replace(cfg.scaling, metric=cfg.metric))


# one BLAS thread: the figure workers hold the other cores, and idle BLAS threads spin (the AoA fits
# took 3.1 CPU-s with two threads for 2.5 with one, in the same wall time and to the same bits)
@threadpool_limits.wrap(limits=1, user_api="blas")
def build_report(ev: EvalSet, out: Path, cfg: ReportConfig, workers: Optional[int] = None,
                 figure_cache: bool = True, previous: Optional[Path] = None) -> dict:
    """Write report.md, figures/, appendix/ and tables/ under `out`, the figures drawn by `workers` processes
    (default: up to 2) meanwhile. What the report in `previous` (default `out`) computed from unchanged inputs is
    reused, the same bits: its sigmoid fits (CACHE_DIR) and, with `figure_cache`, its figures."""
    t0 = time.perf_counter()
    tdir, fdir, adir = (out / sub for sub in ("tables", "figures", "appendix"))
    for sub in (fdir, adir, tdir):
        sub.mkdir(parents=True, exist_ok=True)
    metric = f"acc_{cfg.metric}"
    ylabel = accuracy_label(metric)
    notes = list(ev.problems)
    curve_b, final_b = curve_benchmarks(ev.table), final_benchmarks(ev.table)
    with FigureJobs(workers) as jobs:
        ct = ev.table[ev.table.benchmark.isin(curve_b)]
        # AoA and forgettability (section 5) first: the sigmoid fits not kept from the previous report are
        # made by a worker meanwhile (MINPACK's thousand small fits are a report's longest computation)
        fits = FitStore(Path(previous or out) / CACHE_DIR / "aoa-fits.npz")
        phen_all = phenomenon_table(ev.table)  # a phenomenon's rows are its benchmark's: filtering commutes
        phen_ct = phen_all if len(ct) == len(ev.table) else \
            phen_all[phen_all.benchmark.isin(curve_b)].reset_index(drop=True)
        finish_aoa = start_aoa_table(ct[AOA_COLUMNS], phen_ct, dataclasses.replace(cfg.aoa, metric=cfg.metric),
                                     fits, jobs.compute)
        n_curves, alpha = u_levels_alpha(ev, cfg)
        cfg = report_config(ev, cfg, alpha)
        R: dict = {"curve_benchmarks": curve_b, "final_benchmarks": final_b, "n_u_curves": n_curves}
        # the figure cache (its code version takes ~0.1 s) once the fits are under way: no figure before it
        jobs.cache = cache = FigureCache(out, previous) if figure_cache else None

        # 1. curves: overall and per phenomenon, seed mean with the band the seeds can support
        human = zhoblimp_human(ev.table)  # (per phenomenon, overall) or None: ZhoBLiMP's human validation
        human_acc = dict(zip(human[0].phenomenon, human[0].human_acc)) if human else {}
        bit = MLP if cfg.metric == "mlp" else SUM
        shared = shared_pair_var(ev.outcomes, ev.runs, bit)  # every seed scores the same pairs: their variance
        u_over, u_phen = unit_curves(ct, metric, (), shared), unit_curves(ct, metric, ("phenomenon",), shared)
        b_over = seed_bands(u_over, ["model", "budget", "benchmark", "step"])
        b_phen = seed_bands(u_phen, ["model", "budget", "benchmark", "phenomenon", "step"])
        if len(b_over):
            jobs.submit("Overall learning curve", plot_overall, b_over, u_over, fdir / "overall_curve.png", ylabel)
        R["heldout"] = val = heldout_table(ev.runs)  # beside it: the held-out loss (probes/analysis/heldout.py)
        if len(val):
            jobs.submit("Held-out loss", plot_heldout, val, fdir / "heldout_loss.png")
        for bench in curve_b:
            bb = b_phen[b_phen.benchmark == bench]
            largest = budget_order(bb)[-1]
            hum = human_acc if bench == "zhoblimp" else None
            jobs.submit(f"All phenomena, {bench} (Figure 5)", plot_all_phenomena, bb, u_phen[u_phen.benchmark == bench],
                        bench, largest, fdir / f"phenomena_{safe_name(bench)}.png", ylabel, hum)
            for ph, s in bb.groupby("phenomenon", sort=True):  # a panel per corpus budget
                jobs.submit(f"Appendix: learning curve, {bench} · {ph}", plot_budgets, s,
                            u_phen[(u_phen.benchmark == bench) & (u_phen.phenomenon == ph)],
                            adir / f"curve_{safe_name(bench)}_{safe_name(ph)}.png", ylabel, f"{bench} · {ph}; x: tokens "
                            f"seen (log), hollow marker = step 0\n{band_caption(s)}", human_acc.get(ph) if hum else None)
        R["bands"] = pd.concat([b_over, b_phen], ignore_index=True)  # the caption names every kind drawn
        # the other probes' sections: the form-vs-use figure (the largest) is drawn from here on
        use_md, use_figs = use_sections(ev, out, metric, cfg.aoa, jobs)

        # 2. final accuracy: the Table-4-style table, scaling view and difficulty groups (all pairs where scored)
        final = final_accuracy(ev.table, ev.runs)
        # each cell's 95 % interval over seeds and pairs (probes.analysis.bands), from each run's last checkpoint
        cells = {by: final_bands(ev.table, metric, by, shared) for by in ((), ("phenomenon",), ("phenomenon", "paradigm"))}
        overall, per_phen = grid_tables(final, metric, (cells[()], cells[("phenomenon",)]))
        t4_cells = pd.concat([cells[("phenomenon",)], cells[()].assign(phenomenon="overall")], ignore_index=True)
        refs = {"zhoblimp": human, "blimp": blimp_human(ev.table)}  # human rows: the paper's, BLiMP's own
        R["table4"] = {b: table4(final, b, metric, refs.get(b.removesuffix(ALL_SUFFIX)), final_heldout(val) if len(val)
                                 else None, t4_cells) for b in final_b}
        par_cells = cells[("phenomenon", "paradigm")][["model", "budget", "benchmark", "paradigm", "lo", "hi"]]
        R["groups"] = groups = difficulty_groups(final[final.benchmark.isin(final_b)].merge(
            par_cells, on=["model", "budget", "benchmark", "paradigm"], how="left"), cfg.scaling)
        for bench in final_b:
            o, pp = overall[overall.benchmark == bench], per_phen[per_phen.benchmark == bench]
            jobs.submit(f"Scaling, {bench} (model × corpus)", plot_grid_overall, o, bench, metric,
                        fdir / f"scaling_{bench}_overall.png")
            jobs.submit(f"Scaling, {bench} per phenomenon", plot_grid_phenomena, o, pp, bench, metric,
                        fdir / f"scaling_{bench}_phenomena.png")

        # 3. U-shapes (levels and per-curve level from cfg), their pictures, the paper's U's beside ours
        u_evidence: list[str] = []
        ev_c = dataclasses.replace(ev, outcomes={k: v for k, v in ev.outcomes.items() if k[1] in curve_b})
        us, u_notes = find_u_shapes_in_runs(ev_c, cfg.ushape, levels=cfg.u_levels, evidence=u_evidence)
        notes += u_notes
        # a dip peaking at step 0 is the initialisation's accuracy, not a U: its own table, not the gallery's
        step0_u = us[us.accepted & (us.peak_step == 0)] if len(us) else us
        acc_u = us[us.accepted & (us.peak_step > 0)].sort_values("u_depth", ascending=False, ignore_index=True) \
            if len(us) else us
        if len(us):  # deepest first, u_id 1, 2, ... as the gallery's panels are numbered
            acc_u.insert(0, "u_id", np.arange(1, len(acc_u) + 1))
            acc_u["in_gallery"] = acc_u["u_id"] <= MAX_PANELS
        if len(acc_u):
            u_par = unit_curves(ct, metric, ("phenomenon", "paradigm"), shared)
            b_par = seed_bands(u_par, ["model", "budget", "benchmark", "phenomenon", "paradigm", "step"])
            ub = pd.concat([b_phen.assign(paradigm=""), b_par], ignore_index=True)
            uu = pd.concat([u_phen.assign(paradigm=""), u_par], ignore_index=True)
            jobs.submit("U-shapes (numbered as the table)", plot_u_gallery, acc_u[acc_u.in_gallery], ub, uu,
                        fdir / "ushapes.png", ylabel)
        R["paper_us"] = paper_u_table(ev_c, cfg.ushape) if "zhoblimp" in curve_b else pd.DataFrame()

        # the first paragraph: change from step 0, phenomena above chance, U's, pairs needed (reportmd.summary_table)
        ch = change_units(ev.outcomes, ev.runs, bit, curve_b)
        R["change"] = seed_bands(ch, ["model", "budget", "benchmark"], bounds=(-1, 1)).merge(
            ch.groupby(["model", "budget", "benchmark"], dropna=False)[["first_acc", "last_acc"]].mean().reset_index(),
            on=["model", "budget", "benchmark"]) if len(ch) else ch
        R["phen_final"] = above_chance(cells[("phenomenon",)][cells[("phenomenon",)].benchmark.isin(final_b)])
        R.update(us=us, ev=ev)
        R["summary"] = summary_table(R, cfg)

        # 4. the generic regions (appendix; paradigms with an accepted U first) and the paper's case study
        par_curves, phen_curves = group_region_curves(ev.table), group_region_curves(phen_all)
        regions_u = u_region_table(us, par_curves, phen_curves, cfg.regions) if len(us) else pd.DataFrame()
        has_regions = par_curves[["delta_critical", "delta_suffix"]].notna().any(axis=1) & \
            par_curves.benchmark.isin(curve_b)
        keys = ["model", "budget", "benchmark", "phenomenon", "paradigm"]
        candidates = par_curves.loc[has_regions, keys].drop_duplicates()
        with_u = candidates.merge(acc_u[keys].drop_duplicates(), on=keys) if len(acc_u) else candidates.iloc[:0]
        pick_r = pd.concat([with_u, candidates]).drop_duplicates().head(cfg.regions.max_plots)
        for k in pick_r.to_dict("records"):
            group = f"{k['model']} · {budget_label(k['budget'])}"
            name = "_".join(["regions", *(safe_name(k[c]) for c in ("benchmark", "paradigm", "model"))])
            jobs.submit(f"Appendix: regions over training, {k['paradigm']} ({group})", plot_regions,
                        pick(par_curves, **k), f"{k['benchmark']} · {k['paradigm']} ({group})",
                        adir / f"{name}_{budget_label(k['budget'])}.png", pick(acc_u, **k) if len(acc_u) else None,
                        metric)
        cs_md, cs_notes = case_study_section(ev, cfg.case_study, out, jobs, metric)
        notes += cs_notes
        aoa_note_at = len(notes)  # section 5's note, once its fits are in

        # 6. normalised scores as their authors sweep them (last checkpoint, from the stored per-pair sums)
        sweep = sweep_paradigms(ev.runs)
        R["sweep"] = sweep_summary(sweep) if len(sweep) else pd.DataFrame()

        # 7. every number behind the figures, written while the workers draw
        write_csv(tdir / "heldout_loss.csv", val)
        for name, df in (("accuracy_paradigm", bootstrap_paradigm_intervals(ev.table)), ("curves_overall", b_over),
                         ("curves_overall_seeds", u_over), ("curves_phenomenon", b_phen),
                         ("curves_phenomenon_seeds", u_phen), ("seeds_paradigm", paradigm_bands(ct, [*keys, "step"])),
                         ("region_curves_paradigm", par_curves)):
            big_table(tdir / name, df)
        if len(sweep):
            big_table(tdir / "normalised_sweep_paradigm", sweep)
        write_csv(tdir / "summary.csv", R["summary"])
        write_csv(tdir / "phenomena_above_chance.csv", R["phen_final"])
        for b, t4 in R["table4"].items():
            write_csv(tdir / f"table4_{safe_name(b)}.csv", t4)
        for name, df in (("ushapes", us), ("ushapes_accepted", acc_u), ("ushapes_step0", step0_u),
                         ("ushape_regions", regions_u),
                         ("final_accuracy_paradigm", final),
                         ("scaling_overall", overall), ("scaling_phenomenon", per_phen),
                         ("difficulty_groups", groups), ("paper_ushapes", R["paper_us"]),
                         ("normalised_sweep_summary", R["sweep"])):
            write_csv(tdir / f"{name}.csv", df)
        runs = pd.DataFrame([dataclasses.asdict(r) for r in ev.runs])
        write_csv(tdir / "runs.csv", runs)
        # 5. AoA and forgettability, on curves only: last, so that the parent's own work is done while a
        # worker fits (its note keeps its place among the others)
        aoa = finish_aoa()
        few = aoa[aoa.status == "too_few_checkpoints"]
        if len(few):
            notes.insert(aoa_note_at, f"{len(few)} curve(s) have fewer than {cfg.aoa.min_points} trained checkpoints: "
                         f"no sigmoid fitted, AoA left empty (e.g. {few.iloc[0].run} "
                         f"{few.iloc[0].paradigm or few.iloc[0].phenomenon})")
        aoa_ph = aoa[aoa.level == "phenomenon"].groupby(["model", "budget", "benchmark", "phenomenon"], dropna=False).agg(
            n_runs=("run", "nunique"), aoa_log10_tokens=("aoa_log10_tokens", "mean"),
            aoa_acquired_runs=("aoa_log10_tokens", "count"), forgettability=("forgettability", "mean"),
            best_fitted_acc=("best_fitted_acc", "mean"), final_acc=("final_acc", "mean")).reset_index()
        aoa_ph = aoa_intervals(ev_c.outcomes, ev.runs, aoa_ph, aoa, ct, cfg.aoa, cfg.ushape.seed, fits)
        fits.save(out / CACHE_DIR / "aoa-fits.npz")  # the point fits and the intervals' resamples
        R["reused"] = {"aoa_fit_batches": (fits.hits, fits.hits + fits.misses)}
        write_csv(tdir / "aoa.csv", aoa)
        write_csv(tdir / "aoa_phenomenon_summary.csv", aoa_ph)
        figs = jobs.results()

    if notes:
        write_text(out / "problems.txt", "\n".join(notes) + "\n")
    R.update(ev=ev, cfg=cfg, runs=runs, us=us, acc_u=acc_u, u_evidence=u_evidence, aoa_ph=aoa_ph,
             overall=overall, regions_u=regions_u, figs=figs, other_figs=use_figs, notes=notes,
             other_md=use_md, cs_md=cs_md, human=human, rule=u_rule_text(cfg.ushape, n_curves))
    md, main_figs = markdown(R, out)
    write_text(out / "report.md", md)
    all_figs = figs + use_figs
    result = {"figures": [p for _, p in all_figs], "main_figures": main_figs, "ushapes": us, "aoa": aoa,
              "groups": groups, "notes": notes, "ushape_evidence": u_evidence, "seconds": time.perf_counter() - t0,
              "figure_cache": (cache.hits, cache.misses) if cache else None}
    result["reused"] = {**R["reused"], **({"figures": (cache.hits, cache.hits + cache.misses)} if cache else {})}
    if cfg.wandb:
        _log_wandb(cfg, out, all_figs)
    return result


def u_rule_text(u: UShapeConfig, n_curves: Optional[int] = None) -> str:
    """The U-shape acceptance rule in words, with this report's parameters."""
    looks = (["the raw checkpoints"] if u.raw else []) + (
        [f"the curve smoothed on log10 tokens (local-linear, bandwidth {u.bandwidth} decades, at least "
         f"{u.min_neighbours} neighbours)"] if u.bandwidth > 0 else [])
    family = (f"The search looks at {n_curves} curve(s); each is tested at level {u.alpha:.3g}, so at most "
              f"{u.alpha * n_curves:.2f} false U's are expected in this whole report (curves flat at chance; "
              "rising curves far less). " if n_curves else "")
    return (family + f"Candidates: drop and recovery >= {u.delta} on the seed-mean curve, looked for on "
            f"{' and on '.join(looks)}. Accepted when (1) the U's depth, min(drop, recovery), exceeds the "
            f"deepest drop that noise makes anywhere on the schedule at that scale "
            f"({1 - u.alpha / max(len(looks), 1):.4g} quantile over {u.n_null} Monte Carlo draws of binomial noise "
            "at the curve's own accuracies and pairs, its variance times the checkpoints' measured dispersion where "
            "that is above 1 (column noise_dispersion: the same pairs at every checkpoint, seeds sharing data); "
            "looking at every checkpoint is paid for here), (2) the paired "
            f"bootstrap over pairs ({u.n_boot} resamples, the same pairs at every checkpoint and seed) puts the "
            f"drop{' and the recovery' if u.require_recovery else ''} above 0 at one-sided level {u.alpha:.3g}, "
            f"and (3) at least {u.min_seed_agreement:.0%} of seeds show it on their own curve (with 2 seeds that "
            "is one seed: the agreement column says how many did). With one seed "
            "only binomial noise can be measured: a U is reported as too_thin when it is no deeper than what "
            "that noise makes at p = 0.5 with the curve's pairs per paradigm; the pairs a U of depth d needs "
            "are (c / d)^2 for the schedule's one-pair noise threshold c. A curve without an accepted U shows no "
            "dip deeper than its noise threshold; shallower ones are not detectable here, not absent. Kinds: "
            "learned_then_lost (peak above chance after the model left its near-random stage), early_heuristic "
            "(peak above chance while the model was still near-random), chance_dip (the peak itself is not above "
            "chance; the peak's level is read on the smoothed curve, Bonferroni over the checkpoints it was "
            "picked from).")


def _log_wandb(cfg: ReportConfig, out: Path, figs) -> None:
    import wandb

    os.environ.setdefault("WANDB_MODE", "offline")  # never reach the network unless the user asked for it
    run = wandb.init(project=cfg.wandb_project, job_type="report", dir=str(out))
    run.log({f"report/{Path(p).stem}": wandb.Image(str(p)) for _, p in figs})
    for name in ("ushapes", "aoa_phenomenon_summary", "difficulty_groups", "scaling_overall",
                 *(t for f in families() for t in f.tables)):
        if (out / "tables" / f"{name}.csv").is_file():  # a family's tables only where runs have that probe
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
    p.add_argument("--u-levels", default=",".join(d.u_levels), metavar="LEVELS",
                   help="curves searched for U's: phenomenon (default, the paper's level) and/or paradigm")
    p.add_argument("--false-u-budget", type=float, default=d.false_u_budget,
                   help="expected false U's allowed in the whole report; sets the per-curve level "
                        f"(default {d.false_u_budget})")
    p.add_argument("--max-region-plots", type=int, default=d.regions.max_plots)
    p.add_argument("--case-study", default=d.case_study.paradigm, metavar="PARADIGM",
                   help="paradigm of the Figure-6-style case study (accuracy and phrase-region deltas over "
                        "training, seed bands); 'auto' (default): npi_renhe_wh_question_subj where the runs "
                        "have ZhoBLiMP, else the grammar's sv_agreement_pp_attractor; 'none': off")
    p.add_argument("--case-study-quantity", choices=["mean", "sum"], default=d.case_study.quantity,
                   help="region delta drawn: 'mean' = difference in mean log-prob per token (the paper's), "
                        "'sum' = difference in summed log-prob (tables carry both)")
    p.add_argument("--phrase-regions", default=None, metavar="JSON",
                   help="slot grouping per paradigm (default probes/benchmarks/phrase_regions.json)")
    p.add_argument("--wandb", action="store_true", help="also log figures and tables to W&B (offline by default)")
    p.add_argument("--no-figure-cache", action="store_true",
                   help="draw every figure; by default a figure whose inputs and plotting code are unchanged "
                        "since the report in --out is copied from its .figure-cache")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        cfg = ReportConfig(metric=a.metric, wandb=a.wandb, u_levels=tuple(a.u_levels.split(",")),
                           false_u_budget=a.false_u_budget,
                           ushape=UShapeConfig(delta=a.delta, bandwidth=a.bandwidth, n_boot=a.n_boot),
                           aoa=AoAConfig(bandwidth=a.bandwidth),
                           regions=RegionConfig(max_plots=a.max_region_plots),
                           case_study=CaseStudyConfig(paradigm=a.case_study, quantity=a.case_study_quantity,
                                                      phrase_regions=a.phrase_regions))
        # a read-only or missing place, a dangling link, a file of the user's the report would replace: one line,
        # before any work
        check_owned_output(a.out, REPORT_ENTRIES, MANIFEST)
        check_writable(a.out, "--out")
        ev = load_runs(a.run_dirs)
        pick_paradigms(ev, cfg.case_study.paradigm)  # a misspelt paradigm fails before any work
    except (EvalInputError, ValueError, UserError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def staged() -> dict:  # built whole beside --out, then swapped in (a killed report leaves the old one)
        with staged_output(a.out) as stage:
            res = build_report(ev, stage, cfg, figure_cache=not a.no_figure_cache, previous=a.out)
        # the figures' paths where they now are, not where they were built
        for key in ("figures", "main_figures"):
            res[key] = [a.out / Path(p).relative_to(stage) for p in res[key]]
        return res

    # a file refused half-way (SLOR/MORCELA read every last-checkpoint file), a full disk: one line too
    res = exit_on_user_error(staged)
    for n in res["notes"]:
        print(f"warning: {n}", file=sys.stderr)
    for n in res["ushape_evidence"]:
        print(f"U-shapes: {n}")
    print(f"report: {a.out / 'report.md'} ({len(res['main_figures'])} figures in the main flow, "
          f"{len(res['figures']) - len(res['main_figures'])} in the appendix; tables in {a.out / 'tables'}); "
          f"{count_text(res['ushapes'])}; {res['seconds']:.1f} s"
          + (f"; {res['figure_cache'][0]} figure(s) reused from the figure cache" if res["figure_cache"] else ""))
    if res["main_figures"]:
        print(f"first figure: {res['main_figures'][0]}")
    return 0
