#!/usr/bin/env python3
"""docs_check: docs that cannot drift from the code.

  python3 tests/docs/docs_check.py --root . --facts-tool build/bin/det_docs_facts \\
      --descriptor-set build/tests/docs/det_api_v1.desc --master build/bin/det-master \\
      --agent build/bin/det-agent --cli build/bin/det-cli [--check LIST] [--regen] [--fix]

(ctest -R docs_check runs it; `cmake --build build --target docs_regen` runs
it with --regen.) Exit status 0 when every selected check passes, 1 when one
fails (each problem printed as FILE[:LINE]: what is wrong; how to fix it), 2
for a bad command line or a tool that fails.

Checks (--check, comma-separated; default all):
  config   every field of det::ExperimentConfigFields() has a table row in
           docs/reference/experiment-config.md whose first cell is the dotted
           path in backticks; a row naming a path the parser does not know
           (first component a known top-level key) is stale.
  flags    every flag of `det-master --help` / `det-agent --help` has a row
           (first cell `--flag`) under the "## det-master" / "## det-agent"
           heading of docs/reference/master-agent.md.
  api      every RPC of proto/det/api/v1/*.proto has a heading (its name) in
           docs/reference/api.md, and every REST route the master serves
           (declared, GET /api/v1/routes, POST /api/v1/<Rpc>) appears there as
           a table row "| METHOD | `PATH` |" or a code span `METHOD PATH`.
  cli      every det-cli command (from --help, recursively) has a heading
           "det-cli ..." in docs/reference/cli.md.
  links    in README.md, CONTRIBUTING.md, bench/README.md and docs/**/*.md
           (those present; README.md and docs/ must be): every relative link
           resolves to a file or directory inside the repository, and its
           #anchor, when the target is Markdown, to a heading there (GitHub
           slugs: lower case, punctuation but '-' and '_' removed, spaces to
           '-', repeats -1, -2, ...; ATX headings only). Every back-ticked
           repository path exists: a code span outside fenced blocks with no
           space, '*', '<', '>', '{', '}', '$' or '...', made of path
           characters, whose first component is a top-level entry listed in
           REPO_TOP (a directory needs a '/' after it); a ":LINE" suffix and a
           "#anchor" are dropped first.
  includes a fenced block directly after `<!-- include: PATH -->` equals the
           file PATH (relative to the repository root) byte for byte, the
           file's final newline aside; --fix
           rewrites such blocks from the files.
  env      every DET_* variable the code uses (see docs_facts.py) appears in a
           code span of docs/reference/environment.md, and every exit code of
           common/exit_codes.h has a table row there whose first cell starts
           with the number.
  gen-api, gen-cli, gen-master-agent
           the generated page equals a fresh generation (docs_generate.py).
"""

import argparse
import difflib
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docs_facts  # noqa: E402
import docs_generate  # noqa: E402
import docs_markdown as md  # noqa: E402

REPO_TOP = ("CMakeLists.txt", "proto", "common", "master", "agent", "trial_runtime", "cli", "examples", "bench",
            "deploy", "tests", "fuzz", "docs", ".ci", "cmake", "README.md", "CONTRIBUTING.md")
OPTIONAL_PAGES = ("CONTRIBUTING.md", "bench/README.md")
CONFIG_PAGE = "docs/reference/experiment-config.md"
ENV_PAGE = "docs/reference/environment.md"
FIX = "python3 tests/docs/docs_check.py --fix"
REGEN = "regenerate: " + docs_generate.REGEN
FACT_CHECKS = ("config", "flags", "api", "cli", "env", "gen-api", "gen-cli", "gen-master-agent")
ALL_CHECKS = ("config", "flags", "api", "cli", "links", "includes", "env", "gen-api", "gen-cli", "gen-master-agent")
MAX_PAGE_BYTES = 2 << 20
MAX_INCLUDE_BYTES = 1 << 20


class Problems:
    """The problems found, as "FILE[:LINE]: message" lines."""

    def __init__(self):
        self.found = []

    def add(self, rel, line, message):
        self.found.append((rel, line, message))

    @property
    def items(self):
        """Sorted by file and line, repeats dropped."""
        ordered = sorted(dict.fromkeys(self.found), key=lambda p: (p[0], p[1]))
        return ["%s%s: %s" % (rel, ":%d" % line if line else "", msg) for rel, line, msg in ordered]


