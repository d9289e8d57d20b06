"""`python -m probes score-run --hub ORG/NAME --revisions pythia|step0,… --out RUN_DIR`: a public checkpoint
suite scored into a run directory like our own runs (docs/public_suites.md: the first token, hub.json, the
sanity warnings). Each revision is a huggingface_hub snapshot loaded through train.weights.load_causal_lm, so a
weight that does not fit is an error, not a random tensor."""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Callable, Optional

from probes.benchmarks.pairs import Pair
from probes.evals.files import CONVENTION, EvalInputError, eval_file_meta, eval_path, pair_set
from probes.scoring.evaluate import ScoreOptions, evaluate_checkpoint, ids_fingerprint
from train.errors import InputFileError, reading
from train.files import write_json_atomic, write_text_atomic

PYTHIA_TOKENS_PER_STEP = 1024 * 2048  # Pythia's global batch: 1,024 sequences of 2,048 tokens
# Pythia's 154 revisions: step0, the log-spaced 1..512, then every 1,000 steps to 143,000
PYTHIA_STEPS = [0] + [2 ** i for i in range(10)] + list(range(1000, 143001, 1000))
RECORD = "hub.json"
# its entries in --out and their list, written first (probes/analysis/outputs.py check_owned_output's rule)
OWNED = (("config.yaml", RECORD, "evals", ".score-run-files"), ".score-run-files")
# Relative drop of the distance from the reference revision below an earlier revision's that is named:
# training moves away from its initialisation at every checkpoint (train/trajectory.py, measured on the
# demo), and the reading is exact up to float32 summation (~1e-6 relative), so 1e-3 is far above noise.
BACKWARDS_TOLERANCE = 1e-3


class RevisionError(Exception):
    """A revision that cannot be had (not on the hub, not in the offline cache, no weights)."""


def parse_revisions(spec: str) -> list[str]:
    if spec == "pythia":
        return [f"step{s}" for s in PYTHIA_STEPS]
    revs = [r.strip() for r in spec.split(",") if r.strip()]
    if not revs:
        raise ValueError(f"--revisions {spec!r}: no revision named")
    if bad := [r for r in revs if not re.fullmatch(r"step\d+", r)]:
        raise ValueError(f"--revisions: {bad[0]!r} is not step<N> (the step gives the tokens axis)")
    if len(set(revs)) != len(revs):
        raise ValueError(f"--revisions {spec!r}: a revision is named twice")
    return sorted(revs, key=lambda r: int(r[4:]))


@dataclass
class HubOptions:
    name: str  # ORG/NAME on the hub
    revisions: list[str]
    tokens_per_step: int = PYTHIA_TOKENS_PER_STEP
    delete_after: bool = False  # drop a revision from the cache once scored (the reference is kept)


