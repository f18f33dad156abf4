"""dpsense edge core: runs unchanged on CPython and MicroPython (1.9.2 and later).

One source, three names: on CPython it is ``dpsense.protocol``; on a board with folders it is
the ``shared_protocol`` package; on the micro:bit (no folders) each module is a flat file.
So modules import each other relatively, falling back to the flat name, and import nothing
else of ours. ``__version__`` is the project's one version (pyproject.toml, firmware/package.json
and every board's boot line take it from here); the wire format has its own, ``wire.VERSION``.
"""
__version__ = "0.2.0"