def read_text(path, limit):
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError("larger than %d bytes" % limit)
    return data.decode("utf-8", errors="replace")


def doc_pages(root, problems):
    """{relative path: Page} of the pages the link checks read."""
    rels = ["README.md"] + [p for p in OPTIONAL_PAGES if os.path.isfile(os.path.join(root, p))]
    docs = os.path.join(root, "docs")
    if not os.path.isdir(docs):
        problems.add("docs", 0, "missing: the docs tree (docs/index.md, docs/guides, docs/reference, ...)")
    for dirpath, dirnames, filenames in os.walk(docs):
        dirnames.sort()
        rels += [os.path.relpath(os.path.join(dirpath, f), root) for f in sorted(filenames) if f.endswith(".md")]
    pages = {}
    for rel in rels:
        try:
            pages[rel] = md.Page(rel, read_text(os.path.join(root, rel), MAX_PAGE_BYTES))
        except (OSError, ValueError) as e:
            problems.add(rel, 0, "unreadable: %s" % e)
    return pages


def load_page(root, rel, problems, why):
    try:
        return md.Page(rel, read_text(os.path.join(root, rel), MAX_PAGE_BYTES))
    except (OSError, ValueError) as e:
        problems.add(rel, 0, "missing or unreadable (%s): %s" % (e.__class__.__name__, why))
        return None


def code_first_cells(page, first=0, last=None):
    """{first cell without backticks: line} of table rows (on lines first <
    line < last) whose first cell is one code span."""
    out = {}
    for n, cells in md.rows(page):
        if first < n and (last is None or n < last) and cells and re.fullmatch(r"`+[^`]+`+", cells[0]):
            out.setdefault(md.unquote_code(cells[0]), n)
    return out


# ------------------------------------------------------------------ checks

def check_config(root, facts, problems):
    fields = facts["config_fields"]
    why = "it documents the %d config fields of det::ExperimentConfigFields() (common/config_fields.cc)" % len(fields)
    page = load_page(root, CONFIG_PAGE, problems, why)
    if page is None:
        return
    rows = code_first_cells(page)
    for f in fields:
        if f["path"] not in rows:
            problems.add(CONFIG_PAGE, 0, "config field `%s` is not documented: add a table row whose first cell is "
                         "`%s` (the parser knows it: common/config_fields.cc)" % (f["path"], f["path"]))
    known = {f["path"] for f in fields}
    subtrees = [f["path"] + "." for f in fields if f["subtree"]]
    tops = {p.split(".")[0] for p in known}
    for path, n in sorted(rows.items(), key=lambda kv: kv[1]):
        if not re.fullmatch(r"[a-z_][a-z0-9_]*(\.[a-z0-9_]+)*", path) or path.split(".")[0] not in tops:
            continue
        if path not in known and not any(path.startswith(s) for s in subtrees):
            problems.add(CONFIG_PAGE, n, "`%s` is no config field the parser knows (common/config_fields.cc): fix "
                         "the path or remove the row" % path)


def _section_rows(page, title):
    """{first cell: line} of code-span first cells under the level-2 heading
    `title`, up to the next heading of level 1 or 2; None without one."""
    hs = md.headings(page)
    start = next((n for n, lvl, t in hs if lvl == 2 and t == title), None)
    if start is None:
        return None
    end = next((n for n, lvl, _ in hs if n > start and lvl <= 2), len(page.lines) + 1)
    return code_first_cells(page, start, end)


def check_flags(root, facts, problems):
    rel = docs_generate.PAGES["master-agent"]
    page = load_page(root, rel, problems, "the det-master and det-agent flags; " + REGEN)
    if page is None:
        return
    for d in (facts["master"], facts["agent"]):
        rows = _section_rows(page, d["name"])
        if rows is None:
            problems.add(rel, 0, "no '## %s' heading for its %d flags; %s" % (d["name"], len(d["flags"]), REGEN))
            continue
        for f in d["flags"]:
            if f["flag"] not in rows:
                problems.add(rel, 0, "%s flag `%s` (%s --help) is not documented under '## %s'; %s"
                             % (d["name"], f["flag"], d["name"], d["name"], REGEN))


