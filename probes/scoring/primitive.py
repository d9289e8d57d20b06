"""The one scoring primitive (per-token log-probs) and the named reductions built on it, under the convention
``start_token_all_tokens_v2`` (docs/scoring.md): each sentence encoded with ``ENCODE`` after the start token training
put before every document, ``lp`` summed over ALL its tokens, MLP and sum-LP strict (a tie is wrong)."""
from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Callable, Optional, Sequence

import numpy as np
import pandas as pd
import torch
from torch.nn.utils.rnn import pad_sequence
from tqdm.auto import tqdm

from probes.evals.files import CONVENTION, CONVENTIONS, REGIONS as REGION_NAMES  # defined by the eval contract
from probes.benchmarks.pairs import Pair
from probes.scoring.head import _HeadLSE, _batch_split, _drop_last, _split_head
from probes.scoring.pack import ATTENTION, packed_logprobs
from train.start_token import scoring_start_id

# How sentence text is encoded, everywhere ids are compared with the scored ones.
ENCODE = {"add_special_tokens": False, "split_special_tokens": True}

# Named reductions over one sentence's (or option's) per-token natural-log probabilities: the ELAGENT
# probe scores its options with them (probes/elagent/score.py).
REDUCTIONS: dict[str, Callable[[np.ndarray], float]] = {
    "sum": lambda lp: float(np.sum(lp)),
    "mean": lambda lp: float(np.mean(lp)) if len(lp) else float("nan"),
}

start_id = scoring_start_id  # the id prepended to every sentence


def sentence_ids(tokenizer, texts: list[str]) -> list[list[int]]:
    """The start id followed by the ids of ``text`` (no special tokens added, none read from text)."""
    start = start_id(tokenizer)
    if not texts:
        return []
    enc = tokenizer(list(texts), **ENCODE)["input_ids"]
    return [[start, *map(int, ids)] for ids in enc]


def _checked(model, seqs: list[list[int]], batch_size: int, device, what: str, extra: int = 0) -> torch.device:
    """The device to score on (default: the model's); ValueError for a batch size below 1, an empty sequence or
    one that does not fit the model's context with `extra` positions more."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    max_pos = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    for i, s in enumerate(seqs):
        if len(s) == 0:
            raise ValueError(f"{what} {i} is empty: it needs at least the BOS id")
        if max_pos is not None and len(s) + extra > max_pos:
            raise ValueError(f"{what} {i} has {len(s)} tokens{', with its continuation,' if extra else ','} more "
                             f"than the model's max_position_embeddings={max_pos}")
    return torch.device(device) if device is not None else next(model.parameters(), torch.zeros(0)).device


@contextmanager
def _scoring(model, device: torch.device, bf16: bool):
    """Eval and inference mode (bf16 autocast if asked) around forwards; the model's mode restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            yield
    finally:
        model.train(was_training)


def _prefix_nodes(seqs: list[list[int]]) -> tuple[list[np.ndarray], int]:
    """For each sequence, the id of the prefix ``seq[:j+1]`` per scored position j: equal prefixes get equal ids
    (a trie), so the logsumexp at a prefix is computed once for every sequence that shares it."""
    child: dict[tuple[int, int], int] = {}
    out = []
    for s in seqs:
        node, ids = -1, []
        for tok in s[:-1]:
            node = child.setdefault((node, tok), len(child))
            ids.append(node)
        out.append(np.asarray(ids, dtype=np.int64))
    return out, len(child)


