"""What fixes a run's training trajectory: the config sections a resume must match, and their hash. Its own
floor (json and hashlib only): readers of finished runs need the hash too (`probes report`), and importing
train.config loaded torch and the engines."""
from __future__ import annotations

import hashlib
import json

# Sections that define the training trajectory: a resumed run must agree on them exactly.
TRAJECTORY_KEYS = ("seed", "model", "data", "tokenizer", "optim")
# ...except these, which change where or how fast, not what is trained (data.generator: an import path;
# what it generates is data.grammar's)
RESUME_MAY_CHANGE = ("data.cache_dir", "data.num_proc", "data.load_timeout_s", "data.generator",
                     "optim.micro_batch", "optim.impl",
                     "model.gradient_checkpointing", "model.attn_implementation")


# Keys added later, with the value that gives what runs before them did: left out of the view at that value
ADDED_LATER = {"data.heldout_tokens": 0}


def trajectory_view(resolved: dict) -> dict:
    """The part of a resolved config that fixes the training trajectory (what a resume must match)."""
    view = {key: resolved.get(key) for key in TRAJECTORY_KEYS}
    for dotted, legacy in ADDED_LATER.items():
        section, key = dotted.split(".")
        if isinstance(view.get(section), dict) and view[section].get(key, legacy) == legacy:
            view[section] = {k: v for k, v in view[section].items() if k != key}
    for dotted in RESUME_MAY_CHANGE:
        section, key = dotted.split(".")
        if isinstance(view.get(section), dict):
            view[section] = {k: v for k, v in view[section].items() if k != key}
    return view


def config_hash(resolved: dict) -> str:
    """sha256 of the trajectory view: recorded in every checkpoint's trainer_state and manifest."""
    blob = json.dumps(trajectory_view(resolved), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def trajectory_diff(saved: dict, current: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two resolved configs (restricted to TRAJECTORY_KEYS)."""
    diffs = []
    keys = TRAJECTORY_KEYS if not prefix else sorted(set(saved) | set(current))
    for key in keys:
        name = f"{prefix}{key}"
        a, b = saved.get(key, ADDED_LATER.get(name)), current.get(key, ADDED_LATER.get(name))
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += trajectory_diff(a, b, name + ".")
        elif a != b and name not in RESUME_MAY_CHANGE:
            diffs.append(f"{name}: {a!r} -> {b!r}")
    return diffs
