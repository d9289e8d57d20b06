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

from probes.analysis.aggregate import bootstrap_paradigm_intervals, bootstrap_phenomenon_intervals, seed_summary
from probes.analysis.aoa import AoAConfig, aoa_table
from probes.analysis.casestudy import CaseStudyConfig, case_study_section, pick_paradigms
from probes.analysis.curves import GROUP_RUN, phenomenon_table
from probes.analysis.plotting import plot_line, safe_name, token_axis
from probes.analysis.evalset import ALL_SUFFIX, EvalInputError, EvalSet, load_runs, parse_model_params
from probes.analysis.formuse import use_sections
from probes.analysis.human import PAPER_HUMAN_OVERALL, zhoblimp_human
from probes.scoring.unigram import MORCELA_BETA, MORCELA_GAMMA, final_metrics
from probes.analysis.outputs import FigureJobs, save_figure, staged_output, write_csv, write_parquet, write_table, write_text
from probes.analysis.regions import RegionConfig, group_region_curves, plot_regions, u_region_table
from probes.analysis.scaling import (PAPER_GROUPS, ScalingConfig, budget_label, difficulty_groups, final_accuracy,
                            grid_tables, plot_grid_overall, plot_grid_phenomena)
from probes.syntaxqa.report import syntax_qa_section
from probes.analysis.ushape import UShapeConfig, find_u_shapes_in_runs
from train.cli import exit_on_user_error
from train.errors import UserError, check_writable


@dataclass
class ReportConfig:
    metric: str = "mlp"  # mlp | sum: the accuracy used by every analysis
    ushape: UShapeConfig = field(default_factory=UShapeConfig)
    aoa: AoAConfig = field(default_factory=AoAConfig)
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    regions: RegionConfig = field(default_factory=RegionConfig)
    case_study: CaseStudyConfig = field(default_factory=CaseStudyConfig)
    wandb: bool = False  # also log figures and tables to W&B (offline unless WANDB_MODE says otherwise)
    wandb_project: str = "syntax-dynamics"


BIG_ROWS = 10_000  # above this a table is written as parquet only: CSV of a whole grid takes minutes


def big_table(stem: Path, df: pd.DataFrame) -> None:
    if len(df) > BIG_ROWS:
        write_parquet(stem.with_suffix(".parquet"), df)
    else:
        write_table(stem, df)


def _group_label(model, budget) -> str:
    return f"{model} · {budget_label(budget)}"


