"""Scoring speed and agreement: probes.scoring vs minicons, same model, same sentences, one run.

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
  ours       probes.scoring.token_logprobs(model, sentence_ids(tokenizer, sentences)), tokenizing
             included; also with bf16=True (its lp error vs fp32 is printed, not used for the ratio)
Prints sentences/s of each, ours/minicons and the max |lp difference| per sentence.

minicons is a dev extra (pyproject.toml); it installs next to torch 2.13 without changing it:
    pip install -c constraints.txt minicons        # or: pip install -e ".[dev]" -c constraints.txt
Without it the minicons rows are skipped with a message.
"""
from __future__ import annotations

import argparse
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
    return build_model(ModelConfig(**fields), seed=seed, bos_token_id=0, eos_token_id=0).eval()


def blimp_sentences(n: int) -> list[str]:
    from probes.benchmarks import BenchmarkConfig, load_benchmark

    pairs = load_benchmark(BenchmarkConfig(name="blimp", max_pairs_per_paradigm=8))
    return [t for p in pairs for t in (p.good, p.bad)][:n]


def run_minicons(scorer, sentences: list[str], batch_size: int) -> list[float]:
    out: list[float] = []
    for a in range(0, len(sentences), batch_size):
        out += scorer.sequence_score(sentences[a:a + batch_size], bos_token=True,
                                     reduction=lambda x: x.sum(0).item())
    return out


def run_forward(model, tokenizer, sentences: list[str], batch_size: int) -> None:
    from probes.scoring import sentence_ids

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
    from probes.scoring import sentence_ids, token_logprobs

    lps = token_logprobs(model, sentence_ids(tokenizer, sentences), batch_size=batch_size, bf16=bf16)
    return [float(x.sum()) for x in lps]


def timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--tokenizer", type=Path, default=None, help="HF tokenizer directory")
    ap.add_argument("--vocab", type=int, default=32000, help="BPE size when training one")
    ap.add_argument("--corpus-bytes", type=int, default=8_000_000)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
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

        from probes.scoring import sentence_ids

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
