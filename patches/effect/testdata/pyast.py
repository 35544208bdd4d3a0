# Oracle for the Go Python reader tests: prints, per file named on the command line, what
# Python's own ast module says, in the shape the Go side produces:
#   classes: qualified class name -> sorted method names (defs in the class body, also
#            under if/try/with, not inside nested defs or classes)
#   calls:   "Class.method" -> sorted names X of self.X(...), Class.X(...), super().X(...)
#            that run when the method runs (nested defs count only when called by name)
#   env:     sorted [name, line] of environment reads with a string-literal key
import ast
import json
import sys

FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def child_defs(nodes):
    out, stack = [], list(nodes)
    while stack:
        n = stack.pop()
        if isinstance(n, FUNCS):
            out.append(n)
            continue
        if isinstance(n, (ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(n))
    return out


def code_nodes(nodes):
    # Everything that runs when the body runs: a nested def's header does, its body not.
    stack = list(nodes)
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, FUNCS):
            stack.extend(n.decorator_list)
            stack.append(n.args)
            if n.returns is not None:
                stack.append(n.returns)
        else:
            stack.extend(ast.iter_child_nodes(n))


def recv_matches(v, cls):
    if isinstance(v, ast.Name) and v.id in ("self", cls):
        return True
    if isinstance(v, ast.Attribute) and v.attr in ("self", cls):
        return True
    return isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super"


def calls_of(fn, cls):
    result, visited = set(), set()

    def visit(f, scopes):
        if id(f) in visited:
            return
        visited.add(id(f))
        kids = {}
        for d in child_defs(f.body):
            kids.setdefault(d.name, []).append(d)
        scopes = scopes + [kids]
        for n in code_nodes(f.body):
            if not isinstance(n, ast.Call):
                continue
            if isinstance(n.func, ast.Attribute) and recv_matches(n.func.value, cls):
                result.add(n.func.attr)
            elif isinstance(n.func, ast.Name):
                for i in range(len(scopes) - 1, -1, -1):
                    if n.func.id in scopes[i]:
                        for d in scopes[i][n.func.id]:
                            visit(d, scopes[: i + 1])
                        break

    visit(fn, [])
    return result


def classes_of(tree):
    classes, calls = {}, {}

    def walk(node, qual):
        for n in child_defs_and_classes(node):
            q = n.name if not qual else qual + "." + n.name
            if isinstance(n, ast.ClassDef):
                methods = child_defs(n.body)
                classes.setdefault(q, set()).update(m.name for m in methods)
                for m in methods:
                    calls.setdefault(q + "." + m.name, set()).update(calls_of(m, n.name))
            walk(n, q)

    walk(tree, "")
    return classes, calls


def child_defs_and_classes(node):
    out, stack = [], list(node.body)
    while stack:
        n = stack.pop()
        if isinstance(n, FUNCS + (ast.ClassDef,)):
            out.append(n)
            continue
        if isinstance(n, ast.Lambda):
            continue
        stack.extend(ast.iter_child_nodes(n))
    return out


def env_reads(tree):
    os_names, env_names, getenv_names = {"os"}, set(), set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name == "os" and a.asname:
                    os_names.add(a.asname)
        if isinstance(n, ast.ImportFrom) and n.module == "os" and n.level == 0:
            for a in n.names:
                if a.name == "environ":
                    env_names.add(a.asname or a.name)
                if a.name == "getenv":
                    getenv_names.add(a.asname or a.name)
    aug_targets = {id(n.target) for n in ast.walk(tree) if isinstance(n, ast.AugAssign)}

    def is_environ(v):
        if isinstance(v, ast.Attribute) and v.attr == "environ":
            return isinstance(v.value, ast.Name) and v.value.id in os_names
        return isinstance(v, ast.Name) and v.id in env_names

    def key(k):
        if isinstance(k, ast.Constant) and isinstance(k.value, str):
            return k
        return None

    out = []
    for n in ast.walk(tree):
        k = None
        if isinstance(n, ast.Subscript) and is_environ(n.value):
            if isinstance(n.ctx, ast.Load) or id(n) in aug_targets:
                k = key(n.slice)
        elif isinstance(n, ast.Call) and n.args:
            f = n.func
            if isinstance(f, ast.Attribute) and f.attr == "get" and is_environ(f.value):
                k = key(n.args[0])
            elif isinstance(f, ast.Attribute) and f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id in os_names:
                k = key(n.args[0])
            elif isinstance(f, ast.Name) and f.id in getenv_names:
                k = key(n.args[0])
        elif isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.In, ast.NotIn)):
            if is_environ(n.comparators[0]):
                k = key(n.left)
        if k is not None:
            out.append([k.value, k.lineno])
    return sorted(out)


out = {}
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), path)
    classes, calls = classes_of(tree)
    out[path] = {
        "classes": {k: sorted(v) for k, v in classes.items()},
        "calls": {k: sorted(v) for k, v in calls.items()},
        "env": env_reads(tree),
    }
json.dump(out, sys.stdout)
