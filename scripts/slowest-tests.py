#!/usr/bin/env python3
"""Prints the slowest tests of a nextest JUnit report: `slowest-tests.py JUNIT.xml [COUNT]`.

CI (`.ci/run`) calls it after the test run so the log says where the time went.
"""
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    path = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    root = ET.parse(path).getroot()
    cases = []
    for suite in root.iter("testsuite"):
        for case in suite.iter("testcase"):
            failed = case.find("failure") is not None or case.find("error") is not None
            cases.append((float(case.get("time", "0")), suite.get("name", ""), case.get("name", ""), failed))
    cases.sort(reverse=True)
    total = sum(c[0] for c in cases)
    print(f"{len(cases)} tests, {total:.0f} s of test time in all; the {min(count, len(cases))} slowest:")
    for seconds, binary, name, failed in cases[:count]:
        mark = "  FAILED" if failed else ""
        print(f"{seconds:8.1f} s  {binary} {name}{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
