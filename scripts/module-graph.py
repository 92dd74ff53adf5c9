#!/usr/bin/env python3
"""module-graph.py - the import graph of src/ and pkg/ against doc/architecture.md.

Called by scripts/check-layering.sh; prints "layering: ..." lines and exits 1 on a violation.

Why: each module's meson dependency only puts the headers of what it declares on the include
path, but an include_directories('../x') or an #include "../x/y.h" reaches past that, and a
dependency nobody wrote down in the module map goes unnoticed. So the map is the rule:

* Every directory src/<m> and pkg/<m> is one module and owns the headers under it (generated
  headers: GENERATED below). A header name belongs to one module only.
* doc/architecture.md's module map lists the modules bottom-up; a row's "Depends on" column is
  a comma-separated list of names (a module's directory, its last part, "pkg" for all of pkg/,
  "proto" and "embedded" for the generated headers, a library such as "jansson", "everything"
  for every row above), each followed by prose if wanted ("mqsrv's ...", "(...)"). Headers
  named in that prose (`cq_coord.h`) narrow the dependency to them. Dependencies are transitive
  (as meson's are) except through a narrowed one.
* A module may include its own headers and those of what its row allows; each dependency must
  be a row above it (so the graph has no cycle and no arrow back up).
* No #include "../..." in src/, pkg/, clients/, tools/, and no include_directories() (or -I)
  in their meson.build files that leaves the directory downwards ('..'): a sibling's headers
  come from its declared dependency.
"""
import os
import re
import subprocess
import sys

DOC = 'doc/architecture.md'
ROOTS = ('src', 'pkg')
MESON_ROOTS = ('src', 'pkg', 'clients', 'tools')
# Names in the "Depends on" column that are not rows: libraries included with <...> (the
# adapter checks in check-layering.sh own those) and the build's generated headers.
EXTERNAL = {'jansson', 'libnats'}
GENERATED = {'proto': re.compile(r'.*\.pb-c\.h$'), 'embedded': re.compile(r'cq_embedded\.h$')}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

errors = []


def fail(msg):
    errors.append('layering: ' + msg)


def tree_files(roots):
    out = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard', '--']
                         + list(roots), capture_output=True, text=True, check=True).stdout
    return sorted(set(p for p in out.split('\n') if p and os.path.exists(p)))


def module_of(path):
    parts = path.split('/')
    return '/'.join(parts[:2]) if len(parts) > 2 else None


# ---- the module map -------------------------------------------------------------------------

def split_top(text):
    """Splits at commas outside parentheses."""
    items, depth, cur = [], 0, ''
    for ch in text:
        depth += (ch == '(') - (ch == ')')
        if ch == ',' and depth == 0:
            items.append(cur)
            cur = ''
        else:
            cur += ch
    items.append(cur)
    return [i.strip() for i in items if i.strip()]


def read_map():
    """[(module, line, deps text)] in the table's order (bottom layer first)."""
    rows, in_map = [], False
    with open(DOC, encoding='utf-8') as f:
        for n, line in enumerate(f, 1):
            if line.startswith('## '):
                in_map = line.strip() == '## Module map'
                continue
            if not in_map or not line.startswith('| `'):
                continue
            cells = [c.strip() for c in line.strip().strip('|').split('|')]
            if len(cells) < 3:
                continue
            for name in re.findall(r'`([^`]+)`', cells[0]):
                name = name.rstrip('/')
                if name.split('/')[0] in ROOTS:
                    rows.append((name, n, cells[2]))
    return rows


def short_names(rows):
    """Names the column may use: 'src/core', 'core', 'pkg/http', 'base', ..., and 'pkg'."""
    names = {}
    for mod, _, _ in rows:
        names[mod] = [mod]
        names.setdefault(mod.split('/')[1], [mod])
    names['pkg'] = [m for m, _, _ in rows if m.startswith('pkg/')]
    return names


def parse_deps(rows, names):
    """{module: [(dep, headers or None)]}; checks names and the bottom-up order."""
    deps, above = {}, set()
    for mod, line, text in rows:
        deps[mod] = []
        for item in split_top(text):
            if item in ('–', '-'):
                continue
            m = re.match(r"`?([\w./-]+)`?", item)
            word = m.group(1) if m else item
            narrowed = re.findall(r'`([\w.-]+\.h)`', item[m.end():] if m else '') or None
            if word in EXTERNAL:
                continue
            if word == 'everything':
                deps[mod] += [(m, None) for m in sorted(above)]
                deps[mod] += [(g, None) for g in GENERATED]
                continue
            if word in GENERATED:
                deps[mod].append((word, narrowed))
                continue
            if word not in names:
                fail(f'{DOC}:{line}: {mod} depends on "{word}", which is no module of the map')
                continue
            for dep in names[word]:
                if dep == mod:
                    continue
                if dep not in above:
                    fail(f'{DOC}:{line}: {mod} depends on {dep}, which the map lists below it '
                         '(dependencies point downward: a cycle or an arrow back up)')
                deps[mod].append((dep, narrowed))
        above.add(mod)
    return deps


