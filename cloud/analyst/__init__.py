"""Analyst: the service (windows closed and carried, detection, correction rounds, leases), windows, devices, detectors.
May import: transport, deploy, storage, ingest, correction, privacy, ops.
"""
