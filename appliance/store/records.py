"""Rows to typed records and back: packed token arrays, compact JSON, and one mapper per record type.

Token ids and logprobs are stored as packed arrays (int32 / float32 blobs): exact, and ~4x smaller than JSON
at a million model calls. A record is read field by field from the column of the same name (`record`), so a
mapper names only the columns it decodes; column lists for inserts come from the record's fields too.
"""

from __future__ import annotations

import json
import sqlite3
from array import array
from dataclasses import fields
from typing import Any, TypeVar

from appliance.schemas import (
    Checkpoint,
    Control,
    ControlCommand,
    ControlStatus,
    Demonstration,
    Event,
    Iteration,
    IterationStatus,
    ModelCall,
    Outcome,
    Phase,
    Rollout,
    RolloutStatus,
    Run,
    RunStatus,
    Sample,
    Split,
    Task,
    TaskStatus,
)

R = TypeVar("R")


def pack_ints(values: list[int]) -> bytes:
    return array("i", values).tobytes()


def unpack_ints(blob: bytes) -> list[int]:
    a = array("i")
    a.frombytes(blob)
    return a.tolist()


def pack_floats(values: list[float]) -> bytes:
    return array("f", values).tobytes()


def unpack_floats(blob: bytes) -> list[float]:
    a = array("f")
    a.frombytes(blob)
    return a.tolist()


def to_json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def from_json(text: str | None) -> dict[str, Any]:
    """A JSON object column that may be NULL (read as {})."""
    value: dict[str, Any] = json.loads(text or "{}")
    return value


def _stored(cls: type) -> list[Any]:
    """A record type's fields that are columns (a field with metadata stored=False lives in memory only)."""
    return [f for f in fields(cls) if f.metadata.get("stored", True)]


def columns(cls: type, *extra: str) -> tuple[str, ...]:
    """The column names of a record type (its stored dataclass fields) and any extra columns, in order."""
    return (*(f.name for f in _stored(cls)), *extra)


def insert_sql(table: str, cols: tuple[str, ...], verb: str = "INSERT") -> str:
    return f"{verb} INTO {table} ({', '.join(cols)}) VALUES ({','.join('?' * len(cols))})"


def record(cls: type[R], row: sqlite3.Row, **decoded: Any) -> R:
    """A record whose every field is the column of its name, except the ones decoded by the caller."""
    return cls(**{f.name: decoded[f.name] if f.name in decoded else row[f.name] for f in _stored(cls)})


def run(r: sqlite3.Row) -> Run:
    return record(Run, r, status=RunStatus(r["status"]), config=json.loads(r["config"]))


def iteration(r: sqlite3.Row) -> Iteration:
    return record(Iteration, r, index=r["idx"], phase=Phase(r["phase"]), status=IterationStatus(r["status"]))


def task(r: sqlite3.Row) -> Task:
    return record(Task, r, split=Split(r["split"]), status=TaskStatus(r["status"]), spec=json.loads(r["spec"]))


def rollout(r: sqlite3.Row) -> Rollout:
    return record(Rollout, r, status=RolloutStatus(r["status"]),
                  outcome=Outcome(r["outcome"]) if r["outcome"] else None)


def model_call(r: sqlite3.Row) -> ModelCall:
    return record(ModelCall, r, request=json.loads(r["request"]),
                  response=json.loads(r["response"]) if r["response"] else None,
                  prompt_ids=unpack_ints(r["prompt_ids"]), completion_ids=unpack_ints(r["completion_ids"]),
                  logprobs=unpack_floats(r["logprobs"]))


def sample(r: sqlite3.Row) -> Sample:
    return record(Sample, r, token_ids=unpack_ints(r["token_ids"]), mask=unpack_ints(r["mask"]),
                  logprobs=unpack_floats(r["logprobs"]))


def checkpoint(r: sqlite3.Row) -> Checkpoint:
    return record(Checkpoint, r, metrics=from_json(r["metrics"]))


def event(r: sqlite3.Row) -> Event:
    return record(Event, r, data=from_json(r["data"]))


def control(r: sqlite3.Row) -> Control:
    return record(Control, r, command=ControlCommand(r["command"]), status=ControlStatus(r["status"]))


def demonstration(r: sqlite3.Row) -> Demonstration:
    return record(Demonstration, r, messages=json.loads(r["messages"]), token_ids=unpack_ints(r["token_ids"]),
                  mask=unpack_ints(r["mask"]), lengths=unpack_ints(r["lengths"] or b""))


def lineage(r: sqlite3.Row) -> dict[str, Any]:
    return {**dict(r), "files": from_json(r["files"])}
