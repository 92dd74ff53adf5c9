#!/usr/bin/env python3
"""comment-ratio.py FILE...: comment lines / code lines of C files, per file and in total.

A line with comment text counts as a comment line; a line with code counts as a code line (a
line with both counts as both); blank lines count as neither. The core's files, as issue 22
measures them (its acceptance: a total of at least 0.2):

    scripts/comment-ratio.py $(ls src/core/*.c | grep -v -e cq_fsm -e cq_settings -e cq_json)
"""
import os
import sys


def count(text):
    """Returns (comment lines, code lines) of C source text."""
    com = code = 0
    inblock = False
    for line in text.split('\n'):
        t = line.strip()
        if not t:
            continue
        has_code = has_com = False
        i = 0
        while i < len(t):
            if inblock:
                has_com = True
                j = t.find('*/', i)
                if j < 0:
                    break
                inblock = False
                i = j + 2
            elif t.startswith('/*', i):
                inblock = has_com = True
                i += 2
            elif t.startswith('//', i):
                has_com = True
                break
            elif t[i] in '"\'':
                q, j = t[i], i + 1
                while j < len(t) and t[j] != q:
                    j += 2 if t[j] == '\\' else 1
                i = j + 1
                has_code = True
            else:
                has_code = has_code or not t[i].isspace()
                i += 1
        com += has_com
        code += has_code
    return com, code


def main(paths):
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    total_com = total_code = 0
    width = max(len(p) for p in paths)
    print(f"{'file':{width}}  comment   code  ratio")
    for p in paths:
        with open(p, encoding='utf-8') as f:
            com, code = count(f.read())
        total_com += com
        total_code += code
        ratio = com / code if code else 0.0
        print(f"{p:{width}}  {com:7d} {code:6d}  {ratio:.3f}")
    ratio = total_com / total_code if total_code else 0.0
    print(f"{'total':{width}}  {total_com:7d} {total_code:6d}  {ratio:.3f}")
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
