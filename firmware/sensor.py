"""Sensor HAL: ``read()`` returns one raw reading (a list of ints, one per column).

    s = Stimulus([[10, 20], [11, 21]])     # or Stimulus("readings.txt"): "10,20" per line
    s.read()                                # [10, 20]; None once the source is exhausted
    a = make({"sensor": "adc", "adc_pins": (26, 27)}, 2)    # machine.ADC, 0..65535 codes
    a.kind                                  # "adc" ("stimulus", "microbit"): the boot line's sensor=

``Stimulus`` is the rig's sensor: tests inject known raw values and check what the
board sends. A file it cannot open or a line that is not ``ncols`` comma-separated
integers raises ``StimulusError("<file>:<line>: <what is wrong>")``; the board then
stops (firmware/app.py), as it does for a config error. ``Analog`` wraps
``machine.ADC`` (ESP32, RP2040) and ``MicrobitAnalog`` the micro:bit's pins; both report
``read_u16`` codes, 0..65535, so a column's provisioned scaling does not depend on the
board's ADC width. ``machine`` and ``microbit`` are imported only by ``make`` on the
boards that have them.
"""


class StimulusError(ValueError):
    """``"<file>:<line>: <what is wrong>"``."""


class Stimulus:
    """Readings from a list, or from a text file read one line at a time (RAM)."""

    kind = "stimulus"

    def __init__(self, source, ncols):
        self.ncols = ncols
        self.count = 0
        self._rows = None
        self._f = None
        self._path = None
        self._line = 0
        if isinstance(source, str):
            self._path = source
            try:
                self._f = open(source)
            except OSError:
                raise StimulusError("%s: cannot open the stimulus file" % source)
        else:
            self._rows = source

    def read(self):
        if self._rows is not None:
            if self.count >= len(self._rows):
                return None
            row = self._rows[self.count]
        else:
            row = None
            assert self._f is not None      # a file source when there are no rows
            while row is None:
                line = self._f.readline()
                if not line:
                    self._f.close()
                    return None
                self._line += 1
                line = line.strip()
                if line and line[0] != "#":
                    row = self._parse(line)
        if len(row) != self.ncols:
            raise ValueError("stimulus reading %d has %d values for %d columns"
                             % (self.count, len(row), self.ncols))
        self.count += 1
        return list(row)

    def _parse(self, line):
        fields = line.split(",")
        if len(fields) != self.ncols:
            n = len(fields)
            self._bad("%d value%s for %d columns" % (n, "" if n == 1 else "s", self.ncols))
        row = []
        for x in fields:
            try:
                row.append(int(x))
            except ValueError:
                self._bad("%r is not an integer" % x.strip())
        return row

    def _bad(self, what):
        f = self._f
        assert f is not None   # only called while reading, before close()
        f.close()
        raise StimulusError("%s:%d: %s" % (self._path, self._line, what))


class Analog:
    """``machine.ADC`` channels, one per column."""

    kind = "adc"

    def __init__(self, adcs):
        self._adcs = adcs

    def read(self):
        return [a.read_u16() for a in self._adcs]


class MicrobitAnalog:
    """micro:bit pins: ``read_analog()`` is 0..1023, rescaled to 0..65535."""

    kind = "microbit"

    def __init__(self, pins):
        self._pins = pins

    def read(self):
        return [(p.read_analog() * 65535 + 511) // 1023 for p in self._pins]


def make(profile, ncols, stimulus=None):
    """The sensor for ``ncols`` columns: the stimulus when the config gives one (on any
    board: a rig feeds known readings to a real board), else the one the profile names."""
    kind = profile["sensor"]
    if stimulus is not None or kind == "stimulus":
        return Stimulus(stimulus, ncols)
    if kind == "adc":
        from machine import ADC, Pin
        return Analog([ADC(Pin(p)) for p in profile["adc_pins"][:ncols]])
    if kind == "microbit":
        import microbit
        return MicrobitAnalog([getattr(microbit, "pin%d" % p) for p in profile["adc_pins"][:ncols]])
    raise ValueError("unknown sensor kind %r" % kind)
