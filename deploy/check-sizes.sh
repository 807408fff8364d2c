#!/usr/bin/env bash
# Source size check (ctest: source_sizes). Over the C++ sources (.cc, .h) of
# master/, agent/, cli/, trial_runtime/ and common/, tests (*_test.cc) and the
# dashboard's assets (master/http/dashboard/) aside:
#   - prints the five longest files as `wc -l` prints them, longest last;
#   - fails (exit 1) naming each file longer than MAX_FILE_LINES (800);
#   - fails naming file:line and function for each function whose body, from
#     the line of its `{` to the line of its `}`, is longer than
#     MAX_FUNCTION_LINES (120).
# A function is a `{` block at file, namespace or class scope that follows a
# `)` (then maybe const, override, noexcept, `-> type`, a constructor's
# initializer list or an annotation macro); lambdas and local classes inside a
# function count as part of it. Comments, string and character literals (raw
# strings included) and preprocessor lines are skipped. A heuristic scan, not
# a C++ parser.
# Usage: deploy/check-sizes.sh   (from any directory; needs python3)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
MAX_FILE_LINES=800
MAX_FUNCTION_LINES=120

files=()
while IFS= read -r f; do files+=("$f"); done < <(
  find master agent cli trial_runtime common -type f \( -name '*.cc' -o -name '*.h' \) \
    ! -name '*_test.cc' ! -path 'master/http/dashboard/*' | LC_ALL=C sort)
if [ "${#files[@]}" -eq 0 ]; then
  echo "check-sizes: no sources found under $root" >&2
  exit 1
fi

echo "Five longest sources (wc -l, longest last):"
# One wc for all files (so one column width), without its "total" line.
wc -l "${files[@]}" | sed '$d' | sort -n -k1,1 | tail -n 5

python3 - "$MAX_FILE_LINES" "$MAX_FUNCTION_LINES" "${files[@]}" <<'PY'
import re
import sys

max_file, max_func = int(sys.argv[1]), int(sys.argv[2])
paths = sys.argv[3:]


def clean(text):
    """`text` with comments, literals and preprocessor lines blanked out.

    Newlines are kept, so offsets map to the same line numbers; a string
    literal becomes "" and a character literal ' '.
    """
    out = []
    i, n = 0, len(text)
    line_start = True  # only whitespace since the last newline
    while i < n:
        c = text[i]
        if c == '\n':
            out.append(c)
            line_start = True
            i += 1
            continue
        if line_start and c == '#':
            # A preprocessor directive, with its backslash continuations.
            while i < n and text[i] != '\n':
                if text[i] == '\\' and i + 1 < n and text[i + 1] == '\n':
                    out.append('\n')
                    i += 2
                    continue
                i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith('//', i):
            while i < n and text[i] != '\n':
                i += 1
            continue
        if text.startswith('/*', i):
            end = text.find('*/', i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:end]))
            i = end
            continue
        if c == '"':
            # Raw string: an R (after an optional u8/u/U/L prefix) that
            # starts a token, right before the quote.
            m = re.search(r'(?:^|[^\w])(?:u8|u|U|L)?R$', text[max(0, i - 4):i])
            if m:
                open_paren = text.find('(', i)
                delim = text[i + 1:open_paren]
                end = text.find(')' + delim + '"', open_paren)
                end = n if end < 0 else end + len(delim) + 2
                out.append('""' + '\n' * text.count('\n', i, end))
                i = end
                continue
            j = i + 1
            while j < n and text[j] != '"' and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append('""')
            i = j + 1
            continue
        if c == "'":
            # A digit separator (1'000) when the token before it is a number.
            k = i
            while k > 0 and (text[k - 1].isalnum() or text[k - 1] in "_'."):
                k -= 1
            if k < i and text[k].isdigit():
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != "'" and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append("' '")
            i = j + 1
            continue
        out.append(c)
        i += 1
    return ''.join(out)


QUALIFIER = re.compile(
    r'(?:\b(?:const|override|final|noexcept|volatile|mutable|try)\b|&&|&|\b[A-Z][A-Z0-9_]+\b)\s*$')
TRAILING_RETURN = re.compile(r'->\s*[\w:<>,\s*&]+$')


def strip_parens(s):
    """Removes a trailing balanced (...) from `s`, or returns None."""
    if not s.endswith(')'):
        return None
    depth = 0
    for k in range(len(s) - 1, -1, -1):
        if s[k] == ')':
            depth += 1
        elif s[k] == '(':
            depth -= 1
            if depth == 0:
                return s[:k].rstrip()
    return None


