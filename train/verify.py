"""`python -m train verify RUN_DIR [RUN_DIR ...]`: can the checkpoints of a run be trusted?

Every checkpoint under RUN_DIR/checkpoints against the failures public suites have shipped and against damage
(docs/verify.md lists the checks, the output and the exit status); train/trajectory.py measures the weights as one
trajectory, the checks below turn the measures into findings."""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from omegaconf import OmegaConf
from safetensors import SafetensorError, safe_open

from train.checkpoint import (MANIFEST, CorruptCheckpointError, checkpoint_files, list_checkpoints,
                              manifest_problems, missing_manifest, read_manifest, sha256_file)
from train.confighash import config_hash
from train.evalsums import checkpoint_problem, sum_problem
from train.trajectory import GROUP_MIN_ELEMENTS, Trajectory, Weights, identical_pairs, same_values, trace

STATE = "trainer_state.json"


@dataclass
class Finding:
    step: Optional[int]  # None: about the run, not one checkpoint
    file: str  # path of the file (or directory) the finding is about
    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.message}"


@dataclass
class RunReport:
    run: str
    checkpoints: list[dict] = field(default_factory=list)  # step, tokens, manifest, distances
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # worth knowing, not wrong (exit status unchanged)


def _names(names: list[str], limit: int = 3) -> str:
    return ", ".join(names[:limit]) + (f", … ({len(names)} in all)" if len(names) > limit else "")


def weight_files(path: Path) -> list[Path]:
    """The checkpoint's weights: model.safetensors, or the shards save_pretrained splits large ones into."""
    return sorted(f for f in Path(path).glob("*.safetensors") if not f.name.startswith("."))


@dataclass
class _Checkpoint:
    """What the file checks learned about one step<N>/ directory."""
    step: int
    path: Path
    state: Optional[dict] = None
    manifest: Optional[dict] = None
    hashes: dict[str, str] = field(default_factory=dict)  # file name -> sha256 (weights always; all with a manifest)
    weights: Optional[Weights] = None  # None: unreadable, not traced


# A healthy run's detour ratios stay near 1 to √2 (at most 1.61 in 15 runs; bf16 noise alone about 2); a
# tensor from a distant step makes it grow with that distance; 3 leaves room on both sides.
DETOUR_LIMIT = 3.0
# A relative drop of the model's distance from step 0: far above float32 summation noise (~1e-6), far below
# a jump to another step's weights (consecutive demo checkpoints differ by > 1 %).
BACKWARDS_TOLERANCE = 1e-3


def _identical(cks: list[_Checkpoint], name: str, i_step: int, j_step: int, how: str) -> Finding:
    """The finding for weights of steps i < j that are the same: blamed on j, unless j is the final model
    (an intermediate step serving the final model's weights, Pythia #206)."""
    first, last = cks[0].step, cks[-1].step
    if i_step == first:
        blamed, other, what = j_step, i_step, "the initialisation"
    elif j_step == last:
        blamed, other, what = i_step, j_step, "the final model"
    else:
        blamed, other, what = j_step, i_step, "another checkpoint"
    path = next(c.path for c in cks if c.step == blamed)
    return Finding(blamed, str(path / name), "identical-weights",
                   f"{how} step{other}/{name} ({what}): the weights did not change or were copied")


def _same_models(cks: list[_Checkpoint], traj: Trajectory, report: RunReport) -> set[int]:
    """Checkpoints whose every tensor equals another step's (another dtype or layout); the steps blamed."""
    K, steps = len(traj.names), traj.steps
    count = Counter(pair for name in traj.names for pair in identical_pairs(traj, name))
    blamed = set()
    for (i, j), n in sorted(count.items()):
        if n == K:
            finding = _identical(cks, weight_files(cks[0].path)[0].name, steps[i], steps[j],
                                 "every tensor equals that of")
            report.findings.append(finding)
            blamed.add(finding.step)
    return blamed


