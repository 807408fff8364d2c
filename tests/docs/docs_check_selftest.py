#!/usr/bin/env python3
"""docs_check_selftest: the docs checker fails, naming the item, for each kind
of drift.

  python3 tests/docs/docs_check_selftest.py <the arguments of docs_check.py>

Builds a fixture tree in a fresh temporary directory: the repository's code
directories as symlinks (so source scans and back-ticked paths see the real
tree), the generated pages from a fresh generation, and small hand-written
pages (README.md, CONTRIBUTING.md, bench/README.md, docs/reference/
experiment-config.md and environment.md, docs/guides/page.md) that document
every fact and use every construct the checker reads. The fixture must pass
every check; then each mutation below (one at a time, the fixture restored
between them) must make the checks fail with a problem that names the
removed item. Last, docs_check.py itself runs on the fixture as a process:
exit status 0, then 1 after a snippet line is removed, then --fix, then 0.
Exit status 0 when all of that holds, 1 otherwise (each failure printed).
"""

import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docs_check  # noqa: E402
import docs_facts  # noqa: E402
import docs_generate  # noqa: E402

SNIPPET = "docs/example/snippet.txt"
SNIPPET_TEXT = "first line of the snippet\n```\n  an indented line\nlast line\n"
OWN = ("README.md", "CONTRIBUTING.md", "bench", "docs")


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()


def link_code(real_root, fixture):
    """Symlinks to the repository's entries, but the pages the fixture owns."""
    for name in sorted(os.listdir(real_root)):
        if name in OWN or name.startswith((".git", "build")):
            continue
        os.symlink(os.path.join(real_root, name), os.path.join(fixture, name))
    os.makedirs(os.path.join(fixture, "bench"))
    for name in sorted(os.listdir(os.path.join(real_root, "bench"))):
        if name != "README.md":
            os.symlink(os.path.join(real_root, "bench", name), os.path.join(fixture, "bench", name))


def first_service(facts):
    return next(s for f in facts["files"] for s in f["services"])


def hand_written_pages(facts):
    fields = ["| `%s` | %s |" % (f["path"], "unused" if f["unused_reason"] else "read") for f in facts["config_fields"]]
    env = ["- `%s`" % name for name in facts["env"]]
    codes = ["| `%d` | %s |" % (v, c) for v, c, _ in facts["exit_codes"]]
    fence = "````text"
    return {
        "README.md": "\n".join([
            "# Fixture", "",
            "See [the page](docs/guides/page.md), [its heading](docs/guides/page.md#some-heading), [the repeat]"
            "(docs/guides/page.md#some-heading-1), [an RPC](docs/reference/api.md#%s) and [below](#fixture)."
            % first_service(facts)["methods"][0]["name"].lower(),
            "The exit codes live in `common/exit_codes.h`; [web](https://example.com) is not checked.", "",
            "<!-- include: %s -->" % SNIPPET, fence] + SNIPPET_TEXT.rstrip("\n").split("\n") + ["````", ""]),
        "CONTRIBUTING.md": "# Contributing\n\nBack to the [README](README.md).\n",
        "bench/README.md": "# Benchmarks\n\nSee [the docs](../docs/guides/page.md).\n",
        "docs/guides/page.md": "# Page\n\n## Some heading\n\nText.\n\n## Some heading\n\nAgain; `deploy/` exists.\n",
        SNIPPET: SNIPPET_TEXT,
        docs_check.CONFIG_PAGE: "\n".join(["# Config", "", "| Field | Use |", "| --- | --- |"] + fields) + "\n",
        docs_check.ENV_PAGE: "\n".join(["# Environment", ""] + env + ["", "| Code | Name |", "| --- | --- |"]
                                       + codes) + "\n",
    }


def build_fixture(real_root, fixture, facts):
    link_code(real_root, fixture)
    for rel, text in hand_written_pages(facts).items():
        write(fixture, rel, text)
    docs_check.regenerate(fixture, facts)


