"""Answer matching for fill-in-the-blank, and the overall accuracy OA. Words: runs of letters/digits, and each CJK
character alone, case and punctuation dropped ("Pierre Vinken , 61" matches "Pierre Vinken, 61"; 加速度 is three
words). Strict F1 counts words matching *in order* (the longest common subsequence): bag-of-words F1 would reward
"board the"."""
from __future__ import annotations

import math
import re

_WORD_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\W_]+", re.UNICODE)


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD_RE.findall(text)]


def _lcs(a: list[str], b: list[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, start=1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]


def exact_match(pred: str, golds: list[str]) -> float:
    p = words(pred)
    return float(any(p == words(g) for g in golds))


def strict_f1(pred: str, golds: list[str]) -> float:
    """Best F1 over the gold answers, with in-order (LCS) word overlap."""
    p = words(pred)
    best = 0.0
    for g in golds:
        gw = words(g)
        if not p or not gw:
            best = max(best, float(p == gw))
            continue
        m = _lcs(p, gw)
        if m:
            prec, rec = m / len(p), m / len(gw)
            best = max(best, 2 * prec * rec / (prec + rec))
    return best


def overall_accuracy(tf_acc: float, mc_acc: float, fitb_acc: float, fitb_f1: float) -> float:
    """OA = (TF_acc + MC_acc + (FITB_acc + FITB_F1) / 2) / 3; NaN when a part is missing."""
    parts = (tf_acc, mc_acc, fitb_acc, fitb_f1)
    if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in parts):
        return float("nan")
    return (tf_acc + mc_acc + (fitb_acc + fitb_f1) / 2) / 3