def _check_tensors(cks: list[_Checkpoint], traj: Trajectory, report: RunReport) -> None:
    """Tensors with another step's values, and tensors off the run's path (DETOUR_LIMIT)."""
    steps, K = traj.steps, len(traj.names)
    ck_by_step = {ck.step: ck for ck in cks}
    detour = traj.detour()
    flagged = set()  # (row, tensor) already named by a copied-tensor finding
    by_blame: dict[tuple[int, int, str], list[str]] = {}
    for name in traj.names:
        k = traj.names.index(name)
        present = [r for r, key in enumerate(traj.keys[name]) if key is not None]
        if all(same_values(traj, name, present[0], r) for r in present):
            continue  # never changes in the whole run (a buffer, a frozen tensor): nothing was copied
        for i, j in identical_pairs(traj, name):
            if j == i + 1 and (traj.bf16[name][i] or traj.bf16[name][j]) and traj.sizes[k] < GROUP_MIN_ELEMENTS:
                # late in a run, Adam's updates can stay within half a bf16 spacing on every element of a
                # small tensor; on thousands, never
                report.notes.append(f"step{steps[j]}: {name} rounds to the same bf16 values as at "
                                    f"step{steps[i]} (an update below bf16 resolution)")
                continue
            # blame the row off the path (the larger detour); step 0 and the final model are references
            if i == 0 or (j != len(steps) - 1 and np.nan_to_num(detour[j, k]) >= np.nan_to_num(detour[i, k])):
                blamed, other = j, i
            else:
                blamed, other = i, j
            flagged.add((blamed, name))
            by_blame.setdefault((blamed, other, str(_file_of(ck_by_step[steps[blamed]], name))), []).append(name)
    for (blamed, other, file), names in sorted(by_blame.items()):
        what = {0: " (the initialisation)", len(steps) - 1: " (the final model)"}.get(other, "")
        report.findings.append(Finding(steps[blamed], file, "copied-tensor",
                                       f"{len(names)} of {K} tensors hold the values they have at "
                                       f"step{steps[other]}{what}: {_names(names)}; a shard or tensor "
                                       f"copied from another step"))
    for group, columns in traj.groups().items():
        ratio = traj.detour(columns)
        # a copied tensor bends its neighbours' paths too: rows beside one are not judged, and of two
        # neighbours over the limit only the larger is named
        for row, name in flagged:
            if traj.names.index(name) in columns:
                ratio[[r for r in (row - 1, row, row + 1) if 0 <= r < len(ratio)]] = np.nan
        while np.nanmax(ratio, initial=0) > DETOUR_LIMIT:
            row = int(np.nanargmax(ratio))
            names = [traj.names[k] for k in columns]
            what = group if len(columns) == 1 else f"{group} ({_names(names)})"
            report.findings.append(Finding(
                steps[row], str(_file_of(ck_by_step[steps[row]], names[0])), "off-trajectory",
                f"{what} is off the run's path between step{steps[row - 1]} and step{steps[row + 1]} "
                f"(detour ratio {ratio[row]:.1f} > {DETOUR_LIMIT:g}): values from another step or run"))
            ratio[row - 1:row + 2] = np.nan


def _check_distance_backwards(traj: Trajectory, report: RunReport, paths: dict[int, Path]) -> None:
    """A checkpoint closer to step 0 than an earlier one (Pythia #206): the model moves away from its
    initialisation at every checkpoint. Rows already blamed, and bf16 rows (their rounding moves the
    distance as much), are not judged."""
    d = traj.model_distance(traj.d_init)
    blamed = {f.step for f in report.findings}
    bf16 = [any(traj.bf16[n][r] for n in traj.names) for r in range(len(traj.steps))]
    best, best_row = -1.0, None
    for row, step in enumerate(traj.steps):
        if bf16[row] or step in blamed:
            continue
        if best_row is not None and d[row] < best * (1 - BACKWARDS_TOLERANCE):
            report.findings.append(Finding(
                step, str(paths[step]), "distance-backwards",
                f"step{step} is closer to step{traj.steps[0]}'s weights (|θ-θ0| {d[row]:.6g}) than step"
                f"{traj.steps[best_row]} was ({best:.6g}): one of the two holds another step's weights"))
        if d[row] > best:
            best, best_row = float(d[row]), row


def _file_of(ck: _Checkpoint, name: str) -> Path:
    return ck.weights.files.get(name, ck.path) if ck.weights else ck.path