def plot_phenomenon_bands(s: pd.DataFrame, boot: pd.DataFrame, ref, benchmark: str, phenomenon: str,
                          metric: str, path: Path, human: Optional[float] = None) -> Path:
    """One panel per corpus budget, one line per model (coloured by size): seed mean with its 95 %
    interval over seeds, or the bootstrap interval over pairs where a group has a single seed.

    s / boot: the seed-summary and bootstrap rows of this benchmark and phenomenon; ref: every
    token count of the benchmark, so all its figures put step 0 at the same place. The layout is
    fixed rather than constrained: on a grid report these figures are most of the drawing time
    and constrained layout draws each one twice."""
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    models = sorted(s.model.unique(), key=lambda m: (parse_model_params(m) or float("inf"), m))
    budgets = sorted(s.budget.unique(), key=lambda b: (pd.isna(b), 0 if pd.isna(b) else float(b)))
    cmap = colormaps["viridis"]
    color = {m: cmap(0.9 * i / max(len(models) - 1, 1)) for i, m in enumerate(models)}
    ncols = min(4, len(budgets))
    nrows = -(-len(budgets) // ncols)
    fig = Figure(figsize=(3.4 * ncols + 2.3, 3.3 * nrows + 0.9))
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True)
    kinds, handles = set(), {}
    for ax, budget in zip(axes.flat, budgets):
        sb = s[s.budget.isna()] if pd.isna(budget) else s[s.budget == budget]
        for model in models:
            g = sb[sb.model == model].sort_values("step")
            if g.empty:
                continue
            if (g.n_seeds > 1).all():
                band, n = (g[f"{metric}_lo"].clip(0, 1), g[f"{metric}_hi"].clip(0, 1)), int(g.n_seeds.min())
                kinds.add("95 % interval over seeds")
            else:
                b = boot[boot.model == model]
                b = b[b.budget.isna()] if pd.isna(budget) else b[b.budget == budget]
                b = b.groupby("step")[[f"{metric}_boot_lo", f"{metric}_boot_hi"]].mean().reindex(g.step)
                band, n = (b.iloc[:, 0].to_numpy(), b.iloc[:, 1].to_numpy()), 1
                kinds.add("95 % bootstrap over pairs")
            label = f"{model} ({n} seed{'s' if n > 1 else ''})"
            plot_line(ax, g.tokens.to_numpy(), g[f"{metric}_mean"].to_numpy(), ref, label, color[model], band=band)
            handles.setdefault(model, ax.lines[-1 if not (g.tokens == 0).any() else -2])
        if human is not None and human == human:  # the human baseline of this phenomenon (probes/analysis/human.py)
            ax.axhline(human, color="0.3", ls=":", lw=1.2)
            handles.setdefault("human", ax.lines[-1])
            handles["human"].set_label(f"human {100 * human:.1f} % (validation CSV)")
        token_axis(ax, ref, ylabel=f"accuracy ({'MLP' if metric == 'acc_mlp' else 'sum-LP'})" if ax in axes[:, 0] else "")
        xlabel = ax.get_xlabel()
        ax.set_xlabel("")  # said once for the figure: the panels are narrow
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"corpus {budget_label(budget)}", fontsize=9)
    for ax in list(axes.flat)[len(budgets):]:
        ax.set_visible(False)
    fig.suptitle(f"{benchmark} · {phenomenon}  (bands: {', '.join(sorted(kinds))})", fontsize=10)
    fig.supxlabel(xlabel, fontsize=8, x=(0.75 + fig.get_figwidth() - 2.3) / 2 / fig.get_figwidth(),
                  y=0.12 / fig.get_figheight(), va="bottom")
    keys = [m for m in [*models, "human"] if m in handles]
    fig.legend([handles[m] for m in keys], [handles[m].get_label() for m in keys],
               loc="upper left", bbox_to_anchor=(1 - 2.2 / fig.get_figwidth(), 0.9), fontsize=8,
               title="model", title_fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.75 / fig.get_figwidth(), right=1 - 2.3 / fig.get_figwidth(),
                        bottom=0.62 / fig.get_figheight(), top=1 - 0.65 / fig.get_figheight(), wspace=0.08, hspace=0.45)
    return save_figure(fig, path)


def _select(df: pd.DataFrame, model, budget, benchmark, paradigm) -> pd.DataFrame:
    sel = ((df.model == model) & (df.benchmark == benchmark) & (df.paradigm == paradigm)
           & (df.budget.isna() if pd.isna(budget) else df.budget == budget))
    return df[sel]


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


