"""Print one closing line for `make test`: tests passed and failed across every suite.

    python scripts/summarize.py out/test/*.xml --upy out/test/micropython.txt \
        --typecheck out/test/typecheck.txt

Reads pytest's JUnit XML files, the MicroPython runner's "N passed, N failed" line and
scripts/typecheck.sh's lines ("typecheck NAME ok|FAILED ..."), each check one test.
"""
import re
import sys
import xml.etree.ElementTree as ET


def _option(argv: list[str], name: str) -> tuple[str | None, list[str]]:
    if name not in argv:
        return None, argv
    i = argv.index(name)
    return argv[i + 1], argv[:i] + argv[i + 2:]


def main(argv: list[str]) -> int:
    upy, argv = _option(argv, "--upy")
    typecheck, argv = _option(argv, "--typecheck")
    passed = failed = skipped = 0
    parts = []
    if typecheck:
        try:
            text = open(typecheck).read()
        except OSError:
            text = ""
        results = re.findall(r"^typecheck (\S+) +(ok|FAILED) ", text, re.M)
        if results:
            ok = sum(1 for _, r in results if r == "ok")
            passed, failed = passed + ok, failed + len(results) - ok
            parts.append("typecheck %d" % ok)
        else:
            # No check ran (no mypy, or the stubs could not be installed): that fails too.
            failed += 1
            parts.append("typecheck missing")
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
