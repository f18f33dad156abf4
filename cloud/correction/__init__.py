"""Correction: the correction server, honest rounds, the rules per mode, the sealed channel, chunks, mpc/ (mode secure).
May import: transport, deploy, storage, ingest.

Here: the correction protocol of paper 1 (Böhler et al. 2017, Sect. 6), pure rules per party, and a local runner.
"""
from dpsense.cloud.correction.bands import (
    Bands,
    BandsResult,
    band_candidates,
    lower_edges,
    make_bands,
    run_bands,
    width_from_history,
)
from dpsense.cloud.correction.rules import (
    BOUNDS,
    LAYERS,
    SPLITS,
    CorrectionParams,
    CorrectionResult,
    FalseNegatives,
    RowReduction,
    Split,
    false_negatives,
    needs_round,
    noise_threshold,
    normal_radius,
    reduce_rows,
    run_protocol,
    split_presumed,
)

__all__ = ["BOUNDS", "LAYERS", "SPLITS", "Bands", "BandsResult", "CorrectionParams", "CorrectionResult",
           "FalseNegatives", "RowReduction", "Split", "band_candidates", "false_negatives", "lower_edges",
           "make_bands", "needs_round", "noise_threshold", "normal_radius", "reduce_rows", "run_bands",
           "run_protocol", "split_presumed", "width_from_history"]
