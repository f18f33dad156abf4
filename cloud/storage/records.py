"""The rows the analyst store's stream tables (stream.py) hand out: windows, verdicts, a window's
members (their released values, for detection), board statuses, events. Nothing here carries a
noise or a distance difference: the analyst never has one."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class WindowRecord:
    """One detection window of one device group (``start``..``end`` in Unix seconds)."""

    id: int
    group: str
    seq: int                      # the window's number within its group
    kind: str                     # "time" or "count"
    start: float
    end: float
    closed_at: float
    n: int
    state: str                    # "closed", "held", "done" or "carried"
    attempts: int
    round_id: int | None
    last_error: str | None
    presumed: int | None
    removed_fp: int | None
    added_fn: int | None
    candidates: int | None
    missing: int | None           # readings whose correction record the correction server lacked
    detect_s: float | None
    round_s: float | None
    done_at: float | None
    fit: str | None = None        # why the round's correction was not used (cloud/correction/fit.py)


@dataclass(frozen=True)
class Verdict:
    """What a window's round decided about one reading, with the reading's identity."""

    window: int
    group: str
    row_id: int
    device_id: int
    boot_id: int
    seq: int
    received_at: float
    presumed: bool                # flagged by the detector on the released data (O')
    removed_fp: bool              # presumed, removed as a false positive by the round
    added_fn: bool                # not presumed, added as a false negative by the round
    candidate: bool               # in the window's candidate set R

    @property
    def verdict(self) -> str:
        if self.removed_fp:
            return "removed_fp"
        if self.added_fn:
            return "added_fn"
        return "candidate" if self.candidate else "presumed"


@dataclass(frozen=True)
class WindowOutcome:
    presumed: int
    removed_fp: int
    added_fn: int
    candidates: int
    missing: int
    detect_s: float
    round_s: float
    done_at: float
    fit: str | None = None        # the model-fit check's reason when the correction was not used


@dataclass(frozen=True)
class Members:
    """The readings of a closed window in arrival order, as detection and the round need them."""

    row_ids: npt.NDArray[np.int64]
    device_ids: npt.NDArray[np.int64]
    boot_ids: npt.NDArray[np.int64]
    seqs: npt.NDArray[np.int64]
    received_at: npt.NDArray[np.float64]
    tokens: list[bytes]
    values: npt.NDArray[np.int64]
    # Readings of the window that do not fit it (another column count or configuration):
    # kept out of every array above, never scored.
    odd: list[OddReading] = field(default_factory=list)


@dataclass(frozen=True)
class OddReading:
    """A valid reading set apart from its window, and why."""

    row_id: int
    device_id: int
    columns: int
    config_id: int
    reason: str


@dataclass(frozen=True)
class PendingGroup:
    count: int
    first_at: float               # earliest arrival among the group's pending readings


@dataclass(frozen=True)
class DeviceStatus:
    """A board's status message (``dpsense/status/d<N>``) as stored: only ``STATUS_FIELDS``."""

    device_id: int
    boot_id: int | None
    received_at: float
    fields: dict[str, Any]
    topic: str = ""


@dataclass(frozen=True)
class Event:
    """An entry of the analyst's status log: a carried window, a held round, ..."""

    at: float
    kind: str
    group: str | None
    window: int | None
    text: str


@dataclass(frozen=True)
class BootActivity:
    device_id: int
    boot_id: int
    readings: int
    last_seen: float
