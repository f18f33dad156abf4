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
#: The boards' default noise on d_diff towards the correction server (config ``epsilon_cs``):
#: the smallest of the measured values that keeps mode bands within 1 point of recall and subset
#: of the exact d_diff at paper 1's settings (docs/privacy.md, "d_diff towards the correction server").
DEFAULT_EPSILON_CS = "2"


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
    #: The boards' config ``epsilon_cs`` (None: boards that add no noise to d_diff).
    epsilon_cs: str | None = DEFAULT_EPSILON_CS
    # The share of outliers the analyst expects in a window (its round skip and the model-fit
    # check, cloud/correction/fit.py): calibrated with the rest; 0.10 in profiles written before.
    outlier_share: float = 0.10

    def mechanism(self, rng: object) -> RecordMechanism:
        """The board's per-record mechanism for this profile (identity scaling over the domain),
        with its noise on d_diff when the profile has ``epsilon_cs``."""
        span = int(round(self.domain / self.quantum))
        eps = parse_decimal(self.epsilon)
        cols = [Column(Affine(1, 1, 0, -span, span), d, eps) for d in self.delta_q]
        ecs = None if self.epsilon_cs is None else parse_decimal(self.epsilon_cs)
        return RecordMechanism(cols, list(self.centre_q), rng, ecs)

    def noise_scale_q(self) -> float:
        """b, the largest per-column noise scale in quanta (public: sensitivity / epsilon)."""
        num, den = parse_decimal(self.epsilon)
        return max(self.delta_q) * den / num

    def board_noise_scale_q(self) -> float:
        """The boards' noise scale on d_diff, ``cs_delta / epsilon_cs`` quanta
        (shared_protocol/mechanism.py), 0 without ``epsilon_cs``."""
        if self.epsilon_cs is None:
            return 0.0
        num, den = parse_decimal(self.epsilon_cs)
        cols = [Column(Affine(1, 1, 0, -1, 1), d, (1, 1)) for d in self.delta_q]
        return RecordMechanism(cols, [0] * len(cols), None, (num, den)).cs_delta * den / num

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
