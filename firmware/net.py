"""Wi-Fi station for the boards that have it (ESP32, Pico W).

    up = WifiLink("home", "secret")
    up()             # connects, or returns at once when connected; OSError on timeout

The uplink calls it before every broker connection attempt, so a lost access point
is handled by the same backoff as a lost broker.
"""


class WifiLink:
    def __init__(self, ssid, password, timeout_ms=15000):
        import network
        self._wlan = network.WLAN(network.STA_IF)
        self._ssid = ssid
        self._password = password
        self._timeout_ms = timeout_ms

    def __call__(self):
        import time
        w = self._wlan
        if w.isconnected():
            return
        w.active(True)
        w.connect(self._ssid, self._password)
        t0 = time.ticks_ms()
        while not w.isconnected():
            if time.ticks_diff(time.ticks_ms(), t0) > self._timeout_ms:
                raise OSError("Wi-Fi %r: no connection within %d ms" % (self._ssid, self._timeout_ms))
            time.sleep_ms(100)