def documented_routes(page):
    """{"METHOD PATH"} from table rows and `METHOD PATH` code spans."""
    out = set()
    methods = r"(GET|POST|PATCH|PUT|DELETE|HEAD)"
    for _, cells in md.rows(page):
        if len(cells) >= 2 and re.fullmatch(methods, cells[0]):
            out.add("%s %s" % (cells[0], md.unquote_code(cells[1])))
    for _, line in page.outside():
        for span in md.code_spans(line):
            if re.fullmatch(methods + r" /\S+", span):
                out.add(span)
    return out


def check_api(root, facts, problems):
    rel = docs_generate.PAGES["api"]
    page = load_page(root, rel, problems, "the API reference; " + REGEN)
    if page is None:
        return
    titles = {t for _, _, t in md.headings(page)}
    for f in facts["files"]:
        for s in f["services"]:
            for m in s["methods"]:
                if m["name"] not in titles:
                    problems.add(rel, 0, "RPC %s.%s (proto/%s) has no heading '%s'; %s"
                                 % (s["full_name"], m["name"], f["name"], m["name"], REGEN))
    routes = documented_routes(page)
    for r in facts["routes"]:
        key = "%s %s" % (r["method"], r["path"])
        if key not in routes:
            problems.add(rel, 0, "REST route `%s` (RPC %s) is not documented; %s" % (key, r["rpc"] or "none", REGEN))


def check_cli(root, facts, problems):
    rel = docs_generate.PAGES["cli"]
    page = load_page(root, rel, problems, "the det-cli reference; " + REGEN)
    if page is None:
        return
    titles = {t for _, _, t in md.headings(page)}
    for cmd in facts["cli"]:
        if cmd["path"] not in titles:
            parent = " ".join(cmd["path"].split()[:-1]) or "det-cli"
            problems.add(rel, 0, "command `%s` (%s --help lists it) has no heading '%s'; %s"
                         % (cmd["path"], parent, cmd["path"], REGEN))


def check_env(root, facts, problems):
    page = load_page(root, ENV_PAGE, problems, "it documents %d environment variables and %d exit codes"
                     % (len(facts["env"]), len(facts["exit_codes"])))
    if page is None:
        return
    spans = " ".join(s for _, line in page.outside() for s in md.code_spans(line))
    for name, files in facts["env"].items():
        if not re.search(r"\b%s\b" % re.escape(name), spans):
            problems.add(ENV_PAGE, 0, "environment variable `%s` (used in %s) is not documented: mention it in "
                         "backticks" % (name, ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")))
    firsts = [md.unquote_code(cells[0]) for _, cells in md.rows(page) if cells]
    for value, const, _ in facts["exit_codes"]:
        if not any(re.match(r"`?%d\b" % value, c) for c in firsts):
            problems.add(ENV_PAGE, 0, "exit code %d (%s, common/exit_codes.h) is not documented: add a table row "
                         "whose first cell is `%d`" % (value, const, value))


# ------------------------------------------------------------------- links

def inside_root(root, path):
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return real == real_root or real.startswith(real_root + os.sep)


def _check_link(root, pages, page, n, dest, problems):
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", dest) or dest.startswith("//"):
        return  # http:, https:, mailto:, ...
    target, _, anchor = dest.partition("#")
    target = re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), target.split("?")[0])
    if not target:
        rel = page.rel
    elif target.startswith("/"):
        rel = os.path.normpath(target.lstrip("/"))
    else:
        rel = os.path.normpath(os.path.join(os.path.dirname(page.rel), target))
    path = os.path.join(root, rel)
    if rel.startswith("..") or not inside_root(root, path):
        problems.add(page.rel, n, "link `%s` points outside the repository" % dest)
        return
    if not os.path.exists(path):
        problems.add(page.rel, n, "link `%s`: no file or directory %s; fix the link or create the target" % (dest, rel))
        return
    if not anchor or not rel.endswith(".md") or not os.path.isfile(path):
        return
    target_page = pages.get(rel)
    if target_page is None:
        try:
            target_page = pages[rel] = md.Page(rel, read_text(path, MAX_PAGE_BYTES))
        except (OSError, ValueError) as e:
            problems.add(page.rel, n, "link `%s`: cannot read %s: %s" % (dest, rel, e))
            return
    if anchor not in md.anchors(target_page):
        problems.add(page.rel, n, "link `%s`: %s has no heading with anchor #%s; fix the anchor (GitHub slug of "
                     "the heading) or the heading" % (dest, rel, anchor))


