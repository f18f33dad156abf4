"""dpsense cloud side: CPython services and the ``dpsense`` command."""
