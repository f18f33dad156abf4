"""Wi-Fi station for the boards that have it (ESP32, Pico W).

    up = WifiLink("home", "secret")
    up.radio_on()    # the radio runs (the ESP32's RNG needs it); no association yet
    up()             # connects, or returns at once when connected; OSError on timeout

The uplink calls it before every broker connection attempt, so a lost access point
is handled by the same backoff as a lost broker.
"""


class WifiLink:
    """``network`` and ``clock`` (``time``-shaped) are the port's own unless a test passes them."""

    def __init__(self, ssid, password, timeout_ms=15000, network=None, clock=None):
        if network is None:
            import network
        if clock is None:
            import time as clock
        self._wlan = network.WLAN(network.STA_IF)
        self._clock = clock
        self._ssid = ssid
        self._password = password
        self._timeout_ms = timeout_ms

    def radio_on(self):
        """Start the station interface (the radio) without waiting for an access point."""
        self._wlan.active(True)

    def __call__(self):
        t = self._clock
        w = self._wlan
        if w.isconnected():
            return
        w.active(True)
        w.connect(self._ssid, self._password)
        t0 = t.ticks_ms()
        while not w.isconnected():
            if t.ticks_diff(t.ticks_ms(), t0) > self._timeout_ms:
                raise OSError("Wi-Fi %r: no connection within %d ms" % (self._ssid, self._timeout_ms))
            t.sleep_ms(100)
