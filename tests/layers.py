#!/usr/bin/env python3
"""tests/layers.py: the floor table of ARCHITECTURE.md, enforced, and
its rule that only cli/ reads the environment.

Reads every `#include "..."` of the product code (base/ ir/ lang/ io/
kernels/ compiler/ runtime/ cli/) and fails when one

  * goes up a floor (ir/ including compiler/),
  * goes sideways between folders of one floor (kernels/ including io/;
    kernels/cpu/ and kernels/cuda/ count as folders of their own;
    compiler/strategy/ is part of compiler/), except
    lang/ -> io/ (reading a dataset's shape is part of building a graph), or
  * closes a cycle between modules: a module is a header and its source
    (place.h, place.c), and a source without a header of its own joins the
    module whose `_impl.h` it includes (plan_memory.c joins plan through
    plan_impl.h); modules that include each other, directly or around a
    loop, are reported with the files that make each edge.

It also holds the backend interface to its shape (ARCHITECTURE.md,
"Backend capabilities"): the table of entries a backend fills
(runtime/backend_impl.h) is the backends' own, and everyone else calls
runtime/backend.h's functions and asks a backend's declared capabilities.
Outside runtime/backend*, it fails when

  * a product file includes runtime/backend_impl.h (tests may, to build a
    stand-in backend), or
  * any file of the product, tests/ or bench/ reads an entry of that table
    (`b->i.read_now == NULL`, `!b->i.set_threads`, `b->i.capture_begin ?`,
    `b->i.alloc(b, n)`): an entry tested for NULL guesses a capability, an
    entry called skips the functions. Comments and strings are skipped;
    assigning an entry (a test's stand-in) is allowed, and so is calling
    an entry whose name the collectives' table shares (`c->i.free(c)`),
    which no text alone tells from the backend's.

And it fails when the code below cli/ reads the environment (getenv,
secure_getenv, environ) other than in the few places ENV_ALLOWED lists
(a variable of another program's, in one file each; docs/architecture.md
says why): the A/B switches are fields of tfg_switches (base/switches.h),
read from TFG_* in cli/switches.c and passed down; other settings are
read in cli/ and passed down too. Comments and string literals are not
code: a getenv named in a comment is no read.

  python3 tests/layers.py [ROOT]     prints each violation as
                                     "FILE:LINE: reason", exits 1 if any

Includes of files not in the tree (the Bison header, system headers in
quotes) are outside the table and skipped."""

import os
import re
import sys

# floor of each folder; a file's folder is its longest listed prefix
FLOORS = {
    "base": 1,
    "ir": 2,
    "lang": 3,
    "io": 3,
    "kernels": 3,
    "kernels/cpu": 3,
    "kernels/cuda": 3,
    "compiler": 4,
    "compiler/strategy": 4,
    "runtime": 5,
    "cli": 6,
}
# subfolders that are part of the folder above them (one module per
# training strategy, ARCHITECTURE.md "Strategy"): they and it include
# each other freely, as files of one folder do
PART_OF = {"compiler/strategy": "compiler"}
# sideways includes the table allows: (from folder, to folder)
SIDEWAYS = {("lang", "io")}
SOURCES = (".c", ".h", ".cu", ".cuh", ".y", ".re")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

# The environment variables code below cli/ may read, each in one file:
# variables another program sets for tfg, whose reading belongs beside the
# library that uses them (docs/architecture.md, "Options").
ENV_ALLOWED = {
    # whether mpirun (Open MPI) or a PMIx launcher started this process:
    # the launcher's interface to the process, read where tfg meets MPI,
    # as MPI_Init itself reads it
    ("runtime/mpi.c", "OMPI_COMM_WORLD_SIZE"),
    ("runtime/mpi.c", "PMIX_RANK"),
    # where the CUDA toolkit is, to dlopen its libnvrtc: the toolkit's own
    # variable (nvcc's, the Makefile's)
    ("kernels/nvrtc.c", "CUDA_HOME"),
}
ENV_READ = re.compile(r"\b(secure_getenv|getenv|__environ|environ)\b")
ENV_NAME = re.compile(r'\s*\(\s*"([^"\\]*)"\s*\)')