def repo_path_token(span):
    """The repository path a code span names, or None (see the header)."""
    if re.search(r"[\s*<>{}$]|\.\.\.", span):
        return None
    token = re.sub(r":\d+(-\d+)?$", "", span.split("#")[0])
    if not re.fullmatch(r"[A-Za-z0-9_.+\-/]+", token):
        return None
    first = token.split("/")[0]
    if first not in REPO_TOP or ("/" not in token and first not in ("CMakeLists.txt", "README.md", "CONTRIBUTING.md")):
        return None
    return token


def check_links(root, problems):
    pages = doc_pages(root, problems)
    for rel in sorted(pages):
        page = pages[rel]
        for n, dest in md.links(page):
            _check_link(root, pages, page, n, dest, problems)
        for n, line in page.outside():
            for span in md.code_spans(line):
                token = repo_path_token(span)
                if token and not os.path.exists(os.path.join(root, token.rstrip("/"))):
                    problems.add(rel, n, "`%s` names no file or directory of the repository; fix the path" % span)


# ---------------------------------------------------------------- includes

def _include_text(root, rel):
    """The file an include names, or (None, why)."""
    if os.path.isabs(rel) or ".." in rel.split("/") or not inside_root(root, os.path.join(root, rel)):
        return None, "must be a path inside the repository, relative to its root"
    path = os.path.join(root, rel)
    if not os.path.isfile(path):
        return None, "no such file"
    try:
        return read_text(path, MAX_INCLUDE_BYTES), None
    except (OSError, ValueError) as e:
        return None, str(e)


def _block_diff(block_lines, text):
    want = text[:-1].split("\n") if text.endswith("\n") else text.split("\n")
    for i in range(max(len(want), len(block_lines))):
        w = want[i] if i < len(want) else "<end of file>"
        b = block_lines[i] if i < len(block_lines) else "<end of block>"
        if w != b:
            return "first difference at block line %d: the file has %r, the block %r" % (i + 1, w, b)
    return None


def check_includes(root, problems, fix=False):
    """Checks (or with `fix`, rewrites) the include blocks; returns the
    number of blocks rewritten."""
    pages = doc_pages(root, problems)
    fixed = 0
    for rel in sorted(pages):
        page = pages[rel]
        lines = list(page.lines)
        for comment, inc, open_line, close in reversed(md.includes(page)):
            if open_line is None or close is None:
                problems.add(rel, comment, "<!-- include: %s --> must be followed directly by a closed fenced block"
                             % inc)
                continue
            text, why = _include_text(root, inc)
            if text is None:
                problems.add(rel, comment, "<!-- include: %s -->: %s" % (inc, why))
                continue
            diff = _block_diff(lines[open_line:close - 1], text)
            if diff is None:
                continue
            if not fix:
                problems.add(rel, open_line, "included block differs from %s (%s); fix: %s" % (inc, diff, FIX))
                continue
            body = (text[:-1] if text.endswith("\n") else text).split("\n")
            opening, closing = lines[open_line - 1], lines[close - 1]
            marker = re.match(r"\s*(`{3,}|~{3,})", opening).group(1)
            needed = md.fence_for(text, "")
            if marker[0] == "`" and len(marker) < len(needed):  # the file holds a fence of its own
                opening = needed + opening.lstrip()[len(marker):]
                closing = needed
            lines[open_line - 1:close] = [opening] + body + [closing]
            fixed += 1
        if lines != page.lines:
            with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
                f.write("\n".join(lines))
    return fixed


# --------------------------------------------------------------- generated

