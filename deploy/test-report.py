#!/usr/bin/env python3
"""The report deploy/test.sh prints after ctest: skips and the slowest tests.

    deploy/test-report.py --junit FILE [--allowlist FILE] [--ctest-status N]
                          [--wall-seconds S] [--slowest 15]

Reads ctest's JUnit file (`ctest --output-junit FILE`, CMake >= 3.21) and
prints, after ctest's own closing lines:

  - every test that did not run (skipped, disabled, not run), each with its
    reason: the GTEST_SKIP() message, or the `SKIP: ...` line of a script
    that exits 77, or ctest's own word;
  - `skipped: N (allowlisted: M)`, where N counts the skips that no entry of
    the allowlist covers and M those it does;
  - the slowest tests with their seconds, and the total test time.

The allowlist (default tests/skip_allowlist.txt) holds one entry a line: a
test-name pattern (fnmatch: `*` and `?`, matched against the whole ctest
name) and, after white space, the reason the skip is acceptable. `#` starts a
comment line.

Exit status: the ctest status given with --ctest-status when it is not 0;
else 1 when a skip is not allowlisted (or the JUnit file is missing or
unreadable), 2 for a bad allowlist or argument; else 0. Python 3 standard
library only.
"""
import argparse
import fnmatch
import os
import re
import sys
import xml.etree.ElementTree as ET

MAX_JUNIT_BYTES = 512 * 1024 * 1024  # ctest keeps at most ~300 KB per test
MAX_ALLOWLIST_BYTES = 64 * 1024
MAX_ALLOWLIST_ENTRIES = 100
MAX_REASON_CHARS = 600

# gtest: "<file>:<line>: Skipped\n<message>\n\n[  SKIPPED ] Suite.Name (0 ms)".
GTEST_SKIP_RE = re.compile(r'^[^\n]*: Skipped\n(.*?)\n*^\[  SKIPPED \]', re.M | re.S)
SCRIPT_SKIP_RE = re.compile(r'^SKIP: (.*)$', re.M)


class ReportError(Exception):
    """A bad input: the message names the file and how to fix it."""


def read_bounded(path, limit, what):
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise ReportError(f'{what} {path}: cannot read it ({e.strerror})') from e
    if size > limit:
        raise ReportError(f'{what} {path}: {size} bytes, more than the {limit} this report reads')
    with open(path, 'rb') as f:
        return f.read(limit + 1)


def load_allowlist(path):
    """[(pattern, reason, line_no)] from the allowlist; ReportError if malformed."""
    if not os.path.exists(path):
        raise ReportError(f'allowlist {path} does not exist (create it, empty, or pass --allowlist)')
    text = read_bounded(path, MAX_ALLOWLIST_BYTES, 'allowlist').decode('utf-8', 'replace')
    entries = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith('#'):
            continue
        parts = line.split(None, 1)
        if len(parts) < 2:
            raise ReportError(f'{path}:{n}: entry "{parts[0]}" has no reason; write "PATTERN  why this skip is fine"')
        entries.append((parts[0], parts[1], n))
    if len(entries) > MAX_ALLOWLIST_ENTRIES:
        raise ReportError(f'{path}: {len(entries)} entries, more than {MAX_ALLOWLIST_ENTRIES}; keep it short')
    return entries


def shorten(text):
    text = ' '.join(text.split())
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS] + '...'


def skip_reason(case):
    """Why a test case that did not run did not run, in one line."""
    out_el = case.find('system-out')
    out = (out_el.text or '') if out_el is not None else ''
    if case.get('status') == 'disabled':
        return 'disabled (DISABLED property or DISABLED_ prefix)'
    m = GTEST_SKIP_RE.search(out)
    if m and m.group(1).strip():
        return shorten(m.group(1))
    lines = SCRIPT_SKIP_RE.findall(out)
    if lines:
        return shorten('; '.join(lines))
    word = ctest_word(case)
    if word.startswith('SKIP_') or not word:
        tail = out.strip().splitlines()[-3:]
        return shorten(f'{word or "not run"}, no reason printed (last output: {" | ".join(tail)})')
    return shorten(out if word in out else f'{word}: {out}')