def _check_tensor_sets(cks: list[_Checkpoint], report: RunReport) -> None:
    """Every checkpoint holds the first one's tensors with their shapes (missing ones are not traced)."""
    ref = cks[0].weights
    for ck in cks[1:]:
        w = ck.weights
        missing = sorted(set(ref.files) - set(w.files))
        extra = sorted(set(w.files) - set(ref.files))
        reshaped = sorted(n for n in set(ref.files) & set(w.files) if w.shapes[n] != ref.shapes[n])
        for what, names in (("lacks", missing), ("adds", extra), ("changes the shape of", reshaped)):
            if names:
                report.findings.append(Finding(ck.step, str(ck.path), "tensor-set",
                                               f"{what} {len(names)} tensors of step{cks[0].step}: {_names(names)}"))


def _check_files(ck: _Checkpoint, report: RunReport, fast: bool = False) -> None:
    def find(file: str, kind: str, message: str) -> None:
        report.findings.append(Finding(ck.step, str(ck.path / file), kind, message))

    for name in ("config.json", STATE):
        if not (ck.path / name).is_file():
            find(name, "missing-file", "missing: a checkpoint needs it (from_pretrained, resume, probes)")
    if not weight_files(ck.path):
        find("model.safetensors", "missing-file", "missing: the checkpoint has no weights (*.safetensors)")
    try:
        ck.manifest = read_manifest(ck.path)
    except CorruptCheckpointError as e:
        find(MANIFEST, "bad-manifest", str(e).removeprefix(f"{ck.path / MANIFEST} "))
    if ck.manifest is not None:
        for rel in checkpoint_files(ck.path):
            if not fast:
                ck.hashes[rel] = sha256_file(ck.path / rel)
                continue
            # the manifest's sha256 for a file of the recorded size (trusted, not read), else a marker that
            # differs from it (no recorded sizes: presence only)
            size, want = (ck.path / rel).stat().st_size, (ck.manifest.get("sizes") or {}).get(rel)
            ck.hashes[rel] = ck.manifest["files"].get(rel, "") if want is None or want == size else f"{size:,} bytes"
        for rel, kind, what in manifest_problems(ck.path, ck.manifest, ck.hashes):
            if fast and kind == "changed":
                what = (f"is {ck.hashes[rel]}, {MANIFEST} records {ck.manifest['sizes'][rel]:,}: the file "
                        f"was damaged or replaced after it was written")
            find(rel, f"{kind}-file", what)
        if ck.manifest.get("step") != ck.step:
            find(MANIFEST, "wrong-step", f"records step {ck.manifest.get('step')} in directory step{ck.step}: "
                                         f"a checkpoint copied from another step?")
    else:
        ck.hashes = {f.name: sha256_file(f) for f in weight_files(ck.path)}
        lost = missing_manifest(ck.path)
        if lost:
            find(MANIFEST, "missing-manifest", lost.removeprefix(f"{ck.path / MANIFEST} "))
        elif not any(f.kind == "bad-manifest" for f in report.findings if f.step == ck.step):
            report.notes.append(f"{ck.path}: no {MANIFEST} (written before manifests existed): its files "
                                f"cannot be checked, only its weights compared")
    if (ck.path / STATE).is_file():
        try:
            ck.state = json.loads((ck.path / STATE).read_text())
        except (ValueError, UnicodeDecodeError) as e:
            find(STATE, "unreadable", f"not valid JSON ({e})")
    if ck.state is not None:
        if ck.state.get("step") != ck.step:
            find(STATE, "wrong-step", f"records step {ck.state.get('step')} in directory step{ck.step}")
        if ck.manifest is not None:
            for key in ("tokens", "config_hash"):
                if ck.manifest.get(key) != ck.state.get(key):
                    find(MANIFEST, "mismatch", f"{key} {ck.manifest.get(key)!r} differs from {STATE}'s "
                                               f"{ck.state.get(key)!r}")
    ck.weights = _read_weights(ck, find, report)