def snapshot(fixture):
    """{relative path: text} of every regular file the fixture owns."""
    out = {}
    for top in OWN:
        base = os.path.join(fixture, top)
        if os.path.isfile(base):
            out[top] = read(fixture, top)
            continue
        for dirpath, _, filenames in os.walk(base):
            for f in filenames:
                path = os.path.join(dirpath, f)
                if not os.path.islink(path):
                    out[os.path.relpath(path, fixture)] = read(fixture, os.path.relpath(path, fixture))
    return out


def restore(fixture, saved):
    for rel in set(snapshot(fixture)) - set(saved):
        os.remove(os.path.join(fixture, rel))
    for rel, text in saved.items():
        write(fixture, rel, text)


# -------------------------------------------------------------- mutations

def edit(rel, old, new, count=1):
    """A mutation replacing `old` by `new` in `rel` (`count` times; 0: all)."""
    def apply(root):
        text = read(root, rel)
        if old not in text:
            raise AssertionError("fixture %s lacks %r" % (rel, old))
        write(root, rel, text.replace(old, new) if count == 0 else text.replace(old, new, count))
    return apply


def drop_section_row(rel, heading, first_cell):
    """A mutation removing the table row starting `| first_cell |` below `heading`."""
    def apply(root):
        lines = read(root, rel).split("\n")
        start = lines.index(heading)
        i = next(i for i in range(start, len(lines)) if lines[i].startswith("| %s |" % first_cell))
        write(root, rel, "\n".join(lines[:i] + lines[i + 1:]))
    return apply


def remove(rel):
    return lambda root: os.remove(os.path.join(root, rel))


def mutations(facts):
    """[(what, mutation, [substrings one problem must contain])]."""
    pages = docs_generate.PAGES
    field = next((f["path"] for f in facts["config_fields"] if f["path"] == "searcher.metric"),
                 facts["config_fields"][-1]["path"])
    mflag = facts["master"]["flags"][-1]["flag"]
    aflag = facts["agent"]["flags"][-1]["flag"]
    rpc = first_service(facts)["methods"][0]
    service = first_service(facts)["full_name"]
    route = next(r for r in facts["routes"] if not r["generic"] and r["rpc"])
    rkey = "%s %s" % (route["method"], route["path"])
    generic = "POST /api/v1/" + rpc["name"]
    command = facts["cli"][min(2, len(facts["cli"]) - 1)]
    cmd = command["path"]
    env = sorted(facts["env"])[0]
    code = facts["exit_codes"][-1]
    return [
        ("config field row", edit(docs_check.CONFIG_PAGE, "| `%s` |" % field, "| moved |"),
         ["config field `%s` is not documented" % field]),
        ("stale config row", edit(docs_check.CONFIG_PAGE, "| Field | Use |\n| --- | --- |\n",
                                  "| Field | Use |\n| --- | --- |\n| `searcher.no_such_field` | x |\n"),
         ["`searcher.no_such_field` is no config field"]),
        ("det-master flag", drop_section_row(pages["master-agent"], "## det-master", "`%s`" % mflag),
         ["det-master flag `%s`" % mflag]),
        ("det-agent flag", drop_section_row(pages["master-agent"], "## det-agent", "`%s`" % aflag),
         ["det-agent flag `%s`" % aflag]),
        ("RPC heading", edit(pages["api"], "\n### %s\n" % rpc["name"], "\n"),
         ["RPC %s.%s" % (service, rpc["name"])]),
        ("declared route", lambda root: [edit(pages["api"], "| %s | `%s` |" % (route["method"], route["path"]),
                                              "| x | y |")(root),
                                         edit(pages["api"], "`%s`" % rkey, "", 0)(root)],
         ["REST route `%s`" % rkey]),
        ("generic route", edit(pages["api"], "`%s`" % generic, "", 0), ["REST route `%s`" % generic]),
        ("CLI command", edit(pages["cli"], "\n%s\n" % docs_generate.cli_heading(command), "\n"),
         ["command `%s`" % cmd]),
        ("link target", remove("docs/guides/page.md"), ["README.md:", "no file or directory docs/guides/page.md"]),
        ("anchor", edit("docs/guides/page.md", "Text.\n\n## Some heading", "Text."),
         ["README.md:", "no heading with anchor #some-heading-1"]),
        ("link outside", edit("CONTRIBUTING.md", "(README.md)", "(../README.md)"), ["points outside"]),
        ("snippet line", edit("README.md", "  an indented line\n", ""), ["included block differs from " + SNIPPET]),
        ("include target", remove(SNIPPET), ["include: %s -->: no such file" % SNIPPET]),
        ("repository path", edit("README.md", "`common/exit_codes.h`", "`common/no_such_file.h`"),
         ["`common/no_such_file.h` names no file"]),
        ("environment variable", edit(docs_check.ENV_PAGE, "- `%s`\n" % env, ""),
         ["environment variable `%s`" % env]),
        ("exit code", edit(docs_check.ENV_PAGE, "| `%d` |" % code[0], "| gone |"), ["exit code %d (%s" % code[:2]]),
        ("generated page edited", edit(pages["cli"], "\n## ", "\nA hand edit.\n\n## "),
         [pages["cli"] + ": differs from a fresh generation", docs_generate.REGEN]),
    ]


