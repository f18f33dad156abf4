"""Reproductions of the papers' experiments (paper 1: Böhler et al. 2017, Sect. 7; papers 2-4 in their own modules)."""
