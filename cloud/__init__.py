"""dpsense cloud side: CPython services and the ``dpsense`` command."""
__version__ = "0.1.0"
