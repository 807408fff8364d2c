#!/usr/bin/env python3
"""docs_quickstart: runs the quick start of README.md and docs/getting-started.md.

The commands come from the docs themselves, never from a copy:
- A fenced block right after `<!-- docs_quickstart: run -->` is run, in page
  order (README.md first), in one bash session with `set -euo pipefail`.
  A line that runs `deploy/test.sh` is left out: that is the suite itself,
  which CI runs (.ci/run).
- A fenced block right after `<!-- docs_quickstart: output -->` is what the
  run block before it prints: each of its lines must appear, in order, as a
  whole line of that output; a line `...` stands for any lines.
  `<!-- docs_quickstart: output, numbers vary -->` lets every number in the
  expected lines stand for any number.

The session runs in a fresh temporary directory laid out like a checkout
(deploy/, examples/ and the other top-level entries are symlinks to the source
tree, build/ to the build tree), with HOME there too, so nothing is written
into the checkout or the user's home. Ports are chosen by the OS: the master's
default ports 8090 and 8080 in the commands become free ports, and
`cluster.sh start` gets them as flags (run-example.sh reads DET_GRPC_PORT and
DET_HTTP_PORT).

Usage: docs_quickstart.py --source-dir SRC --build-dir BUILD [--keep]
Exit status 0 when every block ran and every output matched; 1 otherwise,
naming the file and line of the block that failed.
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

PAGES = ["README.md", "docs/getting-started.md"]
MARK = re.compile(r"^<!-- docs_quickstart: (run|output|output, numbers vary) -->\s*$")
FENCE = re.compile(r"^```")
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def blocks(path):
    """(kind, line number, text) of every marked fenced block of `path`."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = MARK.match(lines[i])
        if not m:
            i += 1
            continue
        if i + 1 >= len(lines) or not FENCE.match(lines[i + 1]):
            sys.exit(f"{path}:{i + 1}: a docs_quickstart marker must be followed by a fenced block")
        j = i + 2
        while j < len(lines) and not FENCE.match(lines[j]):
            j += 1
        out.append((m.group(1), i + 2, "\n".join(lines[i + 2:j])))
        i = j + 1
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def adapt(command, grpc, http):
    """The command with the OS-chosen ports in place of the defaults."""
    command = re.sub(r"\b8090\b", str(grpc), command)
    command = re.sub(r"\b8080\b", str(http), command)
    return re.sub(r"(cluster\.sh start)\b", rf"\1 --grpc-port {grpc} --http-port {http}", command)


def pattern(expected_line, numbers_vary):
    if expected_line.strip() == "...":
        return None
    parts = NUMBER.split(expected_line.rstrip()) if numbers_vary else [expected_line.rstrip()]
    glue = r"\d+(?:\.\d+)?" if numbers_vary else ""
    return re.compile("^" + glue.join(re.escape(p) for p in parts) + r"\s*$")


def match_output(expected, numbers_vary, actual):
    """None when every expected line appears in order in `actual`; else the first that does not."""
    got = actual.split("\n")
    pos = 0
    for line in expected.split("\n"):
        p = pattern(line, numbers_vary)
        if p is None:
            continue
        while pos < len(got) and not p.match(got[pos]):
            pos += 1
        if pos == len(got):
            return line
        pos += 1
    return None


def lay_out(src, build, tmp):
    for entry in os.listdir(src):
        if entry in ("build", ".git", "det-cluster", "det-output"):
            continue
        os.symlink(os.path.join(src, entry), os.path.join(tmp, entry))
    os.symlink(build, os.path.join(tmp, "build"))
    os.makedirs(os.path.join(tmp, "home"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    src, build = os.path.realpath(args.source_dir), os.path.realpath(args.build_dir)
    all_blocks = [(page, *b) for page in PAGES for b in blocks(os.path.join(src, page))]
    runs = [b for b in all_blocks if b[1] == "run"]
    if not runs:
        sys.exit("docs_quickstart: no '<!-- docs_quickstart: run -->' block in " + ", ".join(PAGES))
    grpc, http = free_port(), free_port()
    tmp = tempfile.mkdtemp(prefix="docs_quickstart.")
    lay_out(src, build, tmp)
    script = ["set -euo pipefail"]
    for n, (page, kind, line, text) in enumerate(all_blocks):
        if kind != "run":
            continue
        script.append(f"echo '@@docs_quickstart {n}@@'")
        for cmd in text.split("\n"):
            if re.search(r"deploy/test\.sh", cmd):
                print(f"{page}:{line}: not run here (the suite itself; CI runs it): {cmd.strip()}")
                continue
            script.append(adapt(cmd, grpc, http))
    script.append("echo '@@docs_quickstart end@@'")
    env = dict(os.environ, HOME=os.path.join(tmp, "home"), DET_GRPC_PORT=str(grpc), DET_HTTP_PORT=str(http),
               DET_CLUSTER_DIR=os.path.join(tmp, "det-cluster"), CCACHE_DIR=os.environ.get(
                   "CCACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "ccache")))
    env.pop("DET_MASTER", None)
    print("running in", tmp, "with ports", grpc, http, flush=True)
    try:
        # Under ctest's TIMEOUT (1500 s), so that the cluster is stopped below.
        proc = subprocess.run(["bash", "-c", "\n".join(script)], cwd=tmp, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace", timeout=1320)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        proc = subprocess.CompletedProcess(e.cmd, 124, out + "\ndocs_quickstart: timed out after 1320 s\n")
    finally:
        subprocess.run(["bash", "-c", "./deploy/cluster.sh stop"], cwd=tmp, env=env, capture_output=True)
    print(proc.stdout)
    outputs = dict(re.findall(r"@@docs_quickstart (\d+)@@\n(.*?)(?=@@docs_quickstart )", proc.stdout, re.S))
    failures = []
    if proc.returncode != 0:
        failures.append(f"the commands exited {proc.returncode} (output above)")
    last_run = None
    for n, (page, kind, line, text) in enumerate(all_blocks):
        if kind == "run":
            last_run = n
            continue
        if last_run is None:
            failures.append(f"{page}:{line}: an output block with no run block before it")
            continue
        missing = match_output(text, kind.endswith("numbers vary"), outputs.get(str(last_run), ""))
        if missing is not None:
            failures.append(f"{page}:{line}: the output shown is not what the commands printed: "
                            f"no line matches {missing!r} (in order)")
    if not args.keep and not failures:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("docs_quickstart: FAIL:", f)
    print(f"docs_quickstart: {len(runs)} run blocks, {len(all_blocks) - len(runs)} output blocks, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
