"""report.md, organised as the ZhoBLiMP paper: curves, Figure 5, Table 4, case study, groups, AoA, U's.
The main flow embeds a fixed set of figures (the number of paradigms or runs never adds one); the rest are
listed in the appendix."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from probes.analysis.bands import CLAIMS_95, band_caption, band_label
from probes.analysis.table4 import PAPER_HUMAN_OVERALL
from probes.analysis.normsweep import MORCELA_BETAS, MORCELA_GAMMAS, POW_ALPHAS, sweep_markdown
from probes.analysis.paper_ushapes import REFERENCE_DEPTH, paper_u_markdown
from probes.analysis.scaling import PAPER_GROUPS, budget_label
from probes.analysis.table4 import table4_markdown
from probes.analysis.paperfigs import MAX_PANELS, pick
from probes.analysis.ushape import count_ushapes, pairs_needed
from probes.benchmarks.registry import REGISTRY
from probes.evals.files import CONVENTIONS


def md_table(df: pd.DataFrame, limit: int = 30, floatfmt: str = "{:.3g}") -> str:
    if df.empty:
        return "_(none)_\n"
    d = df.head(limit).copy()
    for c in d.columns:
        if pd.api.types.is_float_dtype(d[c]):
            d[c] = d[c].map(lambda v: "" if pd.isna(v) else floatfmt.format(v))
    d = d.astype(object).map(lambda v: "" if not isinstance(v, str) and pd.isna(v) else str(v))
    head = "| " + " | ".join(map(str, d.columns)) + " |\n|" + "---|" * len(d.columns) + "\n"
    body = "".join("| " + " | ".join(r) + " |\n" for r in d.itertuples(index=False))
    more = f"\n_{len(df) - limit} more rows in the CSV._\n" if len(df) > limit else ""
    return head + body + more


def summary_table(R: dict, cfg) -> pd.DataFrame:
    """One row per model x budget x curve benchmark: what report.md's first paragraph says. The change from
    the first checkpoint with its 95 % interval (R["change"]) and whether it excludes 0; phenomena ending above
    chance (q_above < 0.05); accepted U's, learning apart from step 0's; the run's pairs_needed figure."""
    ch, ph = R["change"], R["phen_final"]
    table = R["ev"].table
    rows = []
    for d in ch.to_dict("records"):
        g = dict(model=d["model"], budget=d["budget"])
        at = lambda df: pick(df, **g)  # noqa: E731
        fin = at(ph[ph.benchmark.str.removesuffix("_all") == d["benchmark"]])
        us = at(R["us"][R["us"].benchmark == d["benchmark"]]) if len(R["us"]) else R["us"]
        c = count_ushapes(us)
        rows.append(g | {
            "benchmark": d["benchmark"], "first_acc": d["first_acc"], "last_acc": d["last_acc"],
            "change": d["acc_mean"], "change_lo": d["lo"], "change_hi": d["hi"], "band": d["band"],
            "change_told_from_zero": bool(d["lo"] > 0 or d["hi"] < 0),
            "final_benchmark": fin.benchmark.iloc[0] if len(fin) else "",
            "final_band": "/".join(sorted(set(fin.band))) if len(fin) else "",
            "phenomena_above_chance": int((fin.q_above < 0.05).sum()), "phenomena": len(fin),
            "learning_us": c["learning"], "chance_dips": c["chance_dip"], "us_from_step0": c["from_step0"],
            **pairs_needed(at(table[table.benchmark == d["benchmark"]]), cfg.ushape)})
    out = pd.DataFrame(rows)
    if len(out):
        out["budget"] = out["budget"].astype("Int64")
    return out


