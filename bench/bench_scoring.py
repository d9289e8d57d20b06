"""Scoring speed and agreement: probes.scoring.primitive vs minicons, same model, same sentences, one run.

    python bench/bench_scoring.py [--sentences 1000] [--batch-size 64] [--repeats 3] [--threads N]

Model: the pythia-14m architecture (configs/model/pythia-14m.yaml, vocab 50304), Pythia
initialisation, fp32, CPU. Sentences: the first N of the BLiMP pairs of ../shared/benchmarks
(8 pairs per paradigm, good and bad interleaved), as a pair evaluation sees them. Tokenizer: no
Pythia tokenizer is on this machine, so a byte-level BPE of Pythia's kind (one ``<|endoftext|>``
special token that is BOS, EOS and pad) is trained on ../shared/corpora/en; ``--tokenizer DIR``
takes any HF tokenizer directory instead (e.g. a Pythia checkout).

Measured per repeat, alternating (the CPU is shared; the median of the repeats is reported):
  minicons   scorer.IncrementalLMScorer(model, "cpu", tokenizer).sequence_score(batch,
             bos_token=True, reduction=lambda x: x.sum(0).item()) over batches in input order
  forward    a plain batched ``model(ids).logits`` over the same batches (the reference cost)
  ours       probes.scoring.primitive.token_logprobs(model, sentence_ids(tokenizer, sentences)), tokenizing
             included; also with bf16=True (its lp error vs fp32 is printed, not used for the ratio)
Prints sentences/s of each, ours/minicons and the max |lp difference| per sentence.

End to end (--end-to-end): the whole job as two processes, alternating, --repeats times each:
  ours       python -m probes score --model DIR --benchmark blimp --max-pairs-per-paradigm N --out F
  minicons   python bench/bench_scoring.py --minicons-job ...: the same pairs (our benchmark reader),
             the model and tokenizer from DIR, IncrementalLMScorer.sequence_score(bos_token=True, sum)
             per batch of sentences in input order, lp_good/lp_bad written to parquet
Both wall-clock times include interpreter start, imports, reading the benchmark, tokenizing, the
model, and writing the parquet. Prints the median of each, ours/minicons, and the max |lp difference|
per sentence between the two files. DIR defaults to a pythia-14m (random init) saved with the BPE.
    python bench/bench_scoring.py --end-to-end --pairs-per-paradigm 150 --repeats 3   # 20,100 sentences

minicons is a dev extra (pyproject.toml); it installs next to torch 2.13 without changing it:
    pip install -c constraints.txt minicons        # or: pip install -e ".[dev]" -c constraints.txt
Without it the minicons rows are skipped with a message.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def train_tokenizer(out_dir: Path, vocab_size: int, max_bytes: int):
    """A byte-level BPE like Pythia's (GPT-NeoX-20B tokenizer), trained on the English corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    files = sorted((SHARED / "corpora" / "en").rglob("*.txt"))
    if not files:
        raise SystemExit(f"no corpus under {SHARED / 'corpora' / 'en'}; pass --tokenizer DIR")

    def lines():
        budget = max_bytes
        for f in files:
            for line in f.open(encoding="utf-8"):
                if budget <= 0:
                    return
                budget -= len(line)
                yield line

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    fast.save_pretrained(out_dir)
    return fast


def pythia_14m(seed: int = 0):
    from train.model import ModelConfig, build_model

    fields = OmegaConf.to_container(OmegaConf.load(ROOT / "configs" / "model" / "pythia-14m.yaml"))
    # the config derives vocab_size from the run's tokenizer; the bench pins Pythia's 50,304 rows
    # (its 50,277 tokens padded), whatever BPE it scores with: the output layer is most of the cost
    fields["vocab_size"] = fields.get("vocab_size") or 50304
    return build_model(ModelConfig(**fields), seed=seed, bos_token_id=0, eos_token_id=0).eval()


def blimp_sentences(n: int) -> list[str]:
    from probes.benchmarks.registry import BenchmarkConfig, load_benchmark

    pairs = load_benchmark(BenchmarkConfig(name="blimp", max_pairs_per_paradigm=8))
    return [t for p in pairs for t in (p.good, p.bad)][:n]


def run_minicons(scorer, sentences: list[str], batch_size: int) -> list[float]:
    out: list[float] = []
    for a in range(0, len(sentences), batch_size):
        out += scorer.sequence_score(sentences[a:a + batch_size], bos_token=True,
                                     reduction=lambda x: x.sum(0).item())
    return out