def build_report(ev: EvalSet, out: Path, cfg: ReportConfig, workers: Optional[int] = None) -> dict:
    """Write report.md, figures/ and tables/ under `out`. Figures are drawn by `workers` processes
    (default: up to 2) while the statistics for the next ones are computed."""
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    (out / "figures").mkdir(exist_ok=True)
    (out / "tables").mkdir(exist_ok=True)
    tdir, fdir = out / "tables", out / "figures"
    metric = f"acc_{cfg.metric}"
    for sub in (cfg.ushape, cfg.aoa, cfg.scaling):
        sub.metric = cfg.metric
    notes = list(ev.problems)
    with FigureJobs(workers) as jobs:
        # 1. accuracies, bootstrap over pairs, seeds; the curve figures start drawing at once
        phen = phenomenon_table(ev.table)
        phen_boot = bootstrap_phenomenon_intervals(ev.table, [*GROUP_RUN, "step", "tokens", "benchmark", "phenomenon"])
        seeds_phen = seed_summary(phen, ["model", "budget", "benchmark", "phenomenon", "step"])
        human = zhoblimp_human(ev.table)  # (per phenomenon, overall) or None: ZhoBLiMP's human validation
        human_acc = dict(zip(human[0].phenomenon, human[0].human_acc)) if human else {}
        for bench, sb in seeds_phen.groupby("benchmark", sort=True):
            ref = sb["tokens"].to_numpy()
            bb = phen_boot[phen_boot.benchmark == bench]
            for ph, s in sb.groupby("phenomenon", sort=True):
                jobs.submit(f"Learning curve, {bench} · {ph}", plot_phenomenon_bands, s, bb[bb.phenomenon == ph], ref,
                            bench, ph, metric, fdir / f"curve_{safe_name(bench)}_{safe_name(ph)}.png",
                            human_acc.get(ph) if bench in ("zhoblimp", "zhoblimp_all") else None)

        # 2. scaling grid and difficulty groups
        final = final_accuracy(ev.table, ev.runs)
        overall, per_phen = grid_tables(final, metric)
        groups = difficulty_groups(final, cfg.scaling)
        human_table = _human_table(human, per_phen, metric) if human else pd.DataFrame()
        for bench in sorted(final.benchmark.unique()):
            o, pp = overall[overall.benchmark == bench], per_phen[per_phen.benchmark == bench]
            jobs.submit(f"Scaling heatmap, {bench} (model × corpus)", plot_grid_overall, o, bench, metric, fdir)
            jobs.submit(f"Scaling heatmap, {bench} per phenomenon", plot_grid_phenomena, o, pp, bench, metric, fdir)

        # 3. U-shapes, then the region figures (paradigms with an accepted U first)
        u_evidence: list[str] = []
        us, u_notes = find_u_shapes_in_runs(ev, cfg.ushape, evidence=u_evidence)
        notes += u_notes
        par_curves, phen_curves = group_region_curves(ev.table), group_region_curves(phen)
        regions_u = u_region_table(us, par_curves, phen_curves, cfg.regions) if len(us) else pd.DataFrame()
        has_regions = par_curves[["delta_critical", "delta_suffix"]].notna().any(axis=1)
        keys = ["model", "budget", "benchmark", "phenomenon", "paradigm"]
        candidates = par_curves.loc[has_regions, keys].drop_duplicates()
        acc_u = us[us.accepted & (us.level == "paradigm")]
        with_u = candidates.merge(acc_u[keys[:3] + ["paradigm"]].drop_duplicates(), on=keys[:3] + ["paradigm"])
        pick = pd.concat([with_u, candidates]).drop_duplicates().head(cfg.regions.max_plots)
        for k in pick.itertuples(index=False):
            name = f"regions_{safe_name(k.benchmark)}_{safe_name(k.paradigm)}_{safe_name(k.model)}_{budget_label(k.budget)}.png"
            jobs.submit(f"Regions over training, {k.paradigm} ({_group_label(k.model, k.budget)})", plot_regions,
                        _select(par_curves, k.model, k.budget, k.benchmark, k.paradigm),
                        f"{k.benchmark} · {k.paradigm} ({_group_label(k.model, k.budget)}); U windows shaded",
                        fdir / name, _select(acc_u, k.model, k.budget, k.benchmark, k.paradigm), metric)

        # the paper's case study (§5.4, Figure 6): phrase regions of one paradigm, over seeds
        cs_md, cs_notes = case_study_section(ev, cfg.case_study, out, jobs, metric)
        notes += cs_notes

        # 4. AoA and forgettability
        aoa = aoa_table(ev.table, phen, cfg.aoa)
        few = aoa[aoa.status == "too_few_checkpoints"]
        few = few[~few.benchmark.astype(str).str.endswith(ALL_SUFFIX)]  # "<name>_all": last step only, by design
        if len(few):
            notes.append(f"{len(few)} curve(s) have fewer than {cfg.aoa.min_points} trained checkpoints: no sigmoid "
                         f"fitted, AoA left empty (e.g. {few.iloc[0].run} {few.iloc[0].paradigm or few.iloc[0].phenomenon})")
        aoa_ph = aoa[aoa.level == "phenomenon"].groupby(["model", "budget", "benchmark", "phenomenon"], dropna=False).agg(
            n_runs=("run", "nunique"), aoa_log10_tokens=("aoa_log10_tokens", "mean"),
            aoa_acquired_runs=("aoa_log10_tokens", "count"), forgettability=("forgettability", "mean"),
            best_fitted_acc=("best_fitted_acc", "mean"), final_acc=("final_acc", "mean")).reset_index()

        # 5. every number behind the figures, written while the workers draw
        big_table(tdir / "accuracy_paradigm", bootstrap_paradigm_intervals(ev.table))
        big_table(tdir / "accuracy_phenomenon", phen_boot)
        big_table(tdir / "seeds_paradigm",
                  seed_summary(ev.table, ["model", "budget", "benchmark", "phenomenon", "paradigm", "step"]))
        big_table(tdir / "seeds_phenomenon", seeds_phen)
        big_table(tdir / "region_curves_paradigm", par_curves)
        for name, df in (("ushapes", us), ("ushape_regions", regions_u), ("aoa", aoa),
                         ("aoa_phenomenon_summary", aoa_ph), ("final_accuracy_paradigm", final),
                         ("scaling_overall", overall), ("scaling_phenomenon", per_phen),
                         ("difficulty_groups", groups), ("human_baseline", human_table)):
            write_csv(tdir / f"{name}.csv", df)
        uni = final_metrics(ev.runs)  # SLOR / MORCELA where eval files carry unigram columns
        if len(uni):
            write_csv(tdir / "unigram_metrics_final.csv", uni)
        runs = pd.DataFrame([dataclasses.asdict(r) for r in ev.runs])
        write_csv(tdir / "runs.csv", runs)
        # 6. the syntax-questions probe, where runs have it (drawn here: three figures)
        qa_md, qa_figs = syntax_qa_section([(r.name, Path(r.path), r.model, r.budget) for r in ev.runs], out)
        # 6b. the ELAGENT tasks (where runs have them) and the form-vs-use view (FAC²E; probes.analysis.formuse)
        use_md, use_figs = use_sections(ev, out, metric, cfg.aoa)
        figs = jobs.results() + qa_figs + use_figs

    # 7. report.md
    if notes:
        write_text(out / "problems.txt", "\n".join(notes) + "\n")
    md = _markdown(ev, cfg, runs, us, aoa_ph, overall, groups, regions_u, figs, notes, out, [*qa_md, *use_md],
                   human=(human_table, human[1]) if human else None, uni=uni, cs_md=cs_md,
                   u_evidence=u_evidence)
    write_text(out / "report.md", md)
    result = {"figures": [p for _, p in figs], "ushapes": us, "aoa": aoa, "groups": groups,
              "notes": notes, "ushape_evidence": u_evidence, "seconds": time.perf_counter() - t0}
    if cfg.wandb:
        _log_wandb(cfg, out, figs)
    return result