def folder_of(path):
    """The listed folder a repository path lies in, or None."""
    best = None
    for f in FLOORS:
        if path.startswith(f + "/") and "/" not in path[len(f) + 1:]:
            best = f
    return best


def below(a, b):
    """True when folder a may include folder b."""
    a, b = PART_OF.get(a, a), PART_OF.get(b, b)
    if a == b:
        return True
    # kernels/cpu and kernels/cuda use the shared kernels/ headers above them
    if b == "kernels" and a.startswith("kernels/"):
        return True
    if (a, b) in SIDEWAYS:
        return True
    return FLOORS[b] < FLOORS[a]


def scan(root):
    """{path: [(line, included path)]} for every product source file."""
    files = {}
    for f in sorted(FLOORS):
        d = os.path.join(root, f)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if name.endswith(SOURCES):
                files[f + "/" + name] = []
    for path in files:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                if inc not in files:  # "cpu_impl.h" beside the file
                    near = os.path.dirname(path) + "/" + inc
                    inc = near if near in files else None
                if inc:
                    files[path].append((n, inc))
    return files


def stem(path):
    return os.path.splitext(path)[0]


def modules(files):
    """{path: module}: see the module rule in the purpose comment."""
    headers = {stem(p) for p in files if p.endswith((".h", ".cuh"))}
    mod = {}
    for p, incs in files.items():
        s = stem(p)
        if s.endswith("_impl"):
            s = s[: -len("_impl")]
        elif not p.endswith((".h", ".cuh")) and s not in headers:
            for _, inc in incs:
                if inc.endswith("_impl.h") and os.path.dirname(inc) == os.path.dirname(p):
                    s = stem(inc)[: -len("_impl")]
                    break
        mod[p] = s
    return mod


def cycles(files, mod):
    """Strongly connected groups of more than one module (Tarjan), each
    with the include lines that tie it."""
    edges = {}
    for p, incs in files.items():
        for n, inc in incs:
            a, b = mod[p], mod[inc]
            if a != b:
                edges.setdefault(a, {}).setdefault(b, (p, n, inc))
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(set(mod.values())):
        if v not in index:
            visit(v)
    ties = []
    for group in out:
        for a in group:
            for b, why in sorted(edges.get(a, {}).items()):
                if b in group:
                    ties.append((group, why))
    return ties


