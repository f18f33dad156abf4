"""Print one closing line for `make test`: tests passed and failed across every suite.

    python scripts/summarize.py out/test/*.xml --upy out/test/micropython.txt

Reads pytest's JUnit XML files and the MicroPython runner's "N passed, N failed" line.
"""
import re
import sys
import xml.etree.ElementTree as ET


def main(argv: list[str]) -> int:
    upy = None
    if "--upy" in argv:
        i = argv.index("--upy")
        upy = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    passed = failed = skipped = 0
    parts = []
    if upy:
        try:
            text = open(upy).read()
        except OSError:
            text = ""
        m = re.search(r"(\d+) passed, (\d+) failed", text)
        if m:
            p, f = int(m.group(1)), int(m.group(2))
            passed, failed = passed + p, failed + f
            parts.append("micropython %d" % p)
    for path in argv:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError):
            failed += 1
            parts.append("%s missing" % path)
            continue
        for suite in root.iter("testsuite"):
            t, f, e, s = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
            passed += t - f - e - s
            failed += f + e
            skipped += s
            parts.append("%s %d" % (suite.get("name", path), t - f - e - s))
    print("suites: " + ", ".join(parts))
    print("total: %d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
