#!/usr/bin/env python3
"""Counts test results from meson testlog.json files.

A test whose output is TAP counts one per `ok`/`not ok` line; any other test counts once.
Prints 'N passed, N failed' (with ', N skipped' when some were skipped) as the last line."""
import json
import re
import sys

def main():
    args = sys.argv[1:]
    extra_pass = extra_fail = 0
    files = []
    i = 0
    while i < len(args):
        if args[i] == '--extra-pass':
            extra_pass = int(args[i + 1]); i += 2
        elif args[i] == '--extra-fail':
            extra_fail = int(args[i + 1]); i += 2
        else:
            files.append(args[i]); i += 1
    passed, failed, skipped = extra_pass, extra_fail, 0
    for f in files:
        try:
            lines = open(f).read().splitlines()
        except OSError:
            failed += 1
            continue
        for line in lines:
            t = json.loads(line)
            res = t.get('result', '')
            out = t.get('stdout', '') or ''
            skips = len(re.findall(r'^(?:not )?ok \d+[^\n]*# SKIP', out, re.M))
            oks = len(re.findall(r'^ok \d+(?![^\n]*# SKIP)', out, re.M))
            noks = len(re.findall(r'^not ok \d+(?![^\n]*# SKIP)', out, re.M))
            skipped += skips
            if res == 'SKIP':
                skipped += 1
            elif oks + noks + skips:
                passed += oks
                failed += noks + (1 if res != 'OK' and noks == 0 else 0)
            elif res == 'OK':
                passed += 1
            else:
                failed += 1
    tail = f', {skipped} skipped' if skipped else ''
    print(f'{passed} passed, {failed} failed{tail}')

if __name__ == '__main__':
    main()
