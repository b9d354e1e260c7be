#!/usr/bin/env python3
"""Fails when a function body is longer than docs/style.md allows (70 lines).

Usage: tools/check_function_length.py [--max N] [--report K] FILE...

A function's length is counted from the line of its opening brace to the line of its
closing brace, both included. The parse is lexical: comments, string and character
literals and preprocessor lines are blanked first; then every '{' at namespace or class
scope that follows a parameter list, and is not a control statement or an initializer,
opens a function body. Lambdas and local classes inside a function count toward it.
--report K also prints the K longest functions (to see how close the code is).
"""
import argparse
import re
import sys

CONTROL = re.compile(r"\b(if|for|while|switch|catch|do|else|try)\s*$")
SCOPE_KEYWORDS = re.compile(r"\b(namespace|class|struct|union|enum)\b")


def char_prefix(text: str, i: int) -> bool:
    """Whether the quote at i follows a character-literal prefix (L'a', u'a', U'a', u8'a')."""
    def starts_word(j: int) -> bool:
        return j <= 0 or not (text[j - 1].isalnum() or text[j - 1] == "_")
    if text[i - 1] in "LuU" and starts_word(i - 1):
        return True
    return text[i - 2:i] == "u8" and starts_word(i - 2)


def blank(text: str) -> str:
    """Replaces comments, literals and preprocessor lines with spaces, keeping newlines."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n and text[j] != "\n":
                j = j + 2 if text[j] == "\\" and j + 1 < n else j + 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if c == "R" and text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if m:
                end = text.find(")" + m.group(1) + '"', i)
                end = n if end < 0 else end + len(m.group(1)) + 2
                out.append(re.sub(r"[^\n]", " ", text[i:end]))
                i = end
                continue
        if c == "'" and i > 0 and text[i - 1].isalnum() and not char_prefix(text, i):
            out.append(c)  # a digit separator, as in 160'000
            i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i))
            i = j + 1
            continue
        if not c.isspace():
            line_start = False
        if c == "\n":
            line_start = True
        out.append(c)
        i += 1
    return "".join(out)


def head_kind(head: str) -> str:
    """What a '{' opens, from the text since the previous ';', '{' or '}'."""
    h = " ".join(head.split())
    if not h or h.endswith("=") or re.search(r"=\s*$", h) or h.endswith(","):
        return "other"
    if re.search(r"\bextern\s*$", h):
        return "scope"
    if ")" not in h:
        return "scope" if SCOPE_KEYWORDS.search(h) or h.startswith("extern") else "other"
    before_paren = h[: h.find("(")]
    if CONTROL.search(before_paren.strip()) or re.match(r"^(if|for|while|switch|catch)\b", h):
        return "other"
    if SCOPE_KEYWORDS.match(h) and "(" not in before_paren:
        return "scope" if not re.search(r"\)\s*$", h) else "function"
    return "function"


def functions(text: str):
    """Yields (name, first_line, last_line) for every function body at namespace/class scope."""
    code = blank(text)
    stack = []  # kinds of the open braces
    head_start = 0
    for i, c in enumerate(code):
        if c in ";":
            head_start = i + 1
        elif c == "{":
            inside_function = any(k[0] in ("function", "other", "nested") for k in stack)
            kind = "nested" if inside_function else head_kind(code[head_start:i])
            stack.append((kind, i, head_start))
            head_start = i + 1
        elif c == "}":
            if stack:
                kind, start, hs = stack.pop()
                if kind == "function":
                    name = re.findall(r"([\w:~]+)\s*\(", code[hs:start])
                    yield (name[0] if name else "?", code.count("\n", 0, start) + 1,
                           code.count("\n", 0, i) + 1)
            head_start = i + 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=70)
    parser.add_argument("--report", type=int, default=0)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    found = []
    for path in args.files:
        with open(path, encoding="utf-8") as f:
            for name, first, last in functions(f.read()):
                found.append((last - first + 1, path, first, name))
    found.sort(reverse=True)
    for length, path, first, name in found[: args.report]:
        print(f"  {length:4d} lines  {path}:{first}  {name}")
    too_long = [f for f in found if f[0] > args.max]
    for length, path, first, name in too_long:
        print(f"{path}:{first}: function '{name}' is {length} lines; docs/style.md allows "
              f"{args.max}: split it (parents hold the control flow, leaves do the work)")
    print(f"check_function_length: {len(found)} functions, {len(too_long)} over {args.max} lines")
    return 1 if too_long else 0


if __name__ == "__main__":
    sys.exit(main())
