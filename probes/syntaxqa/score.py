"""Build syntax-question items from treebanks, score any causal LM on them, summarise as OA; the CLI (mode=paper's
items and scores: ``paper``). How TF/MC likelihoods, FITB and OA are scored: docs/syntax-questions.md."""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from probes.syntaxqa.items import SourceReport, collect_facts
from probes.syntaxqa.metrics import exact_match, overall_accuracy, strict_f1
from probes.syntaxqa.config import KIND, SYNTAX_QA_MODES as MODES, PaperConfig, SyntaxQAConfig
from probes.syntaxqa.questions import (QUESTION_TYPES, Item, attach_prompts, balanced_sample, candidates, continuations,
                                       frame_for, render, statistics_table)
from probes.syntaxqa.records import KNOWLEDGE_POINTS, benchmark_name


def build_items_and_reports(cfg: SyntaxQAConfig) -> tuple[list[Item], list[SourceReport]]:
    if cfg.mode == "paper":  # its exemplar set is in the items' prompts
        from probes.syntaxqa.paper import build_paper_items_and_reports

        items, _, reports = build_paper_items_and_reports(cfg)
        return items, reports
    facts, reports = collect_facts(cfg.sources, cfg.knowledge_points, cfg.max_sentences)
    cands = candidates(facts, cfg.seed, tuple(cfg.question_types))
    chosen = balanced_sample(cands, cfg.k_per_tuple, cfg.seed, cfg.max_items)
    items = [render(c, facts, cfg.seed) for c in chosen]
    pool: dict[tuple[str, str, str], list[Item]] = {}
    if cfg.shots > 0:
        taken = {c.key for c in chosen}
        groups: dict[tuple[str, str, str], list] = {}
        for c in cands:
            if c.key not in taken:
                groups.setdefault((facts[c.fact].sentence.lang, c.kp, c.qtype), []).append(c)
        for key, group in groups.items():
            rng = random.Random(f"{cfg.seed}|pool|{'|'.join(key)}")
            # enough for every exemplar seed, with spare ones for items that share a sentence
            picked = rng.sample(group, min(len(group), cfg.shots * cfg.shot_seeds + 8))
            pool[key] = [render(c, facts, cfg.seed) for c in picked]
    attach_prompts(items, pool, cfg.shots, cfg.shot_seeds, cfg.seed)
    return items, reports


def continuation_ids(tokenizer, prefix: str, conts: list[str]) -> tuple[list[int], list[list[int]]]:
    """(context ids, ids of each continuation) with context + ids_i == BOS + tokens(prefix + conts[i]) (module doc)."""
    from probes.scoring.primitive import start_id

    enc = tokenizer([prefix] + [prefix + c for c in conts], add_special_tokens=False)["input_ids"]
    p_ids, fulls = list(enc[0]), [list(e) for e in enc[1:]]
    n = len(os.path.commonprefix([p_ids, *fulls]))  # the longest token prefix they all share
    tails = [f[n:] for f in fulls]
    for c, t in zip(conts, tails):
        if not t:
            raise ValueError(f"continuation {c!r} adds no tokens after the prompt; the tokenizer cannot tell it apart")
    return [start_id(tokenizer)] + p_ids[:n], tails


def _check_length(model, n: int, item: Item) -> None:
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if limit is not None and n > limit:
        raise ValueError(f"syntax-qa item {item.item_id}: prompt of {n} tokens exceeds the model's "
                         f"max_position_embeddings={limit}; lower syntax_qa.shots")


