"""Token-level evidence: each pair's per-token log-probs in a sidecar ``<benchmark>.tokens.parquet`` beside its eval
file (schema: checkpoints.md), and ``python -m probes tokens`` to draw them over checkpoints. The sidecar is written
before its eval file, and an eval file rescored without per-token removes its old sidecar first, so a sidecar never
outlives the scores it explains (``pair_tokens`` checks the sums anyway)."""
from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from probes.evals.files import META_KEY, TOKENS_SUFFIX, EvalInputError, tokens_path
from train.evalsums import CHECKSUM, CHECKSUM_KEY, sum_problem, write_summed

SIDES = ("good", "bad")
# per-token columns score_pairs(per_token=True) adds to its frame; split off before the eval file
FRAME_COLUMNS = tuple(f"{k}_{side}" for k in ("ids", "pieces", "lps") for side in SIDES)
_TYPES = {"ids": pa.list_(pa.int32()), "pieces": pa.list_(pa.string()), "lps": pa.list_(pa.float32())}


def frame_columns(tokenizer, pairs, ids: list[list[int]], lps: list[np.ndarray],
                  index: dict[str, int]) -> dict[str, list]:
    """The per-token columns of ``pairs`` (``FRAME_COLUMNS``) from probes.scoring.primitive's per-sentence
    ids (start token first) and lps; pieces are looked up once per distinct sentence."""
    pieces: dict[int, list[str]] = {}
    out: dict[str, list] = {c: [] for c in FRAME_COLUMNS}
    for p in pairs:
        for side in SIDES:
            k = index[getattr(p, side)]
            if k not in pieces:
                pieces[k] = tokenizer.convert_ids_to_tokens(ids[k][1:])
            out[f"ids_{side}"].append(np.asarray(ids[k][1:], dtype=np.int32))
            out[f"pieces_{side}"].append(pieces[k])
            # lossless: the lps are float32 values widened to float64 (probes.scoring.primitive)
            out[f"lps_{side}"].append(np.asarray(lps[k], dtype=np.float32))
    return out


def write_eval(df, path: Path, meta: dict) -> None:
    """Write an eval file and first its sidecar (with the eval file's metadata), from ``df``'s per-token columns,
    or else remove an old sidecar."""
    from probes.scoring.store import write_pairs

    side = tokens_path(path)
    if not set(FRAME_COLUMNS) <= set(df.columns):
        side.unlink(missing_ok=True)
        return write_pairs(df, path, meta)
    cols = {"paradigm": pa.array(df["paradigm"].astype(str).tolist(), pa.string()),
            "pair_id": pa.array(df["pair_id"].astype(str).tolist(), pa.string()),
            **{c: pa.array(df[c].tolist(), _TYPES[c.split("_")[0]]) for c in FRAME_COLUMNS}}
    blob = json.dumps({**meta, "kind": "per_token", CHECKSUM_KEY: CHECKSUM}, default=str).encode()
    table = pa.table(cols).replace_schema_metadata({META_KEY: blob})
    floats = [f"{c}.list.element" for c in table.column_names if c.startswith("lps_")]
    buf = io.BytesIO()
    # ids and pieces repeat across pairs: dictionary + zstd. The lps do not repeat: byte-stream
    # split lets zstd find their shared exponent bytes (it excludes a dictionary). On all 35,400
    # ZhoBLiMP pairs: 4.8 MB with parquet's defaults + zstd, 3.5 MB so (README "Token-level evidence")
    pq.write_table(table, buf, compression="zstd", use_byte_stream_split=floats,
                   use_dictionary=[c if c in ("paradigm", "pair_id") else f"{c}.list.element"
                                   for c in table.column_names if not c.startswith("lps_")])
    write_summed(side, buf.getvalue())
    write_pairs(df.drop(columns=list(FRAME_COLUMNS)), path, meta)


