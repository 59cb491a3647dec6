"""Check a folder of vLLM sources for the hooks ttlctl's scheduler plugin uses (no import).

    python -m tests.tools.vllm_hooks SRC [SRC ...]

``SRC`` holds the ``vllm`` package's Python files: site-packages, a source checkout,
or a wheel unpacked with ``unzip vllm-X.whl 'vllm/*.py' -d SRC`` (a CUDA wheel
cannot be installed on a CPU machine, but its Python files can be read). The
check uses ``ast`` only, so it needs neither vLLM's compiled extensions nor torch.

For each source it prints one line per hook of :data:`ttlctl.engine.hooks.HOOKS` that
its release must have (:func:`ttlctl.engine.compat.hooks_release`: a release the plugin
does not support is read as the nearest one that it does, an unreadable version as the
newest), found with a signature the
plugin can use, or why not, judged by :func:`ttlctl.engine.hooks.mismatch`, the rule
the import-time check applies;
the abstract-method checks (``RequestQueue`` against ``ProgramQueue``;
``SchedulerInterface`` against ``Scheduler``, so the plugin inherits every
interface method), the call sites the scheduler's docstring cites with their
``file:line``, where the prefix cache's map can lose entries (the prefix-hit
memo sees only those in ``BlockPool._remove_cached_block_hashes`` and a reset),
and how the waiting loop treats a head granted 0 tokens. Exit
status: 0 when everything is found, 1 when something is missing, 2 on bad input.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ttlctl.engine import compat, hooks
from ttlctl.engine.hooks import Hook, Param

ENGINE_CORE = "vllm.v1.engine.core"
INTERFACE = "vllm.v1.core.sched.interface"

Definition = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Site:
    """``function`` calls ``callee`` (with ``keyword``, or without ``without``)."""

    label: str
    module: str
    function: str
    callee: str
    keyword: str | None = None
    without: str | None = None


SITES: tuple[Site, ...] = (
    Site("--scheduler-cls resolved", ENGINE_CORE, "EngineCore.__init__", "get_scheduler_cls"),
    Site("scheduler built", ENGINE_CORE, "EngineCore.__init__", "Scheduler", keyword="vllm_config"),
    Site("step schedules", ENGINE_CORE, "EngineCore.step", "schedule"),
    Site("async step schedules", ENGINE_CORE, "EngineCore.step_with_batch_queue", "schedule"),
    Site("arrivals", ENGINE_CORE, "EngineCore.add_request", "add_request"),
    Site("aborts", ENGINE_CORE, "EngineCore.abort_requests", "finish_requests"),
    Site("waiting queue made", hooks.SCHEDULER, "Scheduler.__init__", "create_request_queue"),
    Site(
        "running path",
        hooks.SCHEDULER,
        "Scheduler.schedule",
        "allocate_slots",
        without="num_new_computed_tokens",
    ),
    Site("waiting path hit", hooks.SCHEDULER, "Scheduler.schedule", "_get_local_prefix_cache_hit"),
    Site(
        "waiting path",
        hooks.SCHEDULER,
        "Scheduler.schedule",
        "allocate_slots",
        keyword="num_new_computed_tokens",
    ),
    Site("finish (abort)", hooks.SCHEDULER, "Scheduler.finish_requests", "_free_request"),
    Site("finish (stop)", hooks.SCHEDULER, "Scheduler.update_from_output", "_free_request"),
    Site("free", hooks.SCHEDULER, "Scheduler._free_request", "_free_blocks"),
    Site("free blocks", hooks.SCHEDULER, "Scheduler._free_blocks", "_free_request_blocks"),
    Site("deferred free", hooks.SCHEDULER, "Scheduler._free_request_blocks", "pop_blocks_for_free"),
    Site(
        "deferred free",
        hooks.SCHEDULER,
        "Scheduler._free_request_blocks",
        "_request_blocks_can_be_freed",
    ),
    Site("deferred free", hooks.SCHEDULER, "Scheduler._drain_deferred_frees", "free_blocks"),
)

#: (module, class whose abstract methods) -> (module, class that must define them)
INHERITED = ((INTERFACE, "SchedulerInterface"), (hooks.SCHEDULER, "Scheduler"))
#: interface methods whose line the report shows (new in 0.33)
NOTED = ("has_request",)


class Sources:
    """The ``vllm`` package under a folder, parsed on demand."""

    def __init__(self, root: Path) -> None:
        package = root / "vllm" if (root / "vllm" / "__init__.py").is_file() else root
        if not (package / "__init__.py").is_file() or package.name != "vllm":
            raise ValueError(f"{root}: no vllm package (vllm/__init__.py) there")
        self.package = package
        self._trees: dict[str, ast.Module | None] = {}

    def path(self, module: str) -> Path:
        return self.package.parent.joinpath(*module.split(".")).with_suffix(".py")

    def relative(self, module: str) -> str:
        return self.path(module).relative_to(self.package).as_posix()

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            path = self.path(module)
            self._trees[module] = ast.parse(path.read_text(), str(path)) if path.is_file() else None
        return self._trees[module]

    def version(self) -> str:
        path = self.package / "_version.py"
        match = re.search(r"""__version__\s*=\s*version\s*=\s*['"]([^'"]+)""", _read(path))
        return match.group(1) if match else "unknown"

    def find_class(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
        tree = self.tree(module)
        if tree is None or depth > 4:
            return None
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return module, node
        for found in ast.walk(tree):  # a name imported from another vllm module
            if isinstance(found, ast.ImportFrom) and (found.module or "").startswith("vllm"):
                assert found.module is not None
                for alias in found.names:
                    if (alias.asname or alias.name) == name:
                        return self.find_class(found.module, alias.name, depth + 1)
        return None

    def mro(self, module: str, name: str) -> Iterator[tuple[str, ast.ClassDef]]:
        """The class, then its bases found in these sources, depth first."""
        found = self.find_class(module, name)
        if found is None:
            return
        yield found
        for base in found[1].bases:
            base_name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
            if base_name and base_name not in ("ABC", "object", "Enum", "IntEnum", "enum"):
                yield from self.mro(found[0], base_name)


def _read(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def parameters(node: Definition) -> list[Param]:
    """A method's parameters after ``self`` (as :func:`hooks.mismatch` reads them)."""
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults = [False] * (len(positional) - len(args.defaults)) + [True] * len(args.defaults)
    params = [Param(a.arg, hooks.POSITIONAL, d) for a, d in zip(positional, defaults, strict=True)]
    if args.vararg is not None:
        params.append(Param(args.vararg.arg, hooks.VAR_POSITIONAL))
    for a, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        params.append(Param(a.arg, hooks.KEYWORD, default is not None))
    if args.kwarg is not None:
        params.append(Param(args.kwarg.arg, hooks.VAR_KEYWORD))
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    return params if static else params[1:]


def _decorated(node: Definition, name: str) -> bool:
    return any(
        (isinstance(d, ast.Name) and d.id == name)
        or (isinstance(d, ast.Attribute) and d.attr == name)
        for d in node.decorator_list
    )


def _method(cls: ast.ClassDef, name: str) -> Definition | None:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node
    return None


def _class_names(cls: ast.ClassDef) -> dict[str, int]:
    names: dict[str, int] = {}
    for node in cls.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Name):
                names.setdefault(target.id, node.lineno)
    return names


def _self_names(cls: ast.ClassDef) -> dict[str, int]:
    names: dict[str, int] = {}
    for node in ast.walk(cls):
        if not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                names.setdefault(target.attr, node.lineno)
    return names


def check_hook(src: Sources, hook: Hook) -> tuple[str | None, str]:
    """(why it does not fit, or None; ``file:line`` where it was found)."""
    classes = list(src.mro(hook.module, hook.owner))
    if not classes:
        return f"no class {hook.owner} in {hook.module}", ""
    for module, cls in classes:
        where = src.relative(module)
        method = _method(cls, hook.name)
        if hook.use in hooks.METHOD_USES and method is not None:
            return hooks.mismatch(hook, parameters(method)), f"{where}:{method.lineno}"
        if hook.use == hooks.MEMBER and hook.name in _class_names(cls):
            return None, f"{where}:{_class_names(cls)[hook.name]}"
        if hook.use == hooks.ATTRIBUTE:
            if method is not None and _decorated(method, "property"):
                return None, f"{where}:{method.lineno}"
            for names in (_self_names(cls), _class_names(cls)):
                if hook.name in names:
                    return None, f"{where}:{names[hook.name]}"
    return f"no {hook.where}", ""


def abstract(src: Sources, module: str, name: str) -> dict[str, int]:
    found = src.find_class(module, name)
    if found is None:
        return {}
    return {
        node.name: node.lineno
        for node in found[1].body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and _decorated(node, "abstractmethod")
    }


def _function(src: Sources, module: str, qualname: str) -> Definition | None:
    owner, _, name = qualname.partition(".")
    found = src.find_class(module, owner)
    return _method(found[1], name) if found is not None else None


def _callee(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)


def calls(src: Sources, site: Site) -> list[int]:
    """Lines where ``site.function`` calls ``site.callee`` as the site asks."""
    function = _function(src, site.module, site.function)
    if function is None:
        return []
    lines = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and _callee(node) == site.callee:
            keywords = {k.arg for k in node.keywords}
            if site.keyword is not None and site.keyword not in keywords:
                continue
            if site.without is not None and site.without in keywords:
                continue
            lines.append(node.lineno)
    return sorted(lines)


def _zero_test(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "num_new_tokens"
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == 0
    )


def zero_token_head(src: Sources) -> list[str]:
    """What the waiting loop of ``Scheduler.schedule`` does with a request granted 0 tokens.

    The waiting loop is the code after ``schedule``'s local ``skip_request``;
    each ``if num_new_tokens == 0:`` there either ends admission (``break``) or
    requeues the request and goes on to the next (``skip_request``, ``continue``).
    """
    schedule = _function(src, hooks.SCHEDULER, "Scheduler.schedule")
    if schedule is None:
        return []
    nodes = list(ast.walk(schedule))
    start = min(
        (n.lineno for n in nodes if isinstance(n, ast.FunctionDef) and n.name == "skip_request"),
        default=0,
    )
    seen = []
    tests = [n for n in nodes if isinstance(n, ast.If) and _zero_test(n)]
    for node in sorted(tests, key=lambda n: n.lineno):
        if node.lineno < start:
            continue
        body = [n for stmt in node.body for n in ast.walk(stmt)]
        if any(isinstance(n, ast.Call) and _callee(n) == "skip_request" for n in body):
            seen.append(f"{node.lineno} skip_request+continue")
        elif any(isinstance(n, ast.Break) for n in body):
            seen.append(f"{node.lineno} break")
        else:
            seen.append(f"{node.lineno} other")
    return seen


#: the prefix cache's map (block hash -> blocks) and where vLLM may change it without the
#: prefix-hit memo (``ttlctl.engine.hitmemo``) seeing it: entries are added anywhere in
#: ``BlockPool`` (an addition never changes a lookup's answer: it goes after), removed
#: only in ``_remove_cached_block_hashes`` (which the memo wraps), and the map replaced
#: (0.32, 0.33) or emptied in place (0.34: ``clear``) only when the pool is made or its
#: prefix cache reset (also wrapped)
CACHE_MAP = "cached_block_hash_to_block"
MAP_READS = frozenset({"get_one_block", "contain", "__len__"})
MAP_REMOVES_IN = "BlockPool._remove_cached_block_hashes"
MAP_ADDS_IN = "BlockPool."
MAP_REPLACED_IN = frozenset({"BlockPool.__init__", "BlockPool.reset_prefix_cache"})
MAP_CLEARED_BY = "clear"


def _scopes(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """Every node with the qualified name of the function (``Class.method``) it is in."""

    def walk(node: ast.AST, scope: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            name = getattr(child, "name", None)
            inner = (
                f"{scope}.{name}".lstrip(".")
                if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                else scope
            )
            yield inner, child
            yield from walk(child, inner)

    yield from walk(tree, "")


def cache_map_writes(src: Sources) -> tuple[list[str], list[str]]:
    """(where the cache map loses entries as the memo expects, where it changes otherwise),
    over every module of the package that names the map."""
    expected: list[str] = []
    other: list[str] = []
    for path in sorted(src.package.rglob("*.py")):
        text = path.read_text()
        if CACHE_MAP not in text:
            continue
        where = path.relative_to(src.package).as_posix()
        in_pool = where == src.relative(hooks.BLOCK_POOL)
        for scope, node in _scopes(ast.parse(text, str(path))):
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Attribute) and t.attr == CACHE_MAP for t in targets):
                    ok = in_pool and scope in MAP_REPLACED_IN
                    (expected if ok else other).append(f"{where}:{node.lineno} {scope} replaces")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr == CACHE_MAP
                and node.func.attr not in MAP_READS
            ):
                op = node.func.attr
                if op == "insert":
                    ok = in_pool and scope.startswith(MAP_ADDS_IN)
                elif op == MAP_CLEARED_BY:
                    ok = in_pool and scope in MAP_REPLACED_IN
                else:
                    ok = in_pool and op == "pop" and scope == MAP_REMOVES_IN
                if not ok or op != "insert":
                    (expected if ok else other).append(f"{where}:{node.lineno} {scope} {op}")
    return expected, other


