# Stand-in board (tools/ptyboard.py): Wi-Fi is the host's network, so a station is
# connected as soon as it was asked to connect.
STA_IF = 0
AP_IF = 1
STAT_IDLE = 0
STAT_CONNECTING = 1
STAT_GOT_IP = 3


_state = {}     # per interface, shared by every WLAN object of it, as on a board


class WLAN:
    def __init__(self, interface=STA_IF):
        self._s = _state.setdefault(interface, {'active': False, 'ssid': None})

    def active(self, on=None):
        if on is None:
            return self._s['active']
        self._s['active'] = bool(on)
        if not on:
            self._s['ssid'] = None

    def connect(self, ssid=None, key=None, *args, **kwargs):
        self._s['active'] = True
        self._s['ssid'] = ssid

    def disconnect(self):
        self._s['ssid'] = None

    def isconnected(self):
        return self._s['ssid'] is not None

    def status(self, param=None):
        if param == 'rssi':
            return -50
        return STAT_GOT_IP if self._s['ssid'] is not None else STAT_IDLE

    def ifconfig(self, config=None):
        if config is None:
            return ('127.0.0.1', '255.0.0.0', '127.0.0.1', '127.0.0.1')

    def config(self, *args, **kwargs):
        if args in (('essid',), ('ssid',)):
            return self._s['ssid'] or ''
        if args == ('mac',):
            return b'\x02\x00\x00\x00\x00\x01'
        return None
