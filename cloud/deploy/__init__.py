"""Deployment: the broker's configuration and accounts, TLS files, private files and modes, settings, the device profile.
May import: transport.
"""