def run_forward(model, tokenizer, sentences: list[str], batch_size: int) -> None:
    from probes.scoring.primitive import sentence_ids

    ids = sentence_ids(tokenizer, sentences)
    with torch.inference_mode():
        for a in range(0, len(ids), batch_size):
            batch = ids[a:a + batch_size]
            width = max(map(len, batch))
            x = torch.zeros((len(batch), width), dtype=torch.long)
            m = torch.zeros_like(x)
            for r, s in enumerate(batch):
                x[r, :len(s)] = torch.tensor(s)
                m[r, :len(s)] = 1
            model(input_ids=x, attention_mask=m).logits


def run_ours(model, tokenizer, sentences: list[str], batch_size: int, bf16: bool = False) -> list[float]:
    from probes.scoring.primitive import sentence_ids, token_logprobs

    lps = token_logprobs(model, sentence_ids(tokenizer, sentences), batch_size=batch_size, bf16=bf16)
    return [float(x.sum()) for x in lps]


def timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def minicons_job(model_dir: Path, pairs_per_paradigm: int, batch_size: int, out: Path) -> None:
    """The minicons side of --end-to-end, run as its own process: the same job as `probes score`."""
    import pandas as pd
    from minicons import scorer as mc_scorer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from probes.__main__ import _load_pairs

    _name, pairs = _load_pairs("blimp", "auto", pairs_per_paradigm)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    scorer = mc_scorer.IncrementalLMScorer(model, "cpu", tokenizer=AutoTokenizer.from_pretrained(model_dir))
    texts = [t for p in pairs for t in (p.good, p.bad)]
    lp = run_minicons(scorer, texts, batch_size)
    pd.DataFrame({"pair_id": [str(p.pair_id) for p in pairs], "paradigm": [p.paradigm for p in pairs],
                  "lp_good": lp[0::2], "lp_bad": lp[1::2]}).to_parquet(out)


