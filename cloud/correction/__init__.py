"""Correction protocol of paper 1 (SPEC 1.5): pure rules per party, and a local runner."""
from dpsense.cloud.correction.rules import (
    BOUNDS,
    SPLITS,
    CorrectionParams,
    CorrectionResult,
    FalseNegatives,
    RowReduction,
    Split,
    false_negatives,
    reduce_rows,
    run_protocol,
    split_presumed,
)

__all__ = ["BOUNDS", "SPLITS", "CorrectionParams", "CorrectionResult", "FalseNegatives", "RowReduction",
           "Split", "false_negatives", "reduce_rows", "run_protocol", "split_presumed"]
