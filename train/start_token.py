"""The document-start token: the one id training puts before every document and scoring before every
sentence, so a scored sentence starts from a context the model was trained in (docs/scoring.md; the record,
``start_token.json``, in checkpoints.md). Rule: start = BOS, else EOS; end = EOS when it differs (Llama-style
``<s> doc </s>``). Our older checkpoints without a record were trained EOS-separated. Light: probes imports it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from train.files import read_trainer_state, write_json_atomic

RECORD = "start_token.json"


def document_tokens(tokenizer) -> tuple[int, Optional[int]]:
    """(start id before every document, end id after every document or None)."""
    bos, eos = getattr(tokenizer, "bos_token_id", None), getattr(tokenizer, "eos_token_id", None)
    start = bos if bos is not None else eos
    if start is None:
        raise ValueError(f"tokenizer {type(tokenizer).__name__} ({getattr(tokenizer, 'name_or_path', '')}) "
                         f"has neither bos_token_id nor eos_token_id: nothing marks where a document starts")
    end = eos if eos is not None and eos != start else None
    return int(start), (None if end is None else int(end))


def write_record(directory: Path, tokenizer) -> None:
    start, end = document_tokens(tokenizer)
    record = {"start_token": tokenizer.convert_ids_to_tokens(start), "start_token_id": start,
              "end_token": None if end is None else tokenizer.convert_ids_to_tokens(end), "end_token_id": end}
    write_json_atomic(Path(directory) / RECORD, record)


def read_record(directory: Path) -> Optional[dict]:
    path = Path(directory) / RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        int(record["start_token_id"]), str(record["start_token"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: not a start-token record (needs start_token and start_token_id): {e}") from None
    return record


def scoring_start_id(tokenizer, directory: Optional[Path] = None) -> int:
    """The id before every scored sentence; `directory` defaults to the tokenizer's ``name_or_path``."""
    where = Path(directory if directory is not None else getattr(tokenizer, "name_or_path", "") or ".")
    record = read_record(where) if where.is_dir() else None
    if record is not None:
        sid = int(record["start_token_id"])
        piece = tokenizer.convert_ids_to_tokens(sid) if 0 <= sid < len(tokenizer) else None
        if piece != record["start_token"]:
            raise ValueError(f"{where / RECORD}: start token {record['start_token']!r} is id {sid}, but this "
                             f"tokenizer's id {sid} is {piece!r}: the record belongs to another tokenizer")
        return sid
    try:  # a checkpoint of this project without a record (HF Trainer's trainer_state.json lacks these keys)
        legacy = {"tokens_per_step", "seq_len"} <= read_trainer_state(where, missing_ok=True).keys()
    except (OSError, ValueError):
        legacy = False
    if legacy and getattr(tokenizer, "eos_token_id", None) is not None:
        return int(tokenizer.eos_token_id)  # trained on an EOS-separated stream
    return document_tokens(tokenizer)[0]
