"""Empirical differential-privacy audits of the noise the boards release (CPython only)."""
