"""The generated reference pages: docs/reference/api.md, cli.md and
master-agent.md, built from the facts of docs_facts.py. Pure functions of
the facts: the same facts give the same bytes. The hand-written parts of
each page (intros) are the templates below; edit them here, then run the
regeneration command.
"""

import re

import docs_markdown as md

REGEN = "cmake --build build --target docs_regen"
PAGES = {
    "api": "docs/reference/api.md",
    "cli": "docs/reference/cli.md",
    "master-agent": "docs/reference/master-agent.md",
}
API_PACKAGE = ".det.api.v1."


def header(title, sources):
    return ["# " + title, "",
            "_Generated from %s by `%s` (tests/docs/docs_check.py); do not edit._" % (sources, REGEN), ""]


def escape_text(text):
    """Plain text for a Markdown paragraph or table cell: '<', '>' and '|'
    escaped outside code spans, a leading '#' escaped."""
    parts = re.split(r"(`+[^`]*`+)", text)
    out = []
    for i, p in enumerate(parts):
        if i % 2 == 0:
            p = p.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
        out.append(p)
    s = "".join(out)
    return "\\" + s if s.startswith("#") else s


def comment_paragraphs(comment):
    """A proto comment as Markdown lines: each line trimmed and escaped,
    blank lines kept as paragraph breaks."""
    lines = [escape_text(l.strip()) for l in comment.strip("\n").split("\n")]
    return lines if any(lines) else []


def first_sentence(comment):
    text = " ".join(l.strip() for l in comment.strip().split("\n") if l.strip())
    m = re.match(r"(.+?\.)(\s|$)", text)
    return (m.group(1) if m else text)


def type_name(t):
    return t[len(API_PACKAGE):] if t.startswith(API_PACKAGE) else t.lstrip(".")


_DIVIDER = re.compile(r"^\s*-{3,}\s*(.*?)\s*(?:\(.*\))?\s*$")


def group_name(comment):
    """The group a divider comment opens ("---- workspaces and projects
    (workspace.proto)" -> "workspaces and projects"), or ""."""
    first = comment.strip("\n").split("\n")[0] if comment.strip() else ""
    m = _DIVIDER.match(first)
    return m.group(1) if m else ""


def method_groups(service):
    """[(group or "", comment without its divider line)] per method: a group
    starts at a divider comment detached above a method, leading it, or (for
    the first method) right after the service's opening brace. A method
    without a comment after one with a comment in its group (one comment
    above several RPCs) gets a line pointing there."""
    out = []
    commented = ""  # the last method of the group with a comment
    for i, m in enumerate(service["methods"]):
        comment = m["comment"]
        group = group_name(m["group"]) or (group_name(service.get("trailing_comment", "")) if i == 0 else "")
        if not group and group_name(comment):
            group = group_name(comment)
            comment = "\n".join(comment.strip("\n").split("\n")[1:])
        if group:
            commented = ""
        if comment.strip():
            commented = m["name"]
        elif commented:
            comment = "No comment of its own in the proto; see [%s](#%s)." % (commented, commented.lower())
        out.append((group, comment))
    return out


# ------------------------------------------------------------------ api.md

API_INTRO = """\
The master serves the API twice over one core, so the two never disagree:

- **gRPC**: the service `det.api.v1.Determined` on the master's gRPC port
  (`--grpc-port`, default 8090), defined in `proto/det/api/v1/api.proto`
  with its messages in the other files of `proto/det/api/v1/`.
- **REST/JSON** on the master's HTTP port (`--http-port`, default 8080):
  every RPC but the client-streaming ones is `POST /api/v1/<RpcName>` with
  the request as the JSON body (protobuf's JSON mapping) and the response as
  JSON; a server-streaming RPC answers newline-delimited JSON, one message per
  line. The declared routes below are resource-style paths onto the same
  RPCs (their requests come from the query string and the path, or from a
  JSON body). `GET /api/v1/routes` lists every route at run time.

Every call but `GetMaster` and `Login` needs a token from `Login`: gRPC
metadata `authorization: Bearer <token>`, the same HTTP header over REST.
The health check, `GET /api/v1/health` (also `GET /healthz`), needs none:
200 `{"status":"ok"}` while the master serves, 503 with a `reason` when not
(the deployment guide, Health checks); the gRPC port serves the
standard `grpc.health.v1.Health`.
The comment block of `api.proto` (transport, authentication, errors) is
quoted in full below.""".split("\n")


# Routes without an RPC, by path.
ROUTE_DESCRIPTIONS = {
    "/api/v1/routes": "Lists every route the master serves (declared and generic).",
    "/api/v1/health": "Whether the master is serving (also `GET /healthz`): 200 `{\"status\":\"ok\"}`, or 503 "
                      "`{\"status\":\"unavailable\",\"reason\":...}`; probes the database at most once a second.",
}


