"""Runs every tests/integration/test_*.py with unittest and ends with one plain summary line:
`N passed, N failed, N skipped`. Exit status 0 only if nothing failed.

Usage: python3 runner.py [PATTERN...]   (PATTERN: substrings of test ids to select, e.g. Network)
"""
import os
import re
import sys
import time
import unittest


def iter_tests(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from iter_tests(t)
        else:
            yield t


class TimedResult(unittest.TextTestResult):
    """Keeps each test's wall time, so the end of a run can name the slowest (CI's time budget)."""

    def startTest(self, test):
        self._t0 = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        self.durations_s = getattr(self, "durations_s", [])
        self.durations_s.append((time.monotonic() - self._t0, test.id()))


SLOWEST_SHOWN = 12
FAILURE_LINE_CHARS = 400


def failure_line(trace):
    """The test's own frame (file:line) and the exception's first line: the last line of an
    assertEqual's diff is only its marker line ("?   ++++")."""
    lines = trace.splitlines()
    where = next((ln.strip() for ln in reversed(lines) if ln.strip().startswith('File "') and "/test_" in ln), "")
    where = where.split("/")[-1].replace('", line ', ":").split(",")[0] if where else ""
    what = next((ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception|Interrupt|Exit)\b", ln)), "")
    what = what or next((ln for ln in reversed(lines) if ln.strip()), "")
    return f"{where}: {what}" if where else what


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    loader = unittest.TestLoader()
    suite = loader.discover(here, pattern="test_*.py", top_level_dir=here)
    patterns = sys.argv[1:]
    if patterns:
        suite = unittest.TestSuite(t for t in iter_tests(suite) if any(p in t.id() for p in patterns))
    total = suite.countTestCases()
    print(f"sbx integration tests: mode={os.environ.get('SBX_MODE')} uid={os.getuid()} "
          f"binary={os.environ.get('SBX_BIN')} tests={total}", flush=True)
    t0 = time.monotonic()
    runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=2, resultclass=TimedResult)
    result = runner.run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped - len(result.expectedFailures)
    if result.skipped:
        print("skipped tests and why:", flush=True)
        for test, reason in result.skipped:
            print(f"  {test.id()}: {reason}", flush=True)
    if failed:
        # Each with the last line of its traceback: CI shows only the end of its output.
        print("failed tests:", flush=True)
        for test, trace in result.failures + result.errors:
            print(f"  {test.id()}: {failure_line(trace)[:FAILURE_LINE_CHARS]}", flush=True)
    sys.stderr.flush()
    slowest = sorted(getattr(result, "durations_s", []), reverse=True)[:SLOWEST_SHOWN]
    if slowest:
        print("slowest tests:", flush=True)
        for secs, test_id in slowest:
            print(f"  {secs:6.1f}s {test_id}", flush=True)
    summary = f"{passed} passed, {failed} failed"
    if skipped:
        summary += f", {skipped} skipped"
    print(f"({time.monotonic() - t0:.1f}s)", flush=True)
    print(summary, flush=True)
    return 1 if failed or result.testsRun == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
