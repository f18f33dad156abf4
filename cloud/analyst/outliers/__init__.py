"""Outlier detectors with the scikit-learn estimator shape (1 = inlier, -1 = outlier)."""
from dpsense.cloud.analyst.outliers.dbscan import DBSCANOutliers
from dpsense.cloud.analyst.outliers.distance import BetaRAnomalies, DistanceOutliers

__all__ = ["BetaRAnomalies", "DBSCANOutliers", "DistanceOutliers"]
