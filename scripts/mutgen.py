"""Generated mutants for ``scripts/mutate.py --generate``: classic operator mutations found with
``ast`` over the modules the hand-written samples cover, and a seeded sample of them.

Kinds: comparison flips (``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``is``/``is not``, ``in``/
``not in``), arithmetic swaps (``+``/``-``, ``*``/``/``, ``/``/``//``, also in ``+=``…),
``and``/``or``, ``not`` removed, numbers (0↔1, else ±1), ``return x`` → ``return None``,
``min``/``max``, a call or ``x += …`` statement dropped (``pass``), ``break``/``continue``, slice
bounds ±1. Docstrings, strings, f-strings, type annotations, ``__repr__`` and logging calls'
arguments are left alone; a ``log.debug`` call is never dropped (diagnostics, not behaviour).

Each mutant's ``old`` is the whole line(s) of the change, widened by neighbouring lines until it
occurs exactly once in its file (skipped if it cannot be); the mutated file must parse and differ
from the original in its syntax tree. A module's mutants run the union of the tests the
hand-written mutants of that module name. The sample is weighted by executable lines: each
module's share of the picks follows its count of statement lines, whatever its mutant count.
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mutants import Mutant

__all__ = ["MODULES", "enumerate_mutants", "executable_lines", "module_tests", "sample"]

ROOT = Path(__file__).resolve().parents[1]
MODULES = (
    "acquisition/summary/build.py",
    "acquisition/summary/source_energy.py",
    "acquisition/report/compare.py",
    "acquisition/secrets.py",
    "sinks/influxdb/http.py",
    "sinks/influxdb/__init__.py",
    "sinks/influxdb/segments.py",
    "sinks/file/__init__.py",
    "acquisition/processors/attribution.py",
    "acquisition/processors/energy.py",
    "acquisition/lineproto.py",
    "collectors/emonpi/fields.py",
    "collectors/rapl/backends.py",
    "collectors/procfs/trees.py",
    "acquisition/torch/steps.py",
)
_WIDEN = 4  # lines added above and below at most to make a snippet unique
_LOGGERS = {"log", "logger", "logging", "_log"}
_LOG_METHODS = {"debug", "info", "warning", "error", "exception", "critical"}
_CMP = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.Is: (r"is", "is not"),
    ast.IsNot: (r"is\s+not", "is"),
    ast.In: (r"in", "not in"),
    ast.NotIn: (r"not\s+in", "in"),
}
_ARITH = {
    ast.Add: ("+", ["-"]),
    ast.Sub: ("-", ["+"]),
    ast.Mult: ("*", ["/"]),
    ast.Div: ("/", ["*", "//"]),
    ast.FloorDiv: ("//", ["/"]),
}


@dataclass(frozen=True)
class Edit:
    """One change: ``kind``, the character spans it replaces and the line it is on."""

    kind: str
    spans: tuple[tuple[int, int, str], ...]  # (start, end, replacement) in the file's text
    line: int


class _Source:
    """A module's text with conversions from ``ast`` positions (UTF-8 columns) to offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def at(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode()[:col].decode())

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.at(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.at(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def line_of(self, offset: int) -> int:
        """1-based line holding ``offset``."""
        lo, hi = 0, len(self.lines) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def find_op(self, start: int, end: int, pattern: str) -> tuple[int, int] | None:
        """The operator matching ``pattern`` between two operands (comments blanked out)."""
        gap = re.sub(r"#[^\n]*", lambda m: " " * len(m.group()), self.text[start:end])
        found = re.search(rf"(?<![\w<>=!/*+-]){pattern}(?![\w<>=/*])", gap)
        return None if found is None else (start + found.start(), start + found.end())


def _is_log_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _LOG_METHODS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in _LOGGERS
    )


class _Finder(ast.NodeVisitor):
    """Collects the edits of one module."""

    def __init__(self, src: _Source) -> None:
        self.src = src
        self.edits: list[Edit] = []

    def add(self, kind: str, spans: Iterable[tuple[int, int, str]]) -> None:
        spans = tuple(spans)
        if spans:
            self.edits.append(Edit(kind, spans, self.src.line_of(spans[0][0])))

    # -- what is skipped --
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name == "__repr__":
            return
        for stmt in node.body:
            self.visit(stmt)  # not the annotations, defaults or decorators
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d]:
            self.visit(default)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return

    def visit_If(self, node: ast.If) -> None:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _is_log_call(node):
            return  # message text and its arguments
        fn = node.func
        if isinstance(fn, ast.Name) and fn.id in ("min", "max"):
            a, b = self.src.span(fn)
            self.add(f"{fn.id}→{'max' if fn.id == 'min' else 'min'}", [(a, b, _other(fn.id))])
        self.generic_visit(node)

    # -- expressions --
    def visit_Compare(self, node: ast.Compare) -> None:
        left = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            pattern, new = _CMP[type(op)]
            pat = pattern if pattern[0].isalpha() else re.escape(pattern)
            found = self.src.find_op(self.src.span(left)[1], self.src.span(right)[0], pat)
            if found:
                old = self.src.text[found[0] : found[1]]
                self.add(f"{' '.join(old.split())} → {new}", [(*found, new)])
            left = right
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        self._arith(node.op, self.src.span(node.left)[1], self.src.span(node.right)[0], "")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._arith(node.op, self.src.span(node.target)[1], self.src.span(node.value)[0], "=")
        self._drop(node, "x op= … dropped")
        self.visit(node.value)

    def _arith(self, op: ast.operator, start: int, end: int, suffix: str) -> None:
        if type(op) not in _ARITH:
            return
        sym, news = _ARITH[type(op)]
        found = self.src.find_op(start, end, re.escape(sym + suffix))
        for new in news if found else ():
            self.add(f"{sym}{suffix} → {new}{suffix}", [(*found, new + suffix)])  # type: ignore[misc]

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        word, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        spans = []
        for a, b in zip(node.values, node.values[1:], strict=False):
            found = self.src.find_op(self.src.span(a)[1], self.src.span(b)[0], word)
            if found:
                spans.append((*found, new))
        self.add(f"{word} → {new}", spans)
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if isinstance(node.op, ast.Not):
            start = self.src.span(node)[0]
            found = re.match(r"not\s*", self.src.text[start:])
            if found:
                self.add("not removed", [(start, start + found.end(), "")])
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        v = node.value
        if isinstance(v, bool) or not isinstance(v, int | float):
            return
        a, b = self.src.span(node)
        text = self.src.text[a:b]
        for n in (1,) if v == 0 else (0,) if v == 1 else (v + 1, v - 1):
            new = hex(int(n)) if text.lower().startswith("0x") else repr(type(v)(n))
            self.add(f"{text} → {new}", [(a, b, new)])

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.slice, ast.Slice):
            for bound in (node.slice.lower, node.slice.upper):
                if bound is not None:
                    a, b = self.src.span(bound)
                    text = self.src.text[a:b]
                    if not isinstance(bound, ast.Name | ast.Constant | ast.Attribute | ast.Call):
                        text = f"({text})"
                    for d in ("+", "-"):
                        self.add(f"slice bound {d}1", [(a, b, f"{text} {d} 1")])
        self.generic_visit(node)

    # -- statements --
    def visit_Return(self, node: ast.Return) -> None:
        v = node.value
        if v is not None and not (isinstance(v, ast.Constant) and v.value is None):
            a, b = self.src.span(v)
            self.add("return None", [(a, b, "None")])
        self.generic_visit(node)

    def visit_Break(self, node: ast.Break) -> None:
        a, b = self.src.span(node)
        self.add("break → continue", [(a, b, "continue")])

    def visit_Continue(self, node: ast.Continue) -> None:
        a, b = self.src.span(node)
        self.add("continue → break", [(a, b, "break")])

    def visit_Expr(self, node: ast.Expr) -> None:
        call = node.value.value if isinstance(node.value, ast.Await) else node.value
        if isinstance(call, ast.Call):
            debug = _is_log_call(call) and call.func.attr == "debug"  # type: ignore[attr-defined]
            if not debug:
                self._drop(node, "call dropped")
        self.generic_visit(node)

    def _drop(self, node: ast.stmt, kind: str) -> None:
        """Replace a statement that has its line(s) to itself by ``pass``."""
        a, b = self.src.span(node)
        first = self.src.starts[node.lineno - 1]
        last = self.src.starts[node.end_lineno]  # type: ignore[index]
        before, after = self.src.text[first:a], self.src.text[b:last]
        if before.strip() or (after.strip() and not after.strip().startswith("#")):
            return  # shares a line with another statement
        self.add(kind, [(first, last, f"{before}pass\n")])


