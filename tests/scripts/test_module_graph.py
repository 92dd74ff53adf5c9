#!/usr/bin/env python3
"""TAP test of scripts/module-graph.py (called by scripts/check-layering.sh).

A small tree with a module map (pkg/base, src/low, src/mid narrowed to low.h, src/top) passes;
each case then breaks one rule in a fresh copy and wants the check's exit 1 and its message,
so a check that stopped seeing an upward include, a narrowed header, a relative include, a
meson include path into a sibling or a row that points up fails here.
Usage: test_module_graph.py REPO_ROOT"""
import os
import shutil
import subprocess
import sys
import tempfile

root = sys.argv[1]
script = os.path.join(root, 'scripts', 'module-graph.py')
results = []

MAP = """# Architecture

## Module map

| Module | What it is | Depends on | I/O |
|---|---|---|---|
| `pkg/base` | leaf | – | none |
| `src/low` | the bottom | pkg | none |
| `src/mid` | over low's header only | low's header (`low.h`), jansson | none |
| `src/top` | over both | mid, low | none |

## Next section

| `src/zzz` | not in the map's section | nothing | none |
"""

TREE = {
    'doc/architecture.md': MAP,
    'pkg/base/cq_base.h': '',
    'src/low/low.h': '#include "cq_base.h"\n',
    'src/low/low_int.h': '',
    'src/low/low.c': '#include "low.h"\n#include "low_int.h"\n',
    'src/low/meson.build': "# a comment may say include_directories('../mid')\n"
                           "low_inc = include_directories('.')\n",
    'src/mid/mid.h': '#include "low.h"\n#include <jansson.h>\n',
    'src/mid/meson.build': "mid_dep = declare_dependency(\n"
                           "  include_directories: include_directories('.'))\n",
    'src/top/top.c': '#include "mid.h"\n#include "low_int.h"\n#include "cq_base.h"\n',
}


def make(changes):
    tmp = tempfile.mkdtemp(prefix='chanq-graph.')
    for path, text in {**TREE, **changes}.items():
        if text is None:
            continue
        os.makedirs(os.path.join(tmp, os.path.dirname(path)), exist_ok=True)
        with open(os.path.join(tmp, path), 'w') as f:
            f.write(text)
    subprocess.run(['git', 'init', '-q', tmp], check=True)
    return tmp


def run(changes):
    tmp = make(changes)
    p = subprocess.run([sys.executable, script, tmp], capture_output=True, text=True)
    shutil.rmtree(tmp)
    return p.returncode, p.stdout


def case(name, changes, want):
    rc, out = run(changes)
    ok = (rc == 0 and out == '') if want is None else (rc == 1 and want in out)
    results.append((name, ok, rc, out, want))


def edit(path, old, new):
    return {path: TREE[path].replace(old, new)}


case('the tree passes (transitive includes, a narrowed header, a meson comment)', {}, None)
case('an upward include', {'src/low/low.c': '#include "mid.h"\n'},
     'src/low/low.c:1: src/low includes mid.h of src/mid, which its row')
case('a header outside the narrowed dependency', {'src/mid/mid.c': '#include "low_int.h"\n'},
     'src/mid/mid.c:1: src/mid includes low_int.h of src/low')
case('not transitive through a narrowed dependency', {'src/mid/mid.c': '#include "cq_base.h"\n'},
     'src/mid includes cq_base.h of pkg/base')
case('a relative #include', {'src/top/top.c': '#include "../low/low.h"\n'},
     'src/top/top.c:1: #include "../low/low.h" reaches another directory by a relative path')
case('a relative #include outside src/', {'clients/c/x.c': '\n#include "../../pkg/base/cq_base.h"\n'},
     'clients/c/x.c:2: #include "../../pkg/base/cq_base.h" reaches another directory')
case('include_directories into a sibling',
     edit('src/mid/meson.build', "include_directories('.')", "include_directories('.', '../low')"),
     "src/mid/meson.build:2: include_directories('../low') reaches a sibling module's headers")
case('include_directories into a sibling from tools/',
     {'tools/meson.build': "x = include_directories(\n  '../src/low')\n"},
     "tools/meson.build:1: include_directories('../src/low') reaches a sibling")
case('-I into a sibling', {'src/top/meson.build': "c_args: ['-I../low']\n"},
     "src/top/meson.build:1: '-I../low' reaches a sibling module's headers")
case('a row that depends on one below it',
     edit('doc/architecture.md', '| `src/low` | the bottom | pkg |', '| `src/low` | the bottom | mid |'),
     'src/low depends on src/mid, which the map lists below it')
case('a name that is no module',
     edit('doc/architecture.md', '| mid, low |', '| mid, low, nowhere |'),
     'src/top depends on "nowhere", which is no module of the map')
case('a narrowed header the module does not have',
     edit('doc/architecture.md', '(`low.h`)', '(`lower.h`)'),
     'src/mid narrows src/low to lower.h, which src/low does not have')
case('a module without a row', {'src/new/x.c': ''}, 'src/new/x.c: src/new has no row in the module map')
case('two headers of one name', {'src/top/low.h': ''}, 'an include would be ambiguous')
case('a header nobody owns', {'src/top/top.c': '#include "nowhere.h"\n'},
     'src/top/top.c:1: #include "nowhere.h": no module owns nowhere.h')
case('a generated header not declared', {'src/top/top.c': '#include "x.pb-c.h"\n'},
     'src/top includes x.pb-c.h of proto')
case('a generated header declared', {
    **edit('doc/architecture.md', '| mid, low |', '| mid, low, proto |'),
    'src/top/top.c': '#include "x.pb-c.h"\n'}, None)

print(f'1..{len(results)}')
for i, (name, ok, rc, out, want) in enumerate(results, 1):
    print(f'{"ok" if ok else "not ok"} {i} {name}')
    if not ok:
        print(f'#   exit {rc}, want {"0" if want is None else "1 with: " + want}')
        for line in out.splitlines():
            print(f'#   {line}')
sys.exit(0 if all(r[1] for r in results) else 1)
