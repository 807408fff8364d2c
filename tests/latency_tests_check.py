#!/usr/bin/env python3
"""Checks tests/latency_tests.cmake against the tests ctest knows.

Every entry must name an existing test that ctest labels `latency` and runs
RUN_SERIAL, and every test labelled `latency` must be an entry. ctest's
set_tests_properties ignores a name that matches no test, so this check is
what makes a stale entry (a renamed or deleted test) fail.

Usage: latency_tests_check.py --ctest CTEST --build-dir DIR --list FILE
Exit 0 when the list and ctest agree, 1 (naming each problem) otherwise,
2 on bad arguments or an unreadable list.
"""
import argparse
import json
import re
import subprocess
import sys

ENTRY = re.compile(r'^\s*"(\S+) (\S+) (\S+)"\s*$')
MAX_LIST_BYTES = 1 << 20


def read_entries(path):
    """The (directory, executable, name) entries of set(DET_LATENCY_TESTS ...)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_LIST_BYTES + 1)
    except OSError as e:
        sys.exit(f"latency_tests_check: cannot read --list {path}: {e}")
    if len(text) > MAX_LIST_BYTES:
        sys.exit(f"latency_tests_check: --list {path} is over {MAX_LIST_BYTES} bytes")
    block = re.search(r"set\(DET_LATENCY_TESTS\n(.*?)\n\)", text, re.S)
    if not block:
        sys.exit(f"latency_tests_check: {path} has no set(DET_LATENCY_TESTS ...) block")
    entries = []
    for line in block.group(1).splitlines():
        if not line.strip() or line.strip().startswith("#"):
            continue
        m = ENTRY.match(line)
        if not m:
            sys.exit(f'latency_tests_check: {path}: "{line.strip()}" is not "<directory> <executable> <test name>"')
        entries.append(m.groups())
    return entries


def ctest_tests(ctest, build_dir):
    """name -> {property: value} of every test ctest lists in build_dir."""
    r = subprocess.run([ctest, "--show-only=json-v1"], cwd=build_dir, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        sys.exit(f"latency_tests_check: ctest --show-only=json-v1 in {build_dir} exited {r.returncode}: {r.stderr}")
    tests = {}
    for t in json.loads(r.stdout)["tests"]:
        tests[t["name"]] = {p["name"]: p["value"] for p in t.get("properties", [])}
    return tests


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctest", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--list", required=True)
    args = ap.parse_args()
    entries = read_entries(args.list)
    tests = ctest_tests(args.ctest, args.build_dir)
    problems = []
    listed = set()
    for directory, exe, name in entries:
        listed.add(name)
        props = tests.get(name)
        if props is None:
            hint = (f"{exe} is not built (build it)" if f"{exe}_NOT_BUILT" in tests
                    else f"rename or remove the entry in {args.list}")
            problems.append(f"{name} ({directory}/{exe}): no such test; {hint}")
            continue
        labels = props.get("LABELS") or []
        if "latency" not in labels:
            problems.append(f"{name}: not labelled latency (labels {labels}); is det_latency_tests({directory}) "
                            f"the last thing in {directory}/CMakeLists.txt?")
        if not props.get("RUN_SERIAL"):
            problems.append(f"{name}: not RUN_SERIAL")
        print(f"latency: {name} labels={labels} RUN_SERIAL={props.get('RUN_SERIAL')}")
    for name, props in sorted(tests.items()):
        if "latency" in (props.get("LABELS") or []) and name not in listed:
            problems.append(f"{name}: labelled latency but not listed in {args.list}")
    for p in problems:
        print(f"latency_tests_check: {p}", file=sys.stderr)
    print(f"latency_tests_check: {len(entries)} listed, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