def read_tokens(path: Path, paradigm: Optional[str] = None, pair_id: Optional[str] = None):
    """(rows as a list of dicts, metadata) of a sidecar; filtered to one paradigm / pair when given."""
    filters = [(k, "=", v) for k, v in (("paradigm", paradigm), ("pair_id", pair_id)) if v is not None]
    meta = json.loads((pq.read_schema(path).metadata or {}).get(META_KEY, b"{}"))
    if problem := sum_problem(path, meta):
        raise EvalInputError(problem)
    return pq.read_table(path, filters=filters or None).to_pylist(), meta


def pair_tokens(run_dir: Path, benchmark: str, paradigm: str, pair_id: str) -> list[dict]:
    """Per checkpoint with a sidecar holding the pair, by step: step, tokens and the sidecar row; a sidecar whose
    sums differ from its eval file's lp is an error naming both files."""
    evals = Path(run_dir) / "evals"
    out = []
    for d in sorted(evals.glob("step*"), key=lambda d: int(d.name[4:]) if d.name[4:].isdigit() else -1):
        f, eval_file = d / f"{benchmark}{TOKENS_SUFFIX}", d / f"{benchmark}.parquet"
        # no eval file: a write interrupted between the two (the sidecar comes first); rescoring redoes it
        if not d.name[4:].isdigit() or not f.is_file() or not eval_file.is_file():
            continue
        rows, meta = read_tokens(f, paradigm, pair_id)
        if not rows:
            continue
        _check_sums(rows[0], eval_file, f, paradigm, pair_id)
        out.append({"step": int(meta.get("step", d.name[4:])), "tokens": int(meta.get("tokens", -1)), **rows[0]})
    return out


def _check_sums(row: dict, eval_file: Path, side_file: Path, paradigm: str, pair_id: str) -> None:
    ev = pq.read_table(eval_file, columns=["paradigm", "pair_id", "lp_good", "lp_bad"],
                       filters=[("paradigm", "=", paradigm), ("pair_id", "=", pair_id)]).to_pylist()
    if not ev:
        raise ValueError(f"{side_file}: pair {paradigm}/{pair_id} is not in {eval_file}")
    for side in SIDES:
        total = float(np.sum(np.asarray(row[f"lps_{side}"], dtype=np.float64)))
        if abs(total - ev[0][f"lp_{side}"]) > 1e-9:
            raise ValueError(f"{side_file}: per-token lps of {paradigm}/{pair_id} ({side}) sum to {total:.6f}, "
                             f"but {eval_file} has lp_{side}={ev[0][f'lp_{side}']:.6f}: stale sidecar")


def surprisal_table(points: list[dict]):
    """Long table: one row per checkpoint x side x position, surprisal in nats (-lp)."""
    import pandas as pd

    rows = [{"step": pt["step"], "tokens": pt["tokens"], "side": side, "position": j, "piece": piece,
             "surprisal": -float(lp)}
            for pt in points for side in SIDES
            for j, (piece, lp) in enumerate(zip(pt[f"pieces_{side}"], pt[f"lps_{side}"]))]
    return pd.DataFrame(rows, columns=["step", "tokens", "side", "position", "piece", "surprisal"])


# families with CJK glyphs, tried in order when a piece needs one (DejaVu Sans, matplotlib's default, has none)
_CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei", "SimHei",
              "Microsoft YaHei", "PingFang SC", "Arial Unicode MS")


def _labeller(pieces: list[str]):
    """(font family or None, piece -> legend text): a CJK font when a piece needs one and one is
    installed; without one such pieces are drawn as code points (U+4E86), never as empty boxes."""
    from matplotlib import font_manager

    if all(ord(c) < 0x2E80 for p in pieces for c in p):
        return None, str
    for family in _CJK_FONTS:
        try:
            font_manager.findfont(family, fallback_to_default=False)
            return family, str
        except ValueError:
            continue
    return None, lambda p: "".join(c if ord(c) < 0x2E80 else f"U+{ord(c):04X}" for c in p)


