#!/usr/bin/env python3
"""TAP test of the summary line: scripts/count-tests.py and scripts/lib-test.sh's run_suite.

Each case feeds exact inputs and checks the exact line, so a summary that reads "0 failed"
for a broken build, a cancelled node test or a lost skip fails here.
Usage: test_summary.py REPO_ROOT"""
import json
import os
import subprocess
import sys
import tempfile

root = sys.argv[1]
count = os.path.join(root, 'scripts', 'count-tests.py')
tmp = tempfile.mkdtemp(prefix='chanq-summary.')
results = []


def write(name, text):
    path = os.path.join(tmp, name)
    with open(path, 'w') as f:
        f.write(text)
    return path


def summary(*args):
    out = subprocess.run([sys.executable, count, *args], capture_output=True, text=True,
                         check=True).stdout
    return out.strip().splitlines()[-1]


def check(name, got, want):
    results.append((name, got == want, got, want))


meson = write('testlog.json', '\n'.join(json.dumps(t) for t in [
    {'name': 'tap', 'result': 'FAIL',
     'stdout': 'ok 1 a\nnot ok 2 b\nok 3 c # SKIP no db\n1..3\n'},
    {'name': 'plain', 'result': 'OK', 'stdout': ''},
    {'name': 'skipped', 'result': 'SKIP', 'stdout': ''},
    {'name': 'crashed', 'result': 'FAIL', 'stdout': ''},
]) + '\n')
node_ok = write('node-ok.log', 'TAP version 13\n# tests 5\n# suites 1\n# pass 4\n# fail 0\n'
                '# cancelled 0\n# skipped 1\n# todo 0\n')
node_cancel = write('node-cancel.log', 'TAP version 13\n# tests 3\n# pass 0\n# fail 0\n'
                    '# cancelled 3\n# skipped 0\n# todo 0\n')
node_none = write('node-none.log', 'npm ERR! code ELIFECYCLE\n')

check('meson TAP, plain, skip and crash', summary(meson), '2 passed, 2 failed, 2 skipped')
check('node totals with a skip', summary('--node', node_ok), '4 passed, 0 failed, 1 skipped')
check('node cancelled counts as failed', summary('--node', node_cancel), '0 passed, 3 failed')
check('node that never reported is a failure', summary('--node', node_none),
      '0 passed, 1 failed')
check('node exiting non-zero after clean totals', summary('--node-failed', node_ok),
      '4 passed, 1 failed, 1 skipped')
check('missing testlog (suite never ran) is a failure',
      summary(os.path.join(tmp, 'nope.json')), '0 passed, 1 failed')
check('extra counts', summary('--extra-pass', '2', '--extra-fail', '1', '--extra-skip', '3'),
      '2 passed, 1 failed, 3 skipped')

# run_suite with a setup that fails: one failure, no testlog added.
script = ('set -u; fail=0; logs=(); extra_fail=0; jobs=1; MESON_TEST_ARGS=(); '
          f'. "{root}/scripts/lib-test.sh"; cd "{tmp}"; '
          f'run_suite "{tmp}/b" "{root}" -Dno_such_option=1 >/dev/null 2>&1; '
          'echo "$fail $extra_fail ${#logs[@]}"')
out = subprocess.run(['bash', '-c', script], capture_output=True, text=True).stdout.strip()
check('run_suite: failed setup is one failure', out, '1 1 0')

print(f'1..{len(results)}')
for i, (name, ok, got, want) in enumerate(results, 1):
    print(f'{"ok" if ok else "not ok"} {i} {name}')
    if not ok:
        print(f'#   got  {got!r}\n#   want {want!r}')
sys.exit(0 if all(r[1] for r in results) else 1)