def _summary_md(S: pd.DataFrame) -> list[str]:
    """The first paragraph: one sentence per model x budget x benchmark (the first 8; all in summary.csv)."""
    if S.empty:
        return ["**Summary.** No benchmark was scored at two or more checkpoints: no change to report.", ""]
    out = []
    for d in S.head(8).to_dict("records"):
        seeds = f"{d['n_seeds']} seed{'s' if d['n_seeds'] > 1 else ''}"
        weak = [k for k in str(d["final_band"]).split("/") if k and k not in CLAIMS_95]
        fin_band = " by a " + ", ".join(map(band_label, weak)) if weak else ""
        told = ("told from no change" if d["change_told_from_zero"] else "**cannot be told from no change**")
        out.append(
            f"{d['model']} · {budget_label(d['budget'])} ({d['benchmark']}, {seeds}): overall accuracy "
            f"{100 * d['first_acc']:.1f} → {100 * d['last_acc']:.1f} %, change {100 * d['change']:+.1f} points "
            f"({band_label(d['band'])} interval {100 * d['change_lo']:+.1f} to {100 * d['change_hi']:+.1f}: {told}); "
            f"{d['phenomena_above_chance']} of {d['phenomena']} phenomena end above chance (q < 0.05{fin_band}, "
            f"{d['final_benchmark']}); {d['learning_us']} learning U's, {d['chance_dips']} chance dips (peak not above "
            f"chance: no knowledge lost), {d['us_from_step0']} dips peaking at step 0 (the untrained model; neither "
            f"counted as U's); {d['needed']}.")
    more = f" ({len(S) - 8} more in tables/summary.csv)" if len(S) > 8 else " (tables/summary.csv)"
    return ["**Summary.** " + " ".join(out) + more, ""]


def authors_rule(bench: str, metric: str) -> str:
    """A sentence naming the decision rule the benchmark's authors use where the registry knows one
    (RuBLiMP, TurBLiMP, JBLiMP), so a reader comparing with their paper knows which rule this table is."""
    entry = REGISTRY.get(bench.removesuffix("_all"))
    rule = entry.authors_convention if entry else None
    if rule is None:
        return ""
    same = " -- the same rule as this table's" if rule == metric else (
        "; `python -m probes score` prints the accuracy under both, and the eval files record the authors' rule "
        "as `authors_convention`")
    return f" This table is {CONVENTIONS[metric].split(':')[0]}; the authors of {bench} score by {CONVENTIONS[rule]}{same}."


