"""The device profile: what provisioning gives every device, and where the services find it.

    profile = calibrate(reference, epsilon="0.5", quantum=0.01)    # cloud/sim/calibration.py
    save_profile("dpsense-data", profile)                          # <data dir>/profile.json
    load_profile("dpsense-data")                                   # the same profile, or None

``calibrate`` (cloud/sim/calibration.py) computes the profile in the clear from reference data;
``dpsense.cloud.privacy.calibration.dp_calibrate`` computes the same fields with
epsilon-DP. The analyst and the correction server take their defaults (DBSCAN
parameters, quantum, w_O, the band width) from the profile in the data directory.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dpsense.cloud.deploy.files import private_dir, write_private
from dpsense.protocol.fixedpoint import Affine, parse_decimal
from dpsense.protocol.mechanism import Column, RecordMechanism

PROFILE_FILE = "profile.json"


@dataclass(frozen=True)
class DeviceProfile:
    """What provisioning gives a device: scaling, relaxed sensitivity, epsilon, centre."""

    quantum: float
    domain: float
    delta_q: tuple[int, ...]
    epsilon: str
    centre_q: tuple[int, ...]
    config_id: int = 1
    w_o_q: float = 0.0
    dbscan_eps: float = 12.0
    dbscan_min_samples: int = 60
    band_width_q: float = 0.0
    # The share of outliers the analyst expects in a window (its round skip and the model-fit
    # check, cloud/correction/fit.py): calibrated with the rest; 0.10 in profiles written before.
    outlier_share: float = 0.10

    def mechanism(self, rng: object) -> RecordMechanism:
        """The board's per-record mechanism for this profile (identity scaling over the domain)."""
        span = int(round(self.domain / self.quantum))
        eps = parse_decimal(self.epsilon)
        cols = [Column(Affine(1, 1, 0, -span, span), d, eps) for d in self.delta_q]
        return RecordMechanism(cols, list(self.centre_q), rng)

    def noise_scale_q(self) -> float:
        """b, the largest per-column noise scale in quanta (public: sensitivity / epsilon)."""
        num, den = parse_decimal(self.epsilon)
        return max(self.delta_q) * den / num

    def to_json(self) -> str:
        return json.dumps(self.__dict__)


def save_profile(data_dir: Path | str, profile: DeviceProfile) -> Path:
    """Write ``profile`` to ``<data_dir>/profile.json`` (the folder is created 0700, the file
    0600: cloud/deploy/files.py); return the path."""
    p = Path(data_dir) / PROFILE_FILE
    private_dir(p.parent)
    return write_private(p, profile.to_json())


def load_profile(data_dir: Path | str) -> DeviceProfile | None:
    """The profile in ``<data_dir>/profile.json``, or None when there is none; one that is not a
    device profile (damaged, other keys) is a UsageError naming the file: no service runs on it."""
    from dpsense.cloud.errors import UsageError
    p = Path(data_dir) / PROFILE_FILE
    if not p.exists():
        return None
    try:
        d = json.loads(p.read_text())
        d["delta_q"] = tuple(d["delta_q"])
        d["centre_q"] = tuple(d["centre_q"])
        return DeviceProfile(**d)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError("profile %s: not a device profile (%s): write it with `dpsense curator "
                         "calibrate`" % (p, e)) from None
