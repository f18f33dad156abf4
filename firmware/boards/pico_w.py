"""Raspberry Pi Pico W: ADC0..2 on GP26..28, MQTT over the CYW43 Wi-Fi."""
PROFILE = {
    "name": "pico_w",
    "transport": "mqtt",
    "sensor": "adc",
    "adc_pins": (26, 27, 28),
    "entropy": "urandom",        # RP2040 ring-oscillator based
    "wifi": True,
    "ring_path": "ring.bin",
    "ledger_path": "ledger.bin",
    "float_bits": 32,
    "clock": None,               # restarts at boot; no NTP sync in the firmware
}
