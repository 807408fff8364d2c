#!/usr/bin/env python3
"""Tests deploy/test-report.py (ctest test `test_report`).

    deploy/test_report_test.py [--ctest CTEST] [--cmake CMAKE]

Builds a tiny ctest project in a temp dir (no compiler: shell commands only)
with a passing test, a failing one, a script that prints `SKIP: reason` and
exits 77, and one whose output is a GTEST_SKIP, runs ctest --output-junit on
it, and checks what the report prints and returns: the skips with their
reasons, `skipped: N (allowlisted: M)`, exit 1 for a skip the allowlist does
not cover, 0 when it does, ctest's status when ctest failed, 2 for an
allowlist entry without a reason. A hand-written JUnit file checks the
slowest-tests list (order, the cut at --slowest) and the total. Python 3
standard library; the temp dir is removed at the end.
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, 'test-report.py')

PROJECT = r'''cmake_minimum_required(VERSION 3.18)
project(report_test NONE)
enable_testing()
add_test(NAME passes COMMAND sh -c "echo fine")
add_test(NAME script_skip COMMAND sh -c "echo 'SKIP: no widget at /dev/widget'; exit 77")
set_tests_properties(script_skip PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME Gtest.Skips COMMAND sh -c "printf '%s\n' '[ RUN      ] Gtest.Skips' 'x_test.cc:12: Skipped' 'needs a <gadget> & root' '' '[  SKIPPED ] Gtest.Skips (0 ms)'")
set_tests_properties(Gtest.Skips PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
if(WITH_FAILURE)
  add_test(NAME fails COMMAND sh -c "echo broken; exit 3")
endif()
'''

SLOW_JUNIT = '''<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="x" tests="4">
  <testcase name="quick" time="0.5" status="run"><system-out>ok</system-out></testcase>
  <testcase name="slowest" time="120.25" status="run"><system-out>ok</system-out></testcase>
  <testcase name="middle" time="30" status="fail"><failure message=""/><system-out>no</system-out></testcase>
  <testcase name="second" time="60" status="run"><system-out>ok</system-out></testcase>
</testsuite>
'''

failures = []


def check(cond, what, output=''):
    if not cond:
        failures.append(f'{what}\n--- output ---\n{output}')


def run(argv, cwd=None):
    p = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return p.returncode, p.stdout


def report(junit, allowlist, *extra):
    return run([sys.executable, REPORT, '--junit', junit, '--allowlist', allowlist, *extra])


def write(path, text):
    with open(path, 'w') as f:
        f.write(text)
    return path


def ctest_junit(tmp, cmake, ctest, with_failure):
    src = os.path.join(tmp, 'src')
    build = os.path.join(tmp, 'build-fail' if with_failure else 'build')
    os.makedirs(src, exist_ok=True)
    write(os.path.join(src, 'CMakeLists.txt'), PROJECT)
    rc, out = run([cmake, '-S', src, '-B', build, f'-DWITH_FAILURE={"ON" if with_failure else "OFF"}'])
    if rc != 0:
        sys.exit(f'test_report_test: cmake failed:\n{out}')
    junit = os.path.join(build, 'junit.xml')
    rc, out = run([ctest, '--output-junit', junit], cwd=build)
    return rc, junit


def test_skips(tmp, cmake, ctest):
    rc, junit = ctest_junit(tmp, cmake, ctest, with_failure=False)
    check(rc == 0, f'ctest with skips only should pass, exit {rc}')
    empty = write(os.path.join(tmp, 'empty.txt'), '# nothing allowed\n')
    rc, out = report(junit, empty)
    check(rc == 1, f'a skip outside the allowlist must fail the report (exit {rc})', out)
    check('SKIPPED   script_skip: no widget at /dev/widget' in out, "the SKIP: line's reason is listed", out)
    check('SKIPPED   Gtest.Skips: needs a <gadget> & root' in out, "the GTEST_SKIP message is listed", out)
    check(out.rstrip().endswith('skipped: 2 (allowlisted: 0)'), 'the last line counts both skips', out)

    allow = write(os.path.join(tmp, 'allow.txt'), 'script_s?ip  widgets are not on CI\nGtest.*  no gadgets\n')
    rc, out = report(junit, allow)
    check(rc == 0, f'allowlisted skips pass (exit {rc})', out)
    check('skipped: 0 (allowlisted: 2)' in out, 'both skips allowlisted', out)
    check('[allowlist line 1: widgets are not on CI]' in out, 'the allowlist reason is shown', out)

    bad = write(os.path.join(tmp, 'bad.txt'), '# header\nGtest.*\n')
    rc, out = report(junit, bad)
    check(rc == 2 and f'{bad}:2:' in out and 'has no reason' in out, f'an entry without a reason is refused (exit {rc})', out)

    rc, out = report(os.path.join(tmp, 'missing.xml'), empty)
    check(rc == 1 and 'skipped: unknown' in out, f'a missing JUnit file fails (exit {rc})', out)


def test_ctest_failure(tmp, cmake, ctest):
    status, junit = ctest_junit(tmp, cmake, ctest, with_failure=True)
    check(status != 0, 'ctest with a failing test should fail')
    allow = write(os.path.join(tmp, 'allow-all.txt'), '*  everything\n')
    rc, out = report(junit, allow, '--ctest-status', str(status))
    check(rc == status, f"ctest's status {status} is the report's (got {rc})", out)
    check('skipped: 0 (allowlisted: 2)' in out and 'ctest failed' in out, 'skips still counted on failure', out)


def test_slowest(tmp):
    junit = write(os.path.join(tmp, 'slow.xml'), SLOW_JUNIT)
    empty = write(os.path.join(tmp, 'empty2.txt'), '')
    rc, out = report(junit, empty, '--slowest', '3', '--wall-seconds', '125')
    check(rc == 0, f'no skips, no failure status: exit 0 (got {rc})', out)
    lines = [l.split() for l in out.splitlines() if l.strip().endswith(('slowest', 'second', 'middle', 'quick'))]
    names = [l[-1] for l in lines]
    check(names == ['slowest', 'second', 'middle'], f'the 3 slowest, slowest first (got {names})', out)
    check('Slowest 3 of 4 tests run:' in out, 'the header counts the tests run', out)
    check('Total test time: 211 s summed over tests (3.5 min), 125 s wall clock' in out, 'the total', out)
    check('skipped: 0 (allowlisted: 0)' in out, 'no skips', out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--cmake', default='cmake')
    p.add_argument('--ctest', default='ctest')
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix='det-test-report-') as tmp:
        test_skips(tmp, args.cmake, args.ctest)
        test_ctest_failure(tmp, args.cmake, args.ctest)
        test_slowest(tmp)
    for f in failures:
        print(f'FAIL: {f}')
    if failures:
        return 1
    print('test_report_test: all checks passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