def _read_weights(ck: _Checkpoint, find, report: RunReport) -> Optional[Weights]:
    w = Weights(ck.step, {})
    for f in weight_files(ck.path):
        try:
            with safe_open(f, framework="pt") as handle:
                for name in handle.keys():
                    if name in w.files:
                        find(f.name, "duplicate-tensor", f"holds {name}, already in {w.files[name].name}")
                    sl = handle.get_slice(name)
                    w.files[name], w.shapes[name] = f, tuple(sl.get_shape())
        except SafetensorError as e:
            what = f"safetensors cannot read it ({e}; {f.stat().st_size:,} bytes): truncated or damaged"
            changed = [x for x in report.findings if x.file == str(f) and x.kind == "changed-file"]
            if changed:  # one line per file: the manifest's finding says why it differs
                changed[0].kind, changed[0].message = "unreadable", f"{what}; it {changed[0].message}"
            else:
                find(f.name, "unreadable", what)
            return None
    if not w.files:
        return None
    expected = (ck.manifest or {}).get("param_count")
    held = sum(int(np.prod(s)) for s in w.shapes.values())
    if expected is not None and held != expected:
        find(w.files[next(iter(w.files))].name, "param-count",
             f"holds {held:,} parameters, {MANIFEST} records {expected:,}")
    return w


def _check_config_hashes(run_dir: Path, cks: list[_Checkpoint], report: RunReport) -> None:
    """Every checkpoint of a run records one config hash, and config.yaml gives the same one."""
    hashes = {ck.step: (ck.state or {}).get("config_hash") for ck in cks}
    counts = Counter(h for h in hashes.values() if h)
    if not counts:
        return
    run_hash = None
    if (run_dir / "config.yaml").is_file():
        try:
            run_hash = config_hash(OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=True))
        except Exception as e:  # noqa: BLE001 - any unreadable config.yaml is reported, not raised
            report.findings.append(Finding(None, str(run_dir / "config.yaml"), "unreadable",
                                           f"cannot be read ({type(e).__name__}: {e})"))
    expected = run_hash if run_hash in counts else counts.most_common(1)[0][0]
    for ck in cks:
        h = hashes[ck.step]
        if h and h != expected:
            report.findings.append(Finding(ck.step, str(ck.path / STATE), "other-run",
                                           f"config_hash {h[:12]}… differs from the run's {expected[:12]}…: "
                                           f"a checkpoint of another run or config"))
    if run_hash is not None and run_hash not in counts:
        report.findings.append(Finding(None, str(run_dir / "config.yaml"), "other-run",
                                       f"its config hash {run_hash[:12]}… is no checkpoint's "
                                       f"({expected[:12]}…): config.yaml edited or from another run"))


def _check_token_store(cks: list[_Checkpoint], report: RunReport) -> None:
    """The token store the newest checkpoint records (train/token_store.py, DATA_KEY), hashed in full against its build and
    the run's record; one gone from the cache is a note (a rerun rebuilds it and a resume checks it)."""
    from train.token_store import TokenStore
    ck = next((c for c in reversed(cks) if isinstance((c.state or {}).get("data"), dict)), None)
    if ck is None:
        return
    record, state_file = ck.state["data"], str(ck.path / STATE)
    path = Path(record.get("store", ""))
    if not (path / "meta.json").is_file():
        report.notes.append(f"{state_file}: its token store {path} is not there (deleted from the cache?): "
                            f"not checked")
        return
    try:
        store = TokenStore(path)
        store.check(full=True)
    except Exception as e:  # noqa: BLE001 - a damaged store is a finding, whatever it raised
        report.findings.append(Finding(None, str(path), "damaged-store", str(e).removeprefix(f"{path}/")))
        return
    if record.get("store_sha256") not in (None, store.content_hash):
        report.findings.append(Finding(None, str(path), "other-store",
                                       f"is not the token store {state_file} was trained on (its sha256 "
                                       f"differs): rebuilt from a changed corpus?"))


