"""firmware/sensor.py: a stimulus file with a bad line stops with its file and line number."""
from tests.portable import fwutil
from tests.portable.util import raises
import sensor


def _file(name, text):
    p = fwutil.scratch(name)
    f = open(p, "w")
    f.write(text)
    f.close()
    return p


def _rows(s):
    out = []
    while True:
        r = s.read()
        if r is None:
            return out
        out.append(r)


def test_a_good_file_skips_comments_and_blank_lines():
    p = _file("good.txt", "1,2\n# a comment\n\n -3 , 4\n")
    assert _rows(sensor.Stimulus(p, 2)) == [[1, 2], [-3, 4]]
    fwutil.remove(p)


def test_a_bad_value_names_the_file_and_the_line():
    p = _file("badvalue.txt", "1,2\n# line 2\n3,x4\n5,6\n")
    s = sensor.Stimulus(p, 2)
    assert s.read() == [1, 2]
    e = raises(sensor.StimulusError, s.read)
    assert str(e) == "%s:3: 'x4' is not an integer" % p, str(e)
    assert isinstance(e, ValueError)
    fwutil.remove(p)


def test_a_line_with_the_wrong_number_of_values_names_the_counts():
    for text, want in (("1,2,3\n", ":1: 3 values for 2 columns"), ("1,2\n7\n", ":2: 1 value for 2 columns"),
                       ("1,,2\n", ":1: 3 values for 2 columns"), ("1.5,2\n", ":1: '1.5' is not an integer")):
        p = _file("badcount.txt", text)
        e = raises(sensor.StimulusError, _rows, sensor.Stimulus(p, 2))
        assert str(e) == p + want, (text, str(e))
        fwutil.remove(p)


def test_a_missing_file_is_named():
    p = fwutil.scratch("missing.txt")
    e = raises(sensor.StimulusError, sensor.Stimulus, p, 2)
    assert str(e) == "%s: cannot open the stimulus file" % p, str(e)