def _other(name: str) -> str:
    return "max" if name == "min" else "min"


def _apply(text: str, spans: tuple[tuple[int, int, str], ...]) -> str:
    for start, end, new in sorted(spans, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def _snippet(src: _Source, edit: Edit, mutated: str) -> tuple[str, str] | None:
    """The edit's whole lines, widened until they occur once in the file; ``(old, new)``."""
    first = src.line_of(min(s for s, _, _ in edit.spans))
    last = src.line_of(max(e - 1 for _, e, _ in edit.spans))
    delta = len(mutated) - len(src.text)
    for up in range(_WIDEN + 1):
        for down in (up, up + 1) if up < _WIDEN else (up,):
            a, b = max(first - up, 1), min(last + down, len(src.lines))
            old = src.text[src.starts[a - 1] : src.starts[b]]
            if src.text.count(old) == 1:
                return old, mutated[src.starts[a - 1] : src.starts[b] + delta]
    return None


def module_tests(path: str, hand_written: Iterable[Mutant]) -> tuple[str, ...]:
    """The union of the tests the hand-written mutants of ``path`` name (options kept once)."""
    files: list[str] = []
    opts: list[tuple[str, str]] = []
    for m in hand_written:
        if m.path != path:
            continue
        args = iter(m.tests)
        for arg in args:
            if arg.startswith("-"):
                opt = (arg, next(args))
                opts += [opt] if opt not in opts else []
            elif arg not in files:
                files.append(arg)
    return (*files, *(x for opt in opts for x in opt))


def executable_lines(text: str) -> int:
    """Lines on which a statement starts, docstrings left out."""
    lines = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.stmt) and not _is_docstring(node):
            lines.add(node.lineno)
    return len(lines)


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