def ctest_word(case):
    """ctest's message for a test that did not run (SKIP_RETURN_CODE=77, ...)."""
    skipped = case.find('skipped')
    return skipped.get('message', '') if skipped is not None else ''


def kind(case):
    if case.get('status') == 'disabled':
        return 'DISABLED'
    return 'SKIPPED' if ctest_word(case).startswith('SKIP_') else 'NOT RUN'


def load_cases(junit_path):
    data = read_bounded(junit_path, MAX_JUNIT_BYTES, 'ctest JUnit file')
    try:
        root = ET.fromstring(data)
    except ET.ParseError as e:
        raise ReportError(f'ctest JUnit file {junit_path}: not valid XML ({e})') from e
    cases = []
    for c in root.iter('testcase'):
        try:
            seconds = float(c.get('time') or 0)
        except ValueError:
            raise ReportError(f'ctest JUnit file {junit_path}: test {c.get("name")!r} has time={c.get("time")!r}')
        cases.append((c.get('name', '?'), c.get('status', ''), seconds, c))
    return cases


def allowlisted(name, entries):
    for pattern, reason, n in entries:
        if fnmatch.fnmatchcase(name, pattern):
            return f'allowlist line {n}: {reason}'
    return None


def report(cases, entries, slowest, wall_seconds, allowlist_path):
    """Prints the report; returns the number of skips the allowlist does not cover."""
    print('\n==== test report (deploy/test-report.py) ====')
    skips = [(name, kind(c), skip_reason(c)) for name, status, _, c in cases if status in ('notrun', 'disabled')]
    required = 0
    if skips:
        print(f'Tests that did not run ({len(skips)}):')
    for name, what, reason in skips:
        why = allowlisted(name, entries)
        if why is None:
            required += 1
            print(f'  {what:8}  {name}: {reason}')
        else:
            print(f'  {"allowed":8}  {name}: {reason}  [{why}]')
    ran = sorted(((t, name) for name, status, t, _ in cases if status in ('run', 'fail')), reverse=True)
    print(f'Slowest {min(slowest, len(ran))} of {len(ran)} tests run:')
    for t, name in ran[:slowest]:
        print(f'  {t:8.1f} s  {name}')
    total = sum(t for t, _ in ran)
    wall = f', {wall_seconds:.0f} s wall clock' if wall_seconds is not None else ''
    print(f'Total test time: {total:.0f} s summed over tests ({total / 60:.1f} min){wall}')
    if required:
        print(f'FAIL: {required} test(s) did not run and {allowlist_path} does not allow it: give this host what '
              'each reason names (deploy/install-deps.sh installs the packages; run as root), or, only when no CI '
              'host can have it, add the test there with a reason')
    print(f'skipped: {required} (allowlisted: {len(skips) - required})')
    return required


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--junit', required=True, help='ctest --output-junit FILE')
    p.add_argument('--allowlist', default=os.path.join(root, 'tests', 'skip_allowlist.txt'))
    p.add_argument('--ctest-status', type=int, default=0, help="ctest's exit status (returned when not 0)")
    p.add_argument('--wall-seconds', type=float, default=None, help="ctest's wall-clock time, printed")
    p.add_argument('--slowest', type=int, default=15, choices=range(1, 1001), metavar='1..1000')
    args = p.parse_args(argv)
    try:
        entries = load_allowlist(args.allowlist)
    except ReportError as e:
        print(f'test-report: {e}', file=sys.stderr)
        return args.ctest_status or 2
    try:
        cases = load_cases(args.junit)
    except ReportError as e:
        print(f'test-report: {e}; did ctest run with --output-junit?', file=sys.stderr)
        print('skipped: unknown (no ctest results)')
        return args.ctest_status or 1
    required = report(cases, entries, args.slowest, args.wall_seconds, args.allowlist)
    if args.ctest_status:
        print(f'ctest failed (exit status {args.ctest_status}); see its output above')
        return args.ctest_status
    return 1 if required else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
