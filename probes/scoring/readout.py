"""What `probes score` prints for a reader: accuracy per phenomenon, and whether the tokenizer can read the
benchmark at all. One overall number hides both: the demo tokenizer (512 English pieces) writes every Chinese
character as three byte pieces it never saw in training, so ZhoBLiMP on it gives 0.47, a number about the
tokenizer, not syntax. The coverage check counts unknown, byte-fallback and never-seen pieces, and warns."""
from __future__ import annotations

import re
import unicodedata
from itertools import chain
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from probes.scoring.primitive import correct, pair_sentence_ids

# Above these shares the benchmark's scores say little about the model (the reader is told why).
MAX_UNKNOWN = 0.01
MAX_BYTE_FALLBACK = 0.05
MAX_UNSEEN = 0.05
_BYTE_PIECE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


def phenomenon_table(df: pd.DataFrame, authors: Optional[str] = None) -> str:
    """Pairs, paradigms and MLP / sum-LP accuracy per phenomenon, the whole set last; `authors` (the benchmark
    authors' convention) adds its column `acc_<name>`."""
    rules = ["mlp", "sum"] + ([authors] if authors and authors not in ("mlp", "sum") else [])
    scored = df.assign(**{r: correct(df, r).astype(float) for r in rules})
    table = scored.groupby("phenomenon", sort=True).agg(pairs=("mlp", "size"), paradigms=("paradigm", "nunique"),
                                                        **{f"acc_{r}": (r, "mean") for r in rules})
    table.loc["(all)"] = [len(scored), scored["paradigm"].nunique(), *(scored[r].mean() for r in rules)]
    table[["pairs", "paradigms"]] = table[["pairs", "paradigms"]].astype(int)
    return table.to_string(float_format=lambda x: f"{x:.3f}")


def coverage(tokenizer, pairs, corpus_counts: Optional[np.ndarray] = None,
             scored: Optional[dict[str, list[int]]] = None) -> dict[str, float]:
    """Shares of the benchmark's pieces that are unknown, byte fallback and (with the run's id counts) never seen
    in training; `pieces`: how many. `scored`: primitive.pair_sentence_ids, when the caller has them."""
    scored = pair_sentence_ids(tokenizer, pairs) if scored is None else scored
    ids = np.fromiter(chain.from_iterable(scored[s][1:] for p in pairs for s in (p.good, p.bad)), dtype=np.int64)
    n = max(1, len(ids))
    byte_ids = {i for piece, i in tokenizer.get_vocab().items() if _BYTE_PIECE.match(piece)}
    out = {"pieces": float(len(ids)),
           "unknown": float(np.sum(ids == tokenizer.unk_token_id)) / n if tokenizer.unk_token_id is not None else 0.0,
           "byte_fallback": float(np.isin(ids, list(byte_ids)).sum()) / n if byte_ids else 0.0}
    if corpus_counts is not None:
        seen = np.zeros(max(len(corpus_counts), int(ids.max(initial=0)) + 1), dtype=bool)
        seen[: len(corpus_counts)] = corpus_counts > 0
        out["unseen"] = float((~seen[ids]).sum()) / n
    return out


def script_of(ch: str) -> str:
    """The script of a character as a reader names it: the first word of its Unicode name (Cyrillic, ...), CJK
    ideographs as "CJK (kanji/hanzi)", Latin beyond ASCII as "Latin with diacritics"; others by kind."""
    kind = unicodedata.category(ch)[0]
    if kind == "M":
        return "combining marks"
    if kind != "L":
        return "punctuation, digits and symbols"
    name = unicodedata.name(ch, "UNKNOWN")
    if name.startswith("CJK"):
        return "CJK (kanji/hanzi)"
    if name.startswith("LATIN"):
        return "Latin" if ch.isascii() else "Latin with diacritics"
    return name.split()[0].capitalize()


def unwritable_scripts(tokenizer, texts) -> dict[str, list[str]]:
    """{script: characters} the tokenizer can only write as its unknown piece or byte-fallback pieces (from the
    offsets of those pieces in `texts`; a slow tokenizer is asked character by character)."""
    texts = list(dict.fromkeys(texts))
    bad_ids = {i for piece, i in tokenizer.get_vocab().items() if _BYTE_PIECE.match(piece)}
    if tokenizer.unk_token_id is not None:
        bad_ids.add(tokenizer.unk_token_id)
    chars: set[str] = set()
    if getattr(tokenizer, "is_fast", False):
        enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
        for text, ids, offsets in zip(texts, enc["input_ids"], enc["offset_mapping"]):
            chars.update(c for i, (a, z) in zip(ids, offsets) if i in bad_ids for c in text[a:z])
    else:
        every = sorted(set("".join(texts)))
        for ch, ids in zip(every, tokenizer(every, add_special_tokens=False)["input_ids"]):
            if any(i in bad_ids for i in ids):
                chars.add(ch)
    out: dict[str, list[str]] = {}
    for ch in sorted(c for c in chars if not c.isspace()):
        out.setdefault(script_of(ch), []).append(ch)
    return out


def coverage_warning(name: str, cov: dict[str, float], store: Optional[Path] = None,
                     scripts: Optional[dict[str, list[str]]] = None) -> Optional[str]:
    """One line when the tokenizer reads benchmark `name` badly, else None; `scripts`: what it cannot write."""
    limits = ((cov["unknown"], MAX_UNKNOWN, "unknown pieces"),
              (cov["byte_fallback"], MAX_BYTE_FALLBACK, "byte-fallback pieces (<0xNN>)"),
              (cov.get("unseen", 0.0), MAX_UNSEEN, f"pieces never seen in the run's corpus ({store})"))
    bad = [f"{share:.0%} {what}" for share, limit, what in limits if share > limit]
    if not bad:
        return None
    cannot = "; ".join(f"{script} ({len(cs)}: {' '.join(cs[:8])}{' ...' if len(cs) > 8 else ''})"
                       for script, cs in sorted((scripts or {}).items(), key=lambda kv: -len(kv[1])))
    return (f"warning: the tokenizer reads benchmark {name} badly: of its {int(cov['pieces']):,} pieces, "
            f"{', '.join(bad)}{f'; it cannot write {cannot}' if cannot else ''}; its scores say more about "
            f"the tokenizer than about syntax (train the tokenizer on text in the benchmark's language)")


def run_token_counts(model_dir: Path, vocab_size: int) -> tuple[Optional[np.ndarray], Optional[Path]]:
    """(id counts, store) of the run's token store when `model_dir` is <run>/checkpoints/step<N> of one of our
    runs whose store is in its cache, else (None, None)."""
    model_dir = Path(model_dir)
    run_dir = model_dir.parent.parent
    if model_dir.parent.name != "checkpoints" or not (run_dir / "config.yaml").is_file():
        return None, None
    from probes.scoring.unigram import _run_store, token_counts

    try:
        store = _run_store(run_dir, model_dir, None)
        return token_counts(store, vocab_size), store
    except (OSError, ValueError):
        return None, None
