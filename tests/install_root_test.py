#!/usr/bin/env python3
"""deploy/install.sh --root DIR (docs/operations/multi-node.md): every path
in the installed configs and units points under DIR, and the units'
StateDirectory= (which systemd always makes under /var/lib, outside DIR) is
commented out; the master's data dir DIR/var/lib/det is made 0700.

usage: install_root_test.py SOURCE_DIR BUILD_DIR
Runs install.sh --no-system (no useradd, chown, ldconfig, systemctl) into a
fresh temporary directory, which it removes.
"""
import os
import re
import stat
import subprocess
import sys
import tempfile


def check(cond, what, failures):
    if not cond:
        failures.append(what)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, build = sys.argv[1], sys.argv[2]
    failures = []
    with tempfile.TemporaryDirectory(prefix="det-install-root-") as tmp:
        root = os.path.join(tmp, "node")
        env = dict(os.environ, DET_BUILD_DIR=build, MASTER="det-master.example.internal:8090")
        env.pop("PREFIX", None)
        run = subprocess.run(
            [os.path.join(src, "deploy/install.sh"), "--prefix", "/opt/det", "--root", root, "--no-system", "all"],
            env=env, capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            print("install.sh failed (exit %d):\n%s%s" % (run.returncode, run.stdout, run.stderr), file=sys.stderr)
            return 1
        units = os.path.join(root, "etc/systemd/system")
        for unit in ("det-master.service", "det-agent.service"):
            text = open(os.path.join(units, unit)).read()
            active = [l for l in text.splitlines() if re.match(r"^\s*StateDirectory", l)]
            check(not active, "%s: StateDirectory= still active under --root (systemd would make /var/lib/...): %s"
                  % (unit, active), failures)
            execs = [l for l in text.splitlines() if l.startswith("ExecStart=")]
            name = unit.split(".")[0]
            want = "ExecStart=%s/opt/det/bin/%s --config %s/etc/det/%s.toml" % (root, name, root, name.split("-")[1])
            check(execs == [want], "%s: ExecStart is %s, not [%r]" % (unit, execs, want), failures)
        for toml in ("master.toml", "agent.toml"):
            text = open(os.path.join(root, "etc/det", toml)).read()
            for line in text.splitlines():
                if line.lstrip().startswith("#"):
                    continue
                for path in re.findall(r'"(/[^"]*)"', line):
                    check(path.startswith(root + "/"), "%s: %r names %s, outside the root" % (toml, line, path),
                          failures)
        data = os.path.join(root, "var/lib/det")
        check(os.path.isdir(data), "%s was not made" % data, failures)
        if os.path.isdir(data):
            mode = stat.S_IMODE(os.stat(data).st_mode)
            check(mode == 0o700, "%s has mode %o, not 700" % (data, mode), failures)
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    if not failures:
        print("install.sh --root: units and configs point under the root; StateDirectory= commented out")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
