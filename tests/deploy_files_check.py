#!/usr/bin/env python3
"""deploy_files_check: the shipped systemd units and YAML files are valid and
keep the operator's guarantees (issue 47, part 5).

  python3 tests/deploy_files_check.py --root .             (ctest deploy_files_check)
  python3 tests/deploy_files_check.py --root . --selftest  (ctest deploy_files_check_selftest)

Checks:
  units     `systemd-analyze verify` of deploy/systemd/*.service in a
            throwaway root (--root=TMP): the host's unit tree copied in, the
            units in TMP/etc/systemd/system, a stub for each ExecStart binary,
            so the units are checked as shipped. Any message is a failure
            (verify exits 0 on an unknown key and only prints it). Then the
            restart policy: Restart=on-failure, RestartSec, and in [Unit]
            StartLimitIntervalSec and StartLimitBurst, with
            StartLimitBurst * RestartSec < StartLimitIntervalSec (else the
            limit can never trip). det-master.service's TimeoutStopSec
            covers deploy/config/master.toml's shutdown-drain-ms (default
            5000) plus 10 s for the stop (else every systemctl stop ends in
            SIGKILL, no clean shutdown).
  yaml      Debian's yamllint --strict with deploy/yamllint.yaml on
            deploy/k8s/*.yaml, deploy/config/*.yaml, examples/*/*.yaml and the
            config itself.
  probes    every container of deploy/k8s/*.yaml that runs det-master has
            startup, readiness and liveness probes doing httpGet on its
            http-port, scheme HTTPS exactly when its ConfigMap's master.toml
            sets tls-cert: readiness of /healthz or /api/v1/health, startup and
            liveness (which restart the container) of /livez only, never the
            database check (a restart would lose a deleted det.db for good);
            and the pod's terminationGracePeriodSeconds (default 30) covers
            the ConfigMap's shutdown-drain-ms (default 5000) plus 10 s.

A missing tool (systemd-analyze, yamllint, Python's yaml module) is a failure
naming the Debian package, never a skip. --selftest breaks a copy of the
files in the ways above and checks each check fails. Exit 0: all pass; 1: a
check failed (each problem printed as FILE: what is wrong); 2: bad usage.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

UNIT_DIRS = ["/usr/lib/systemd/system", "/lib/systemd/system"]
HEALTH_PATHS = {"/healthz", "/api/v1/health"}
LIVE_PATHS = {"/livez"}
# Which health paths each probe may use: the probes that restart the
# container ask the core only (/livez).
PROBES = {"startupProbe": LIVE_PATHS, "readinessProbe": HEALTH_PATHS, "livenessProbe": LIVE_PATHS}


def need_tool(name, package):
    path = shutil.which(name)
    if path is None:
        raise SystemExit("deploy_files_check: %s not found on PATH: install Debian's %s package "
                         "(deploy/install-deps.sh installs it)" % (name, package))
    return path


def unit_files(root):
    return sorted(glob.glob(os.path.join(root, "deploy/systemd/*.service")))


def parse_unit(path):
    """{section: {key: value}} of a systemd unit (last assignment wins)."""
    sections, current = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            m = re.fullmatch(r"\[(.+)\]", line)
            if m:
                current = sections.setdefault(m.group(1), {})
            elif "=" in line and current is not None:
                key, value = line.split("=", 1)
                current[key.strip()] = value.strip()
    return sections


def seconds(value):
    """A systemd time span ("5", "5s", "10min", "1h") in seconds; None if unknown."""
    m = re.fullmatch(r"(\d+)\s*(s|sec|min|m|h)?", value or "")
    if not m:
        return None
    return int(m.group(1)) * {None: 1, "s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600}[m.group(2)]


def check_restart_policy(path, problems):
    rel = os.path.basename(path)
    unit = parse_unit(path)
    service, head = unit.get("Service", {}), unit.get("Unit", {})
    if service.get("Restart") not in ("on-failure", "always"):
        problems.append("%s: [Service] Restart= must be on-failure (got %r)" % (rel, service.get("Restart")))
    restart_sec = seconds(service.get("RestartSec"))
    interval = seconds(head.get("StartLimitIntervalSec"))
    burst = head.get("StartLimitBurst")
    if restart_sec is None or restart_sec < 1:
        problems.append("%s: [Service] RestartSec= must be a delay of at least 1 s" % rel)
    if interval is None or burst is None or not burst.isdigit():
        problems.append("%s: [Unit] needs StartLimitIntervalSec= and StartLimitBurst= (a bound on restarts)" % rel)
    elif restart_sec is not None and int(burst) * restart_sec >= interval:
        problems.append("%s: StartLimitBurst=%s * RestartSec=%ss >= StartLimitIntervalSec=%ss: the limit never "
                        "trips; lower the burst or lengthen the interval" % (rel, burst, restart_sec, interval))


def exec_binaries(path):
    out = []
    for key, value in parse_unit(path).get("Service", {}).items():
        if key.startswith("Exec") and value:
            out.append(value.split()[0].lstrip("-@+!:"))
    return out


def verify_units(units, problems):
    """systemd-analyze verify in a throwaway root holding the units as shipped."""
    analyze = need_tool("systemd-analyze", "systemd")
    system_dir = next((d for d in UNIT_DIRS if os.path.isfile(os.path.join(d, "sysinit.target"))), None)
    if system_dir is None:
        raise SystemExit("deploy_files_check: no systemd unit tree (%s): install Debian's systemd package"
                         % " or ".join(UNIT_DIRS))
    with tempfile.TemporaryDirectory(prefix="det-units-") as root:
        shutil.copytree(system_dir, os.path.join(root, "usr/lib/systemd/system"), symlinks=True)
        etc = os.path.join(root, "etc/systemd/system")
        os.makedirs(etc)
        for unit in units:
            shutil.copy(unit, etc)
            for binary in exec_binaries(unit):
                if not binary.startswith("/"):
                    problems.append("%s: Exec path %r is not absolute" % (os.path.basename(unit), binary))
                    continue
                stub = os.path.join(root, binary.lstrip("/"))
                os.makedirs(os.path.dirname(stub), exist_ok=True)
                with open(stub, "w") as f:
                    f.write("#!/bin/sh\nexit 0\n")
                os.chmod(stub, 0o755)
        names = [os.path.basename(u) for u in units]
        r = subprocess.run([analyze, "verify", "--root=" + root, "--man=no"] + names,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        out = r.stdout.replace(root, "").strip()
        if r.returncode != 0 or out:
            problems.append("systemd-analyze verify %s (exit %d):\n  %s"
                            % (" ".join(names), r.returncode, out.replace("\n", "\n  ")))


def toml_drain_ms(path):
    """shutdown-drain-ms set in the TOML file `path` (det-master's default 5000 when unset)."""
    with open(path, encoding="utf-8") as f:
        m = re.search(r"^\s*shutdown-drain-ms\s*=\s*(\d+)", f.read(), re.M)
    return int(m.group(1)) if m else 5000


def check_stop_timeout(root, problems):
    """det-master.service waits for the drain of the shipped master.toml plus 10 s before SIGKILL."""
    unit = os.path.join(root, "deploy/systemd/det-master.service")
    if not os.path.isfile(unit):
        problems.append("deploy/systemd/det-master.service is missing")
        return
    drain_ms = toml_drain_ms(os.path.join(root, "deploy/config/master.toml"))
    stop = seconds(parse_unit(unit).get("Service", {}).get("TimeoutStopSec"))
    if stop is None or stop * 1000 < drain_ms + 10000:
        problems.append("det-master.service: TimeoutStopSec %s s does not cover deploy/config/master.toml's "
                        "shutdown-drain-ms %d plus 10 s for the stop (systemd would SIGKILL the master): raise "
                        "TimeoutStopSec or shorten the drain" % (stop, drain_ms))


def check_units(root, problems):
    units = unit_files(root)
    if not units:
        problems.append("deploy/systemd: no *.service files")
        return
    verify_units(units, problems)
    for unit in units:
        check_restart_policy(unit, problems)
    check_stop_timeout(root, problems)


def yaml_files(root):
    files = []
    for pattern in ["deploy/k8s/*.yaml", "deploy/config/*.yaml", "examples/*/*.yaml"]:
        files += sorted(glob.glob(os.path.join(root, pattern)))
    return files + [os.path.join(root, "deploy/yamllint.yaml")]


def check_yaml(root, problems):
    yamllint = need_tool("yamllint", "yamllint")
    files = yaml_files(root)
    r = subprocess.run([yamllint, "--strict", "-f", "parsable", "-c", os.path.join(root, "deploy/yamllint.yaml")]
                       + files, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    if r.returncode != 0:
        problems.append("yamllint --strict -c deploy/yamllint.yaml (exit %d):\n  %s"
                        % (r.returncode, r.stdout.replace(root + "/", "").strip().replace("\n", "\n  ")))


def load_yaml_module():
    try:
        import yaml  # noqa: PLC0415 (Debian's python3-yaml, a dependency of yamllint)
    except ImportError:
        raise SystemExit("deploy_files_check: Python's yaml module is missing: install Debian's python3-yaml")
    return yaml


def master_tls(docs):
    """Whether a ConfigMap's master.toml in `docs` sets tls-cert."""
    for d in docs:
        if d.get("kind") == "ConfigMap":
            toml = (d.get("data") or {}).get("master.toml", "")
            if re.search(r"^\s*tls-cert\s*=", toml, re.M):
                return True
    return False


def master_drain_ms(docs):
    """shutdown-drain-ms of a ConfigMap's master.toml in `docs` (det-master's default 5000 when unset)."""
    for d in docs:
        if d.get("kind") == "ConfigMap":
            m = re.search(r"^\s*shutdown-drain-ms\s*=\s*(\d+)", (d.get("data") or {}).get("master.toml", ""), re.M)
            if m:
                return int(m.group(1))
    return 5000


def check_grace(rel, spec, drain_ms, problems):
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if not isinstance(grace, int) or grace * 1000 < drain_ms + 10000:
        problems.append("%s: terminationGracePeriodSeconds %r does not cover shutdown-drain-ms %d plus 10 s for the "
                        "stop: raise it or shorten the drain" % (rel, grace, drain_ms))


def check_container_probes(rel, c, tls, problems):
    ports = {p.get("containerPort") for p in c.get("ports", [])}
    for kind, paths in PROBES.items():
        get = (c.get(kind) or {}).get("httpGet")
        where = "%s: container %s: %s" % (rel, c.get("name"), kind)
        want_path = sorted(paths)[-1]
        if not get:
            problems.append("%s is missing: add an httpGet of %s on the http-port" % (where, want_path))
            continue
        if get.get("path") in HEALTH_PATHS and paths == LIVE_PATHS:
            problems.append("%s: path %r checks the database: a failure restarts the container, which cannot bring "
                            "back a deleted det.db and loses what the master still holds; use /livez"
                            % (where, get.get("path")))
        elif get.get("path") not in paths:
            problems.append("%s: path %r is not the health check (%s)" % (where, get.get("path"), want_path))
        if get.get("port") not in ports:
            problems.append("%s: port %r is none of the container's ports %s" % (where, get.get("port"), sorted(ports)))
        want = "HTTPS" if tls else "HTTP"
        if get.get("scheme", "HTTP") != want:
            problems.append("%s: scheme %s, but the master serves %s (tls-cert %s in master.toml)"
                            % (where, get.get("scheme", "HTTP"), want, "set" if tls else "unset"))


def check_probes(root, problems):
    yaml = load_yaml_module()
    masters = 0
    for path in sorted(glob.glob(os.path.join(root, "deploy/k8s/*.yaml"))):
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            try:
                docs = [d for d in yaml.safe_load_all(f) if d]
            except yaml.YAMLError as e:
                problems.append("%s: does not parse: %s" % (rel, e))
                continue
        tls = master_tls(docs)
        for d in docs:
            spec = ((d.get("spec") or {}).get("template") or {}).get("spec") or {}
            for c in spec.get("containers", []):
                if os.path.basename(str((c.get("command") or [""])[0])) == "det-master":
                    masters += 1
                    check_container_probes(rel, c, tls, problems)
                    check_grace(rel, spec, master_drain_ms(docs), problems)
    if masters == 0:
        problems.append("deploy/k8s: no container runs det-master")


CHECKS = {"units": check_units, "yaml": check_yaml, "probes": check_probes}


def run_checks(root):
    problems = []
    for name, check in CHECKS.items():
        before = len(problems)
        check(root, problems)
        print("deploy_files_check: %-6s %s" % (name, "ok" if len(problems) == before else "FAILED"))
    return problems


def edit(path, old, new):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if old not in text:
        raise SystemExit("selftest: %r not in %s: update the selftest" % (old, path))
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new, 1))


