"""Is a scored sentence's first token predicted from the context training fed? Measured on a run.

    python -m train experiment=demo hydra.run.dir=/tmp/demo
    python bench/bench_start_token.py /tmp/demo

Prints the per-paradigm MLP accuracy at every checkpoint (the attractor U), and on the last
checkpoint: the mean log-prob of the first token of every benchmark sentence after the start token
(start_token.json), the same after a token training never fed (id 0, <unk>, as the old BOS <s>
was), and the model's mean log-prob of the first token of training documents in their windows.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM

from probes.scoring.primitive import accuracy, sentence_ids, token_logprobs
from train.sequences import SequenceStream
from train.start_token import document_tokens, read_record
from train.token_store import TokenStore
from train.tokenizer import load_tokenizer


def main(run: Path, benchmark: str = "grammar", windows: int = 300) -> None:
    torch.set_num_threads(1)
    steps = sorted(int(p.name[4:]) for p in (run / "evals").iterdir() if p.name.startswith("step"))
    rows = []
    for s in steps:
        df = pd.read_parquet(run / "evals" / f"step{s}" / f"{benchmark}.parquet")
        ok = df.lp_good / df.ntok_good > df.lp_bad / df.ntok_bad
        rows.append({"step": s, **df.assign(ok=ok).groupby("paradigm").ok.mean().round(3).to_dict(),
                     "all_mlp": round(accuracy(df, "mlp"), 4), "all_sum": round(accuracy(df, "sum"), 4)})
    print(pd.DataFrame(rows).to_string(index=False))

    ckpt = run / "checkpoints" / f"step{steps[-1]}"
    print("record:", read_record(ckpt))
    model = AutoModelForCausalLM.from_pretrained(ckpt).eval()
    tok = load_tokenizer(ckpt)
    df = pd.read_parquet(run / "evals" / f"step{steps[-1]}" / f"{benchmark}.parquet")
    ids = sentence_ids(tok, sorted(set(df.good) | set(df.bad)))
    first = np.array([x[0] for x in token_logprobs(model, ids)])
    never = np.array([x[0] for x in token_logprobs(model, [[0] + i[1:] for i in ids])])
    print(f"step {steps[-1]}, {len(ids)} sentences: first-token mean lp {first.mean():.3f} after start id "
          f"{ids[0][0]}, {never.mean():.3f} after never-fed id 0")

    cfg = OmegaConf.to_container(OmegaConf.load(run / "config.yaml"))["data"]
    stores = [p for p in (Path(cfg["cache_dir"]).expanduser() / "stores").iterdir() if not p.name.startswith(".")]
    start, end = document_tokens(tok)
    stream = SequenceStream(TokenStore(stores[0]), seq_len=cfg["seq_len"], budget_tokens=cfg["budget_tokens"],
                            epochs=cfg["epochs"], order_seed=cfg["order_seed"], seed=cfg["seed"],
                            start_id=start, end_id=end)
    w = torch.from_numpy(np.stack([stream.window(j) for j in range(min(windows, stream.sequences_per_epoch))]))
    with torch.no_grad():
        lp = model(w[:, :-1]).logits.log_softmax(-1).gather(-1, w[:, 1:, None])[..., 0]
    at = lp[w[:, :-1] == start]
    print(f"training document starts: mean lp {at.mean():.3f} over {len(at)} starts")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