def fetch(name: str, revision: str) -> Path:
    """The revision's snapshot directory (downloaded unless cached; only the cache under HF_HUB_OFFLINE=1)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "tokenizer*"]
    try:
        snap = Path(snapshot_download(name, revision=revision, allow_patterns=patterns))
        if not weight_files(snap):  # an older revision with pytorch_model.bin only
            snap = Path(snapshot_download(name, revision=revision, allow_patterns=patterns + ["*.bin"]))
    except (LocalEntryNotFoundError, RepositoryNotFoundError, HfHubHTTPError, OSError, ValueError) as e:
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
        offline = " (HF_HUB_OFFLINE is set: only the local cache is read)" if offline else ""
        raise RevisionError(f"{name} revision {revision}: cannot be had{offline}: {type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else ''}") from None
    check_snapshot(snap)
    if not weight_files(snap):
        raise RevisionError(f"{name} revision {revision}: {snap} holds no weights (*.safetensors, *.bin)")
    return snap


def check_snapshot(snap: Path) -> None:
    """Refuses a cache snapshot with an entry that resolves outside its repository's blobs/: it would be read as
    the revision's, and huggingface_hub's deletion follows the link and deletes that file."""
    if snap.parent.name != "snapshots":
        return
    blobs = (snap.parent.parent / "blobs").resolve()
    for f in sorted(snap.rglob("*")):
        if f.is_symlink() and not f.resolve().is_relative_to(blobs):
            raise RevisionError(f"{f}: links to {f.resolve()}, outside the cache's {blobs}; refused (not read, not "
                                f"deleted): delete {snap} and download the revision again")


def weight_files(snap: Path) -> list[Path]:
    """The weight files from_pretrained reads: safetensors when there are any, else .bin."""
    files = sorted(p for p in snap.iterdir() if p.suffix == ".safetensors")
    return files or sorted(p for p in snap.iterdir() if p.suffix == ".bin" and "training" not in p.name)


def blob_ids(snap: Path) -> dict[str, str]:
    """{weight file: the cache's blob name, the sha256 of an LFS file (so equal bytes without reading them)}; outside
    a hub cache (no symlinks) the files are hashed."""
    from train.checkpoint import sha256_file

    out = {}
    for f in weight_files(snap):
        target = f.resolve()
        out[f.name] = target.name if target != f.absolute() and target.parent.name == "blobs" else sha256_file(f)
    return out


def _tensors(files: list[Path]):
    """name -> a zero-argument loader of that tensor, over every file (lazy: one tensor in memory at once)."""
    import torch
    from safetensors import safe_open

    out = {}
    for f in files:
        if f.suffix == ".safetensors":
            h = safe_open(f, framework="pt")
            out.update({k: partial(h.get_tensor, k) for k in h.keys()})
        else:
            sd = torch.load(f, map_location="cpu", mmap=True, weights_only=True)
            out.update({k: partial(lambda v: v, v) for k, v in sd.items()})
    return out


def distance(a: list[Path], b: list[Path]) -> float:
    """|θ_a − θ_b| over the tensors both hold, in float32, one tensor at a time."""
    import torch

    ta, tb = _tensors(a), _tensors(b)
    total = 0.0
    for k in sorted(set(ta) & set(tb)):
        x, y = ta[k](), tb[k]()
        if x.shape == y.shape and x.is_floating_point():
            total += float(torch.linalg.vector_norm(x.float() - y.float())) ** 2
    return math.sqrt(total)


def sanity_warnings(name: str, revisions: dict[str, dict]) -> list[str]:
    """Warnings naming both revisions: the same weight blobs, and distance from the reference going back."""
    out = []
    ordered = sorted(revisions.items(), key=lambda kv: kv[1]["step"])
    seen: dict[tuple, str] = {}
    for rev, r in ordered:
        key = tuple(sorted(r["weights"].items()))
        if seen.setdefault(key, rev) != rev:
            out.append(f"{name}: revision {rev} serves the same weight files as revision {seen[key]} "
                       f"(blob {next(iter(r['weights'].values()))[:12]}…): one of them is not the checkpoint "
                       f"its name says")
    best, best_rev = -1.0, None
    for rev, r in ordered:
        d = r.get("distance")
        if d is None:
            continue
        ref_weights = revisions.get(r["reference"], {}).get("weights")
        if d == 0 and rev != r["reference"] and r["weights"] != ref_weights:  # same blobs: named above
            out.append(f"{name}: revision {rev} holds the same weights as {r['reference']} (distance 0)")
        elif best_rev is not None and d < best * (1 - BACKWARDS_TOLERANCE):
            out.append(f"{name}: revision {rev} is closer to {r['reference']}'s weights ({d:.6g}) than revision "
                       f"{best_rev} was ({best:.6g}): training moves away from its start, so one of the two "
                       f"holds another step's weights")
        if d > best:
            best, best_rev = d, rev
    return out


def _done(out_dir: Path, step: int, rev: str, benchmarks: dict[str, str], name: str) -> bool:
    """Every benchmark's file holds this revision of this suite on this pair set. Not compared: the manifest
    (eval_done's key), which the next run cannot know before it fetches the snapshot."""
    for bench, pairs_hash in benchmarks.items():
        path = eval_path(out_dir, step, bench)
        try:
            meta = eval_file_meta(path) if path.is_file() else {}
        except EvalInputError:  # damaged or foreign: scored again, which replaces it
            return False
        if [meta.get(k) for k in ("convention", "pair_set", "hub", "hub_revision")] != [CONVENTION, pairs_hash,
                                                                                         name, rev]:
            return False
    return True


def check_out(out_dir: Path) -> None:
    """--out must not be a training run: its eval files would be overwritten by the suite's."""
    config = out_dir / "config.yaml"
    if (out_dir / "checkpoints").exists() or (
            config.is_file() and not config.read_text(errors="replace").startswith("experiment: hub\n")):
        raise EvalInputError(f"{out_dir}: holds a training run (checkpoints/ or its own config.yaml); "
                             f"score-run --hub would overwrite its eval files: give --out a new directory")
    if config.is_file() and not (out_dir / OWNED[1]).is_file():  # a suite scored before the list: its own
        _own(out_dir)


def _own(out_dir: Path) -> None:
    write_text_atomic(out_dir / OWNED[1], "config.yaml\nhub.json\nevals/\n.score-run-files\n")  # evals/ whole


def _delete(name: str, commit: str, snap: Path) -> None:
    from huggingface_hub import scan_cache_dir

    check_snapshot(snap)  # again, just before: huggingface_hub deletes whatever a link points at
    info = scan_cache_dir()
    if any(repo.repo_id == name for repo in info.repos):
        info.delete_revisions(commit).execute()


def score_hub(out_dir: Path, opts: HubOptions, benchmarks: dict[str, list[Pair]], score_opts: ScoreOptions,
              say: Callable[[str], None] = print) -> tuple[list[Path], list[str], list[str]]:
    """Score every revision not yet done: (files written, warnings, errors naming unavailable revisions)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from probes.scoring.watch import check_vocabulary
    from train.start_token import document_tokens
    from train.weights import load_causal_lm

    out_dir.mkdir(parents=True, exist_ok=True)
    if not (out_dir / OWNED[1]).is_file():
        _own(out_dir)
    rec = {"hub": opts.name, "tokens_per_step": opts.tokens_per_step, "revisions": {}}
    if (out_dir / RECORD).is_file():
        try:
            rec = json.loads((out_dir / RECORD).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise EvalInputError(f"{out_dir / RECORD}: unreadable ({e}); delete it to rebuild the record") from None
        if [rec.get("hub"), rec.get("tokens_per_step")] != [opts.name, opts.tokens_per_step]:
            raise EvalInputError(f"{out_dir / RECORD}: holds {rec.get('hub')} at {rec.get('tokens_per_step')} tokens "
                                 f"per step, not {opts.name} at {opts.tokens_per_step}; use another --out")
    if not (out_dir / "config.yaml").is_file():  # the run labelled by the suite, as the analysis reads config.yaml
        write_text_atomic(out_dir / "config.yaml", f"experiment: hub\nmodel:\n  name: {opts.name}\nseed: null\n")
    sets = {n: pair_set(p) for n, p in benchmarks.items()}
    device = score_opts.device or ("cuda" if torch.cuda.is_available() else "cpu")
    written, errors = [], []
    ref_rev = opts.revisions[0] if "reference" not in rec else rec["reference"]
    ref_snap: Optional[Path] = None
    for rev in opts.revisions:
        step = int(rev[4:])
        if rev in rec["revisions"] and _done(out_dir, step, rev, sets, opts.name):
            continue
        try:
            snap = fetch(opts.name, rev)
            # a downloaded suite is untrusted: False, not the default None (which asks on stdin, and a "y"
            # runs the repository's Python)
            with reading(snap / "tokenizer_config.json", "the revision's tokenizer"):
                tokenizer = AutoTokenizer.from_pretrained(snap, trust_remote_code=False)
        except (RevisionError, InputFileError) as e:
            errors.append(str(e))
            continue
        start, _ = document_tokens(tokenizer)
        start_piece = tokenizer.convert_ids_to_tokens(start)
        if "start_token" not in rec:
            say(f"{opts.name}: every sentence is scored after {start_piece!r} (id {start}), the token its "
                f"training put between documents (its tokenizer adds no BOS of its own to our ids)")
        if rec.setdefault("start_token", start_piece) != start_piece:
            errors.append(f"{opts.name} revision {rev}: its tokenizer starts documents with {start_piece!r}, "
                          f"the earlier revisions with {rec['start_token']!r}: not one suite")
            continue
        fingerprint = ids_fingerprint(tokenizer)
        if rec.setdefault("tokenizer", fingerprint) != fingerprint:  # other ids: not points of one curve
            rec.setdefault("refused", {})[rev] = (
                f"{opts.name} revision {rev}: its tokenizer gives other ids (fingerprint {fingerprint}) than the "
                f"suite's ({rec['tokenizer']}, hub.json): not scored into the same curve")
            errors.append(rec["refused"][rev])
            write_json_atomic(out_dir / RECORD, {**rec, "warnings": _warnings(opts.name, rec)})
            continue
        weights = weight_files(snap)
        try:
            with reading(weights[0] if len(weights) == 1 else snap, "the revision's weights",
                         f"delete {snap} and download the revision again"):
                model = load_causal_lm(snap, AutoModelForCausalLM, trust_remote_code=False)
        except InputFileError as e:
            errors.append(str(e))
            continue
        check_vocabulary(snap, tokenizer, model)
        model.to(device)
        entry = {"step": step, "commit": snap.name, "weights": blob_ids(snap), "reference": ref_rev}
        if rev == ref_rev:
            entry["distance"] = 0.0
            rec["reference"], ref_snap = ref_rev, snap
        else:
            if ref_snap is None and ref_rev in rec["revisions"]:
                try:
                    ref_snap = fetch(opts.name, ref_rev)
                except RevisionError:
                    pass  # no distances without it; the blob check still runs
            entry["distance"] = distance(weight_files(snap), weight_files(ref_snap)) if ref_snap else None
        for bench, pairs in benchmarks.items():
            ev = evaluate_checkpoint(model, tokenizer, pairs, name=bench, step=step,
                                     tokens=step * opts.tokens_per_step, ckpt_dir=snap, run_dir=out_dir,
                                     opts=replace(score_opts, device=device),
                                     fingerprint=fingerprint, hub=opts.name, hub_revision=rev, hub_commit=snap.name)
            say(f"{rev} {bench}: {len(ev.df)} pairs -> {ev.path}")
            written.append(ev.path)
        rec["revisions"][rev] = entry
        rec.get("refused", {}).pop(rev, None)
        rec["warnings"] = _warnings(opts.name, rec)
        write_json_atomic(out_dir / RECORD, rec)
        del model
        if opts.delete_after and rev != ref_rev:
            _delete(opts.name, snap.name, snap)
    rec["warnings"] = _warnings(opts.name, rec)
    rec["convention"] = CONVENTION
    write_json_atomic(out_dir / RECORD, rec)
    return written, rec["warnings"], errors


def _warnings(name: str, rec: dict) -> list[str]:
    """hub.json's warnings (what `probes report` lists as problems): the sanity checks and refused revisions."""
    return sanity_warnings(name, rec["revisions"]) + list(rec.get("refused", {}).values())