def env_reads(root, files):
    """"FILE:LINE: reason" for every read of the environment below cli/
    that ENV_ALLOWED does not list."""
    bad = []
    for p in sorted(files):
        if folder_of(p) == "cli":
            continue
        with open(os.path.join(root, p), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        code, bare = code_only(text, strings=False), code_only(text)
        for m in ENV_READ.finditer(bare):
            line = bare.count("\n", 0, m.start()) + 1
            name = ENV_NAME.match(code, m.end()) if m.group(1).endswith("getenv") else None
            if name and (p, name.group(1)) in ENV_ALLOWED:
                continue
            if name:
                what = f'{m.group(1)}("{name.group(1)}")'
            else:
                what = m.group(1) + ("(...)" if m.group(1).endswith("getenv") else "")
            bad.append(f"{p}:{line}: {what} below cli/: the environment is read in cli/ and passed "
                       f"down (A/B switches: tfg_switches, base/switches.h; docs/architecture.md)")
    return bad


def check(root):
    files = scan(root)
    bad = []
    for p, incs in sorted(files.items()):
        fa = folder_of(p)
        for n, inc in incs:
            fb = folder_of(inc)
            if not below(fa, fb):
                how = "up" if FLOORS[fb] > FLOORS[fa] else "sideways"
                bad.append(f"{p}:{n}: includes {inc}: {how} from {fa}/ (floor {FLOORS[fa]}) "
                           f"to {fb}/ (floor {FLOORS[fb]})")
    mod = modules(files)
    for group, (p, n, inc) in cycles(files, mod):
        bad.append(f"{p}:{n}: includes {inc}: a cycle between modules {' <-> '.join(group)}")
    bad += env_reads(root, files)
    return files, bad


# The backend's table of entries and who may read it (see the top).
BACKEND_IMPL = "runtime/backend_impl.h"
BACKEND_OWN = "runtime/backend"  # a path prefix: runtime/backend.c, backend_host.c, ...
VTABLE_DIRS = sorted(set(f.split("/")[0] for f in FLOORS)) + ["tests", "bench"]
ENTRY = re.compile(r"\(\s*\*\s*(\w+)\s*\)\s*\(")
ENTRY_USE = re.compile(r"(?:->|\.)\s*i\s*\.\s*(\w+)\b")


def table_entries(root, path, name):
    """The entry names of the struct `name` of function pointers in path
    (empty when the file or the struct is not there)."""
    try:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return set()
    m = re.search(r"typedef struct " + name + r"\s*\{(.*?)\}\s*" + name + r"\s*;", text, re.S)
    return set(ENTRY.findall(m.group(1))) if m else set()


def code_only(text, strings=True):
    """text with comments blanked, and with strings and character literals
    blanked too unless strings is False (then they are kept, so a read's
    argument can be named); newlines kept, so line numbers hold. A literal
    ends at its closing quote or at the end of its line."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            if not strings:
                out.append(text[i:j])
                i = j
                continue
        else:
            out.append(c)
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    return "".join(out)


def vtable_uses(root, files):
    """Violations of the backend interface's shape (see the top)."""
    bad = []
    for p, incs in sorted(files.items()):
        if not p.startswith(BACKEND_OWN):
            bad += [f"{p}:{n}: includes {inc}: the backend table is the backends' own (runtime/backend*); "
                    f"call runtime/backend.h's functions" for n, inc in incs if inc == BACKEND_IMPL]
    entries = table_entries(root, BACKEND_IMPL, "tfg_backend_i")
    if not entries:  # a checker that cannot see the table would pass anything
        return bad + [f"{BACKEND_IMPL}: no tfg_backend_i table of entries to check its readers against"]
    shared = table_entries(root, "runtime/collective.h", "tfg_coll_i")
    for top in VTABLE_DIRS:
        for d, subdirs, names in os.walk(os.path.join(root, top)):
            subdirs.sort()
            for name in sorted(names):
                path = os.path.relpath(os.path.join(d, name), root).replace(os.sep, "/")
                if not name.endswith(SOURCES) or path.startswith(BACKEND_OWN):
                    continue
                with open(os.path.join(d, name), encoding="utf-8", errors="replace") as fh:
                    code = code_only(fh.read())
                for m in ENTRY_USE.finditer(code):
                    entry = m.group(1)
                    if entry not in entries:
                        continue
                    rest = code[m.end():m.end() + 80].lstrip()
                    line = code.count("\n", 0, m.start()) + 1
                    if rest.startswith("=") and not rest.startswith("=="):
                        continue  # filling the table: a stand-in backend
                    if rest.startswith("("):
                        if entry not in shared:
                            bad.append(f"{path}:{line}: calls the backend table's {entry} directly: "
                                       f"call tfg_backend_{entry} (runtime/backend.h)")
                    else:
                        bad.append(f"{path}:{line}: tests the backend table's {entry} (a NULL test guesses "
                                   f"a capability): ask tfg_backend_get_caps (runtime/backend.h)")
    return bad


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    files, bad = check(root)
    bad += vtable_uses(root, files)
    for b in bad:
        print(b)
    if not files:
        print(f"{root}: no product sources found")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
