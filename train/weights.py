"""Loading a causal LM with every weight accounted for: transformers' from_pretrained initialises missing
weights at random with only a printed table (a config.json swapped to another architecture loads a random
model, scored without a word), so every loader goes through load_causal_lm, which refuses that."""
from __future__ import annotations

import json
from pathlib import Path

from train.errors import InputFileError


class WeightsMismatchError(InputFileError):
    """The user's checkpoint directory, not our code, is wrong: one line naming it (train/errors.py)."""


def load_causal_lm(path, cls=None, **kwargs):
    """cls.from_pretrained(path, **kwargs) (default AutoModelForCausalLM), refused unless the weights are
    exactly the model's; with a concrete cls, config.json must name its model_type too."""
    if cls is None:
        from transformers import AutoModelForCausalLM as cls
    path = Path(path)
    expected = getattr(getattr(cls, "config_class", None), "model_type", "")
    if expected:
        try:
            found = json.loads((path / "config.json").read_text()).get("model_type")
        except (OSError, json.JSONDecodeError) as e:
            raise WeightsMismatchError(f"{path / 'config.json'}: cannot read it ({e})") from None
        if found != expected:
            raise WeightsMismatchError(f"{path / 'config.json'} says model_type={found!r}, expected "
                                       f"{expected!r} ({cls.__name__})")
    from transformers.utils import logging as hf_logging
    # transformers prints its own MISSING/UNEXPECTED table as a warning; the error below says it in one line
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model, info = cls.from_pretrained(path, output_loading_info=True, **kwargs)
    finally:
        hf_logging.set_verbosity(verbosity)
    problems = []
    for key, what in (("missing_keys", "missing (would be random)"), ("unexpected_keys", "unexpected"),
                      ("mismatched_keys", "of the wrong shape"), ("error_msgs", "errors")):
        names = sorted(map(str, info.get(key) or []))
        if names:
            shown = ", ".join(names[:5]) + (f", … ({len(names)} in all)" if len(names) > 5 else "")
            problems.append(f"{what}: {shown}")
    if problems:
        raise WeightsMismatchError(
            f"{path}: the weights do not fit the model that config.json describes "
            f"({type(model).__name__}); " + "; ".join(problems))
    return model
