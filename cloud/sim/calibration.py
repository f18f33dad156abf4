"""A device profile in the clear from reference (historical) data, for the simulated fleet and the demo.

    profile = calibrate(reference, epsilon="0.5", quantum=0.01)    # from historical data
    save_profile("dpsense-data", profile)                          # cloud/deploy/profile.py

``dpsense.cloud.privacy.calibration.dp_calibrate`` computes the same fields with epsilon-DP.
"""
from __future__ import annotations

import numpy as np

from dpsense.cloud.deploy.profile import DeviceProfile


def calibrate(reference: np.ndarray, epsilon: str, quantum: float, dbscan_eps: float = 12.0,
              dbscan_min_samples: int = 60) -> DeviceProfile:
    """Deployment parameters from reference (historical) data, never from the data released:
    relaxed sensitivity per column (the percentile estimate of Böhler et al. 2017, the narrowest 90 % range), centre, domain,
    the outlier-layer width w_O for the correction server (Böhler et al. 2017, from historical data: spread of the
    detected outliers' radii), the analyst's band width (half the detected border) and the outlier
    share (the share of the reference the detector flags; 0.10 when it flags none or half or more)."""
    from dpsense.cloud.analyst.outliers.dbscan import DBSCANOutliers
    from dpsense.cloud.correction.bands import width_from_history
    from dpsense.cloud.correction.rules import normal_radius
    from dpsense.cloud.sim.datasets import relaxed_sensitivity
    rs = relaxed_sensitivity(reference, method="shorth")
    domain = float(np.max(np.abs(reference))) * 1.5 + 1.0
    centre = reference.mean(axis=0)
    out = DBSCANOutliers(dbscan_eps, dbscan_min_samples).fit(reference).outlier_mask_
    radii = np.linalg.norm(reference[out] - centre, axis=1)
    w_o = float(radii.max() - radii.min()) if radii.size > 1 else 0.0
    delta_q = tuple(max(1, int(round(r / quantum))) for r in rs)
    band = width_from_history(radii / quantum, normal_radius(delta_q))
    share = float(out.mean()) if out.size else 0.0
    return DeviceProfile(quantum=quantum, domain=domain, delta_q=delta_q,
                         epsilon=epsilon, centre_q=tuple(int(c) for c in np.rint(centre / quantum)),
                         w_o_q=w_o / quantum, dbscan_eps=dbscan_eps, dbscan_min_samples=dbscan_min_samples,
                         band_width_q=band, outlier_share=share if 0 < share < 0.5 else 0.10)