def markdown(R: dict, out: Path) -> tuple[str, list[Path]]:
    """(report.md text, the figures the main flow embeds, in order)."""
    rel = lambda p: Path(p).relative_to(out).as_posix()  # noqa: E731
    ev, cfg, figs = R["ev"], R["cfg"], R["figs"]
    main: list[Path] = []

    def embed(prefix: str, caption: str = "") -> list[str]:
        got = [(t, p) for t, p in figs if t.startswith(prefix) and Path(p).parent.name == "figures"]
        main.extend(p for _, p in got)
        return [line for t, p in got for line in (f"![{t}]({rel(p)})", *([f"_{caption}_", ""] if caption else [""]))]

    runs = R["runs"]
    per_group = runs.groupby(["model", "budget"], dropna=False).size()
    seeds = sorted(set(per_group)) if len(per_group) else [0]
    metric_words = "mean log-prob per token (MLP)" if cfg.metric == "mlp" else "sum of log-probs"
    L = ["# syntax-dynamics report", "", *_summary_md(R["summary"]),
         f"{len(ev.runs)} run(s): {runs.model.nunique()} model size(s) x {runs.budget.nunique(dropna=False)} corpus "
         f"budget(s), {'/'.join(map(str, seeds))} seed(s) each; scoring convention `{ev.convention}`; accuracy = "
         f"{metric_words}, ties wrong; chance 0.5. Lines are seed means; {band_caption(R['bands'])}. Tokens on log "
         "axes; step 0 is "
         "drawn one decade left of the first trained checkpoint.", ""]
    L += ["## Learning curves", ""]
    L += embed("Overall learning curve", "Mean accuracy over every paradigm of each benchmark against tokens seen; "
               "one line per model size, one panel per corpus budget. Numbers: tables/curves_overall.csv (seed "
               "means and bands), tables/curves_overall_seeds.csv (each seed).")
    L += embed("Held-out loss", "Language-model quality on the same axis: mean loss per token on held-out documents of the "
               "corpus that no run trained on (one set for every budget and seed: data.heldout_tokens), at every "
               "checkpoint. Numbers: tables/heldout_loss.csv.")
    for bench in R["curve_benchmarks"]:
        L += embed(f"All phenomena, {bench} (Figure 5)",
                   f"As ZhoBLiMP Figure 5: every phenomenon of {bench} (mean of its paradigms) on the largest corpus "
                   "budget, one line per model size" + ("; dotted: human agreement (validation CSV)" if bench ==
                                                         "zhoblimp" else "")
                   + ". Other budgets: the appendix's per-phenomenon figures. Numbers: tables/curves_phenomenon.csv.")
    if not R["curve_benchmarks"]:
        L += ["_No benchmark was scored at two or more checkpoints: no learning curves._", ""]

    L += ["## Final accuracy per phenomenon (as ZhoBLiMP Table 4)", ""]
    for bench, t4 in R["table4"].items():
        where = ("every pair, at each run's last checkpoint (probes.final_all_pairs)" if bench.endswith("_all")
                 else "the pairs scored at each run's last checkpoint")
        refs = (" Rows in italics are references, labelled with their source: human agreement (the authors' "
                f"validation CSV, our pooled reading; the paper's Table 4 column says {100 * PAPER_HUMAN_OVERALL:.1f} % "
                "overall) and the paper's own Zh-Pythia numbers (3B tokens, Table 4), not ours."
                if bench.removesuffix("_all") == "zhoblimp" else
                " The row in italics, where present, is BLiMP's human validation (its repository's "
                "raw_results/summary/human_validation_summary.csv: a phenomenon the mean of its paradigms; over all 67, "
                "88.6 %, Warstadt et al. 2020's human aggregate), not ours."
                if bench.removesuffix("_all") == "blimp" else " No reference rows for this benchmark.")
        held = " Held-out loss: mean over seeds at the last checkpoint (nats per token)." if "val_loss" in t4 else ""
        L += [f"**{bench}**: accuracy (%) on {where}, mean over seeds; a phenomenon is the mean of its paradigms, "
              f"overall the mean of all paradigms.{refs}{held} CSV: `tables/table4_{bench}.csv`."
              f"{authors_rule(bench, cfg.metric)}", "", table4_markdown(t4), ""]
    L += ["### Scaling view", ""]
    L += embed("Scaling, ", "Final accuracy (%) over model size x corpus budget, the same numbers as the table above.")
    ov = R["overall"][R["overall"].benchmark.isin(R["final_benchmarks"])].copy()
    ov["budget"] = ov["budget"].map(budget_label)
    L += [md_table(ov), ""]

    for block in R["cs_md"]:  # the case study: lines, tables, and where its figures go
        if isinstance(block, pd.DataFrame):
            L.append(md_table(block))
        elif isinstance(block, tuple):
            L += embed(block[1], "Other model sizes and budgets: appendix.")
        else:
            L.append(block)

    L += _groups_md(R, cfg) + _aoa_md(R, cfg) + _ushape_md(R, cfg, embed) + _sweep_md(R)
    params = runs.model_params.map(lambda v: "" if pd.isna(v) else f"{int(v):,}")  # the count, not the size's name
    L += ["## Runs", "", md_table(runs.assign(model_params=params)[
        ["name", "model", "model_params", "tokenizer", "budget", "seed", "experiment", "path"]], 60)]
    notes = R["notes"]
    if notes:
        L += ["## Problems in the input (the data that is there was used)", ""]
        L += [f"- {n}" for n in notes[:40]] + ([f"- … {len(notes) - 40} more in problems.txt"] if len(notes) > 40 else [])
        L.append("")

    L += ["## Appendix", "",
          "Figures outside the main flow, in `appendix/` (the other probes' in `figures/`): per-phenomenon "
          "curves on every budget, the case study for the other model sizes and budgets, and the generic regions of "
          "the paradigms with accepted U's first.", ""]
    rest = [(t, p) for t, p in figs if Path(p) not in main] + list(R["other_figs"])
    L += [f"{i + 1}. [{t.removeprefix('Appendix: ')}]({rel(p)})" for i, (t, p) in enumerate(rest)] + [""]
    if len(R["regions_u"]):
        L += ["### Which region's delta moves first", "",
              "Generic split (critical span / shared suffix), summed Δ log-prob per region, mean over pairs.", "",
              md_table(R["regions_u"][["model", "budget", "level", "phenomenon", "paradigm", "kind", "moves_first",
                                       "critical_onset_tokens", "suffix_onset_tokens"]]), ""]
    L += list(R["other_md"])
    tables = sorted({p.with_suffix("") for p in (out / "tables").iterdir() if p.suffix in (".csv", ".parquet")})
    L += ["## Tables (every number above; .csv and/or .parquet)", ""]
    L += [f"- `{p.relative_to(out).as_posix()}` ({', '.join(sorted(q.suffix for q in p.parent.glob(p.name + '.*')))})"
          for p in tables]
    L += ["", "## Parameters", "", "```", repr(cfg), "```", ""]
    return "\n".join(L), main


