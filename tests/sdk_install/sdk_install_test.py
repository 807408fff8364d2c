#!/usr/bin/env python3
"""End-to-end tests of the Trial SDK as a user gets it (ctest label `sdk`).

  sdk_install_test.py minimal --det-cli BIN --trial SO --source-dir DIR
      examples/minimal/const.yaml trains in local mode with the tree's det-cli
      (and adaptive.yaml's first sample, as local mode runs it).
  sdk_install_test.py install --build-dir DIR
      `cmake --install` of the build tree into a temp prefix; checks what is
      installed (SONAME, RUNPATH, package files, nothing pointing into the
      build tree); then, outside the source tree, a project written by the
      INSTALLED `det-cli trial new` is built (a) with find_package(det) by the
      very command line trial new prints and (b) with the pkg-config line, and
      each trial.so trains in local mode with the INSTALLED det-cli.

Every check that fails exits 1 naming what was expected; a tool that is
missing fails too (never a skip). A temp dir per run, removed at the end
(kept when DET_KEEP_TMP=1).
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

TRIAL = "sdk_smoke"
# const.yaml's searcher.max_length.
BATCHES = 200
# CMAKE_INSTALL_LIBDIR of the build (--libdir).
LIBDIR = "lib"


class Failure(Exception):
    pass


def check(cond, message):
    if not cond:
        raise Failure(message)


def run(args, cwd=None, env=None, timeout=600, shell=False):
    """Runs a command, returns its stdout+stderr; fails on a non-zero exit."""
    shown = args if shell else " ".join(shlex.quote(a) for a in args)
    print(f"$ {shown}", flush=True)
    p = subprocess.run(args, cwd=cwd, env=env, timeout=timeout, shell=shell,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise Failure(f"exit {p.returncode}: {shown}\n{p.stdout[-6000:]}")
    return p.stdout


def need(tool):
    path = shutil.which(tool)
    check(path is not None, f"'{tool}' not found on PATH; install it (deploy/install-deps.sh)")
    return path


def clean_env(prefix=None):
    """The environment without anything that could find the build tree."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", "DESTDIR", "CMAKE_PREFIX_PATH", "PKG_CONFIG_PATH", "det_DIR")}
    if prefix:
        env["PATH"] = os.path.join(prefix, "bin") + os.pathsep + env.get("PATH", "")
    return env


def check_trained(out, what):
    check(f"completed {BATCHES} batches" in out, f"{what}: no 'completed {BATCHES} batches' in:\n{out[-4000:]}")
    m = re.search(r"best validation loss: ([0-9.eE+-]+)", out)
    check(m is not None, f"{what}: no 'best validation loss' line in:\n{out[-4000:]}")
    # Untrained, the 2-class cross-entropy is about ln 2 = 0.69.
    check(float(m.group(1)) < 0.5, f"{what}: validation loss {m.group(1)} did not fall below 0.5")


def dynamic_section(path):
    return run([need("readelf"), "-d", path])


def check_installed_files(prefix):
    lib = os.path.join(prefix, LIBDIR)
    for rel in ["bin/det-cli", "bin/det-trial", "include/det/det.h", "include/det/version.h",
                f"{LIBDIR}/cmake/det/detConfig.cmake", f"{LIBDIR}/cmake/det/detConfigVersion.cmake",
                f"{LIBDIR}/cmake/det/detTargets.cmake", f"{LIBDIR}/cmake/det/detAddTrial.cmake",
                f"{LIBDIR}/pkgconfig/det-sdk.pc"]:
        check(os.path.isfile(os.path.join(prefix, rel)), f"not installed: {rel}")
    check(not os.path.exists(os.path.join(prefix, "include/det/version.h.in")), "version.h.in was installed")
    # libdet_sdk.so -> libdet_sdk.so.0 -> libdet_sdk.so.0.X.Y, SONAME libdet_sdk.so.0.
    check(os.readlink(os.path.join(lib, "libdet_sdk.so")) == "libdet_sdk.so.0", "libdet_sdk.so is not -> .so.0")
    real = os.readlink(os.path.join(lib, "libdet_sdk.so.0"))
    check(re.fullmatch(r"libdet_sdk\.so\.0\.\d+\.\d+", real) is not None, f"libdet_sdk.so.0 -> {real}")
    check("(SONAME)             Library soname: [libdet_sdk.so.0]" in dynamic_section(os.path.join(lib, real)),
          "libdet_sdk's SONAME is not libdet_sdk.so.0")
    version_h = open(os.path.join(prefix, "include/det/version.h")).read()
    check(f'#define DET_SDK_VERSION "{real[len("libdet_sdk.so."):]}"' in version_h,
          f"det/version.h does not say the library's version {real}")
    # The installed det-trial finds the installed SDK without ldconfig.
    check(f"[$ORIGIN/../{LIBDIR}]" in dynamic_section(os.path.join(prefix, "bin/det-trial")),
          f"det-trial has no RUNPATH $ORIGIN/../{LIBDIR}")
    ldd = run([need("ldd"), os.path.join(prefix, "bin/det-trial")], env=clean_env())
    m = re.search(r"libdet_sdk\.so\.0 => (\S+)", ldd)
    check(m is not None and os.path.realpath(m.group(1)) == os.path.realpath(os.path.join(lib, real)),
          f"installed det-trial does not load {lib}/libdet_sdk.so.0: {m.group(0) if m else 'not found'}")