def is_function_header(header):
    """Whether the text before a `{` ends like a function's signature."""
    h = header.strip()
    while True:
        before = h
        h = TRAILING_RETURN.sub('', h).rstrip()
        h = QUALIFIER.sub('', h).rstrip()
        if h.endswith(')'):
            # noexcept(...) or an annotation MACRO(...) after the parameters
            # (not a macro that takes them: TEST(A, B) stays).
            inner = strip_parens(h)
            if inner is not None:
                m = re.search(r'\b(?:noexcept|[A-Z][A-Z0-9_]+)$', inner)
                if m and inner[:m.start()].rstrip().endswith(')'):
                    h = inner
        if h == before:
            break
    if h.endswith(')'):
        return True
    # A constructor's initializer list ending in a brace initializer
    # (`: a_(x), b_{y} {` arrives here as `: a_(x), b_{}`).
    return bool(re.search(r'\)\s*:\s*[\w:]+\s*[({]', h)) and h.endswith('{}')


SKIP_NAMES = {'__attribute__', 'alignas', 'decltype', '__declspec', 'noexcept'}


def function_name(header):
    """The name before the parameter list: the first top-level (...) group
    that does not follow an attribute or an all-caps macro."""
    h = re.sub(r'\s+', ' ', header.strip())
    h = re.sub(r'^(?:public|private|protected)\s*:\s*', '', h)
    depth = 0
    first = None
    for k, ch in enumerate(h):
        if ch == '(':
            if depth == 0:
                m = re.search(r'((?:[\w~]+\s*::\s*)*(?:operator\s*[^\w\s(]*|~?\w+))\s*(?:<[^()]*>)?\s*$', h[:k])
                name = m.group(1).replace(' ', '') if m else ''
                if name == 'operator' and h[k:k + 2] == '()':
                    name = 'operator()'
                if first is None:
                    first = name
                last = name.split('::')[-1]
                if name and last not in SKIP_NAMES and not re.fullmatch(r'[A-Z][A-Z0-9_]+', last):
                    return name
            depth += 1
        elif ch == ')':
            depth -= 1
    return first or '<unnamed>'


def match_brace(code, i):
    """The offset just past the `}` that closes the `{` at code[i]."""
    depth, j, n = 1, i + 1, len(code)
    while j < n and depth:
        if code[j] == '{':
            depth += 1
        elif code[j] == '}':
            depth -= 1
        j += 1
    return j


def scan(text):
    """Yields (line, name, body_lines) for every function in `text`."""
    code = clean(text)
    line_of = []  # the line number of each offset
    line = 1
    for ch in code:
        line_of.append(line)
        if ch == '\n':
            line += 1
    # Outside functions every `{` opens a namespace or class (scanned on), a
    # function (matched to its end at once) or something else, such as an
    # initializer or an enum (skipped whole, the header going on: `b_{}` in
    # an initializer list). `header` is the text since the last `;`, `{` or
    # `}` at this level; `blocks` the header offsets and lines of the blocks
    # skipped in it.
    header, header_start, blocks = [], 0, []
    i, n = 0, len(code)
    while i < n:
        ch = code[i]
        if ch in ';}':
            header, header_start, blocks = [], i + 1, []
        elif ch == '{':
            h = ''.join(header)
            j = match_brace(code, i)
            if is_function_header(h):
                open_line = line_of[i]
                # A lambda in a constructor's initializer list belongs to it.
                init = re.search(r'\)\s*:(?!:)', h)
                if init:
                    open_line = min([open_line] + [ln for pos, ln in blocks if pos >= init.end()])
                name = function_name(h)
                last = name.split('::')[-1]
                m = re.search(re.escape(last) if name != '<unnamed>' else r'\S', code[header_start:i])
                name_line = line_of[header_start + m.start()] if m else line_of[i]
                yield name_line, name, line_of[j - 1] - open_line + 1
                header, header_start, blocks = [], j, []
                i = j
                continue
            # What follows the last skipped block, as in `enum E {} class X`.
            word = re.sub(r'^\s*(?:(?:public|private|protected)\s*:\s*)*(?:template\s*<[^{};]*>\s*)?', '',
                          h.split('{}')[-1])
            if re.match(r'\s*(?:(?:inline\s+)?namespace\b|extern\b)', word) or \
               (re.match(r'\s*(?:typedef\s+)?(?:class|struct|union)\b', word) and '=' not in word):
                header, header_start, blocks = [], i + 1, []
            else:
                blocks.append((len(h), line_of[i]))
                header.append('{}')
                i = j
                continue
        else:
            if not header:
                header_start = i
            header.append(ch)
        i += 1


failures = []
for path in paths:
    with open(path, encoding='utf-8', errors='replace') as f:
        text = f.read()
    lines = text.count('\n')  # as wc -l counts
    if lines > max_file:
        failures.append(f'{path}: {lines} lines, longer than {max_file}')
    for line, name, body in scan(text):
        if body > max_func:
            failures.append(f'{path}:{line}: function {name} has a body of {body} lines, longer than {max_func}')

if failures:
    print(f'\ncheck-sizes: {len(failures)} violation(s):')
    for msg in failures:
        print('  ' + msg)
    sys.exit(1)
print(f'\ncheck-sizes: OK ({len(paths)} files; none over {max_file} lines, no function over {max_func} lines)')
PY