def draw(points: list[dict], title: str, out: Path) -> Path:
    """Good and bad side by side: one line per token position, surprisal (nats) over tokens seen."""
    from matplotlib import colormaps

    from probes.analysis.outputs import save_figure
    from probes.analysis.plotting import new_figure, plot_line, token_axis

    table = surprisal_table(points)
    all_tokens = np.array(sorted({pt["tokens"] for pt in points}), dtype=float)
    family, label_of = _labeller([p for pt in points[-1:] for side in SIDES for p in pt[f"pieces_{side}"]])
    fig, axes = new_figure(12.0, 4.8, 1, 2, sharey=True)
    text = {"fontfamily": [family, "DejaVu Sans"]} if family else {}
    for ax, side in zip(axes[0], SIDES):
        sub = table[table["side"] == side]
        for j, g in sub.groupby("position", sort=True):
            plot_line(ax, g["tokens"].to_numpy(), g["surprisal"].to_numpy(), all_tokens,
                      f"{j}: {label_of(g['piece'].iloc[-1])}", colormaps["tab20"](j % 20), lw=1.2)
        token_axis(ax, all_tokens, ylabel="surprisal (nats)", chance=False)
        last = points[-1][f"pieces_{side}"]
        sentence = " ".join(map(label_of, last))
        sentence = sentence if len(sentence) <= 70 else sentence[:69] + "…"
        ax.set_title(f"{side}: {sentence}", fontsize=9, **text)
        ax.legend(fontsize=7, ncol=2, loc="upper right", prop={"size": 7, "family": text.get("fontfamily")})
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m probes tokens",
        description="Per-token surprisal of one pair's good and bad sentence over a run's checkpoints, "
                    "from the per-token sidecars (score-run --per-token or probes.per_token=true).")
    p.add_argument("run_dir", type=Path, metavar="RUN")
    p.add_argument("--paradigm", required=True)
    p.add_argument("--pair", required=True, metavar="ID", help="the pair_id of the eval files")
    p.add_argument("--benchmark", default=None, help="the eval file's name (default: the only benchmark with sidecars)")
    p.add_argument("--out", type=Path, default=None, metavar="FIG.png", help="draw the figure here")
    args = p.parse_args(argv)
    try:
        import pandas as pd

        evals = args.run_dir / "evals"
        if not evals.is_dir():
            raise ValueError(f"{args.run_dir}: no evals/ directory; not a probed run directory")
        have = sorted({f.name[:-len(TOKENS_SUFFIX)] for f in evals.glob(f"step*/*{TOKENS_SUFFIX}")})
        if not have:
            raise ValueError(f"{evals}: no per-token files (*{TOKENS_SUFFIX}); score with "
                             f"`probes score-run RUN --per-token` or probes.per_token=true")
        bench = args.benchmark
        if bench is None:
            if len(have) > 1:
                raise ValueError(f"--benchmark: {args.run_dir} has per-token files of {', '.join(have)}; name one")
            bench = have[0]
        elif bench not in have:
            raise ValueError(f"--benchmark {bench}: no per-token files of it in {evals} (have: {', '.join(have)})")
        if args.out is not None:
            from probes.analysis.outputs import check_output_file

            check_output_file(args.out)
        points = pair_tokens(args.run_dir, bench, args.paradigm, args.pair)
        if not points:
            raise ValueError(f"--paradigm {args.paradigm} --pair {args.pair}: no such pair in the per-token "
                             f"files of {bench} under {evals}")
        table = surprisal_table(points)
        with pd.option_context("display.width", 200, "display.max_columns", 50):
            for side in SIDES:
                sub = table[table["side"] == side]
                wide = sub.pivot_table(index=["step", "tokens"], columns="position", values="surprisal")
                wide.columns = [f"{j}:{points[-1][f'pieces_{side}'][j]}" for j in wide.columns]
                wide["total"] = wide.sum(axis=1)
                print(f"{bench} {args.paradigm}/{args.pair} {side} — surprisal (nats) per token")
                print(wide.round(3).to_string())
                print()
        if args.out is not None:
            draw(points, f"{args.run_dir.name}: {bench} {args.paradigm} pair {args.pair}", args.out)
            print(f"-> {args.out}")
        return 0
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