def check_relocatable(prefix, build_dir, source_dir):
    """No installed package file names the build or source tree."""
    for rel in [f"{LIBDIR}/cmake/det", f"{LIBDIR}/pkgconfig"]:
        for name in os.listdir(os.path.join(prefix, rel)):
            text = open(os.path.join(prefix, rel, name)).read()
            for tree in (os.path.realpath(build_dir), os.path.realpath(source_dir)):
                check(tree not in text, f"{rel}/{name} names {tree}")
    targets = open(os.path.join(prefix, LIBDIR, "cmake/det/detTargets.cmake")).read()
    check(re.search(r'INTERFACE_LINK_LIBRARIES "torch;', targets) is not None,
          "det::sdk does not link LibTorch through its imported target `torch`")


def build_with_cmake(prefix, work):
    """The project from the installed `det-cli trial new`, built and trained
    by the command line it prints (run with the installed det-cli first on PATH)."""
    env = clean_env(prefix)
    out = run([os.path.join(prefix, "bin/det-cli"), "trial", "new", TRIAL, "--dir", work], env=env)
    project = os.path.join(work, TRIAL)
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("cmake -S ")]
    check(len(lines) == 1, f"trial new printed no 'cmake -S' command:\n{out}")
    command = lines[0]
    check(f"-DCMAKE_PREFIX_PATH={prefix}" in command, f"trial new's command lacks -DCMAKE_PREFIX_PATH={prefix}")
    check(command.endswith(f"det-cli experiment create --local {project}/const.yaml {project}/build/{TRIAL}.so"),
          f"unexpected command: {command}")
    # Train in work/ (local mode writes det-output/ in the current directory).
    out = run(command + " --no-progress", cwd=work, env=env, shell=True, timeout=900)
    cache = open(os.path.join(project, "build/CMakeCache.txt")).read()
    check(f"det_DIR:PATH={prefix}/{LIBDIR}/cmake/det" in cache, "find_package(det) did not find the installed package")
    check_trained(out, "find_package(det) build")
    check("libdet_sdk.so.0" in dynamic_section(os.path.join(project, "build", TRIAL + ".so")),
          "the trial does not need libdet_sdk.so.0")
    return project


def build_with_pkg_config(prefix, project, work):
    env = clean_env(prefix)
    env["PKG_CONFIG_PATH"] = os.path.join(prefix, LIBDIR, "pkgconfig")
    flags = run([need("pkg-config"), "--cflags", "--libs", "det-sdk"], env=env).split()
    includes = [os.path.realpath(f[2:]) for f in flags if f.startswith("-I")]
    check(os.path.join(prefix, "include") in includes, f"pkg-config det-sdk gives no -I for {prefix}/include: {flags}")
    so = os.path.join(work, f"{TRIAL}_pc.so")
    run([need("g++"), "-std=c++17", "-shared", "-fPIC", os.path.join(project, TRIAL + ".cc"), "-o", so] + flags,
        env=env, timeout=900)
    out = run([os.path.join(prefix, "bin/det-cli"), "experiment", "create", "--local",
               os.path.join(project, "const.yaml"), so, "--output-dir", os.path.join(work, "pc-output"),
               "--no-progress"], cwd=work, env=env)
    check_trained(out, "pkg-config build")


def test_install(args):
    need("cmake")
    # Real paths: det-cli prints its prefix as /proc/self/exe resolves it.
    tmp = os.path.realpath(tempfile.mkdtemp(prefix="det-sdk-install-"))
    try:
        prefix = os.path.join(tmp, "prefix")
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        run([need("cmake"), "--install", args.build_dir, "--prefix", prefix], env=clean_env())
        check_installed_files(prefix)
        check_relocatable(prefix, args.build_dir, args.source_dir)
        project = build_with_cmake(prefix, work)
        build_with_pkg_config(prefix, project, work)
    finally:
        if os.environ.get("DET_KEEP_TMP") == "1":
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def test_minimal(args):
    tmp = tempfile.mkdtemp(prefix="det-minimal-")
    try:
        out = run([args.det_cli, "experiment", "create", "--local",
                   os.path.join(args.source_dir, "examples/minimal/const.yaml"), args.trial,
                   "--output-dir", os.path.join(tmp, "out"), "--no-progress"], cwd=tmp)
        check_trained(out, "examples/minimal")
        # adaptive.yaml is for a cluster; local mode trains its first
        # hyperparameter sample to max_length (320 batches), which checks
        # that the config parses and names the trial's metric.
        out = run([args.det_cli, "experiment", "create", "--local",
                   os.path.join(args.source_dir, "examples/minimal/adaptive.yaml"), args.trial,
                   "--output-dir", os.path.join(tmp, "adaptive"), "--no-progress"], cwd=tmp)
        check("completed 320 batches" in out and "best validation loss: " in out,
              f"examples/minimal/adaptive.yaml did not train 320 batches:\n{out[-4000:]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["minimal", "install"])
    parser.add_argument("--build-dir")
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--det-cli")
    parser.add_argument("--trial")
    parser.add_argument("--libdir", default="lib", help="the build's CMAKE_INSTALL_LIBDIR")
    args = parser.parse_args()
    global LIBDIR
    LIBDIR = args.libdir
    try:
        if args.mode == "install":
            check(args.build_dir, "install needs --build-dir")
            test_install(args)
        else:
            check(args.det_cli and args.trial, "minimal needs --det-cli and --trial")
            test_minimal(args)
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
