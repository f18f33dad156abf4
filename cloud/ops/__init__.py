"""Operations: detection results for people and scripts, alerts, the dashboard and its Prometheus metrics.
May import: transport, storage.
"""