def _likelihood_scores(model, tokenizer, items: list[Item], cfg: SyntaxQAConfig, device, *,
                       share_context: bool = True) -> dict[str, list]:
    """Per item: [mean correct over prompts, first prompt's prediction, first prompt's option sums]. share_context:
    when every option is one token after the context (the usual "True"/"False", "A"-"D"), the context runs once
    and each option is one log-prob at its last position; otherwise each context + option is its own sequence."""
    from probes.scoring.primitive import next_token_logprobs, token_logprobs

    seqs: list[list[int]] = []
    where: list[tuple[int, int, int, int]] = []  # (item, prompt, option, context length)
    shared_ctx: list[list[int]] = []
    shared_opt: list[list[int]] = []
    shared_where: list[tuple[int, int]] = []  # (item, prompt)
    for i, it in enumerate(items):
        for j, prompt in enumerate(it.prompts):
            ctx, tails = continuation_ids(tokenizer, prompt, continuations(it))
            for t in tails:
                _check_length(model, len(ctx) + len(t), it)
            if share_context and all(len(t) == 1 for t in tails):
                shared_ctx.append(ctx)
                shared_opt.append([t[0] for t in tails])
                shared_where.append((i, j))
                continue
            for o, t in enumerate(tails):
                seqs.append(ctx + t)
                where.append((i, j, o, len(ctx)))
    sums: dict[tuple[int, int], list[float]] = {}
    if shared_ctx:
        for key, lp in zip(shared_where, next_token_logprobs(model, shared_ctx, shared_opt,
                                                            batch_size=cfg.batch_size, device=device)):
            sums[key] = [float(x) for x in lp]
    if seqs:
        lps = token_logprobs(model, seqs, batch_size=cfg.batch_size, device=device)
        for (i, j, o, n), lp in zip(where, lps):
            sums.setdefault((i, j), []).append(float(np.sum(lp[n - 1 :])))
    out: dict[str, list] = {}
    for i, it in enumerate(items):
        # canonical labels ("True"/"False", letters) whatever words the prompt's language uses
        labels = ["True", "False"] if it.qtype == "TF" else continuations(it)
        preds = []
        for j in range(len(it.prompts)):
            s = sums[(i, j)]
            preds.append(labels[s.index(max(s))] if s.count(max(s)) == 1 else "<tie>")
        out[it.item_id] = [float(np.mean([p == it.answer for p in preds])), preds[0], sums[(i, 0)]]
    return out


def generate_answers(model, tokenizer, prompts: list[str], closes: list[str], cfg: SyntaxQAConfig, device) -> list[str]:
    """Greedy continuation of each prompt up to its closing quote (or EOS / max_new_tokens), quote cut off."""
    from probes.syntaxqa.generation import greedy_generate

    answers = [""] * len(prompts)
    for close in sorted(set(closes)):  # rows stop at their own closing quote (or a straight one)
        rows = [i for i, c in enumerate(closes) if c == close]
        stops = tuple(dict.fromkeys((close, '"')))
        texts = greedy_generate(model, tokenizer, [prompts[i] for i in rows], cfg.max_new_tokens, stops,
                                cfg.batch_size, device)
        for i, t in zip(rows, texts):
            for q in stops:
                t = t.split(q, 1)[0]
            answers[i] = t.strip()
    return answers


def score_items(model, tokenizer, items: list[Item], cfg: SyntaxQAConfig, device=None) -> pd.DataFrame:
    """One row per item: correct (mean over exemplar seeds), FITB f1, prediction, random baselines."""
    for it in items:
        if not it.prompts:
            raise ValueError(f"syntax-qa item {it.item_id} has no prompt; build items with build_items_and_reports(cfg)")
    device = device if device is not None else next(model.parameters()).device
    lik = _likelihood_scores(model, tokenizer, [it for it in items if it.qtype in ("TF", "MC")], cfg, device)
    fitb = [it for it in items if it.qtype == "FITB"] if cfg.generate else []
    flat = [(it, p) for it in fitb for p in it.prompts]
    for it, p in flat:  # the prompt and the longest answer must fit the model's positions
        _check_length(model, len(tokenizer(p, add_special_tokens=False)["input_ids"]) + 1 + cfg.max_new_tokens, it)
    gens = generate_answers(model, tokenizer, [p for _, p in flat], [frame_for(it).close for it, _ in flat], cfg, device) if flat else []
    by_item: dict[str, list[str]] = {}
    for (it, _), g in zip(flat, gens):
        by_item.setdefault(it.item_id, []).append(g)
    rows = []
    for it in items:
        row = it.row("likelihood")
        if it.item_id in lik:
            row["correct"], row["pred"], row["lp_options"] = lik[it.item_id]
        elif it.item_id in by_item:
            preds = by_item[it.item_id]
            row["pred"] = preds[0]
            row["correct"] = float(np.mean([exact_match(p, it.golds) for p in preds]))
            row["f1"] = float(np.mean([strict_f1(p, it.golds) for p in preds]))
        rows.append(row)
    return pd.DataFrame(rows)


def _parts(df: pd.DataFrame, acc: str, f1: str) -> tuple[float, float, float, float]:
    def mean(qtype: str, col: str) -> float:  # NaN where no row of the type is scored
        return float(df.loc[df["qtype"] == qtype, col].mean())

    return mean("TF", acc), mean("MC", acc), mean("FITB", acc), mean("FITB", f1)