def _groups_md(R: dict, cfg) -> list[str]:
    s, groups = cfg.scaling, R["groups"]
    # a paradigm whose interval crosses a group's threshold (or has none) is not put in a group (issue 42)
    g = groups.assign(group=groups.group.where(groups.group_sure, "not determined")) if len(groups) else groups
    counts = g.groupby(["budget", "benchmark", "group"], dropna=False).size().unstack(fill_value=0) \
        if len(groups) else pd.DataFrame()
    if len(counts):
        counts = counts.reindex(columns=[*PAPER_GROUPS, "not determined"], fill_value=0).reset_index()
        counts["budget"] = counts["budget"].map(budget_label)
        paper = {"budget": "3B (paper)", "benchmark": "zhoblimp (Zh-Pythia 14M-1.4B)", **PAPER_GROUPS}
        counts = pd.concat([counts, pd.DataFrame([paper])], ignore_index=True)
    where = ("each benchmark's largest corpus budget (the paper groups its 3B-token models)"
             if s.budget == "largest" else "every budget")
    return ["## Difficulty groups", "",
            f"Per paradigm on {where}, final accuracy on every pair where scored, from the best accuracy over model "
            f"sizes and Pearson r between accuracy and log10 model size, as the ZhoBLiMP paper (§5.3) defines the "
            f"groups: Easy best >= {s.easy_min_best}; Medium best >= {s.medium_min_best}; Difficult near chance with "
            f"r >= {s.difficult_min_r}; Other near chance otherwise (also when fewer than {s.min_sizes_for_r} model "
            "sizes make r meaningless). The thresholds are OUR documented defaults (probes/analysis/scaling.py): the "
            "paper's numbers did not survive in its text. *not determined*: the best accuracy's interval (its band, "
            "as Table 4's) crosses the Easy or Medium threshold, or there is none. Last row: the paper's outcome, "
            "80 / 15 / 13 / 10 of 118 paradigms.", "", md_table(counts) if len(counts) else "_(none)_", "",
            "Per paradigm: `tables/difficulty_groups.csv`.", ""]


def _aoa_md(R: dict, cfg) -> list[str]:
    return ["## Age of acquisition and forgettability (per phenomenon, mean over seeds)", "",
            f"Sigmoid on log10 tokens; AoA where it crosses halfway between chance and its best accuracy "
            f"(empty: not acquired by {cfg.aoa.min_gain} over chance, no rise above {cfg.aoa.min_rise_rmse}x the fit's "
            "RMSE, decreasing, above halfway at the first checkpoint, or too few checkpoints — per-curve status in "
            "tables/aoa.csv). aoa_lo / aoa_hi: 95 % bootstrap interval (seeds, then pairs within paradigm and "
            f"seed; {cfg.aoa.n_boot} resamples; an AoA not reached counts as the run's end); *not determined* where "
            "it reaches the first or last trained checkpoint: the runs do not place the AoA inside them. "
            "Forgettability: sum of drops of the smoothed curve.", "",
            md_table(R["aoa_ph"].sort_values("aoa_log10_tokens")), ""]


