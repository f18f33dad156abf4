"""Privacy: the curator's mechanisms, accountant, calibration, queries and publishing; stream aggregates; the DP audits.
May import: deploy, storage, correction.
"""