def verify_run(run_dir: Path, fast: bool = False) -> RunReport:
    """Every check on one run directory; fast: files checked against the manifest's sizes, not hashed."""
    run_dir = Path(run_dir)
    report = RunReport(str(run_dir))
    cks = [_Checkpoint(step, path) for step, path in list_checkpoints(run_dir)]
    if fast:
        report.notes.append(f"{run_dir}: --fast: files checked against {MANIFEST}'s names and sizes, not "
                            f"hashed; a changed byte that keeps the size is not seen")
    for ck in cks:
        _check_files(ck, report, fast)
    if cks and cks[0].step != 0:
        report.notes.append(f"{run_dir}: no step0 checkpoint: distances are from step{cks[0].step}")
    _check_config_hashes(run_dir, cks, report)
    _check_token_store(cks, report)
    # byte-identical weight files at different steps, from the sha256 already computed
    seen: dict[tuple[str, str], int] = {}  # (file name, sha256) -> the first step holding it
    for ck in cks:
        for f in weight_files(ck.path):
            digest = ck.hashes.get(f.name)
            earlier = ck.step if digest is None else seen.setdefault((f.name, digest), ck.step)
            if earlier != ck.step:
                report.findings.append(_identical(cks, f.name, earlier, ck.step, "byte-identical to"))
    # a copy of another step is reported once and left out of the trace (it would bend its neighbours' path)
    copies = {f.step for f in report.findings if f.kind == "identical-weights"}
    traced = [ck for ck in cks if ck.weights is not None and ck.step not in copies]
    if len(traced) >= 2:
        _check_tensor_sets(traced, report)
    traj = None
    while len(traced) >= 2:
        traj = trace([ck.weights for ck in traced])
        same = _same_models(traced, traj, report)
        if not same:
            _check_tensors(traced, traj, report)
            break
        traced = [ck for ck in traced if ck.step not in same]
        traj = None
    if traj is not None:
        _check_distance_backwards(traj, report, {ck.step: ck.path for ck in cks})
    # every eval file under evals/step<N>/ against its .sha256 and the checkpoint beside it; after the weights'
    # checks: those skip steps already blamed
    for path in sorted((run_dir / "evals").glob("step*/*.parquet")):
        problem = None if path.name.startswith(".") else sum_problem(path) or checkpoint_problem(path)
        if problem:
            step = path.parent.name[4:]
            report.findings.append(Finding(int(step) if step.isdigit() else None, str(path), "eval-file",
                                           problem.removeprefix(f"{path}: ").removeprefix(f"{path} ")))
    dist = ({"distance_from_init": traj.model_distance(traj.d_init),
             "distance_from_final": traj.model_distance(traj.d_final)} if traj else {})
    row = {s: r for r, s in enumerate(traj.steps)} if traj else {}
    for ck in cks:
        entry = {"step": ck.step, "tokens": (ck.state or {}).get("tokens"), "manifest": ck.manifest is not None}
        report.checkpoints.append(entry | {k: float(d[row[ck.step]]) for k, d in dist.items() if ck.step in row})
    report.findings.sort(key=lambda f: (-1 if f.step is None else f.step, f.file))
    return report


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m train verify", description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (holding checkpoints/)")
    parser.add_argument("--json", action="store_true", help="one JSON document: findings, notes, distances")
    parser.add_argument("--distances", action="store_true",
                        help="print each checkpoint's distance from step 0 and from the final model")
    parser.add_argument("--fast", action="store_true",
                        help="trust manifest.json: check every file's presence and size, hash none")
    args = parser.parse_args(argv)
    for run in args.runs:
        if not Path(run).is_dir():
            print(f"error: {run}: no such run directory", file=sys.stderr)
            return 2
        if not list_checkpoints(Path(run)):
            print(f"error: {run}: no checkpoints/step<N> directories (not a run directory?)", file=sys.stderr)
            return 2
    reports = [verify_run(Path(run), fast=args.fast) for run in args.runs]
    if args.json:
        print(json.dumps({"runs": [asdict(r) for r in reports],
                          "findings": sum(len(r.findings) for r in reports)}, indent=2))
    else:
        for r in reports:
            for note in r.notes:
                print(f"note: {note}")
            for finding in r.findings:
                print(finding)
            if args.distances:
                print(f"{'step':>8} {'tokens':>14} {'|θ-θ0|':>10} {'|θ-θfinal|':>10}")
                for c in r.checkpoints:
                    print(f"{c['step']:>8} {c['tokens'] if c['tokens'] is not None else '-':>14} "
                          f"{c.get('distance_from_init', float('nan')):>10.4g} "
                          f"{c.get('distance_from_final', float('nan')):>10.4g}")
            n, cks = len(r.checkpoints), r.checkpoints
            span = f"step{cks[0]['step']}..step{cks[-1]['step']}" if n else ""
            verdict = f"{len(r.findings)} finding(s)" if r.findings else "clean"
            print(f"verify {r.run}: {n} checkpoints ({span}), {sum(c['manifest'] for c in cks)} with manifests: "
                  f"{verdict}")
    return 1 if any(r.findings for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