def _kp_rows(df: pd.DataFrame, kp: str) -> pd.DataFrame:
    """The rows of one knowledge point; in paper mode MVP's also include the GS/SC/DO/IO true/false
    items it reuses (``kp_also``, see ``paper``)."""
    mask = df["kp"] == kp
    if "kp_also" in df.columns:
        mask |= df["kp_also"] == kp
    return df[mask]


def summarize(df: pd.DataFrame) -> dict[str, float]:
    """OA and its parts overall and per knowledge point ("<KP>/<key>"), the random baseline the same way: OA,
    OA_random, OA_likelihood (mean of TF and MC, defined when generation was skipped), TF_acc, MC_acc, FITB_acc,
    FITB_F1, n_items; rows with ``unparsed`` (paper mode: an item's share of generations with no answer, scored
    wrong) add ``unparsed`` and TF_/MC_/FITB_unparsed."""
    out: dict[str, float] = {}
    kps = [kp for kp in KNOWLEDGE_POINTS if len(_kp_rows(df, kp))]
    groups = [("", df)] + [(f"{kp}/", _kp_rows(df, kp)) for kp in kps]
    for prefix, d in groups:
        tf, mc, fa, ff = _parts(d, "correct", "f1")
        rtf, rmc, rfa, rff = _parts(d, "rand_acc", "rand_f1")
        if not d.loc[d["qtype"] == "FITB", "correct"].notna().any():
            rfa = rff = float("nan")  # FITB not scored: keep the baseline comparable to OA
        out[prefix + "OA"] = overall_accuracy(tf, mc, fa, ff)
        out[prefix + "OA_random"] = overall_accuracy(rtf, rmc, rfa, rff)
        out[prefix + "OA_likelihood"] = (tf + mc) / 2 if not (math.isnan(tf) or math.isnan(mc)) else float("nan")
        out[prefix + "TF_acc"], out[prefix + "MC_acc"], out[prefix + "FITB_acc"], out[prefix + "FITB_F1"] = tf, mc, fa, ff
        out[prefix + "n_items"] = float(len(d))
        if "unparsed" in d.columns:
            out[prefix + "unparsed"] = float(d["unparsed"].mean())  # NaN without rows
            for qtype in QUESTION_TYPES:
                out[f"{prefix}{qtype}_unparsed"] = float(d.loc[d["qtype"] == qtype, "unparsed"].mean())
    return out


def item_key(item) -> tuple:
    """What identifies an item in the pair set of a syntax_qa eval file (an Item, or one of its rows:
    rows planted by tests may lack some of these columns)."""
    return tuple(getattr(item, k, None) for k in ("item_id", "sentence", "question", "answer"))


def _describe(df: pd.DataFrame, cfg: SyntaxQAConfig, reports: list[SourceReport]) -> dict:
    return {"config": asdict(cfg),
            "summary": {k: (None if math.isnan(v) else v) for k, v in summarize(df).items()},
            "sources": [{"source": r.source, "sentences": r.sentences, "facts": r.facts, "errors": r.errors[:20],
                         "n_errors": len(r.errors), "empty": r.empty} for r in reports]}


def evaluate_items(model, tokenizer, items: list[Item], cfg: SyntaxQAConfig, reports: list[SourceReport], *,
                   step: int, tokens: int, ckpt_dir: Optional[Path], run_dir: Optional[Path] = None,
                   out: Optional[Path] = None, device=None):
    """Score `items` and write them as ``evals/step<N>/syntax_qa.parquet`` of `run_dir` (or `out`) through
    probes.scoring.evaluate.evaluate_checkpoint: the metadata of every eval file, plus config, summary and sources."""
    from probes.scoring.evaluate import ScoreOptions, evaluate_checkpoint

    if cfg.mode == "paper":
        from probes.syntaxqa.paper import score_paper_items as score
    else:
        score = score_items
    return evaluate_checkpoint(
        model, tokenizer, items, name=benchmark_name(cfg.mode), step=step, tokens=tokens, ckpt_dir=ckpt_dir,
        run_dir=run_dir, out=out, opts=ScoreOptions(batch_size=cfg.batch_size, device=device), key=item_key,
        score=lambda m, tok, its, opts: score(m, tok, its, cfg, device=opts.device),
        describe=lambda df: _describe(df, cfg, reports), kind=KIND, mode=cfg.mode)