def _ushape_md(R: dict, cfg, embed) -> list[str]:
    us, acc = R["us"], R["acc_u"]
    L = ["## U-shapes", "", R["rule"], ""]
    if len(us):
        counts = us["verdict"].value_counts()
        c = count_ushapes(us)
        L += [f"{c['learning']} learning U's (a dip after step 0 from a peak above chance), {c['chance_dip']} chance "
              f"dips (the peak not above chance) and {c['from_step0']} dips peaking at step 0 (the untrained model's "
              f"accuracy, not knowledge: tables/ushapes_step0.csv, not the table and gallery below), accepted of "
              f"{len(us)} candidates on {' and '.join(cfg.u_levels)} curves ("
              + ", ".join(f"{n} {v}" for v, n in counts.items())
              + "; every candidate with its verdict and reason in tables/ushapes.csv).", ""]
    else:
        L += [f"No candidate dip of {cfg.ushape.delta} or more on any {' or '.join(cfg.u_levels)} curve.", ""]
    L += [f"- {n}" for n in R["u_evidence"]] + ([""] if R["u_evidence"] else [])
    if len(acc):
        t = acc.copy()
        t["seeds_agreeing"] = [f"{round(a * n)} of {n}" for a, n in zip(t.seed_agreement, t.n_seeds)]
        t["budget"] = t["budget"].map(budget_label)
        cols = ["u_id", "model", "budget", "benchmark", "level", "phenomenon", "paradigm", "kind", "scale",
                "peak_tokens", "trough_tokens", "recovery_tokens", "peak_acc", "trough_acc", "u_depth",
                "noise_threshold", "p_drop", "seeds_agreeing"]
        L += [md_table(t[cols], 40), ""]
        L += embed("U-shapes (numbered",
                   f"Each accepted U (the {MAX_PANELS} deepest; numbers as in the table): its curve with band and "
                   "seeds, ▲ peak ▼ trough ● recovery; title: depth, the noise threshold it cleared, seeds agreeing.")
    L += ["### The paper's U-shapes beside ours", "",
          "ZhoBLiMP reports U's in phenomena near 100M tokens (BA, FCI) and an early dip in its case-study paradigm. "
          "For each model x budget here: *detected* (an accepted U whose peak, trough and recovery each lie in the "
          "paper's window for them), *a dip, not the paper's U* (an accepted U in the paper's span with one of them "
          "outside: ours and the paper's windows are printed), *not "
          "detectable here* (the runs do not reach the window, or the smallest dip this grid can tell from noise — "
          "the curve's noise threshold at its pairs and seeds, not a fixed delta — is deeper than the reference "
          f"depth {REFERENCE_DEPTH}; then what it would take), or *absent* (covered and detectable, none found). "
          f"The paper gives no depth for 'a little': {REFERENCE_DEPTH} is our reading. CSV: "
          "tables/paper_ushapes.csv.", "", paper_u_markdown(R["paper_us"]), ""]
    return L


def _sweep_md(R: dict) -> list[str]:
    return ["## Normalised scores as their authors sweep them (pow-norm, SLOR, MORCELA)", "",
            "At each run's last checkpoint (all pairs where scored), from the stored per-pair sums, the ZhoBLiMP "
            f"authors' grids (their src/run.py): pow-norm lp/|s|^α for α in {POW_ALPHAS[0]}…{POW_ALPHAS[-1]} "
            f"({len(POW_ALPHAS)} points; α = 0 is sum-LP, 1 is MLP), SLOR (lp − ulp)/|s|, and MORCELA "
            f"(lp − β·ulp + γ)/|s| for β in {MORCELA_BETAS[0]}…{MORCELA_BETAS[-1]} and γ in "
            f"{MORCELA_GAMMAS[0]}…{MORCELA_GAMMAS[-1]} ({len(MORCELA_BETAS) * len(MORCELA_GAMMAS)} points; "
            "γ/|s| always favours the shorter sentence). Each cell: overall accuracy (%, mean over paradigms and "
            "seeds) — its range over the grid with the points at its ends, and the value at the authors' defaults "
            "(pow_norm_lp α = 0.5; morcela β = 1, γ = 0, which is SLOR). No single point is \"the\" MORCELA score. "
            "ulp: the unigram log-prob from the run's own token counts. Summary: "
            "tables/normalised_sweep_summary.csv; per paradigm and point: tables/normalised_sweep_paradigm.*.", "",
            sweep_markdown(R["sweep"]), ""]
