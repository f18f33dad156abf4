"""Raspberry Pi Pico (no radio): ADC0..2 on GP26..28, framed lines over USB serial to a gateway.

Records wait in the ring on flash until the gateway acknowledges them (seriallink.py).
"""
PROFILE = {
    "name": "pico",
    "transport": "serial",
    "sensor": "adc",
    "adc_pins": (26, 27, 28),
    "entropy": "urandom",
    "wifi": False,
    "ring_path": "ring.bin",
    "ledger_path": "ledger.bin",
    "float_bits": 32,
    "clock": None,               # restarts at boot; no NTP sync in the firmware
}
