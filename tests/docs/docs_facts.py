"""What the code says, for the docs checker (docs_check.py).

Facts come from four places:
  * det_docs_facts (tests/docs/docs_facts.cc): config fields, REST routes and
    the API's services with their proto comments, as JSON.
  * `--help` of det-master, det-agent and det-cli (every subcommand,
    recursively), parsed from CLI11's help layout: an entry is two spaces, a
    name column 30 characters wide (longer names put the description on the
    next line, indented 30), then the description.
  * Environment variables: every string literal "DET_NAME" (or "DET_NAME=...")
    in the *.cc/*.h files of agent/, master/, cli/, common/ and trial_runtime/
    (tests, *_test.cc, fuzz/, bench/ and examples/ excluded): the variables
    det-cpp reads and the ones it sets for trial processes; and every
    $DET_NAME / ${DET_NAME...} that deploy/*.sh reads.
  * Exit codes: `inline constexpr int kExitName = N;` in common/exit_codes.h.
The binaries run with a fixed environment (PATH and LANG=C only) and argv[0]
set to their plain name, so the help text does not depend on who runs them.
"""

import json
import os
import re
import subprocess

HELP_COLUMN = 30
ENV_SOURCE_DIRS = ("agent", "master", "cli", "common", "trial_runtime")
EXIT_CODES_FILE = "common/exit_codes.h"
MAX_SOURCE_BYTES = 4 << 20


class FactsError(Exception):
    """A tool failed or printed something this parser does not understand."""