class _Module:
    """One module's text, syntax tree and edits; edits become mutants on demand."""

    def __init__(self, path: str, tests: tuple[str, ...], text: str | None = None) -> None:
        self.path, self.tests = path, tests
        self.src = _Source((ROOT / path).read_text() if text is None else text)
        self.tree = ast.parse(self.src.text)
        finder = _Finder(self.src)
        finder.visit(self.tree)
        self.edits = finder.edits
        stem = Path(path).name
        self.short = stem if stem != "__init__.py" else path.split("/")[-2]

    def mutant(self, edit: Edit) -> Mutant | None:
        """``edit`` as a mutant; None when the mutated file would not parse, would have the
        same syntax tree, or no snippet around the edit is unique."""
        mutated = _apply(self.src.text, edit.spans)
        try:
            if ast.dump(ast.parse(mutated)) == ast.dump(self.tree):
                return None
        except SyntaxError:
            return None
        pair = _snippet(self.src, edit, mutated)
        if pair is None:
            return None
        why = f"{edit.kind}: {self.src.lines[edit.line - 1].strip()}"
        name = f"[g] {edit.kind} {self.short}:{edit.line}"
        return Mutant(name, self.path, *pair, self.tests, why)


def _modules(
    hand_written: Iterable[Mutant], texts: Mapping[str, str] | None = None
) -> list[_Module]:
    known = list(hand_written)
    return [_Module(p, module_tests(p, known), (texts or {}).get(p)) for p in MODULES]


def enumerate_mutants(hand_written: Iterable[Mutant]) -> dict[str, list[Mutant]]:
    """Every generated mutant, by module (slow: each is parsed)."""
    return {
        mod.path: [m for m in map(mod.mutant, mod.edits) if m is not None]
        for mod in _modules(hand_written)
    }


def sample(
    seed: int,
    count: int,
    hand_written: Iterable[Mutant],
    texts: Mapping[str, str] | None = None,
) -> list[Mutant]:
    """``count`` mutants drawn without replacement, a module's weight its executable lines
    (shared among its edits), reproducible from ``seed``; in file and line order. An edit that
    makes no usable mutant is passed over for the next drawn.

    The draw depends on the modules' text (one key per edit, in order): ``texts`` (path → text,
    e.g. the modules at the commit a sample was recorded at) replaces the files' current text."""
    rng = random.Random(seed)
    keyed: list[tuple[float, _Module, Edit]] = []
    for mod in _modules(hand_written, texts):
        weight = executable_lines(mod.src.text) / max(len(mod.edits), 1)
        for edit in mod.edits:  # Efraimidis–Spirakis: the largest u ** (1 / w) win
            keyed.append((rng.random() ** (1 / weight), mod, edit))
    keyed.sort(key=lambda k: k[0], reverse=True)
    chosen: list[Mutant] = []
    for _, mod, edit in keyed:
        m = mod.mutant(edit)
        chosen += [m] if m is not None else []
        if len(chosen) == count:
            break
    order = {p: i for i, p in enumerate(MODULES)}
    return sorted(chosen, key=lambda m: (order[m.path], _line(m)))


def _line(m: Mutant) -> int:
    return int(m.name.rsplit(":", 1)[1])
