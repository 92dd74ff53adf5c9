#!/usr/bin/env python3
"""Counts test results for the summary line of scripts/test.sh.

Inputs, any number of each:
  FILE.json         a meson testlog.json: a test whose output is TAP counts one per
                    `ok`/`not ok` line; any other test counts once;
  --node FILE       the output of `node --test`: its `# pass`, `# fail`, `# cancelled`,
                    `# skipped` and `# todo` totals. Cancelled tests (a hook failed) count as
                    failed. A missing file, or one without a `# pass` total, is one failure:
                    a run that never reported is not a pass;
  --node-failed FILE
                    the same, for a node run that exited non-zero: at least one failure
                    even when its totals say none (it died after printing them);
  --extra-pass N, --extra-fail N, --extra-skip N
                    counts from steps with no log of their own (a failed setup or build,
                    the fuzz smoke run, the format checks, a skipped browser test).
Prints 'N passed, N failed' (with ', N skipped' when some were skipped) as the last line."""
import json
import re
import sys


def count_meson(path):
    """Returns (passed, failed, skipped) of one testlog.json; unreadable is one failure."""
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return 0, 1, 0
    passed = failed = skipped = 0
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
    return passed, failed, skipped


def node_total(text, name):
    """The last `# name N` total in node --test output, or None."""
    found = re.findall(r'^ℹ?\s*#?\s*' + name + r' (\d+)$', text, re.M)
    return int(found[-1]) if found else None


def count_node(path):
    """Returns (passed, failed, skipped) of one `node --test` output."""
    try:
        text = open(path, encoding='utf-8', errors='replace').read()
    except OSError:
        return 0, 1, 0
    p = node_total(text, 'pass')
    if p is None:
        return 0, 1, 0
    f = node_total(text, 'fail') or 0
    c = node_total(text, 'cancelled') or 0
    s = (node_total(text, 'skipped') or 0) + (node_total(text, 'todo') or 0)
    return p, f + c, s


def main(args):
    passed = failed = skipped = 0
    i = 0
    while i < len(args):
        a = args[i]
        if a in ('--extra-pass', '--extra-fail', '--extra-skip', '--node', '--node-failed'):
            if i + 1 >= len(args):
                sys.exit(f'count-tests: {a} needs a value')
            v = args[i + 1]
            i += 2
            if a == '--node':
                r = count_node(v)
            elif a == '--node-failed':
                r = count_node(v)
                r = (r[0], max(r[1], 1), r[2])
            else:
                n = int(v)
                r = {'--extra-pass': (n, 0, 0), '--extra-fail': (0, n, 0),
                     '--extra-skip': (0, 0, n)}[a]
        else:
            r = count_meson(a)
            i += 1
        passed, failed, skipped = passed + r[0], failed + r[1], skipped + r[2]
    tail = f', {skipped} skipped' if skipped else ''
    print(f'{passed} passed, {failed} failed{tail}')


if __name__ == '__main__':
    main(sys.argv[1:])
