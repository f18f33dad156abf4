"""Privacy: the curator's mechanisms, accountant, calibration, queries and publishing; the empirical DP audits.
May import: deploy, correction.
"""
