"""MicroPython unix port: a rig for CI, readings from a stimulus, MQTT over the host's network."""
PROFILE = {
    "name": "unix",
    "transport": "mqtt",
    "sensor": "stimulus",
    "adc_pins": None,
    "entropy": "urandom",        # getrandom(2) on Linux
    "wifi": False,
    "ring_path": "ring.bin",
    "ledger_path": "ledger.bin",
    "float_bits": 64,
    "clock": "system",           # the host's clock, kept by its NTP daemon
}
