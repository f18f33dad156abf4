"""dpsense: privacy-preserving outlier detection for sensor fleets.

The installed package is the one import root of the project's folders (pyproject.toml maps them):

    dpsense.cloud      cloud/             the CPython side and the ``dpsense`` command
    dpsense.protocol   shared_protocol/   the edge core; on a board it is ``shared_protocol``
                                          (or flat modules on the micro:bit)
    dpsense.tools      tools/             ``flash`` (tools/flash.py) and its machinery
    dpsense.firmware   firmware/          the board program, carried as files for ``flash``

The version is defined once, in shared_protocol/__init__.py, so boards report the same one.
"""
from dpsense.protocol import __version__

__all__ = ["__version__"]
