"""The small part of GitHub-flavoured Markdown the docs checker reads.

A page is parsed once into lines, each marked as inside a fenced code block
or not. From the lines outside fences it gives: ATX headings ("## Title"; no
setext headings) and their GitHub anchors, table rows split into cells,
inline links and reference definitions, inline code spans, and the
`<!-- include: PATH -->` blocks. Standard library only; pure functions.
"""

import re

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})(.*)$")
_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")
# [text](dest "title") and ![alt](dest); text may hold one level of [...].
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
_REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
_INCLUDE = re.compile(r"^\s*<!--\s*include:\s*(\S+)\s*-->\s*$")
_HTML_TAG = re.compile(r"<[^>]+>")


class Page:
    """One Markdown file: `lines` (no newlines) and `fenced[i]` (line i is a
    fence line or inside a fenced block)."""

    def __init__(self, rel, text):
        self.rel = rel
        self.text = text
        self.lines = text.split("\n")
        self.fenced = _fence_mask(self.lines)

    def outside(self):
        """(line number from 1, line) for every line outside fenced blocks."""
        for i, line in enumerate(self.lines):
            if not self.fenced[i]:
                yield i + 1, line


def _fence_mask(lines):
    mask = [False] * len(lines)
    fence = None  # the opening marker while inside a block
    for i, line in enumerate(lines):
        m = _FENCE.match(line)
        if fence is None:
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                fence = m.group(1)
                mask[i] = True
            continue
        mask[i] = True
        if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
            fence = None
    return mask


def strip_code_spans(line):
    """The line with every inline code span blanked (its text removed)."""
    return _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def code_spans(line):
    """The contents of the inline code spans of one line, trimmed."""
    return [m.group(2).strip() for m in _CODE_SPAN.finditer(line)]


def heading_text(raw):
    """A heading's text as GitHub renders it: code spans, links, emphasis
    markers and HTML tags reduced to their text."""
    text = _CODE_SPAN.sub(lambda m: m.group(2).strip(), raw)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = _HTML_TAG.sub("", text)
    return text.strip()


def slug(text):
    """GitHub's anchor for a heading's rendered text (before de-duplication):
    lower case; every character but letters, digits, '_', '-' and spaces
    removed; each space becomes '-'."""
    out = []
    for ch in text.lower():
        if ch.isalnum() or ch in "_-":
            out.append(ch)
        elif ch == " ":
            out.append("-")
    return "".join(out)


def headings(page):
    """[(line, level, text)] of the ATX headings outside fenced blocks."""
    out = []
    for n, line in page.outside():
        m = _ATX.match(line)
        if m:
            out.append((n, len(m.group(1)), heading_text(m.group(2))))
    return out


def anchors(page):
    """Every anchor GitHub gives the page's headings: a repeated slug gets
    -1, -2, ... in order. Also explicit <a name|id="..."> anchors."""
    seen = {}
    out = set()
    for _, _, text in headings(page):
        base = slug(text)
        if base in seen:
            seen[base] += 1
            out.add("%s-%d" % (base, seen[base]))
        else:
            seen[base] = 0
            out.add(base)
    for _, line in page.outside():
        for m in re.finditer(r"<a\s+(?:name|id)=\"([^\"]+)\"", line):
            out.add(m.group(1))
    return out


def split_row(line):
    """The cells of a table row ("| a | b |"), trimmed; None if the line is
    no table row. A '|' inside a code span or escaped as '\\|' does not split."""
    s = line.strip()
    if not s.startswith("|"):
        return None
    cells, cur, i, tick = [], [], 0, 0
    while i < len(s):
        ch = s[i]
        if ch == "\\" and i + 1 < len(s) and s[i + 1] == "|":
            cur.append("|")
            i += 2
            continue
        if ch == "`":
            run = len(s[i:]) - len(s[i:].lstrip("`"))
            tick = 0 if tick == run else (run if tick == 0 else tick)
            cur.append("`" * run)
            i += run
            continue
        if ch == "|" and tick == 0:
            cells.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
        i += 1
    if "".join(cur).strip():
        cells.append("".join(cur).strip())
    cells = cells[1:]  # before the leading '|'
    if all(re.fullmatch(r":?-{3,}:?", c) for c in cells if c):
        return None  # the delimiter row
    return cells


def rows(page):
    """[(line, cells)] of the table rows outside fenced blocks."""
    out = []
    for n, line in page.outside():
        cells = split_row(line)
        if cells:
            out.append((n, cells))
    return out


def unquote_code(cell):
    """`x` -> x (one code span making up the whole cell); else the cell."""
    m = re.fullmatch(r"(`+)\s*(.*?)\s*\1", cell.strip())
    return m.group(2) if m else cell.strip()


def links(page):
    """[(line, destination)] of inline links, images and reference
    definitions outside fenced blocks and code spans."""
    out = []
    for n, line in page.outside():
        plain = strip_code_spans(line)
        for m in _INLINE_LINK.finditer(plain):
            out.append((n, m.group(1).strip("<>")))
        m = _REF_DEF.match(plain)
        if m:
            out.append((n, m.group(1).strip("<>")))
    return out


def includes(page):
    """[(comment line, path, open line, close line)] of every fenced block
    directly preceded by <!-- include: PATH -->; lines numbered from 1.
    close line is None for a block that never closes; open line is None when
    no fence follows the comment."""
    out = []
    for i, line in enumerate(page.lines):
        if page.fenced[i]:
            continue
        m = _INCLUDE.match(line)
        if not m:
            continue
        j = i + 1
        if j >= len(page.lines) or not page.fenced[j]:
            out.append((i + 1, m.group(1), None, None))
            continue
        k = j + 1
        while k < len(page.lines) and page.fenced[k] and not _is_close(page.lines[j], page.lines[k]):
            k += 1
        close = k + 1 if k < len(page.lines) and page.fenced[k] else None
        out.append((i + 1, m.group(1), j + 1, close))
    return out


def _is_close(open_line, line):
    o = _FENCE.match(open_line)
    m = _FENCE.match(line)
    return bool(m) and m.group(1)[0] == o.group(1)[0] and len(m.group(1)) >= len(o.group(1)) and not m.group(2).strip()


def fence_for(text, info):
    """An opening fence (backticks, longer than any backtick run at the start
    of a line of `text`) with info string `info`."""
    longest = max([len(m.group(1)) for m in re.finditer(r"^ {0,3}(`{3,})", text, re.M)] + [2])
    return "`" * (longest + 1) + info