def _right_padded(batch: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """(ids, mask, the mask to pass the model) of sequences right-padded to the longest (real tokens keep the
    positions 0..L-1); no mask is passed where every row is whole (most batches, sorted by length)."""
    ids = pad_sequence([torch.tensor(s, dtype=torch.long) for s in batch], batch_first=True)
    mask = (torch.arange(ids.shape[1]) < torch.tensor([[len(s)] for s in batch])).long()
    ids, mask = ids.to(device), mask.to(device)
    return ids, mask, (None if bool(mask.all()) else mask)


def token_logprobs(model, seqs: list[list[int]], *, batch_size: int = 64, device=None,
                   progress: bool = False, bf16: bool = False) -> list[np.ndarray]:
    """out[i][j] = log p(seqs[i][j+1] | seqs[i][:j+1]) in float64 numpy; ``batch_size``: about that many sequences'
    tokens per forward; ``bf16``: autocast (lps move by ~1e-2), off so scores are fp32-exact. When the logits are
    head(body) under sdpa or eager attention, ``probes.scoring.pack`` runs the body and the logsumexp over the
    vocabulary once per distinct prefix (docs/speed.md); other models get right-padded batches (``_batched``)."""
    device = _checked(model, seqs, batch_size, device, "sequence")
    out: list[Optional[np.ndarray]] = [np.zeros(0, dtype=np.float64) if len(s) == 1 else None for s in seqs]
    todo = [i for i in range(len(seqs)) if out[i] is None]  # only the BOS: nothing to predict
    split = _split_head(model)
    with _scoring(model, device, bf16):
        if split is not None and getattr(split[0].config, "_attn_implementation", None) in ATTENTION:
            lps = packed_logprobs(split[0], split[1], [seqs[i] for i in todo], batch_size=batch_size,
                                  device=device, bf16=bf16, progress=progress) if todo else []
            for i, lp in zip(todo, lps):
                out[i] = lp
        else:
            _batched(model, split, seqs, todo, out, batch_size, device, bf16, progress)
    return out  # type: ignore[return-value]


def _batched(model, split, seqs, todo, out, batch_size, device, bf16, progress) -> None:
    """token_logprobs without packing: right-padded batches, longest first (an out-of-memory shows up in the first
    batch); the head only where needed when ``split`` is not None."""
    order = sorted(todo, key=lambda i: -len(seqs[i]))
    batches = [order[k:k + batch_size] for k in range(0, len(order), batch_size)]
    nodes, n_nodes = _prefix_nodes(seqs) if split is not None else (None, 0)
    lse = torch.empty(n_nodes, dtype=torch.float32, device=device)
    have = torch.zeros(n_nodes, dtype=torch.bool, device=device)
    lse_head = _HeadLSE(split[1], device, bf16) if split is not None else None
    for batch in tqdm(batches, desc="scoring", unit="batch", disable=not progress):
        ids, mask, call_mask = _right_padded([seqs[i] for i in batch], device)
        if split is None:
            lp = _batch_plain(model, ids, call_mask)
        else:
            node = torch.from_numpy(np.concatenate([nodes[i] for i in batch])).to(device)
            lp = _batch_split(split[0], split[1], lse_head, ids, mask, call_mask, node, lse, have)
        lp = lp.to("cpu", torch.float64).numpy()
        at = 0
        for row, i in enumerate(batch):
            n = len(seqs[i]) - 1
            out[i] = lp[row, :n].copy() if lp.ndim == 2 else lp[at:at + n].copy()
            at += n


def next_token_logprobs(model, contexts: list[list[int]], candidates: list[list[int]], *,
                        batch_size: int = 64, device=None, bf16: bool = False) -> list[np.ndarray]:
    """out[i][k] = log p(candidates[i][k] | contexts[i]) in float64 numpy: one forward of each context for all
    its one-token continuations; equal, up to float rounding, to ``token_logprobs`` of context + candidate."""
    if len(contexts) != len(candidates):
        raise ValueError(f"{len(contexts)} contexts but {len(candidates)} candidate lists")
    device = _checked(model, contexts, batch_size, device, "context", extra=1)  # the candidate's position too
    out: list[Optional[np.ndarray]] = [None] * len(contexts)
    order = sorted(range(len(contexts)), key=lambda i: -len(contexts[i]))
    split = _split_head(model)
    with _scoring(model, device, bf16):
        for k in range(0, len(order), batch_size):
            batch = order[k:k + batch_size]
            ids, _mask, call_mask = _right_padded([contexts[i] for i in batch], device)
            last = torch.tensor([len(contexts[i]) - 1 for i in batch], device=device)
            rows = torch.arange(len(batch), device=device)
            if split is None:
                logits = model(input_ids=ids, attention_mask=call_mask, use_cache=False).logits[rows, last]
            else:  # the head only at each context's last position
                body, head = split
                logits = head(body(input_ids=ids, attention_mask=call_mask, use_cache=False)[0][rows, last])
            logp = torch.log_softmax(logits.float(), dim=-1).to("cpu", torch.float64).numpy()
            for row, i in enumerate(batch):
                out[i] = logp[row, np.asarray(candidates[i], dtype=np.int64)]
    return out  # type: ignore[return-value]


def _batch_plain(model, ids: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """[B, W-1] lps through the model's own logits (any causal LM)."""
    logits = model(input_ids=ids[:, :-1], attention_mask=_drop_last(mask), use_cache=False).logits
    # float32 at least: bf16 logsumexp loses ~2 digits on large vocabularies
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    target = ids[:, 1:].unsqueeze(-1)
    return logits.gather(-1, target).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def _align(good: Sequence[int], bad: Sequence[int]) -> tuple[int, int]:
    """(shared prefix length, shared suffix length) of two token lists; identical lists are all prefix."""
    p = len(os.path.commonprefix([list(good), list(bad)]))
    return p, len(os.path.commonprefix([list(good[p:])[::-1], list(bad[p:])[::-1]]))


def pair_sentence_ids(tokenizer, pairs: list[Pair]) -> dict[str, list[int]]:
    """The scored ids (``sentence_ids``) of each distinct sentence of ``pairs``, in first-seen order."""
    texts = list(dict.fromkeys(t for p in pairs for t in (p.good, p.bad)))
    return dict(zip(texts, sentence_ids(tokenizer, texts)))


def score_pairs(model, tokenizer, pairs: list[Pair], *, batch_size: int = 64, device=None,
                progress: bool = False, bf16: bool = False, per_token: bool = False,
                ids: Optional[dict[str, list[int]]] = None) -> pd.DataFrame:
    """One row per pair with lp/ntok of good and bad and their prefix/critical/suffix region sums; each distinct
    sentence is scored once. ``per_token``: also the list columns ``probes.scoring.tokens.FRAME_COLUMNS``, for the
    per-token sidecar. ``ids``: ``pair_sentence_ids(tokenizer, pairs)`` when the caller has it already."""
    by_text = pair_sentence_ids(tokenizer, pairs) if ids is None else ids
    texts = list(dict.fromkeys(t for p in pairs for t in (p.good, p.bad)))
    ids = [by_text[t] for t in texts]
    index = {t: k for k, t in enumerate(texts)}
    # checked before scoring: a bad tokenizer should not cost a whole benchmark's forward passes
    max_pos = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    for p in pairs:
        where = f"benchmark {p.benchmark!r} paradigm {p.paradigm!r} pair {p.pair_id!r}"
        for side in ("good", "bad"):
            n = len(ids[index[getattr(p, side)]])
            if not getattr(p, side).strip():
                raise ValueError(f"{where}: empty {side} sentence")
            if n == 1:
                raise ValueError(
                    f"{where}: the {side} sentence tokenizes to no tokens (tokenizer "
                    f"{type(tokenizer).__name__} has {len(tokenizer)} tokens; an empty one comes "
                    f"from loading a folder without tokenizer files)")
            if max_pos is not None and n > max_pos:
                raise ValueError(f"{where}: the {side} sentence has {n} tokens with BOS, more "
                                 f"than the model's max_position_embeddings={max_pos}")
    lps = token_logprobs(model, ids, batch_size=batch_size, device=device, progress=progress, bf16=bf16)
    rows = []
    for p in pairs:
        g, b = index[p.good], index[p.bad]
        # drop the BOS: lps[k][j] is the lp of ids[k][j + 1]
        tg, tb = ids[g][1:], ids[b][1:]
        lg, lb = lps[g], lps[b]
        pre, suf = _align(tg, tb)
        row = {"benchmark": p.benchmark, "paradigm": p.paradigm, "phenomenon": p.phenomenon,
               "pair_id": str(p.pair_id), "good": p.good, "bad": p.bad, "lp_good": float(lg.sum()),
               "lp_bad": float(lb.sum()), "ntok_good": len(tg), "ntok_bad": len(tb),
               # the first token's lp: what minicons' default leaves unscored (reduction sum_after_first)
               "lp_good_first": float(lg[0]), "lp_bad_first": float(lb[0])}
        for side, lp in (("good", lg), ("bad", lb)):
            cuts = {"prefix": (0, pre), "critical": (pre, len(lp) - suf), "suffix": (len(lp) - suf, len(lp))}
            for name in REGION_NAMES:
                a, z = cuts[name]
                row[f"lp_{side}_{name}"] = float(lp[a:z].sum())
                row[f"ntok_{side}_{name}"] = z - a
        rows.append(row)
    slot_columns = _add_slot_sums(tokenizer, pairs, rows, ids, lps, index)
    columns = ["benchmark", "paradigm", "phenomenon", "pair_id", "good", "bad",
               "lp_good", "lp_bad", "ntok_good", "ntok_bad", "lp_good_first", "lp_bad_first"]
    columns += [f"{k}_{side}_{name}" for k in ("lp", "ntok") for side in ("good", "bad") for name in REGION_NAMES]
    df = pd.DataFrame(rows, columns=columns + slot_columns)
    if per_token:
        from probes.scoring.tokens import frame_columns

        for name, values in frame_columns(tokenizer, pairs, ids, lps, index).items():
            df[name] = pd.Series(values, index=df.index, dtype=object)  # one list per pair
    return df


def _add_slot_sums(tokenizer, pairs: list[Pair], rows: list[dict], ids: list[list[int]],
                   lps: list[np.ndarray], index: dict[str, int]) -> list[str]:
    """Add per-slot lp/ntok to ``rows`` of pairs with ``regions``; return the new column names."""
    marked = [k for k, p in enumerate(pairs) if p.regions]
    if not marked:
        return []
    if not getattr(tokenizer, "is_fast", False):
        logging.getLogger(__name__).warning("%s is not a fast tokenizer (no character offsets): Pair.regions are "
                                            "not scored, only the diff-based prefix/critical/suffix",
                                            type(tokenizer).__name__)
        return []
    texts = list(dict.fromkeys(t for k in marked for t in (pairs[k].good, pairs[k].bad)))
    enc = tokenizer(texts, **ENCODE, return_offsets_mapping=True)
    offsets = {}
    for t, tid, off in zip(texts, enc["input_ids"], enc["offset_mapping"]):
        if list(tid) != ids[index[t]][1:]:  # same call options, so this is a tokenizer bug
            raise RuntimeError(f"{type(tokenizer).__name__} gives different ids with offsets for {t!r}")
        offsets[t] = off
    columns: dict[str, None] = {}
    for k in marked:
        p, row = pairs[k], rows[k]
        for side in ("good", "bad"):
            text = getattr(p, side)
            lp = lps[index[text]]
            names = [r.name for r in p.regions]
            sums, counts, cross = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0), dict.fromkeys(names, 0)
            for j, (start, end) in enumerate(offsets[text]):
                last = max(start, end - 1)
                for r in p.regions:
                    a, z = getattr(r, side)
                    if a <= last < z:
                        sums[r.name] += float(lp[j])
                        counts[r.name] += 1
                        # a token that also holds text of an earlier slot (服务|员会, a byte-fallback
                        # run): its lp is this slot's, but the boundary is not where the slots say
                        cross[r.name] += bool(text[start:a].strip())
                        break
            for name in names:
                for what, values in (("lp", sums), ("ntok", counts), ("xtok", cross)):
                    row[f"{what}_{side}_slot_{name}"] = values[name]
                    columns[f"{what}_{side}_slot_{name}"] = None
    return list(columns)


# The decision rules a pair can be scored by (``correct``; their names and descriptions: CONVENTIONS, in the eval
# contract), all on the lps above: ours (MLP) and the ones benchmark authors use (probes.benchmarks.registry).
def correct(df: pd.DataFrame, reduction: str = "mlp") -> pd.Series:
    """Per-pair correctness (bool), strict: a tie is wrong. ``reduction``: a key of ``CONVENTIONS``."""
    if reduction == "mlp":
        return (df["lp_good"] / df["ntok_good"]) > (df["lp_bad"] / df["ntok_bad"])
    if reduction == "sum":
        return df["lp_good"] > df["lp_bad"]
    if reduction == "sum_after_first":
        if "lp_good_first" not in df:
            raise ValueError("sum_after_first needs the lp_good_first/lp_bad_first columns, which eval files "
                             "scored before them lack: score the checkpoint again")
        return (df["lp_good"] - df["lp_good_first"]) > (df["lp_bad"] - df["lp_bad_first"])
    raise ValueError(f"unknown reduction {reduction!r}; expected one of {sorted(CONVENTIONS)}")


def accuracy(df: pd.DataFrame, reduction: str = "mlp") -> float:
    """Fraction of pairs whose good sentence scores strictly higher (see ``correct``)."""
    ok = correct(df, reduction)
    if len(ok) == 0:
        raise ValueError("accuracy of an empty set of pairs is undefined")
    return float(ok.mean())
