"""Reproductions of the papers' experiments (SPEC 1.7 and later sections)."""
