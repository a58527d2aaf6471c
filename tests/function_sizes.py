#!/usr/bin/env python3
"""function_sizes.py: no function over ~150 lines in troupe's own C++ (STYLE.md, "The house").

Reads every .cpp/.hpp/.cu/.cuh under the folders named below, finds each function body
(namespace or class scope: a brace block after a parameter list, lambdas inside counting
as part of their function) and measures it from the line of its name to its closing brace.
A function over the limit fails the test unless tests/function_sizes_allowed.txt lists it
with a size at least its own; that list only shrinks: a listed function that has shrunk
below its entry, fallen under the limit or gone fails too, until the entry is lowered or
removed. So an old exception can never grow, and a new one cannot slip in.

  python3 tests/function_sizes.py              # the check (ctest runs it)
  python3 tests/function_sizes.py --top 20     # the 20 longest functions, to plan a split

Not a C++ parser: comments, strings and character literals are blanked first, and a block
counts as a function when the text before its brace at namespace or class scope has a
parameter list and is not a type, an enum, an initialiser or a namespace.
"""
import argparse
import os
import re
import sys

LIMIT = 150
FOLDERS = ["actors", "runtime", "kernels", "cli", "python", "include"]
EXTENSIONS = (".cpp", ".hpp", ".cu", ".cuh")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOWED = os.path.join(ROOT, "tests", "function_sizes_allowed.txt")


def blank_comments_and_strings(text):
    """The text with comments, string and character literals replaced by spaces (newlines
    kept), so braces inside them do not count."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            # A ' between digits is a digit separator (1'000), not a literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum() \
                    and not re.match(r"[A-Za-z_]*$", text[max(0, i - 2):i]):
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


NOT_FUNCTION = re.compile(r"^\s*(namespace|class|struct|union|enum|extern\s*$|template\s*<[^>]*>\s*(class|struct))\b")
NAME = re.compile(r"([~A-Za-z_][\w:~<>,\s*&]*?)\s*\(")


def functions_in(path):
    """(name, first line, last line) of each function body in the file."""
    raw = open(path, encoding="utf-8", errors="replace").read()
    text = blank_comments_and_strings(raw)
    # Preprocessor lines end no statement and open no block.
    text = re.sub(r"(?m)^[ \t]*#.*(\\\n.*)*$", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    line_of = [0] * (len(text) + 1)
    line = 1
    for k, ch in enumerate(text):
        line_of[k] = line
        if ch == "\n":
            line += 1
    line_of[len(text)] = line

    found = []
    # Scopes: 'ns' for namespaces, classes and extern blocks (functions may start there),
    # anything else is skipped as one balanced block.
    stack = []
    statement_start = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in ";":
            statement_start = i + 1
        elif c == "}":
            if stack:
                stack.pop()
            statement_start = i + 1
        elif c == "{":
            header = text[statement_start:i]
            stripped = header.strip()
            scope_is_open = all(s == "ns" for s in stack)
            if not scope_is_open:
                stack.append("block")
                statement_start = i + 1
            elif NOT_FUNCTION.match(stripped) or stripped == "" or stripped.endswith("=") or \
                    re.search(r"=\s*$", stripped) or "(" not in stripped or \
                    re.match(r"^\s*(public|private|protected)\s*:", stripped) and "(" not in stripped:
                if re.match(r"^\s*(namespace|class|struct|union|extern)\b", stripped) or stripped == "":
                    stack.append("ns")
                else:
                    i = skip_block(text, i)
                    continue
                statement_start = i + 1
            elif re.search(r"=\s*[^=]*$", stripped.split("(")[0]) and not re.search(r"operator\s*\S*=", stripped):
                # `x = f(...) {` is an initialiser, not a function.
                i = skip_block(text, i)
                continue
            else:
                # A constructor's member initialisers may use braces: `a_{b}` (after a name or
                # a '>'); the body's brace follows ')' or '}' or a qualifier.
                before = text[statement_start:i].rstrip()
                if re.search(r"\)\s*:", header) and before and (before[-1].isalnum() or before[-1] in "_>"):
                    if not re.search(r"\b(const|override|final|noexcept|mutable)\s*$", before):
                        i = skip_block(text, i) 
                        continue
                end = skip_block(text, i)
                name_match = NAME.search(header.replace("\n", " "))
                name = name_match.group(1).split()[-1] if name_match else "?"
                first = line_of[statement_start + len(header) - len(header.lstrip())]
                # The line of the name: the header may open with template lines.
                name_at = header.find(name) if name != "?" else -1
                if name_at >= 0:
                    first = line_of[statement_start + name_at]
                found.append((qualify(stack_names(text, statement_start), name), first, line_of[end - 1]))
                i = end
                statement_start = i
                continue
        i += 1
    return found


def stack_names(text, position):
    return ""


def qualify(prefix, name):
    return name.strip()


def skip_block(text, i):
    """The index just past the block whose '{' is at i."""
    depth = 0
    n = len(text)
    while i < n:
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def measure():
    sizes = []
    for folder in FOLDERS:
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in sorted(files):
                if not f.endswith(EXTENSIONS):
                    continue
                path = os.path.join(directory, f)
                rel = os.path.relpath(path, ROOT)
                for name, first, last in functions_in(path):
                    sizes.append((last - first + 1, rel, name, first))
    return sizes


def read_allowed():
    allowed = {}
    if not os.path.exists(ALLOWED):
        return allowed
    for number, line in enumerate(open(ALLOWED, encoding="utf-8"), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 3 or not parts[2].isdigit():
            sys.exit(f"{ALLOWED}:{number}: expected 'FILE FUNCTION LINES', found {line!r}")
        allowed[(parts[0], parts[1])] = int(parts[2])
    return allowed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--top", type=int, help="print the N longest functions and exit")
    args = parser.parse_args()
    sizes = measure()
    if args.top:
        for size, rel, name, first in sorted(sizes, reverse=True)[: args.top]:
            print(f"{size:5d}  {rel}:{first}  {name}")
        return 0
    allowed = read_allowed()
    problems = []
    seen = set()
    for size, rel, name, first in sorted(sizes, reverse=True):
        key = (rel, name)
        if size <= LIMIT:
            continue
        seen.add(key)
        if key not in allowed:
            problems.append(f"{rel}:{first}: {name} is {size} lines, over the limit of {LIMIT}: "
                            f"split it (a long function is a concern that has not found its room)")
        elif size > allowed[key]:
            problems.append(f"{rel}:{first}: {name} grew to {size} lines; "
                            f"{os.path.relpath(ALLOWED, ROOT)} allows {allowed[key]}, and only shrinks")
        elif size < allowed[key]:
            problems.append(f"{rel}:{first}: {name} shrank to {size} lines: lower its entry in "
                            f"{os.path.relpath(ALLOWED, ROOT)} from {allowed[key]} to {size}")
    for key, size in sorted(allowed.items()):
        if key not in seen:
            problems.append(f"{key[0]}: {key[1]} (allowed {size}) is no longer over {LIMIT} lines "
                            f"(or is gone): remove its entry from {os.path.relpath(ALLOWED, ROOT)}")
    over = sum(1 for s in sizes if s[0] > LIMIT)
    for p in problems:
        print(p)
    print(f"{len(sizes)} functions read; {over} over {LIMIT} lines, {len(allowed)} listed as "
          f"exceptions; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
