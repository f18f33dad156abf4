"""BBC micro:bit v1 (MicroPython 1.9.2): pins 0..2, framed lines over the USB UART.

No os.urandom: noise comes from the random module, a PRNG, which is weaker than a
hardware source; the board says so in its status line.
"""
PROFILE = {
    "name": "microbit",
    "transport": "serial",
    "sensor": "microbit",
    "adc_pins": (0, 1, 2),
    "entropy": "getrandbits",
    "wifi": False,
    "ring_path": None,
    "ledger_path": "ledger.bin",
    "float_bits": 32,
    "clock": None,               # restarts at boot; no NTP sync in the firmware
}
