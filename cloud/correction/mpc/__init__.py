"""Mode secure of the correction: oblivious transfer, garbled circuits, and the protocol built on them.
Part of the correction role, with its imports: transport, deploy, storage, ingest.
"""
