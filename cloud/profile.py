"""The device profile: what provisioning gives every device, and where the services find it.

    profile = calibrate(reference, epsilon="0.5", quantum=0.01)    # from historical data
    save_profile("dpsense-data", profile)                          # <data dir>/profile.json
    load_profile("dpsense-data")                                   # the same profile, or None

``calibrate`` computes the profile in the clear from reference (historical) data;
``dpsense.cloud.privacy.calibration.dp_calibrate`` computes the same fields with
epsilon-DP. The analyst and the correction server take their defaults (DBSCAN
parameters, quantum, w_O, the band width) from the profile in the data directory.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpsense.cloud.files import private_dir, write_private
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

    def normal_radius_q(self) -> float:
        """rho in quanta: half the diagonal of the relaxed-sensitivity box."""
        from dpsense.cloud.correction.rules import normal_radius
        return normal_radius(self.delta_q)

    def to_json(self) -> str:
        return json.dumps(self.__dict__)


def calibrate(reference: np.ndarray, epsilon: str, quantum: float, dbscan_eps: float = 12.0,
              dbscan_min_samples: int = 60) -> DeviceProfile:
    """Deployment parameters from reference (historical) data, never from the data released:
    relaxed sensitivity per column (the percentile estimate of Böhler et al. 2017, the narrowest 90 % range), centre, domain,
    the outlier-layer width w_O for the correction server (Böhler et al. 2017, from historical data: spread of the
    detected outliers' radii) and the analyst's band width (half the detected border)."""
    from dpsense.cloud.correction.bands import width_from_history
    from dpsense.cloud.correction.rules import normal_radius
    from dpsense.cloud.datasets import relaxed_sensitivity
    from dpsense.cloud.outliers.dbscan import DBSCANOutliers
    rs = relaxed_sensitivity(reference, method="shorth")
    domain = float(np.max(np.abs(reference))) * 1.5 + 1.0
    centre = reference.mean(axis=0)
    out = DBSCANOutliers(dbscan_eps, dbscan_min_samples).fit(reference).outlier_mask_
    radii = np.linalg.norm(reference[out] - centre, axis=1)
    w_o = float(radii.max() - radii.min()) if radii.size > 1 else 0.0
    delta_q = tuple(max(1, int(round(r / quantum))) for r in rs)
    band = width_from_history(radii / quantum, normal_radius(delta_q))
    return DeviceProfile(quantum=quantum, domain=domain, delta_q=delta_q,
                         epsilon=epsilon, centre_q=tuple(int(c) for c in np.rint(centre / quantum)),
                         w_o_q=w_o / quantum, dbscan_eps=dbscan_eps, dbscan_min_samples=dbscan_min_samples,
                         band_width_q=band)


def save_profile(data_dir: Path | str, profile: DeviceProfile) -> Path:
    """Write ``profile`` to ``<data_dir>/profile.json`` (the folder is created 0700, the file
    0600: cloud/files.py); return the path."""
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