def report(root: Path) -> tuple[list[str], int]:
    """The lines to print for one source folder and the number of failures."""
    src = Sources(root)
    version = src.version()
    table = hooks.for_release(compat.hooks_release(version))
    lines = [f"vLLM {version} at {src.package}"]
    failures = 0

    def line(ok: bool, what: str, where: str) -> None:
        nonlocal failures
        failures += not ok
        lines.append(f"{'ok  ' if ok else 'FAIL'}  {what:<72} {where}".rstrip())

    for hook in table:
        why, where = check_hook(src, hook)
        line(why is None, f"{hook.use:<9} {hook.label}" + (f": {why}" if why else ""), where)
    for module, name in hooks.COMPLETE:
        methods = abstract(src, module, name)
        extra = sorted(set(methods) - hooks.implemented(module, name))
        what = f"abstract  {name}: {len(methods)} methods, all implemented by the plugin"
        line(bool(methods) and not extra, what + (f"; not {extra}" if extra else ""), "")
    (i_module, i_name), (s_module, s_name) = INHERITED
    wanted = abstract(src, i_module, i_name)
    owner = src.find_class(s_module, s_name)
    defined = {n.name for n in owner[1].body if isinstance(n, Definition)} if owner else set()
    missing = sorted(set(wanted) - defined)
    what = f"abstract  {i_name}: {len(wanted)} methods, all inherited from {s_name}"
    where = ", ".join(
        f"{name} {src.relative(i_module)}:{wanted[name]}" for name in NOTED if name in wanted
    )
    line(bool(wanted) and not missing, what + (f"; not {missing}" if missing else ""), where)
    for site in SITES:
        found = calls(src, site)
        how = f" with {site.keyword}=" if site.keyword else ""
        how += f" without {site.without}=" if site.without else ""
        what = f"call site {site.function} -> {site.callee}{how} ({site.label})"
        where = f"{src.relative(site.module)}:{','.join(map(str, found))}" if found else ""
        line(bool(found), what, where)
    removes, other = cache_map_writes(src)
    what = f"cache map: entries removed only in {MAP_REMOVES_IN} (prefix-hit memo)"
    if other:
        what += f"; also {', '.join(other)}"
    elif not any(w.endswith(" pop") for w in removes):
        what += "; no removal found"
    popped = any(w.endswith(" pop") for w in removes)
    line(popped and not other, what, ", ".join(w.split()[0] for w in removes))
    zero = "; ".join(zero_token_head(src)) or "none found"
    lines.append(
        f"note  waiting loop, request granted 0 tokens: {src.relative(hooks.SCHEDULER)}: {zero}"
    )
    total = len(table) + len(hooks.COMPLETE) + 2 + len(SITES)
    lines.append(f"{total - failures}/{total} found" + (f", {failures} not" if failures else ""))
    return lines, failures


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    failed = 0
    for arg in argv:
        try:
            lines, failures = report(Path(arg))
        except (ValueError, SyntaxError, OSError) as exc:
            print(f"vllm_hooks: {exc}", file=sys.stderr)
            return 2
        print("\n".join(lines))
        failed += failures
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
