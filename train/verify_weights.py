"""`python -m train verify`'s checks of the weights themselves, across a run's checkpoints: copies of
another step, tensors off the run's path, the whole model moving back towards step 0, and tensors that
come and go (train/trajectory.py measures; these turn the measures into findings)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from train.findings import Finding, RunReport, _Checkpoint, _names, weight_files
from train.trajectory import GROUP_MIN_ELEMENTS, Trajectory, identical_pairs, same_values

# A healthy run's detour ratios stay near 1 (drift) to √2 (a random walk of equal steps): at most 1.61
# in 15 runs measured (train/trajectory.py), and bf16 rounding noise alone gives about 2. A tensor from a
# distant step makes the ratio grow with that distance; 3 leaves room on both sides.
DETOUR_LIMIT = 3.0
# A drop of the whole model's distance from step 0 below an earlier checkpoint's, relative: float32
# sums of squares over millions of elements carry ~1e-6 relative error, so 1e-3 is far above noise and
# far below a jump to another step's weights (the demo's consecutive checkpoints differ by > 1 %).
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
    """Checkpoints whose every tensor equals another step's without byte-identical files (another dtype or
    file layout): reported like byte-identical ones. Returns the steps blamed."""
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
                # late in a run, a random walk of Adam updates (~lr per step) can stay within half a bf16
                # spacing (2^-9 relative) on every element of a small tensor; on thousands, never
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
        # A tensor with another step's values bends its neighbours' paths too (its source may lie beyond
        # one of them): rows beside a copied tensor are not judged, and of two neighbours over the limit
        # only the larger is named.
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
    """A checkpoint closer to step 0 than an earlier one was (Pythia #206: an intermediate step holding part
    of the final model, then a step that jumps back). The whole model moves away from its initialisation at
    every checkpoint (train/trajectory.py), so a drop beyond float32 summation noise (BACKWARDS_TOLERANCE,
    relative) is named, with both steps; rows another finding already blames are not judged again. Rows
    stored in bf16 are left out: their rounding (2^-8 relative per element) moves the distance by as much."""
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