# (what is broken, file, old text, new text, a phrase the problem must contain)
BREAKAGES = [
    ("a typo'd unit key", "deploy/systemd/det-master.service", "RestartSec=", "RestartSecc=", "RestartSecc"),
    ("no restart limit", "deploy/systemd/det-agent.service", "StartLimitBurst=5", "", "StartLimitBurst"),
    ("a limit that never trips", "deploy/systemd/det-agent.service", "StartLimitBurst=5", "StartLimitBurst=500",
     "never trips"),
    ("a unit section typo", "deploy/systemd/det-agent.service", "[Install]", "[Instal]", "Instal"),
    ("bad YAML indentation", "deploy/k8s/agents.yaml", "  name: det-agent\n", "   name: det-agent\n", "agents.yaml"),
    ("trailing spaces", "deploy/config/slurm.yaml", "\n", "  \n", "trailing-spaces"),
    ("a probe on the wrong path", "deploy/k8s/master.yaml", "path: /healthz", "path: /api/v1/master",
     "not the health check"),
    ("a liveness probe on the database check", "deploy/k8s/master.yaml", "restarted after a minute of a wedged core\n"
     "            httpGet:\n              path: /livez", "restarted\n            httpGet:\n              path: /healthz",
     "livenessProbe: path '/healthz' checks the database"),
    ("a drain longer than the grace period", "deploy/k8s/master.yaml", "shutdown-drain-ms = 5000",
     "shutdown-drain-ms = 25000", "does not cover shutdown-drain-ms 25000"),
    ("a drain longer than the unit's stop timeout", "deploy/config/master.toml", 'data-dir = "/var/lib/det"\n',
     'data-dir = "/var/lib/det"\nshutdown-drain-ms = 25000\n', "does not cover deploy/config/master.toml's "
     "shutdown-drain-ms 25000"),
    ("a stop timeout shorter than the drain", "deploy/systemd/det-master.service", "TimeoutStopSec=30",
     "TimeoutStopSec=12", "TimeoutStopSec 12 s does not cover"),
    ("a missing liveness probe", "deploy/k8s/master.yaml", "livenessProbe:", "livenessProbeX:",
     "livenessProbe is missing"),
    ("TLS on without HTTPS probes", "deploy/k8s/master.yaml", 'host = "0.0.0.0"',
     'host = "0.0.0.0"\n    tls-cert = "/etc/det/tls/cert.pem"', "scheme HTTP, but the master serves HTTPS"),
]


def selftest(root):
    problems = run_checks(root)
    if problems:
        print("selftest: the shipped files must pass first:\n" + "\n".join(problems))
        return 1
    failed = 0
    for what, rel, old, new, phrase in BREAKAGES:
        with tempfile.TemporaryDirectory(prefix="det-deploy-selftest-") as tmp:
            for d in ["deploy", "examples"]:
                shutil.copytree(os.path.join(root, d), os.path.join(tmp, d), symlinks=True)
            edit(os.path.join(tmp, rel), old, new)
            found = run_checks(tmp)
        ok = any(phrase in p for p in found)
        print("selftest: %s (%s): %s" % (what, rel, "caught" if ok else "NOT CAUGHT"))
        if not ok:
            failed += 1
            print("  problems were:\n  " + "\n  ".join(found or ["(none)"]))
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="the repository root")
    ap.add_argument("--selftest", action="store_true", help="check that broken copies fail")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    if args.selftest:
        return selftest(root)
    problems = run_checks(root)
    for p in problems:
        print(p)
    print("deploy_files_check: %s" % ("%d problem(s)" % len(problems) if problems else "ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