def _routes_by_rpc(facts):
    by_rpc = {}
    for r in facts["routes"]:
        by_rpc.setdefault(r["rpc"], []).append(r)
    return by_rpc


def _route_notes(route, declared):
    notes = []
    if not route["authenticated"]:
        notes.append("no token")
    d = declared.get((route["method"], route["path"]))
    if d:
        notes.append("JSON body" if d["json_body"] else "query parameters")
        if d["fixed"]:
            notes.append("sets `%s`" % d["fixed"])
        if d["caps"]:
            notes.append("caps `%s`" % d["caps"])
        if d["own_format"]:
            notes.append("answers in its own format")
    if route["streaming"]:
        notes.append("newline-delimited JSON")
    return ", ".join(notes)


def _api_routes_section(facts, summaries):
    declared = {(d["method"], d["path"]): d for d in facts["declared"]}
    out = ["## REST routes", "",
           "The declared routes, in matching order; `POST /api/v1/<RpcName>` of each RPC is listed in its section.",
           "", "| Method | Path | RPC | Notes | Description |", "| --- | --- | --- | --- | --- |"]
    for r in facts["routes"]:
        if r["generic"]:
            continue
        rpc = "[%s](#%s)" % (r["rpc"], r["rpc"].lower()) if r["rpc"] else "—"
        desc = summaries.get(r["rpc"], "") if r["rpc"] else ROUTE_DESCRIPTIONS.get(r["path"], "")
        out.append("| %s | `%s` | %s | %s | %s |" % (r["method"], r["path"], rpc, _route_notes(r, declared),
                                                   escape_text(desc)))
    return out + [""]


def _api_method(m, comment, routes):
    out = ["### " + m["name"], ""]
    arrow = "`%s` → `%s%s`" % (type_name(m["input"]), "stream " if m["server_streaming"] else "",
                             type_name(m["output"]))
    if m["client_streaming"]:
        arrow = "`stream %s` → `%s`" % (type_name(m["input"]), type_name(m["output"]))
    kind = "client streaming" if m["client_streaming"] else ("server streaming" if m["server_streaming"] else "unary")
    out += ["%s (%s)" % (arrow, kind), ""]
    if routes:
        forms = ["`%s %s`%s" % (r["method"], r["path"], "" if r["authenticated"] else " (no token)")
                 for r in routes]
        out += ["REST: " + ", ".join(forms), ""]
    else:
        out += ["REST: none (gRPC only).", ""]
    body = comment_paragraphs(comment)
    return out + (body + [""] if body else [])


def generate_api(facts):
    out = header("API reference", "`proto/det/api/v1/*.proto` and the master's REST route table")
    out += API_INTRO + [""]
    services = [s for f in facts["files"] for s in f["services"]]
    groups = {s["full_name"]: method_groups(s) for s in services}
    summaries = {m["name"]: first_sentence(c) for s in services
                 for m, (_, c) in zip(s["methods"], groups[s["full_name"]])}
    by_rpc = _routes_by_rpc(facts)
    out += ["## Contents", "", "- [Transport, authentication, errors](#transport-authentication-errors)",
            "- [REST routes](#rest-routes)"]
    for s in services:
        title = "Service " + s["full_name"]
        out.append("- [%s](#%s): %d RPCs" % (title, md.slug(title),
                                             len(s["methods"])))
        for g, _ in groups[s["full_name"]]:
            if g:
                title = "RPCs: " + g
                out.append("  - [%s](#%s)" % (title, md.slug(title)))
    out.append("")
    out += ["## Transport, authentication, errors", ""]
    for f in facts["files"]:
        if f["services"] and f["comment"].strip():
            out += ["From `proto/%s`:" % f["name"], "", "```text"]
            out += [l[1:] if l.startswith(" ") else l for l in f["comment"].rstrip("\n").split("\n")]
            out += ["```", ""]
    out += _api_routes_section(facts, summaries)
    for s in services:
        out += ["## Service %s" % s["full_name"], ""] + comment_paragraphs(s["comment"])
        for m, (group, comment) in zip(s["methods"], groups[s["full_name"]]):
            if group:
                out += ["## RPCs: " + group, ""]
            out += _api_method(m, comment, by_rpc.get(m["name"], []))
    return "\n".join(out).rstrip("\n") + "\n"


# ------------------------------------------------------------------ cli.md