def end_to_end(args) -> None:
    import subprocess
    import sys

    import pandas as pd

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model
        if model_dir is None:
            model_dir = Path(tmp) / "pythia-14m"
            train_tokenizer(model_dir, args.vocab, args.corpus_bytes)
            pythia_14m().save_pretrained(model_dir)
        ours_out, mc_out = Path(tmp) / "ours.parquet", Path(tmp) / "minicons.parquet"
        n = str(args.pairs_per_paradigm)
        commands = {
            "ours": [sys.executable, "-m", "probes", "score", "--model", str(model_dir), "--benchmark", "blimp",
                     "--max-pairs-per-paradigm", n, "--batch-size", str(args.batch_size), "--out", str(ours_out)],
            "minicons": [sys.executable, __file__, "--minicons-job", "--model", str(model_dir),
                         "--pairs-per-paradigm", n, "--batch-size", str(args.batch_size), "--out", str(mc_out)],
        }
        roots = {"ours": ROOT, "minicons": ROOT}
        if args.baseline_root is not None:  # another checkout's `probes score` (e.g. before a change)
            commands["baseline"] = commands["ours"][:-1] + [str(Path(tmp) / "baseline.parquet")]
            roots["baseline"] = args.baseline_root.resolve()
        times: dict[str, list[float]] = {k: [] for k in commands}
        cpu: dict[str, list[float]] = {k: [] for k in commands}  # user+sys: steadier on a shared CPU
        threads = {"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}
        for _ in range(args.repeats):
            for key, cmd in commands.items():
                env = {**os.environ, "TQDM_DISABLE": "1", "PYTHONPATH": str(roots[key]), **threads}
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                subprocess.run(cmd, cwd=roots[key], env=env, check=True, stdout=subprocess.DEVNULL)
                times[key].append(time.perf_counter() - t0)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[key].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        ours, mc = pd.read_parquet(ours_out), pd.read_parquet(mc_out)
        merged = ours.merge(mc, on=["paradigm", "pair_id"], suffixes=("", "_mc"))
        assert len(merged) == len(ours) == len(mc), (len(merged), len(ours), len(mc))
        diff = max((merged.lp_good - merged.lp_good_mc).abs().max(), (merged.lp_bad - merged.lp_bad_mc).abs().max())
        for key, ts in times.items():
            print(f"{key:>9}: wall median {statistics.median(ts):7.1f} s  ({', '.join(f'{t:.1f}' for t in ts)});"
                  f"  CPU median {statistics.median(cpu[key]):7.1f} s  ({', '.join(f'{t:.1f}' for t in cpu[key])})")
        if "baseline" in times:
            print(f"baseline ({args.baseline_root}) / ours: wall {statistics.median(times['baseline']) / statistics.median(times['ours']):.2f}x, "
                  f"CPU {statistics.median(cpu['baseline']) / statistics.median(cpu['ours']):.2f}x")
        print(f"CPU time: minicons / ours = {statistics.median(cpu['minicons']) / statistics.median(cpu['ours']):.2f}x")
        ratio = statistics.median(times["minicons"]) / statistics.median(times["ours"])
        paired = statistics.median(m / o for m, o in zip(times["minicons"], times["ours"]))
        print(f"end to end, {2 * len(ours)} sentences ({len(ours)} BLiMP pairs): ours / minicons = {ratio:.2f}x "
              f"(median of per-repeat ratios {paired:.2f}x); max |lp(ours) - lp(minicons)| = {diff:.2e} "
              f"nats per sentence")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--tokenizer", type=Path, default=None, help="HF tokenizer directory")
    ap.add_argument("--vocab", type=int, default=32000, help="BPE size when training one")
    ap.add_argument("--corpus-bytes", type=int, default=8_000_000)
    ap.add_argument("--end-to-end", action="store_true", help="time the two whole processes")
    ap.add_argument("--pairs-per-paradigm", type=int, default=150, help="--end-to-end: BLiMP pairs per paradigm")
    ap.add_argument("--model", type=Path, default=None, help="--end-to-end: HF model directory")
    ap.add_argument("--baseline-root", type=Path, default=None,
                    help="--end-to-end: also time `probes score` from this checkout (same run, alternating)")
    ap.add_argument("--minicons-job", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.minicons_job:
        return minicons_job(args.model, args.pairs_per_paradigm, args.batch_size, args.out)
    if args.end_to_end:
        return end_to_end(args)
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        if args.tokenizer is None:
            t0 = time.perf_counter()
            tokenizer = train_tokenizer(Path(tmp), args.vocab, args.corpus_bytes)
            tok_dir = Path(tmp)
            print(f"tokenizer: byte-level BPE, {len(tokenizer)} tokens, trained in "
                  f"{time.perf_counter() - t0:.1f}s")
        else:
            tok_dir = args.tokenizer
            tokenizer = AutoTokenizer.from_pretrained(tok_dir)
        mc_tokenizer = AutoTokenizer.from_pretrained(tok_dir)  # minicons sets its pad token
        model = pythia_14m()
        sentences = blimp_sentences(args.sentences)

        from probes.scoring.primitive import sentence_ids

        ntok = [len(s) - 1 for s in sentence_ids(tokenizer, sentences)]
        print(f"model: pythia-14m architecture, {sum(p.numel() for p in model.parameters()):,} "
              f"parameters, vocab {model.config.vocab_size}; torch threads {torch.get_num_threads()}")
        print(f"sentences: {len(sentences)} BLiMP, {np.mean(ntok):.1f} tokens on average (+BOS), "
              f"{len(set(sentences))} distinct; batch {args.batch_size}")

        try:
            from minicons import scorer as mc_scorer
        except ImportError:
            mc_scorer = None
            print("minicons: not installed, skipped (pip install -c constraints.txt minicons)")
        scorer = mc_scorer.IncrementalLMScorer(model, "cpu", tokenizer=mc_tokenizer) if mc_scorer else None

        times: dict[str, list[float]] = {"minicons": [], "forward": [], "ours": [], "ours_bf16": []}
        results: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            if scorer is not None:
                t, results["minicons"] = timed(lambda: run_minicons(scorer, sentences, args.batch_size))
                times["minicons"].append(t)
            t, _ = timed(lambda: run_forward(model, tokenizer, sentences, args.batch_size))
            times["forward"].append(t)
            t, results["ours"] = timed(lambda: run_ours(model, tokenizer, sentences, args.batch_size))
            times["ours"].append(t)
            t, results["ours_bf16"] = timed(
                lambda: run_ours(model, tokenizer, sentences, args.batch_size, bf16=True))
            times["ours_bf16"].append(t)

        rate = {k: len(sentences) / statistics.median(v) for k, v in times.items() if v}
        for k, r in rate.items():
            runs = ", ".join(f"{len(sentences) / t:.0f}" for t in times[k])
            print(f"{k:>10}: {r:7.0f} sentences/s  (median of {len(times[k])}: {runs})")
        ours = np.array(results["ours"])
        bf16_err = np.max(np.abs(np.array(results["ours_bf16"]) - ours))
        print(f"bf16 autocast: max |lp(bf16) - lp(fp32)| = {bf16_err:.2e} nats per sentence")
        if scorer is not None:
            diff = np.max(np.abs(ours - np.array(results["minicons"])))
            paired = statistics.median(m / o for m, o in zip(times["minicons"], times["ours"]))
            print(f"ours / minicons = {rate['ours'] / rate['minicons']:.2f}x "
                  f"(median of per-repeat ratios {paired:.2f}x)   "
                  f"ours / forward = {rate['ours'] / rate['forward']:.2f}x   "
                  f"max |lp(ours) - lp(minicons)| = {diff:.2e} nats per sentence")


if __name__ == "__main__":
    main()