# Each flag is a SyntaxQAConfig field (`--max-items` is max_items, as probes.syntax_qa.max_items in a
# training config), every field but the in-loop `enabled`. A flag not given leaves the field's default:
# the defaults live in the dataclass only.
CLI_ONLY = ("model", "out", "device")


def build_parser() -> argparse.ArgumentParser:
    d = SyntaxQAConfig()
    p = argparse.ArgumentParser(prog="python -m probes syntax-qa", argument_default=argparse.SUPPRESS,
                                description="Ask a causal LM questions about the syntax of treebank sentences.")
    p.add_argument("--model", required=True, type=Path, metavar="DIR", help="HF model directory")
    p.add_argument("--out", required=True, type=Path, metavar="FILE.parquet", help="per-item rows")
    p.add_argument("--device", default=None)
    p.add_argument("--sources", nargs="+", action="extend", required=True, metavar="PATH",
                   help=".mrg/.conllu files or directories (the flag may be repeated)")
    for name, metavar in (("knowledge_points", "KP"), ("question_types", "TYPE")):
        p.add_argument(f"--{name.replace('_', '-')}", nargs="+", metavar=metavar,
                       help=f"default: all of {' '.join(getattr(d, name))}")
    for name, what in (("k_per_tuple", "items per (question type, knowledge point, answer category)"),
                       ("seed", "sampling, distractors, option order, exemplars"),
                       ("shots", "few-shot exemplars per prompt"), ("shot_seeds", "exemplar sets per item"),
                       ("max_items", "cap after balanced sampling"), ("max_sentences", "per source"),
                       ("max_new_tokens", "fill-in-the-blank answer length"), ("batch_size", "prompts per forward")):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, help=f"{what} (default {getattr(d, name)})")
    p.add_argument("--generate", action=argparse.BooleanOptionalAction,
                   help="fill-in-the-blank generation (--no-generate skips it; OA is then NaN)")
    p.add_argument("--mode", choices=MODES, help="likelihood: our wording, TF/MC by likelihood (default); "
                                                 "paper: the paper's prompts, exemplars and generated answers")
    dp = d.paper  # syntax_qa.paper.<field> is --paper-<field>
    for name, what in (("shots", "exemplars per prompt"), ("shot_seeds", "exemplar draws per question"),
                       ("exemplar_k", "exemplar-set questions per tuple"),
                       ("max_new_tokens_choice", "TF/MC generation budget"),
                       ("max_new_tokens_fitb", "FITB generation budget")):
        p.add_argument(f"--paper-{name.replace('_', '-')}", type=int, dest=f"paper.{name}",
                       help=f"mode=paper: {what} (default {getattr(dp, name)})")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    from probes.analysis.outputs import check_output_file

    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        given = {k: v for k, v in vars(args).items() if k not in CLI_ONLY and not k.startswith("paper.")}
        paper_fields = {k.removeprefix("paper."): v for k, v in vars(args).items() if k.startswith("paper.")}
        cfg = SyntaxQAConfig(**given, paper=PaperConfig(**paper_fields))
        if not (args.model / "config.json").is_file():
            raise ValueError(f"--model {args.model}: no config.json; not a Hugging Face model directory")
        check_output_file(args.out)
        items, reports = build_items_and_reports(cfg)
        if not items:
            raise ValueError("no syntax-qa items from the given sources")
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    from train.files import read_trainer_state
    from train.weights import WeightsMismatchError, load_causal_lm

    try:
        model = load_causal_lm(args.model, AutoModelForCausalLM).to(device)
        state = read_trainer_state(args.model, missing_ok=True)  # {}: a model directory not trained here
    except ValueError as e:  # WeightsMismatchError is one
        print(f"error: {'--model ' if isinstance(e, WeightsMismatchError) else ''}{e}", file=sys.stderr)
        return 2
    ev = evaluate_items(model, tokenizer, items, cfg, reports, step=int(state.get("step", -1)),
                        tokens=int(state.get("tokens", -1)), ckpt_dir=args.model, out=args.out, device=device)
    df, summary = ev.df, summarize(ev.df)
    print(statistics_table(items).to_string())
    print(json.dumps({k: round(v, 4) for k, v in summary.items() if "/" not in k}))
    print(f"{benchmark_name(cfg.mode)}: {len(df)} items ({cfg.mode} mode) -> {args.out}")
    return 0
