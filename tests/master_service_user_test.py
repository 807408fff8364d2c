#!/usr/bin/env python3
"""det-master as the unprivileged user its systemd unit names (User=det), on
the files deploy/install.sh lays out (issue 47 review, finding 8): the
master reads its TLS key (0600) and cluster secret (0600) owned by that
user, creates det.db in its 0700 data dir, and serves /healthz over TLS.
MultiHost runs the master as root; this test covers the unit's user.

usage: master_service_user_test.py SOURCE_DIR BUILD_DIR
install.sh --no-system installs into a fresh temp dir (removed after);
the files install.sh (without --no-system) and the operator (docs/operations
/multi-node.md, TLS) give to `det` are chowned to an unused uid instead of a
real `det` user, and det-master runs as that uid with the installed unit's
ExecStart plus --grpc-port 0 --http-port 0 --ports-file. Requires root (CI
runs tests as root) and openssl: without them it fails, never skips. Then a
second start with the key left to root checks the refusal names the key.
"""
import json
import os
import pwd
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    return 1


def unused_uid():
    for uid in range(64000, 65000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    raise RuntimeError("no unused uid in 64000-64999")


def install(src, build, root):
    env = dict(os.environ, DET_BUILD_DIR=build)
    env.pop("PREFIX", None)
    subprocess.run([os.path.join(src, "deploy/install.sh"), "--prefix", "/opt/det", "--root", root, "--no-system",
                    "master"], env=env, check=True, capture_output=True, text=True, timeout=300)
    tls = os.path.join(root, "etc/det/tls")
    os.makedirs(tls, mode=0o755)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", tls + "/key.pem", "-out", tls + "/cert.pem", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, text=True, timeout=60)
    os.chmod(tls + "/key.pem", 0o600)
    os.chmod(tls + "/cert.pem", 0o644)
    toml = os.path.join(root, "etc/det/master.toml")
    text = open(toml).read()
    for key in ("tls-cert", "tls-key"):  # the keys multi-node.md says to uncomment
        text = text.replace("# %s = " % key, "%s = " % key, 1)
    open(toml, "w").write(text)
    return tls


def exec_start(root):
    unit = open(os.path.join(root, "etc/systemd/system/det-master.service")).read()
    users = [l.split("=", 1)[1] for l in unit.splitlines() if l.startswith("User=")]
    execs = [l.split("=", 1)[1] for l in unit.splitlines() if l.startswith("ExecStart=")]
    if users != ["det"] or len(execs) != 1:
        raise RuntimeError("det-master.service: User=%s, ExecStart=%s" % (users, execs))
    return shlex.split(execs[0])


def start(argv, uid, log_path):
    def drop():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    log = open(log_path, "wb")
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # systemd's bare environment
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=drop, env=env, cwd="/")


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serves(root, tls, uid, argv, tmp):
    """Starts the master as uid; returns a list of failures."""
    ports = os.path.join(root, "var/lib/det/ports.json")
    log = os.path.join(tmp, "master.log")
    proc = start(argv + ["--grpc-port", "0", "--http-port", "0", "--ports-file", ports], uid, log)
    failures = []
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(ports) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # polls for the ports file, with a deadline
        if not os.path.exists(ports):
            return ["det-master as uid %d wrote no ports file (exit %s):\n%s" % (uid, proc.poll(), open(log).read())]
        http = json.load(open(ports))["http"]
        status = open("/proc/%d/status" % proc.pid).read()
        uids = [l.split()[1:] for l in status.splitlines() if l.startswith("Uid:")][0]
        if uids != [str(uid)] * 4:
            failures.append("det-master runs with uids %s, not %d" % (uids, uid))
        ctx = ssl.create_default_context(cafile=os.path.join(tls, "cert.pem"))
        with urllib.request.urlopen("https://localhost:%d/healthz" % http, context=ctx, timeout=10) as resp:
            if resp.status != 200:
                failures.append("GET /healthz answered %d" % resp.status)
        db = os.path.join(root, "var/lib/det/det.db")
        st = os.stat(db)
        if st.st_uid != uid or (st.st_mode & 0o777) != 0o600:
            failures.append("det.db is uid %d mode %o, not uid %d mode 600" % (st.st_uid, st.st_mode & 0o777, uid))
    finally:
        stop(proc)
    return failures


def refuses_root_key(root, tls, uid, argv, tmp):
    os.chown(os.path.join(tls, "key.pem"), 0, 0)
    log = os.path.join(tmp, "refused.log")
    proc = start(argv + ["--grpc-port", "0", "--http-port", "0"], uid, log)
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        stop(proc)
        return ["det-master as uid %d started with a key only root may read" % uid]
    out = open(log).read()
    if rc == 0 or "key.pem" not in out:
        return ["a key only root may read: exit %d, and the error does not name key.pem:\n%s" % (rc, out)]
    return []


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        return fail("must run as root (CI runs tests as root): it chowns files to another uid and runs det-master as it")
    if shutil.which("openssl") is None:
        return fail("openssl is required (deploy/install-deps.sh installs it)")
    src, build = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp(prefix="det-service-user-")
    try:
        os.chmod(tmp, 0o755)  # the unit's user traverses it to the install
        root = os.path.join(tmp, "node")
        tls = install(src, build, root)
        uid = unused_uid()
        # What install.sh's own() gives det, and the operator the key (multi-node.md, TLS).
        etc = os.path.join(root, "etc/det")
        for path in (os.path.join(root, "var/lib/det"), os.path.join(root, "mnt/det-checkpoints"),
                     etc + "/cluster-secret", etc + "/initial-admin-password", tls + "/key.pem"):
            os.chown(path, uid, uid)
        argv = exec_start(root)
        failures = serves(root, tls, uid, argv, tmp)
        if not failures:
            failures = refuses_root_key(root, tls, uid, argv, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL: " + f, file=sys.stderr)
    if not failures:
        print("det-master ran as uid %d from the installed unit's ExecStart, TLS on, and refused a root-only key" % uid)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