# ---- headers and what each module may include ------------------------------------------------

def generated_headers(files):
    """Headers a module's meson.build generates (custom_target outputs): the module owns them."""
    out = {}
    for p in files:
        if os.path.basename(p) != 'meson.build' or not module_of(p):
            continue
        with open(p, encoding='utf-8') as f:
            text = f.read()
        for m in re.finditer(r"output:\s*\[([^\]]*)\]|output:\s*'([^']*)'", text):
            for name in re.findall(r"'([^']+\.h)'", m.group(0)):
                out[name] = module_of(p)
    return out


def header_owners(files):
    owners = generated_headers(files)
    for p in files:
        mod = module_of(p)
        if not p.endswith('.h') or not mod:
            continue
        name = os.path.basename(p)
        if name in owners and owners[name] != mod:
            fail(f'{p}: header name {name} is also in {owners[name]}: an include would be '
                 'ambiguous')
        owners[name] = mod
    return owners


def owner_of(name, owners):
    if name in owners:
        return owners[name]
    for gen, pat in GENERATED.items():
        if pat.match(name):
            return gen
    return None


def allowed_headers(mod, deps, owners, memo):
    """(modules whose every header mod may include, {single headers}), transitive."""
    if mod in memo:
        return memo[mod]
    memo[mod] = (set(), set())  # a cycle was reported already; stop here
    mods, single = {mod}, set()
    for dep, narrowed in deps.get(mod, []):
        if narrowed:
            for h in narrowed:
                if owner_of(h, owners) != dep:
                    fail(f'{DOC}: {mod} narrows {dep} to {h}, which {dep} does not have')
            single |= set(narrowed)
            continue
        sub_mods, sub_single = allowed_headers(dep, deps, owners, memo)
        mods |= sub_mods | {dep}
        single |= sub_single
    memo[mod] = (mods, single)
    return memo[mod]


def check_includes(files, deps, owners):
    memo = {}
    for p in files:
        if not p.endswith(('.c', '.h')):
            continue
        mod = module_of(p)
        if mod not in deps:
            fail(f'{p}: {mod} has no row in the module map ({DOC})')
            continue
        mods, single = allowed_headers(mod, deps, owners, memo)
        with open(p, encoding='utf-8', errors='replace') as f:
            for n, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if m:
                    check_one(p, n, mod, m.group(1), mods, single, deps, owners)


def check_one(path, n, mod, inc, mods, single, deps, owners):
    if '..' in inc.split('/'):
        fail(f'{path}:{n}: #include "{inc}" reaches another directory by a relative path')
        return
    name = os.path.basename(inc)
    owner = owner_of(name, owners)
    if owner is None:
        fail(f'{path}:{n}: #include "{inc}": no module owns {name}')
    elif owner not in mods and name not in single:
        declared = ', '.join(d if not h else f'{d} ({", ".join(h)})'
                             for d, h in deps[mod]) or 'nothing'
        fail(f'{path}:{n}: {mod} includes {name} of {owner}, which its row in {DOC} does not '
             f'allow (Depends on: {declared})')


# ---- meson include paths ---------------------------------------------------------------------

def strip_comments(text):
    out, quote = [], False
    for line in text.split('\n'):
        cur = ''
        for ch in line:
            if ch == "'":
                quote = not quote
            if ch == '#' and not quote:
                break
            cur += ch
        out.append(cur)
    return '\n'.join(out)


def check_meson(path):
    with open(path, encoding='utf-8') as f:
        text = strip_comments(f.read())
    for m in re.finditer(r'include_directories\s*\(', text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += (text[i] == '(') - (text[i] == ')')
            i += 1
        for s in re.findall(r"'([^']*)'", text[m.end():i - 1]):
            if s == '..' or s.startswith('../') or '/../' in s:
                line = text.count('\n', 0, m.start()) + 1
                fail(f"{path}:{line}: include_directories('{s}') reaches a sibling module's "
                     'headers; use its declared dependency')
    for m in re.finditer(r"'-I([^']*)'", text):
        if '..' in m.group(1).split('/'):
            line = text.count('\n', 0, m.start()) + 1
            fail(f"{path}:{line}: '-I{m.group(1)}' reaches a sibling module's headers")


def main():
    # The tree: this script's checkout, or the one named (tests/scripts/test_module_graph.py).
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')
    os.chdir(root)
    rows = read_map()
    if not rows:
        fail(f'{DOC}: no module map table found')
    deps = parse_deps(rows, short_names(rows))
    files = tree_files(ROOTS)
    owners = header_owners(files)
    check_includes(files, deps, owners)
    for p in tree_files(MESON_ROOTS):
        if os.path.basename(p) == 'meson.build':
            check_meson(p)
        elif p.endswith(('.c', '.h')) and not p.startswith(ROOTS):
            with open(p, encoding='utf-8', errors='replace') as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if m and '..' in m.group(1).split('/'):
                        fail(f'{p}:{n}: #include "{m.group(1)}" reaches another directory by a '
                             'relative path')
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