def check_generated(root, facts, name, problems):
    rel = docs_generate.PAGES[name]
    want = docs_generate.GENERATORS[name](facts)
    try:
        have = read_text(os.path.join(root, rel), MAX_PAGE_BYTES)
    except (OSError, ValueError):
        problems.add(rel, 0, "missing; %s" % REGEN)
        return
    if have == want:
        return
    diff = list(difflib.unified_diff(have.split("\n"), want.split("\n"), "committed", "generated", n=1,
                                     lineterm=""))
    shown = "\n    ".join(diff[:30]) + ("\n    ... (%d more diff lines)" % (len(diff) - 30) if len(diff) > 30 else "")
    problems.add(rel, 0, "differs from a fresh generation (edited by hand, or the code changed); %s\n    %s"
                 % (REGEN, shown))


def regenerate(root, facts):
    changed = []
    for rel, text in docs_generate.generate_all(facts).items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        old = None
        if os.path.exists(path):
            old = read_text(path, MAX_PAGE_BYTES)
        if old != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            changed.append(rel)
    return changed


def run_checks(root, facts, checks):
    """The problems the named checks find in the tree at `root`."""
    problems = Problems()
    for c in checks:
        if c == "config":
            check_config(root, facts, problems)
        elif c == "flags":
            check_flags(root, facts, problems)
        elif c == "api":
            check_api(root, facts, problems)
        elif c == "cli":
            check_cli(root, facts, problems)
        elif c == "links":
            check_links(root, problems)
        elif c == "includes":
            check_includes(root, problems)
        elif c == "env":
            check_env(root, facts, problems)
        elif c.startswith("gen-"):
            check_generated(root, facts, c[4:], problems)
    return problems.items


def parse_args(argv):
    p = argparse.ArgumentParser(description="Checks the docs against the code (see the header of this file).")
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                   help="the repository root (default: the one holding this script)")
    p.add_argument("--facts-tool", help="det_docs_facts")
    p.add_argument("--descriptor-set", help="protoc --include_source_info descriptor set of proto/det/api/v1")
    p.add_argument("--master", help="det-master")
    p.add_argument("--agent", help="det-agent")
    p.add_argument("--cli", help="det-cli")
    p.add_argument("--check", default=",".join(ALL_CHECKS), help="comma-separated checks (default: all)")
    p.add_argument("--regen", action="store_true", help="rewrite the generated pages, then check")
    p.add_argument("--fix", action="store_true", help="rewrite the <!-- include: --> blocks, then check")
    args = p.parse_args(argv)
    args.checks = [c for c in args.check.split(",") if c]
    bad = [c for c in args.checks if c not in ALL_CHECKS]
    if bad:
        p.error("--check: unknown check(s) %s; known: %s" % (", ".join(bad), ", ".join(ALL_CHECKS)))
    if args.fix and not args.regen and args.check == ",".join(ALL_CHECKS):
        args.checks = ["includes"]  # --fix alone needs no build
    args.needs_facts = args.regen or any(c in FACT_CHECKS for c in args.checks)
    missing = [o for o in ("facts_tool", "descriptor_set", "master", "agent", "cli") if not getattr(args, o)]
    if args.needs_facts and missing:
        p.error("these checks need --%s (or run: ctest -R docs_check)" % ", --".join(m.replace("_", "-")
                                                                                  for m in missing))
    return args


def main(argv):
    args = parse_args(argv)
    facts = None
    if args.needs_facts:
        try:
            facts = docs_facts.gather(args)
        except docs_facts.FactsError as e:
            print("docs_check: error: %s" % e, file=sys.stderr)
            return 2
    if args.fix:
        problems = Problems()
        n = check_includes(args.root, problems, fix=True)
        print("docs_check: --fix rewrote %d include block(s)" % n)
    if args.regen:
        changed = regenerate(args.root, facts)
        print("docs_check: --regen rewrote %s" % (", ".join(changed) if changed else "nothing (up to date)"))
    items = run_checks(args.root, facts, args.checks)
    for item in items:
        print(item)
    if items:
        print("docs_check: %d problem(s) found by: %s" % (len(items), ", ".join(args.checks)))
        return 1
    print("docs_check: ok (%s)" % ", ".join(args.checks))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
