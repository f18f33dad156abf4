"""BBC micro:bit v1 (MicroPython 1.9.2): pins 0..2, framed lines over the USB UART.

NO PRIVACY. There is no os.urandom, and the node draws noise, boot id and tokens from the
random module, a PRNG whose 32-bit state a boot id and a token give away: anyone who sees
the records can replay the noise. The nRF51's hardware RNG can be read (mbrng.py, tested
on the emulated board) but does not fit next to the node in its heap yet. The board names
its source "prng_no_dp" in every boot event and status (docs/privacy.md).
"""
PROFILE = {
    "name": "microbit",
    "transport": "serial",
    "sensor": "microbit",
    "adc_pins": (0, 1, 2),
    "entropy": "prng_no_dp",
    "wifi": False,
    "ring_path": None,
    "ledger_path": "ledger.bin",
    "float_bits": 32,
    "clock": None,               # restarts at boot; no NTP sync in the firmware
    "aes": False,                # MicroPython 1.9.2 has no cryptolib: plain correction records
}