def run_mutations(fixture, facts):
    failures = []
    saved = snapshot(fixture)
    for what, mutate, expect in mutations(facts):
        mutate(fixture)
        problems = docs_check.run_checks(fixture, facts, docs_check.ALL_CHECKS)
        restore(fixture, saved)
        if not any(all(e in p for e in expect) for p in problems):
            failures.append("%s: no problem contains %r; the checker said:\n  %s"
                            % (what, expect, "\n  ".join(problems) or "(nothing)"))
        else:
            print("ok: %s -> %s" % (what, next(p for p in problems if all(e in p for e in expect)).split("\n")[0]))
    return failures


def run_process(fixture, argv, checks):
    cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "docs_check.py")]
    cmd += argv_with_root(argv, fixture) + checks
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, check=False)
    return p.returncode, p.stdout.decode(errors="replace")


def argv_with_root(argv, root):
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--root":
            skip = True
        else:
            out.append(a)
    return ["--root", root] + out


def run_end_to_end(fixture, argv):
    failures = []
    rc, out = run_process(fixture, argv, [])
    if rc != 0:
        failures.append("docs_check.py on the fixture: exit %d, want 0:\n%s" % (rc, out))
    edit("README.md", "last line\n", "")(fixture)
    rc, out = run_process(fixture, argv, ["--check", "includes"])
    if rc != 1 or "included block differs from " + SNIPPET not in out:
        failures.append("docs_check.py, a snippet line removed: exit %d, want 1 naming %s:\n%s" % (rc, SNIPPET, out))
    rc, out = run_process(fixture, argv, ["--fix"])
    if rc != 0 or read(fixture, "README.md").count("last line") != 1:
        failures.append("docs_check.py --fix: exit %d, want 0 and the block restored:\n%s" % (rc, out))
    if not failures:
        print("ok: docs_check.py exits 0 on the fixture, 1 on a removed snippet line, and --fix restores it")
    return failures


def main(argv):
    args = docs_check.parse_args(argv)
    try:
        facts = docs_facts.gather(args)
    except docs_facts.FactsError as e:
        print("docs_check_selftest: error: %s" % e, file=sys.stderr)
        return 2
    fixture = tempfile.mkdtemp(prefix="docs_check_selftest.")
    try:
        build_fixture(os.path.abspath(args.root), fixture, facts)
        baseline = docs_check.run_checks(fixture, facts, docs_check.ALL_CHECKS)
        if baseline:
            print("FAIL: the unmodified fixture does not pass:\n  " + "\n  ".join(baseline))
            return 1
        print("ok: the fixture passes every check")
        failures = run_mutations(fixture, facts) + run_end_to_end(fixture, argv)
    finally:
        shutil.rmtree(fixture)
    for f in failures:
        print("FAIL: " + f)
    print("docs_check_selftest: %s" % ("%d failure(s)" % len(failures) if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
