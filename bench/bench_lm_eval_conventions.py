"""What lm-eval's BLiMP convention changes against ours, measured on one checkpoint (docs/lm_eval.md).

    python bench/bench_lm_eval_conventions.py --model RUN/checkpoints/step<N> --benchmark grammar [--max-pairs-per-paradigm 50]

Scores the pairs three ways on the same in-memory model: ``probes score``'s primitive (ours: start token,
no space, ties wrong), lm-eval over the task of ``probes lm-eval-tasks`` (must equal ours), and lm-eval over
the same data with lm-eval's BLiMP settings (target_delimiter " ", choices [good, bad] with target 0: a
tie counts right). Prints lp differences, tie counts and the three accuracies.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--benchmark", default="grammar")
    p.add_argument("--max-pairs-per-paradigm", type=int, default=None)
    args = p.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from probes.benchmarks.registry import BenchmarkConfig, load_benchmark
    from probes.lmeval.run import run_tasks
    from probes.lmeval.tasks import write_task
    from probes.scoring.primitive import score_pairs
    from train.start_token import scoring_start_id

    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    pairs = load_benchmark(BenchmarkConfig(name=args.benchmark, max_pairs_per_paradigm=args.max_pairs_per_paradigm))
    ours = score_pairs(model, tok, pairs)
    start = scoring_start_id(tok, args.model)
    with tempfile.TemporaryDirectory() as d:
        yaml = write_task(pairs, args.benchmark, Path(d))
        text = yaml.read_text()
        (Path(d) / "sd_blimpstyle.yaml").write_text(
            text.replace(f"task: sd_{args.benchmark}", "task: sd_blimpstyle")
            .replace('target_delimiter: ""', 'target_delimiter: " "')
            .replace("{{[sentence_bad, sentence_good]}}", "{{[sentence_good, sentence_bad]}}")
            .replace("doc_to_target: 1", "doc_to_target: 0"))
        lm, summary = run_tasks(model, tok, [f"sd_{args.benchmark}", "sd_blimpstyle"], include_path=d, start_id=start)
    keys = ["paradigm", "pair_id"]
    ours_lp = ours.set_index(keys)[["lp_good", "lp_bad"]]
    n = len(ours)
    sum_acc = float((ours.lp_good > ours.lp_bad).mean())
    ties = int((ours.lp_good == ours.lp_bad).sum())
    print(f"{args.model} on {args.benchmark}: {n} pairs; ties (lp_good == lp_bad): {ties}")
    print(f"ours (probes score) sum-LP acc, ties wrong: {sum_acc:.4f}; MLP acc: "
          f"{float((ours.lp_good / ours.ntok_good > ours.lp_bad / ours.ntok_bad).mean()):.4f}")
    for task, (i_good, i_bad) in ((f"sd_{args.benchmark}", (1, 0)), ("sd_blimpstyle", (0, 1))):
        t = lm[lm.task == task].set_index(keys).loc[ours_lp.index]
        good = np.array([x[i_good] for x in t.lls])
        bad = np.array([x[i_bad] for x in t.lls])
        d_good, d_bad = good - ours_lp.lp_good.to_numpy(), bad - ours_lp.lp_bad.to_numpy()
        moved = int(((np.abs(d_good) > 1e-3) | (np.abs(d_bad) > 1e-3)).sum())
        flips = int(((good > bad) != (ours_lp.lp_good > ours_lp.lp_bad).to_numpy()).sum())
        print(f"lm-eval {task}: acc {summary[task]['acc']:.4f}; max |lp - ours| {max(np.abs(d_good).max(), np.abs(d_bad).max()):.2e} "
              f"nats, mean {np.mean(np.abs(np.r_[d_good, d_bad])):.2e}; pairs with an lp moved > 1e-3: {moved}; "
              f"sum-LP decisions flipped: {flips}")


if __name__ == "__main__":
    main()
