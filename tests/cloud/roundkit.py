"""Helpers for tests that run the correction server's round logic in-process."""
from __future__ import annotations

from typing import Any

import numpy as np

from dpsense.cloud.correction import chunks
from dpsense.cloud.correction import messages as msg
from dpsense.cloud.correction.honest import RoundPolicy

#: The smallest rounds the policy allows, for windows of a few rows.
LOOSE = RoundPolicy(min_window=2, min_presumed=1)


class Exact:
    """No noise: the server's rules on the exact d_diff, to compare a round with the in-process
    protocol. Tests only; the command builds honest.RecordNoise."""

    scale = 0.0

    def noisy(self, tokens: list[bytes], d_diff: np.ndarray) -> np.ndarray:
        return np.asarray(d_diff, dtype=float)

    def margin(self, alpha: float) -> float:
        return 0.0


class Wire:
    """One direction of the broker: chunks in, whole decoded messages out."""

    def __init__(self) -> None:
        self.joiner = chunks.Reassembler()

    def take(self, part: bytes) -> dict[str, Any] | None:
        whole = self.joiner.feed(part)
        return None if whole is None else msg.decode(whole)
