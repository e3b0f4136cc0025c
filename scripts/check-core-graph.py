#!/usr/bin/env python3
"""The core's files depend one way: fail on any cycle among them.

Two graphs, each checked for cycles (strongly connected components of more than one file, or a
file that reaches itself):
  include  every file under core/ -> the files under core/ it includes ("x.h", looked up beside
           the includer, then in core/, core/backend_api/, core/ref/, core/testing/: the build's
           include path)
  call     core/*.c -> the core/*.c files that define a function or object it names: each file
           is preprocessed (cc -E with the build's include path), so that the calls inside macros
           count, and only the file's own lines are read (not its headers'); static names are
           the file's own
Usage: scripts/check-core-graph.py [--root DIR] [--print]   (--print: list both graphs' edges)
"""

import argparse
import os
import re
import shlex
import subprocess
import sys

INCLUDE_DIRS = ["core", "core/backend_api", "core/ref", "core/testing"]
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
LINEMARK_RE = re.compile(r'^# (\d+) "([^"]*)"')
TOKEN_RE = re.compile(r"[A-Za-z_]\w*|\S")
STRING_RE = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'')


def core_files(root, top_only, exts):
    out = []
    base = os.path.join(root, "core")
    for d, _, names in os.walk(base):
        if top_only and d != base:
            continue
        out += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(exts)]
    return sorted(out)


def include_graph(root):
    files = core_files(root, False, (".c", ".h"))
    known = set(files)
    graph = {}
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            names = INCLUDE_RE.findall(fh.read())
        deps = set()
        for n in names:
            for d in [os.path.dirname(f)] + INCLUDE_DIRS:
                p = os.path.normpath(os.path.join(d, n))
                if p in known:
                    deps.add(p)
                    break
        graph[f] = deps
    return graph


def own_text(root, f, cc):
    """The file's own lines after preprocessing (its headers' lines left out)."""
    flags = ["-E", "-DDISTIL_BUILDING=1", "-I" + os.path.join(root, "include")]
    flags += ["-I" + os.path.join(root, d) for d in INCLUDE_DIRS]
    path = os.path.join(root, f)
    out = subprocess.run(
        shlex.split(cc) + flags + [path], check=True, capture_output=True, text=True
    ).stdout
    keep, mine = [], True
    for line in out.splitlines():
        m = LINEMARK_RE.match(line)
        if m:
            mine = os.path.realpath(m.group(2)) == os.path.realpath(path)
        elif mine and not line.lstrip().startswith("#"):
            keep.append(line)
    return STRING_RE.sub(" ", "\n".join(keep))


def definitions(tokens):
    """Names the file defines at file scope: (non-static, static) functions and objects."""
    public, private = set(), set()
    depth, start, body = 0, 0, False
    for i, t in enumerate(tokens):
        if depth == 0:
            decl = tokens[start:i]
            name = None
            if t == "{" and "(" in decl and "=" not in decl:  # a function's body begins
                name, body = decl[decl.index("(") - 1], True
            elif t == "=" and "(" not in decl and decl:  # an object's initialiser
                name = decl[decl.index("[") - 1] if "[" in decl else decl[-1]
            if name is not None:
                (private if "static" in decl else public).add(name)
            if t == ";":
                start = i + 1
        if t in "{(":
            depth += 1
        elif t in "})":
            depth -= 1
            if depth == 0 and t == "}" and body:  # a function's body ends
                start, body = i + 1, False
    return public, private


def call_graph(root, cc):
    files = core_files(root, True, (".c",))
    tokens = {f: TOKEN_RE.findall(own_text(root, f, cc)) for f in files}
    owner = {}
    for f in files:
        public, _ = definitions(tokens[f])
        for name in public:
            owner.setdefault(name, f)
    graph = {}
    for f in files:
        _, private = definitions(tokens[f])
        used = {t for t in tokens[f] if t in owner and t not in private}
        graph[f] = {owner[t] for t in used} - {f}
    return graph


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan), and self-loops."""
    index, low, on, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def path_in(graph, comp):
    """One cycle through the component's first file, as a chain of files."""
    start, members = comp[0], set(comp)
    prev, todo = {start: None}, [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                chain = [v]
                while prev[chain[-1]] is not None:
                    chain.append(prev[chain[-1]])
                return " -> ".join(chain[::-1] + [start])
            if w not in prev:
                prev[w] = v
                todo.append(w)
    return " -> ".join(comp)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--print", action="store_true", help="list both graphs' edges")
    args = ap.parse_args()
    cc = os.environ.get("CC", "cc")
    bad = 0
    for kind, graph in (("include", include_graph(args.root)), ("call", call_graph(args.root, cc))):
        if args.print:
            for f in sorted(graph):
                print(f"{kind}: {f} -> {' '.join(sorted(graph[f])) or '(none)'}")
        for comp in cycles(graph):
            bad += 1
            print(f"check-core-graph: {kind} cycle: {path_in(graph, comp)}", file=sys.stderr)
            print(f"    (files of the cycle: {', '.join(comp)})", file=sys.stderr)
    if bad:
        print("check-core-graph: the core's files must depend one way", file=sys.stderr)
        return 1
    print("check-core-graph: no include cycle, no call cycle among core/*.c")
    return 0


if __name__ == "__main__":
    sys.exit(main())
