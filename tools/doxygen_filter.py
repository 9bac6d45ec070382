#!/usr/bin/env python3
"""Doxygen INPUT_FILTER for strata's headers (docs/Doxyfile).

strata's headers document with plain `//` comments, as the code style asks; Doxygen
reads only `///`. This filter hands Doxygen the same file with the comments that
document something turned into doc comments, and nothing else changed (line numbers
stay):
  - the comment block at the top of a file becomes the file's description (\\file);
  - a run of full-line comments directly above a declaration at namespace or class
    scope documents that declaration;
  - a trailing comment after a member or enumerator (`int n = 0;  // rows`) documents it.
Comments inside function bodies are left as they are. A trailing requires-clause on a
line of its own (after a member's declarator) is blanked: Doxygen 1.9 misreads it as
part of an initializer list. In the text of a converted
comment, the characters Doxygen would read as commands or HTML are escaped outside
`code spans`, so prose such as "tensor<float>", "ops<host>::gemm" or "#15" is shown as written.

usage: doxygen_filter.py FILE   (writes the filtered file to stdout)
"""
import re
import sys

SCOPE_KEYWORDS = re.compile(r"\b(namespace|struct|class|union|enum)\b")
TEMPLATE_HEAD = re.compile(r"\btemplate\s*<[^{};]*?>")
ESCAPED = re.compile(r"([\\@<>&#%$]|::)")
TRAILING_REQUIRES = re.compile(r"^\s*requires\s+[^{};]+$")


def escape(text):
    """Escapes Doxygen's special characters outside backtick code spans."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # even parts are outside code spans
        parts[i] = ESCAPED.sub(r"\\\1", parts[i])
    return "`".join(parts)


def code_of(line):
    """The line without string/char literals and comments, for brace counting."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return line.split("//", 1)[0]


def filter_lines(lines):
    out = list(lines)
    scopes = []  # per open brace: True for namespace/class/enum bodies
    pending = ""  # code since the last ; { or }, to tell what a { opens
    comment_run = []  # indices of the full-line comments just above
    in_header = True
    in_block_comment = False
    for i, line in enumerate(lines):
        stripped = line.strip()
        if in_block_comment:
            in_block_comment = "*/" not in stripped
            continue
        if stripped.startswith("/*"):
            in_block_comment = "*/" not in stripped
            continue
        at_scope = all(scopes)
        if stripped.startswith("//") and not stripped.startswith("///"):
            if in_header:
                indent = line[: len(line) - len(line.lstrip())]
                body = escape(stripped[2:])
                out[i] = f"{indent}///{body}"
            elif at_scope:
                comment_run.append(i)
            continue
        in_header = False
        if not stripped:
            comment_run = []
            continue
        if stripped.startswith("#"):
            comment_run = []  # a comment above #include or #define documents no declaration
            continue
        if TRAILING_REQUIRES.match(line) and not in_header:
            out[i] = ""
            continue
        for j in comment_run:
            indent = lines[j][: len(lines[j]) - len(lines[j].lstrip())]
            out[j] = f"{indent}///{escape(lines[j].strip()[2:])}"
        comment_run = []
        code = code_of(line)
        trailing = line[len(code) :] if "//" in line[len(code) :] else ""
        if at_scope and trailing and code.rstrip().endswith((";", ",")) and not trailing.lstrip().startswith("///"):
            text = trailing.lstrip()[2:]
            out[i] = f"{code.rstrip()}  ///<{escape(text)}"
        for ch in code:
            if ch == "{":
                head = TEMPLATE_HEAD.sub("", pending)
                scopes.append(bool(SCOPE_KEYWORDS.search(head)) and "(" not in head.split("{")[-1])
                pending = ""
            elif ch == "}":
                if scopes:
                    scopes.pop()
                pending = ""
            elif ch == ";":
                pending = ""
            else:
                pending += ch
        pending += " "
    # \file on a line of its own above the description; the #pragma once line, which
    # Doxygen needs not, makes room for it so that later line numbers stay.
    if out and out[0].startswith("///"):
        pragma = next((k for k, l in enumerate(out) if l.strip() == "#pragma once"), None)
        if pragma is not None:
            del out[pragma]
            out.insert(0, "/// \\file")
    return out


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: doxygen_filter.py FILE\n")
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        lines = f.read().split("\n")
    sys.stdout.write("\n".join(filter_lines(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
