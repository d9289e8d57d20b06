"""Read what wandb wrote offline: the records of a run's .wandb file, as the W&B service would.

Only for what exists nowhere else: an offline run's id, project, group and tags, its metric definitions
and its history steps live in the .wandb file alone (wandb 0.31 writes no summary, config or history
file offline), and wandb no longer ships a Python reader for it (wandb.sdk.internal.datastore went with
the move of its internals to the Go service). Media are files of their own: tests read those
(`<run>/files/media/...`, tests/test_report.py)."""
from __future__ import annotations

import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2


def wandb_records(path: Path) -> list:
    """Records of a .wandb file: a 7-byte file header, then leveldb-log records (7-byte header: crc32,
    length, type FULL/FIRST/MIDDLE/LAST) in 32 KiB blocks, each a serialized wandb Record protobuf."""
    data, out, pos, pending = path.read_bytes(), [], 7, b""
    assert data[:4] == b":W&B", path
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block trailer too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            break
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


def history_steps(records) -> list[int]:
    return [r.history.step.num for r in records if r.WhichOneof("record_type") == "history"]