def run_tool(path, args, name=None):
    """stdout of `path args...` run with argv[0] = name (default: basename)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C"}
    argv0 = name or os.path.basename(path)
    try:
        p = subprocess.run([argv0] + list(args), executable=path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60, check=False)
    except OSError as e:
        raise FactsError("cannot run %s: %s" % (path, e))
    if p.returncode != 0:
        raise FactsError("%s %s exited %d: %s" % (argv0, " ".join(args), p.returncode,
                                                  p.stderr.decode(errors="replace").strip()))
    return p.stdout.decode(errors="replace")


def tool_facts(facts_tool, descriptor_set):
    """The JSON object det_docs_facts prints (see docs_facts.cc)."""
    out = run_tool(facts_tool, ["--descriptor-set", descriptor_set])
    try:
        return json.loads(out)
    except ValueError as e:
        raise FactsError("det_docs_facts printed no JSON: %s" % e)


# ------------------------------------------------------------- CLI11 help

def _is_continuation(line):
    return len(line) > HELP_COLUMN and line[:HELP_COLUMN].strip() == "" and line[HELP_COLUMN] != " "


def _split_entry(lines, i):
    """(spec, description, next index) of the help entry starting at lines[i]."""
    line = lines[i]
    nxt = lines[i + 1] if i + 1 < len(lines) else ""
    w = HELP_COLUMN
    if len(line) > w and line[w - 2:w] == "  " and line[w] != " ":
        spec, desc = line[2:w].strip(), [line[w:]]
    elif len(line) > w and line[w - 1] == " " and line[w] != " " and not _is_continuation(nxt):
        spec, desc = line[2:w].strip(), [line[w:]]
    else:
        spec, desc = line.strip(), []
    i += 1
    while i < len(lines) and _is_continuation(lines[i]):
        desc.append(lines[i][w:])
        i += 1
    return spec, "\n".join(desc).strip(), i


def parse_help(text):
    """{'description', 'usage', 'sections': {name: [(spec, description)]}}
    of one CLI11 help text; sections are "Options", "Positionals",
    "Subcommands" (as the help names them)."""
    lines = text.rstrip("\n").split("\n")
    out = {"description": "", "usage": "", "sections": {}}
    i, section, head = 0, None, []
    while i < len(lines):
        line = lines[i]
        if line.startswith("Usage:"):
            out["usage"] = line[len("Usage:"):].strip()
            out["description"] = "\n".join(head).strip()
        elif re.fullmatch(r"[A-Z][A-Za-z ]*:", line):
            section = line[:-1]
            out["sections"].setdefault(section, [])
        elif section and line.startswith("  ") and line[2:3] != " ":
            spec, desc, i = _split_entry(lines, i)
            out["sections"][section].append((spec, desc))
            continue
        elif not out["usage"]:
            head.append(line)
        i += 1
    if not out["usage"]:
        raise FactsError("no 'Usage:' line in help text:\n" + text)
    return out


def parse_flag(spec, description):
    """One option entry ("--data-dir TEXT=det-master-data") as a dict: names
    (all, e.g. ["-h", "--help"]), flag (the long name), value (type, with
    validators), default, repeatable, required, description."""
    first, _, rest = spec.partition(" ")
    names = first.split(",")
    longs = [n for n in names if n.startswith("--")]
    if not longs:
        raise FactsError("option without a long name: %r" % spec)
    rest = rest.strip()
    repeatable = rest.endswith(" ...") or rest == "..."
    rest = re.sub(r"\s*\.\.\.$", "", rest)
    required = rest.endswith("REQUIRED")
    rest = re.sub(r"\s*REQUIRED$", "", rest)
    value, _, default = rest.partition("=")
    return {"names": names, "flag": longs[0], "value": value.strip(), "default": default.strip(),
            "repeatable": repeatable, "required": required, "description": description}


def daemon_help(binary, name):
    """The parsed --help of det-master or det-agent, with its flags."""
    text = run_tool(binary, ["--help"], name)
    parsed = parse_help(text)
    parsed["name"] = name
    parsed["text"] = text
    parsed["flags"] = [parse_flag(s, d) for s, d in parsed["sections"].get("Options", [])]
    if not parsed["flags"]:
        raise FactsError("%s --help lists no options" % name)
    return parsed


def cli_commands(binary, max_commands=500):
    """Every det-cli command, depth first in help order: dicts with path
    ("det-cli experiment create"), summary (from the parent's list) and the
    parsed help."""
    out = []

    def visit(words, summary, aliases):
        if len(out) >= max_commands:
            raise FactsError("more than %d det-cli commands" % max_commands)
        text = run_tool(binary, words + ["--help"], "det-cli")
        parsed = parse_help(text)
        path = " ".join(["det-cli"] + words)
        if parsed["usage"].split(" [")[0].split(" SUBCOMMAND")[0] != path:
            raise FactsError("%s --help shows the usage %r, not the command's own" % (path, parsed["usage"]))
        out.append({"path": path, "words": words, "summary": summary, "aliases": aliases, "help": parsed,
                    "text": text})
        for spec, desc in parsed["sections"].get("Subcommands", []):
            names = [n.strip() for n in spec.split(",")]
            visit(words + [names[0]], desc, names[1:])

    visit([], "", [])
    return out


# ------------------------------------------------------------ source scans

def _read(path):
    with open(path, "rb") as f:
        data = f.read(MAX_SOURCE_BYTES + 1)
    if len(data) > MAX_SOURCE_BYTES:
        raise FactsError("%s: larger than %d bytes" % (path, MAX_SOURCE_BYTES))
    return data.decode(errors="replace")


def env_vars(root):
    """{name: [files]} of the DET_* variables the code and deploy/*.sh use."""
    found = {}
    for top in ENV_SOURCE_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(filenames):
                if not f.endswith((".cc", ".h")) or f.endswith(("_test.cc", "_test.h")):
                    continue
                path = os.path.join(dirpath, f)
                for m in re.finditer(r"\"(DET_[A-Z0-9_]+)[\"=]", _read(path)):
                    found.setdefault(m.group(1), set()).add(os.path.relpath(path, root))
    deploy = os.path.join(root, "deploy")
    for f in sorted(os.listdir(deploy)) if os.path.isdir(deploy) else []:
        if f.endswith(".sh"):
            for m in re.finditer(r"\$\{?(DET_[A-Z0-9_]+)", _read(os.path.join(deploy, f))):
                found.setdefault(m.group(1), set()).add("deploy/" + f)
    return {k: sorted(v) for k, v in sorted(found.items())}


def exit_codes(root):
    """[(value, constant, comment)] of common/exit_codes.h, in file order."""
    text = _read(os.path.join(root, EXIT_CODES_FILE))
    out = []
    for m in re.finditer(r"((?:^//[^\n]*\n)*)^inline constexpr int (kExit\w+) = (\d+);", text, re.M):
        comment = " ".join(l[2:].strip() for l in m.group(1).strip().split("\n") if l)
        out.append((int(m.group(3)), m.group(2), comment))
    if not out:
        raise FactsError("%s: no `inline constexpr int kExit... = N;`" % EXIT_CODES_FILE)
    return out


def gather(args):
    """Every fact, from the tools named in `args` and the tree at args.root."""
    facts = tool_facts(args.facts_tool, args.descriptor_set)
    facts["master"] = daemon_help(args.master, "det-master")
    facts["agent"] = daemon_help(args.agent, "det-agent")
    facts["cli"] = cli_commands(args.cli)
    facts["env"] = env_vars(args.root)
    facts["exit_codes"] = exit_codes(args.root)
    return facts
