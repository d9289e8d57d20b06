"""The weights of a run's checkpoints as one trajectory: per tensor, how far each checkpoint is from step 0,
from the final model and from its neighbours, and which checkpoints hold identical values. `train verify`
turns these into findings (docs/verify.md: why the detour ratio, why small tensors are pooled per layer).
One pass: each tensor read once per checkpoint, beside step 0's, the final model's and the previous two."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from safetensors import safe_open

if TYPE_CHECKING:  # imported where used: `verify --help` needs no torch
    import torch

GROUP_MIN_ELEMENTS = 1024  # a tensor this large is judged alone; smaller ones pooled per layer


@dataclass
class Weights:
    """One checkpoint's tensors: name -> the .safetensors file holding it (sharded checkpoints too)."""
    step: int
    files: dict[str, Path]  # tensor name -> file
    shapes: dict[str, tuple] = field(default_factory=dict)


@dataclass
class Trajectory:
    """Distances per checkpoint (rows, step order) and tensor (columns), NaN where absent or no neighbour."""
    steps: list[int]
    names: list[str]
    d_init: np.ndarray  # |θ_t − θ_first|
    d_final: np.ndarray  # |θ_t − θ_last|
    d_prev: np.ndarray  # |θ_t − θ_{t-1}|; row 0 NaN
    d_skip: np.ndarray  # |θ_{t-1} − θ_{t+1}|; first and last rows NaN
    # per tensor: (key of the values, key of the values rounded to bf16) per row, None where absent
    keys: dict[str, list[tuple[str, str] | None]]
    bf16: dict[str, list[bool]]  # the tensor is stored in bf16 (schedule.weights_dtype=bf16)
    sizes: list[int]  # elements per tensor (columns)

    def model_distance(self, which: np.ndarray) -> np.ndarray:
        """The whole model's distance per row (square root of the tensors' summed squares)."""
        return np.sqrt(np.nansum(which ** 2, axis=1))

    def detour(self, columns: list[int] | None = None) -> np.ndarray:
        """(|θ_{t-1} − θ_t| + |θ_t − θ_{t+1}|) / |θ_{t-1} − θ_{t+1}| per row and tensor (2-D) or for
        `columns` pooled (1-D); NaN at the ends and where the chord is 0 (judged by identical values)."""
        d_prev, d_skip = self.d_prev, self.d_skip
        if columns is not None:
            d_prev = np.sqrt(np.sum(d_prev[:, columns] ** 2, axis=1))
            d_skip = np.sqrt(np.sum(d_skip[:, columns] ** 2, axis=1))
        legs = d_prev[:-1] + d_prev[1:]  # row i: d(i-1, i) + d(i, i+1), for i = 1 .. T-2
        out = np.full_like(d_prev, np.nan)
        chord = d_skip[1:-1]
        with np.errstate(divide="ignore", invalid="ignore"):
            out[1:-1] = np.where(chord > 0, legs[1:] / chord, np.nan)
        return out

    def groups(self) -> dict[str, list[int]]:
        """Columns judged together by the detour rule: a large tensor alone, a layer's small ones pooled."""
        out: dict[str, list[int]] = {}
        for k, name in enumerate(self.names):
            if self.sizes[k] >= GROUP_MIN_ELEMENTS:
                out.setdefault(name, []).append(k)
            else:
                layer = re.match(r"(.*\.layers?\.\d+)\.", name)
                out.setdefault(f"{layer.group(1) if layer else 'other'} small tensors", []).append(k)
        return out


def _key(x: torch.Tensor) -> str:
    """A digest of the tensor's bytes: equal values (same dtype and shape) give equal keys."""
    import torch
    raw = x.contiguous().view(torch.uint8).numpy()
    return hashlib.blake2b(raw.data, digest_size=16).hexdigest() + str(tuple(x.shape))


def _distance(a: torch.Tensor, b: torch.Tensor) -> float:
    import torch
    return float(torch.linalg.vector_norm(a - b, dtype=torch.float32))


def trace(weights: list[Weights]) -> Trajectory:
    """Distances and value keys of every tensor of the first checkpoint, over `weights` (step order)."""
    import torch
    names = sorted(weights[0].files)
    T, K = len(weights), len(names)
    d_init, d_final, d_prev, d_skip = (np.full((T, K), np.nan) for _ in range(4))
    keys: dict[str, list] = {}
    bf16: dict[str, list] = {}
    handles: dict[Path, object] = {}

    def load(w: Weights, name: str):
        f = w.files.get(name)
        if f is None or w.shapes.get(name) != weights[0].shapes.get(name):
            return None
        if f not in handles:
            handles[f] = safe_open(f, framework="pt")
        return handles[f].get_tensor(name)

    for k, name in enumerate(names):
        first = load(weights[0], name).float()
        last_raw = load(weights[-1], name)
        last = last_raw.float() if last_raw is not None else None
        prev = prev2 = None
        keys[name], bf16[name] = [], []
        for i, w in enumerate(weights):
            raw = load(w, name)
            if raw is None:
                keys[name].append(None)
                bf16[name].append(False)
                prev2, prev = prev, None
                continue
            is_bf16 = raw.dtype == torch.bfloat16
            rounded = raw if is_bf16 or not raw.is_floating_point() else raw.to(torch.bfloat16)
            keys[name].append((_key(raw), _key(rounded)))
            bf16[name].append(is_bf16)
            x = raw.float()
            d_init[i, k] = _distance(x, first)
            if last is not None:
                d_final[i, k] = _distance(x, last)
            if prev is not None:
                d_prev[i, k] = _distance(x, prev)
            if prev2 is not None:
                d_skip[i - 1, k] = _distance(x, prev2)
            prev2, prev = prev, x
    sizes = [int(np.prod(weights[0].shapes[name])) for name in names]
    return Trajectory([w.step for w in weights], names, d_init, d_final, d_prev, d_skip, keys, bf16, sizes)


def same_values(traj: Trajectory, name: str, i: int, j: int) -> bool:
    """Rows i and j hold the same values of `name`: byte-equal, or equal once an fp32 one is rounded to bf16."""
    a, b = traj.keys[name][i], traj.keys[name][j]
    if a is None or b is None:
        return False
    if traj.bf16[name][i] == traj.bf16[name][j]:
        return a[0] == b[0]
    return a[1] == b[1]


def identical_pairs(traj: Trajectory, name: str) -> list[tuple[int, int]]:
    groups: dict[str, list[int]] = {}
    for i, key in enumerate(traj.keys[name]):
        if key is not None:
            groups.setdefault(key[1], []).append(i)  # bf16 keys: a superset of the exact matches
    pairs = []
    for rows in groups.values():
        pairs += [(i, j) for n, i in enumerate(rows) for j in rows[n + 1:] if same_values(traj, name, i, j)]
    return sorted(pairs)
