"""Ingest: MQTT (and serial, through the gateway) -> wire.decode -> storage, acknowledged after commit.
May import: transport, storage.
"""
