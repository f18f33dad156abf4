"""Simulation: the simulated fleet and its publisher, the demo, reports, data sets, profiles in the clear, the papers' experiments.
May import: transport, deploy, storage, ingest, correction, privacy, ops, analyst.
"""
