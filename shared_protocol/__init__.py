"""dpsense edge core: runs unchanged on CPython and MicroPython (1.9.2 and later).

Modules are leaves that import nothing from each other except ``ProtocolError``,
so they can be copied onto a flat file system (the micro:bit has no folders).
"""
PROTOCOL_VERSION = 1