def _human_table(human, per_phen: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per ZhoBLiMP phenomenon: human accuracy (the CSV, our reading; the paper's Table 4) beside the final
    accuracy of every model on the largest budget (the grid's best-trained models)."""
    from probes.analysis.scaling import largest_budget

    h = human[0][["phenomenon", "n_paradigms", "human_acc", "human_acc_paper"]]
    # the full benchmark at the last checkpoint (probes.final_all_pairs) where runs have it, else the sample
    full = per_phen[per_phen.benchmark == "zhoblimp_all"]
    p = full if len(full) else per_phen[per_phen.benchmark == "zhoblimp"]
    if len(p):
        p = largest_budget(p)
        wide = p.pivot_table(index="phenomenon", columns="model", values=metric, aggfunc="mean")
        wide.columns = [f"{m} · {budget_label(p.budget.iloc[0])} ({p.benchmark.iloc[0]})" for m in wide.columns]
        h = h.merge(wide.reset_index(), on="phenomenon", how="left")
    return h


def _markdown(ev, cfg, runs, us, aoa_ph, overall, groups, regions_u, figs, notes, out: Path, qa_md=(),
              human=None, uni=None, cs_md=(), u_evidence=()) -> str:
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
    L += ["## U-shapes", "", u_rule_text(u), ""]
    if len(us):
        counts = us["verdict"].value_counts()
        L += [f"{len(acc)} accepted of {len(us)} candidates (" + ", ".join(f"{n} {v}" for v, n in counts.items())
              + "; every candidate with its verdict and reason in tables/ushapes.csv).", ""]
    L += [f"- {n}" for n in u_evidence] + ([""] if len(u_evidence) else [])
    cols = ["model", "budget", "benchmark", "level", "phenomenon", "paradigm", "kind", "scale", "peak_tokens",
            "trough_tokens", "recovery_tokens", "peak_acc", "trough_acc", "u_depth", "noise_threshold", "p_drop",
            "seed_agreement"]
    L += [_md_table(acc[cols].sort_values("u_depth", ascending=False) if len(acc) else acc), ""]
    if len(regions_u):
        L += ["### Which region's delta moves first", "",
              "Generic split (critical span / shared suffix), summed Δ log-prob per region, mean over pairs.", "",
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
    if human is not None:
        table, overall_h = human
        L += ["## Human baseline (ZhoBLiMP)", "",
              f"Human agreement with the gold labels from the authors' human_validation_result.csv, pooled "
              f"correct/total over the released paradigms of each phenomenon (our reading): {100 * overall_h:.1f} % "
              f"overall; the paper reports {100 * PAPER_HUMAN_OVERALL:.1f} % (§3.3, Table 4, column human_acc_paper). "
              "Drawn as the dotted line in each ZhoBLiMP learning-curve figure; model columns: final accuracy on "
              "the largest budget.", "", _md_table(table, 40), ""]
    if uni is not None and len(uni):
        m = ["acc_mlp", "acc_sum", "acc_slor", "acc_morcela"]
        summ = uni.groupby(["model", "budget", "benchmark"], dropna=False)[m].mean().reset_index()
        summ["budget"] = summ["budget"].map(budget_label)
        L += ["## Unigram-normalised metrics at the last checkpoint (SLOR, MORCELA)", "",
              f"Mean over paradigms and seeds (as the scaling grid); SLOR = (lp - ulp)/ntok, MORCELA = (lp - {MORCELA_BETA} ulp + "
              f"{MORCELA_GAMMA})/ntok (beta, gamma: our choice, the middle of the ZhoBLiMP authors' sweep; "
              "probes/scoring/unigram.py), ulp = the sentence's unigram log-prob from the run's own token counts "
              "(or the table named in tables/unigram_metrics_final.csv). Every other section uses "
              f"{'MLP' if cfg.metric == 'mlp' else 'sum-LP'}.", "", _md_table(summ, 40), ""]
    s = cfg.scaling
    counts = groups.groupby(["budget", "benchmark", "group"], dropna=False).size().unstack(fill_value=0) \
        if len(groups) else pd.DataFrame()
    if len(counts):
        counts = counts.reindex(columns=list(PAPER_GROUPS), fill_value=0).reset_index()
        counts["budget"] = counts["budget"].map(budget_label)
        paper = {"budget": "3B (paper)", "benchmark": "zhoblimp (Zh-Pythia 14M-1.4B)", **PAPER_GROUPS}
        counts = pd.concat([counts, pd.DataFrame([paper])], ignore_index=True)
    where = ("each benchmark's largest corpus budget (the paper groups its 3B-token models)"
             if s.budget == "largest" else "every budget")
    L += ["## Difficulty groups", "",
          f"Per paradigm on {where}, from the best final accuracy over model sizes and Pearson r between "
          f"accuracy and log10 model size, as the ZhoBLiMP paper (§5.3) defines the groups: Easy best >= "
          f"{s.easy_min_best}; Medium best >= {s.medium_min_best}; Difficult near chance with r >= "
          f"{s.difficult_min_r}; Other near chance otherwise (also when fewer than {s.min_sizes_for_r} model "
          "sizes make r meaningless). The thresholds are OUR documented defaults (probes/analysis/scaling.py): the "
          "paper's numbers did not survive in its text. Last row: the paper's outcome, 80 / 15 / 13 / 10 of "
          "118 paradigms.", "",
          _md_table(counts) if len(counts) else "_(none)_", "",
          _md_table(groups.drop(columns=["reason"]), 40), ""]
    for block in cs_md:  # the case study: lines, tables, and where its figures go
        if isinstance(block, pd.DataFrame):
            L.append(_md_table(block))
        elif isinstance(block, tuple):
            L += [f"![{t}]({rel(p)})" for t, p in figs if t.startswith(block[1])]
        else:
            L.append(block)
    L += ["## Regions over training", "",
          "Generic regions of every pair (shared prefix, critical span where good and bad tokens differ, shared "
          "suffix): summed log-prob difference per region (good − bad), mean over pairs, one seed per line.", ""]
    L += [f"![{t}]({rel(p)})" for t, p in figs if t.startswith("Regions")] + [""]
    L += list(qa_md)
    tables = sorted({p.with_suffix("") for p in (out / "tables").iterdir() if p.suffix in (".csv", ".parquet")})
    L += ["## Tables (every number above; .csv and/or .parquet)", ""]
    L += [f"- `{p.relative_to(out).as_posix()}` ({', '.join(sorted(q.suffix for q in p.parent.glob(p.name + '.*')))})"
          for p in tables]
    L += ["", "## Parameters", "", "```", repr(cfg), "```", ""]
    return "\n".join(L)


def u_rule_text(u: UShapeConfig) -> str:
    """The U-shape acceptance rule in words, with this report's parameters."""
    looks = (["the raw checkpoints"] if u.raw else []) + (
        [f"the curve smoothed on log10 tokens (local-linear, bandwidth {u.bandwidth} decades, at least "
         f"{u.min_neighbours} neighbours)"] if u.bandwidth > 0 else [])
    return (f"Candidates: drop and recovery >= {u.delta} on the seed-mean curve, looked for on "
            f"{' and on '.join(looks)}. Accepted when (1) the U's depth, min(drop, recovery), exceeds the "
            f"deepest drop that binomial noise alone makes anywhere on the schedule at that scale "
            f"({1 - u.alpha / max(len(looks), 1):.3g} quantile over {u.n_null} Monte Carlo draws, at the "
            "curve's own accuracies and pairs: looking at every checkpoint is paid for here), (2) the paired "
            f"bootstrap over pairs ({u.n_boot} resamples, the same pairs at every checkpoint and seed) puts the "
            f"drop{' and the recovery' if u.require_recovery else ''} above 0 at one-sided level {u.alpha}, "
            f"and (3) at least {u.min_seed_agreement:.0%} of seeds show it on their own curve. With one seed "
            "only binomial noise can be measured: a U is reported as too_thin when it is no deeper than what "
            "that noise makes at p = 0.5 with the curve's pairs per paradigm; the pairs a U of depth d needs "
            "are (c / d)^2 for the schedule's one-pair noise threshold c. Kinds: learned_then_lost (peak "
            "above chance after the model left its near-random stage), early_heuristic (peak above chance "
            "while the model was still near-random), chance_dip (the peak itself is not above chance; the "
            "peak's level is read on the smoothed curve, Bonferroni over the checkpoints it was picked from).")


def _log_wandb(cfg: ReportConfig, out: Path, figs) -> None:
    import os

    import wandb

    os.environ.setdefault("WANDB_MODE", "offline")  # never reach the network unless the user asked for it
    run = wandb.init(project=cfg.wandb_project, job_type="report", dir=str(out))
    run.log({f"report/{Path(p).stem}": wandb.Image(str(p)) for _, p in figs})
    for name in ("ushapes", "aoa_phenomenon_summary", "difficulty_groups", "scaling_overall", "syntax_qa_final"):
        if (out / "tables" / f"{name}.csv").is_file():  # syntax_qa_final only where runs have that probe
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
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        cfg = ReportConfig(metric=a.metric, wandb=a.wandb,
                           ushape=UShapeConfig(delta=a.delta, bandwidth=a.bandwidth, n_boot=a.n_boot),
                           aoa=AoAConfig(bandwidth=a.bandwidth),
                           regions=RegionConfig(max_plots=a.max_region_plots),
                           case_study=CaseStudyConfig(paradigm=a.case_study, quantity=a.case_study_quantity,
                                                      phrase_regions=a.phrase_regions))
        check_writable(a.out, "--out")  # a read-only or missing place: one line, before any work
        ev = load_runs(a.run_dirs)
        pick_paradigms(ev, cfg.case_study.paradigm)  # a misspelt paradigm fails before any work
    except (EvalInputError, ValueError, UserError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    def staged() -> dict:  # built whole beside --out, then swapped in (a killed report leaves the old one)
        with staged_output(a.out) as stage:
            return build_report(ev, stage, cfg)

    # a file refused half-way (SLOR/MORCELA read every last-checkpoint file), a full disk: one line too
    res = exit_on_user_error(staged)
    for n in res["notes"]:
        print(f"warning: {n}", file=sys.stderr)
    for n in res["ushape_evidence"]:
        print(f"U-shapes: {n}")
    n_acc = int(res["ushapes"]["accepted"].sum()) if len(res["ushapes"]) else 0
    print(f"report: {a.out / 'report.md'} ({len(res['figures'])} figures in {a.out / 'figures'}, "
          f"tables in {a.out / 'tables'}); {n_acc} accepted U-shape(s); {res['seconds']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
