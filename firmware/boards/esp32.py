"""ESP32 DevKitC: ADC1 inputs (ADC2 is unusable while Wi-Fi runs), MQTT over Wi-Fi.

os.urandom reads the hardware RNG, which is truly random only while the radio is on
(ESP-IDF docs); firmware/app.py turns the radio on before its first random draw.
"""
PROFILE = {
    "name": "esp32",
    "transport": "mqtt",
    "sensor": "adc",
    "adc_pins": (36, 39, 34, 35, 32, 33),
    "entropy": "urandom",
    "wifi": True,
    "ring_path": "ring.bin",
    "ledger_path": "ledger.bin",
    "float_bits": 32,
    "clock": None,               # restarts at boot; no NTP sync in the firmware
}
