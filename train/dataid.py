"""What a run trained on, recorded in every checkpoint's trainer_state.json under "data" and checked on
resume: the corpus files (path, size, mtime) and the token store's content hash, which with the config hash
fixes the tokens the run reads. A changed corpus is named before the tokenizer check (a retrained tokenizer
would otherwise be blamed); a file merely touched gives the same store and is accepted."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from train.errors import UserError

KEY = "data"  # trainer_state.json key


class DataChangedError(UserError, ValueError):
    pass


def data_record(corpus_id: str, store) -> dict:
    """{corpus, store, store_sha256} for trainer_state.json."""
    return {"corpus": json.loads(corpus_id), "store": str(store.path), "store_sha256": store.content_hash}


def _files(corpus: dict) -> dict[str, tuple]:
    return {f[0]: tuple(f[1:]) for f in corpus.get("files", [])}


def check_resume_data(ckpt: Path, state: dict, corpus_id: str, store) -> None:
    """Refuses a resume whose data differ from the checkpoint's (one without the record is not checked)."""
    saved: Optional[dict] = state.get(KEY)
    if not saved or saved.get("store_sha256") is None or store.content_hash is None:
        return
    if saved["store_sha256"] == store.content_hash:
        return
    before, now = _files(saved.get("corpus", {})), _files(json.loads(corpus_id))
    changed = [f"{p} (size {before[p][0]} -> {now[p][0]}, mtime changed)" for p in sorted(before.keys() & now.keys())
               if before[p] != now[p]]
    changed += [f"{p} (gone)" for p in sorted(before.keys() - now.keys())]
    changed += [f"{p} (new)" for p in sorted(now.keys() - before.keys())]
    what = "; ".join(changed) if changed else (f"the corpus {json.dumps(saved.get('corpus'))[:200]} gives other "
                                               f"tokens now")
    raise DataChangedError(f"{ckpt}: the corpus changed since this checkpoint was written ({what}); resuming would "
                           f"train on other data. Restore the corpus files, or start a new run directory")