CLI_INTRO = """\
`det-cli` talks to the master over gRPC. The master is `-m`/`--master
HOST:PORT`, else `$DET_MASTER`, else `localhost:8090`. A token in
`$DET_USER_TOKEN` is sent with every call, else the one `det-cli user login`
stored (`$DET_AUTH_FILE`, else `~/.det/auth.json`), else det-cli logs in as
`determined` with an empty password. `--tls-ca FILE` (or
`$DET_MASTER_CERT_FILE`) connects over TLS. `det-cli experiment create
--local` runs the trial in this terminal through det-trial, with no master.
A bad command line prints one `det-cli: error: ...` line and exits with
status 2. Every command takes `--help`; its output is quoted below.""".split("\n")


def cli_heading(cmd):
    return "#" * min(2 + max(len(cmd["words"]) - 1, 0), 6) + " " + cmd["path"]


def generate_cli(facts):
    out = header("det-cli reference", "`det-cli --help` of every command")
    out += CLI_INTRO + [""]
    out += ["## Commands", "", "| Command | What it does |", "| --- | --- |"]
    for cmd in facts["cli"]:
        anchor = md.slug(cmd["path"])
        out.append("| [`%s`](#%s) | %s |" % (cmd["path"], anchor, escape_text(cmd["summary"] or
                                                                            cmd["help"]["description"])))
    out.append("")
    for cmd in facts["cli"]:
        out += [cli_heading(cmd), ""]
        if cmd["aliases"]:
            parent = cmd["path"].split()[:-1]
            out += ["Also: %s." % ", ".join("`%s`" % " ".join(parent + [a]) for a in cmd["aliases"]), ""]
        out += ["```text"] + cmd["text"].rstrip("\n").split("\n") + ["```", ""]
    return "\n".join(out).rstrip("\n") + "\n"


# --------------------------------------------------------- master-agent.md

MASTER_AGENT_INTRO = """\
`det-master` is the master daemon: it keeps the cluster's state in SQLite
under `--data-dir`, serves the gRPC API (`--grpc-port`) and the REST API and
web dashboard (`--http-port`), and schedules trials onto agents (or Slurm).
`det-agent` runs on every node that trains: it registers with the master,
offers its slots and runs the trial processes (det-trial) the master places
there. The tables below are each daemon's `--help`.""".split("\n")

TOML_SECTION = """\
## The TOML config file

Both daemons read their flags from a TOML file as well: `--config FILE`.
Each key is a flag's name without the leading `--`, with the same value
(`grpc-port = 8090`, `data-dir = "/var/lib/det"`); a repeatable flag takes an
array (`checkpoint-storage-root = ["/mnt/a", "/mnt/b"]`) and a switch takes
`true` or `false`. A flag given on the command line wins over the file.
Values from the file are checked like flags (`slots = 0` fails as
`--slots 0` does); a file that cannot be read is an error, and so is a key
that names no flag (a typo): the daemon exits naming it. Commented examples:
`deploy/config/master.toml` and `deploy/config/agent.toml`. This is CLI11's
config-file support (`set_config("--config")` in `master/main.cc` and
`agent/main.cc`).""".split("\n")


def _flag_row(flag):
    names = flag["names"]
    short = [n for n in names if n != flag["flag"]]
    toml = "—" if flag["flag"] in ("--help", "--config") else "`%s`" % flag["flag"][2:]
    value = "`%s`" % flag["value"] if flag["value"] else "switch"
    if flag["flag"] == "--config":
        value = "`FILE`"
    if flag["repeatable"]:
        value += ", repeatable"
    if flag["required"]:
        value += ", required"
    default = "`%s`" % flag["default"] if flag["default"] else "—"
    desc = escape_text(flag["description"].replace("\n", " "))
    if short:
        desc += "%s Also %s." % ("" if desc.endswith(".") else ".", ", ".join("`%s`" % s for s in short))
    return "| `%s` | %s | %s | %s | %s |" % (flag["flag"], toml, value, default, desc)


def _daemon_section(d):
    out = ["## " + d["name"], ""]
    if d["description"]:
        out += [escape_text(d["description"]), ""]
    out += ["Usage: `%s`" % d["usage"], "",
            "| Flag | TOML key | Value | Default | Description |", "| --- | --- | --- | --- | --- |"]
    out += [_flag_row(f) for f in d["flags"]]
    return out + [""]


def generate_master_agent(facts):
    out = header("det-master and det-agent reference", "`det-master --help` and `det-agent --help`")
    out += MASTER_AGENT_INTRO + [""]
    out += _daemon_section(facts["master"]) + _daemon_section(facts["agent"]) + TOML_SECTION
    return "\n".join(out).rstrip("\n") + "\n"


GENERATORS = {"api": generate_api, "cli": generate_cli, "master-agent": generate_master_agent}


def generate_all(facts):
    """{relative path: text} of every generated page."""
    return {PAGES[name]: gen(facts) for name, gen in GENERATORS.items()}
