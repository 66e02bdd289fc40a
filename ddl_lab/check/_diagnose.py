"""The diagnosis layer every check shares (CONTRIBUTING.md, "Checks"), in this order: values
in the learner's terms (``describe_value``, ``returned_none``); dtype-fair comparison
(``differs``; ``apart`` prints expected and got with the digits that tell them apart); named
mistakes (``explain``, ``factor_of``) and mutated inputs (``Snapshot``); seeded cases
(``Cases``); the refusal of the package's own implementation (``refuse_package_copy``);
Adagrad's diagnosis (lessons 01 and 07)."""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

# rtol per floating dtype: a few thousand ulps, far below any real mistake (a factor, a sign)
_RTOL = {"float16": 5e-3, "bfloat16": 3e-2, "float32": 2e-4, "float64": 1e-9}


def as_array(value: Any) -> np.ndarray | None:
    """``value`` (numpy, torch, list, scalar) as a numeric numpy array in its own dtype, or
    None if it is not numeric (None, a string, a dict, ragged lists). Never raises."""
    try:
        if type(value).__module__.startswith("torch"):
            t = value.detach().cpu()
            return (t.float() if str(t.dtype) == "torch.bfloat16" else t).numpy()
        if isinstance(value, (list, tuple)) and any(
                type(v).__module__.startswith("torch") for v in value):
            value = [as_array(v) for v in value]
        a = np.asarray(value)
    except Exception:
        return None
    return a if a.dtype.kind in "iufc" else None        # not bool ("b"), str, object


def dtype_name(value: Any) -> str:
    """'float32 tensor', 'float64 array', 'int', 'NoneType' … for messages."""
    if type(value).__module__.startswith("torch") and hasattr(value, "dtype"):
        return f"{str(value.dtype).replace('torch.', '')} tensor"
    return f"{value.dtype} array" if isinstance(value, np.ndarray) else type(value).__name__


def tolerance(*values: Any) -> float:
    """The relative tolerance of the least precise floating dtype among ``values`` (float64's
    for Python numbers, ints and lists)."""
    dtypes = (str(getattr(v, "dtype", "")).replace("torch.", "") for v in values)
    return max((_RTOL.get(d, _RTOL["float64"]) for d in dtypes), default=_RTOL["float64"])


def describe_value(value: Any, limit: int = 60) -> str:
    """What a function returned, in words: 'None', 'a float32 tensor of shape (3,)', …"""
    if value is None:
        return "None"
    a = as_array(value)
    if a is not None and a.ndim > 0:
        return f"a {dtype_name(value)} of shape {tuple(a.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} items"
    text = repr(value)
    return f"{type(value).__name__} {text[:limit] + ('…' if len(text) > limit else '')}"


def returned_none(got: Any, name: str, what: str, instead: str | None = None,
                  call: str = "") -> str | None:
    """The message for a function that returned None (forgot ``return``); else, given
    ``instead``, "``call`` (default ``name``) returned <what it did>; return ``instead``"."""
    if got is not None:
        return instead and f"{call or name} returned {describe_value(got)}; return {instead}"
    return (f"{name} returned None: the function has no `return` (or returns nothing on "
            f"some path) — return {what}.")


def returned_arrays(out: Any, names: tuple[str, ...], name: str) -> list[np.ndarray] | str:
    """The parts of a returned tuple (or list) as numpy arrays in their own dtypes (boolean
    masks too), or the message saying what came back instead."""
    what = f"a tuple ({', '.join(names)})"
    if not isinstance(out, (tuple, list)) or len(out) != len(names):
        got = (f"a {type(out).__name__} of {len(out)} items" if isinstance(out, (tuple, list))
               else describe_value(out))
        return returned_none(out, name, what) or f"{name} must return {what}, got {got}."
    arrays = []
    for part, x in zip(names, out):
        a = as_array(x)
        if a is None and str(getattr(x, "dtype", "")) in ("bool", "torch.bool"):
            a = np.asarray(x.detach().cpu() if hasattr(x, "detach") else x)
        if a is None:
            return (f"{name} returned {describe_value(x)} as {part}; return a tensor (or a "
                    "numpy array).")
        arrays.append(a)
    return arrays


def differs(expected: Any, got: Any, rtol: float | None = None,
            scale: float | None = None) -> str | None:
    """None if ``got`` equals ``expected`` within the looser of their dtypes (or ``rtol``),
    else what differs. The absolute floor, ``rtol × scale`` (by default the largest
    |expected|), keeps cancellation near zero from failing a right answer. Never raises."""
    e, g = as_array(expected), as_array(got)
    if g is None:
        return f"got {describe_value(got)}, expected {describe_value(expected)}"
    if e is None:
        return "the expected value is not numeric"          # a bug of the check, not the learner
    if e.shape != g.shape:
        same_size = " (same values, another shape)" if g.size == e.size and g.size > 0 else ""
        return f"shape {tuple(g.shape)}, expected {tuple(e.shape)}{same_size}"
    if e.size == 0:
        return None
    rtol = tolerance(expected, got) if rtol is None else rtol
    e64, g64 = (a.astype(np.complex128 if a.dtype.kind == "c" else np.float64) for a in (e, g))
    if scale is None:
        finite = np.abs(e64[np.isfinite(e64)])
        scale = float(finite.max()) if finite.size else 1.0
    with np.errstate(all="ignore"):
        bad = ~np.isclose(g64, e64, rtol=rtol, atol=rtol * max(scale, 1e-300), equal_nan=True)
    if not bad.any():
        return None
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    where = idx[0] if len(idx) == 1 else idx
    if not np.isfinite(g64[idx]):
        return (f"element {where} is {g64[idx]}, expected {_fmt(e64[idx])} — a nan/inf "
                f"({int((~np.isfinite(g64)).sum())} of {g.size} elements are not finite)")
    got_text, want_text = apart(g64[idx], e64[idx])
    return (f"element {where} is {got_text}, expected {want_text} "
            f"({int(bad.sum())} of {bad.size} elements differ)")


def same(expected: Any, got: Any, rtol: float | None = None, scale: float | None = None) -> bool:
    return differs(expected, got, rtol, scale) is None


def _fmt(x: Any, digits: int = 6, spec: str = "") -> str:
    return f"{x:{spec}.{digits}g}" if not isinstance(x, complex) else str(x)


def apart(got: Any, expected: Any, spec: str = "") -> tuple[str, str]:
    """``got`` and ``expected`` as a message prints them (``spec``: e.g. ',' for thousands):
    6 significant digits or more until they read differently (past 17, their difference)."""
    for digits in range(6, 18):
        g, e = _fmt(got, digits, spec), _fmt(expected, digits, spec)
        if g != e:
            return g, e
    try:
        return f"{g} (differing by {float(got) - float(expected):.3g})", e
    except TypeError:
        return f"{g} (differing by {got - expected})", e


def explain(got: Any, mistakes: dict[str, Any] | Iterable[tuple[str, Any]],
            rtol: float | None = None, right: Any = None, scale: float | None = None
            ) -> str | None:
    """The first mistake whose value explains ``got``: ``mistakes`` maps a message to what
    code making that mistake returns (a value, or a callable ``got -> bool``); a value that
    is also the ``right`` answer names no mistake. ``rtol``, ``scale``: as for ``same``."""
    items = mistakes.items() if isinstance(mistakes, dict) else mistakes
    for message, value in items:
        try:
            hit = value(got) if callable(value) else (
                value is not None and same(value, got, rtol, scale)
                and (right is None or not same(value, right, rtol, scale)))
        except Exception:
            hit = False
        if hit:
            return message
    return None


def factor_of(expected: Any, got: Any, rtol: float | None = None) -> float | None:
    """c if ``got`` ≈ c · ``expected`` for one constant c ≠ 1 (a sign, sum vs mean), else None."""
    e, g = as_array(expected), as_array(got)
    if e is None or g is None or e.shape != g.shape or e.size == 0:
        return None
    e64, g64 = e.astype(float).ravel(), g.astype(float).ravel()
    norm = float(e64 @ e64)
    if not np.isfinite(norm) or norm == 0 or not np.all(np.isfinite(g64)):
        return None
    c = float(e64 @ g64) / norm
    return None if c == 0 or abs(c - 1) < 1e-6 or not same(c * e64, g64, rtol) else c


def name_factor(c: float, names: dict[float, str], rtol: float = 1e-6) -> str | None:
    """The message of the first named factor that c equals (e.g. {-1: 'sign', n: 'sum'})."""
    return next((msg for f, msg in names.items() if np.isclose(c, f, rtol=rtol, atol=0)), None)


def only_right_for(right: list[str], wrong: str, what: str = "world size") -> str:
    """The "right for one world size only" sentence, for a message's tail."""
    if not right:
        return ""
    return (f" It was right for {', '.join(right)} but not for {wrong}: does the code "
            f"assume one {what} (a constant such as range(4) instead of the value it is "
            "given)?")


class Snapshot:
    """Copies of the learner's inputs before a call; ``changed()`` names the one it mutated."""

    def __init__(self, **inputs: Any):
        arrays = {k: as_array(v) for k, v in inputs.items()}
        self._before = {k: None if a is None else a.copy() for k, a in arrays.items()}
        self._live = inputs

    def changed(self, fn_name: str) -> str | None:
        for name, before in self._before.items():
            now = None if before is None else as_array(self._live[name])
            if now is not None and not np.array_equal(before, now, equal_nan=True):
                diff = (differs(before, now, rtol=0.0) or "its values changed").replace(
                    "expected", "was")
                return (f"{fn_name} changed its argument `{name}` in place ({diff}): the "
                        "caller's data must stay as it was — compute into a new array "
                        f"(`{name} = {name} - …` or `{name}.copy()`), not `{name} -= …` or "
                        f"`{name}[…] = …`.")
        return None


@dataclass
class Case:
    """One drawn case: its parameters (quoted in messages) and its own generator."""
    task: str
    seed: int
    index: int
    params: dict[str, Any]
    rng: np.random.Generator = field(repr=False)

    def __str__(self) -> str:
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, (float, np.floating)) else f"{k}={v}"
                          for k, v in self.params.items())
        return f"case {self.index} ({shown}; replay: check.{self.task}(…, seed={self.seed}))"


GRADING_SEED: int | None = None     # ``ddl-lab grade --seed S``: set in the judge only


class Cases:
    """Seeded cases: ``Cases(task, seed, [fixed params…], draws=k, draw=lambda rng: {...})``
    yields the fixed edge cases, then k drawn ones; under ``ddl-lab grade --seed S``
    (``GRADING_SEED``) every draw mixes in S too: cases the learner never ran."""

    def __init__(self, task: str, seed: int, fixed: Iterable[dict[str, Any]] = (),
                 draws: int = 0, draw: Callable[[np.random.Generator], dict] | None = None):
        self.task, self.seed = task, int(seed)
        self._key = [zlib.crc32(task.encode()), self.seed] + \
            ([] if GRADING_SEED is None else [0x5EED, GRADING_SEED])
        base = np.random.default_rng(self._key)
        self._params = list(fixed) + [draw(base) for _ in range(draws if draw else 0)]

    def __iter__(self) -> Iterator[Case]:
        for i, p in enumerate(self._params):
            yield Case(self.task, self.seed, i, dict(p), np.random.default_rng(self._key + [i]))


def table(keys: str | Sequence[str], *rows: Sequence[Any]) -> list[dict[str, Any]]:
    """Fixed cases as a table: ``table("n nbytes", (4, 64), (3, 0))`` is ``[{"n": 4,
    "nbytes": 64}, {"n": 3, "nbytes": 0}]`` (``keys``: names split on spaces, or a sequence)."""
    names = keys.split() if isinstance(keys, str) else keys
    return [dict(zip(names, row, strict=True)) for row in rows]


def refuse_package_copy(fn: Callable, task: str, *implementations: Any) -> str | None:
    """The message refusing ``fn`` if it is, or calls, one of the package's own
    implementations of the task (CONTRIBUTING.md, "Checks"), else None."""
    from ddl_lab.runtime.reach import course_names, ident
    banned = {ident(f) for f in implementations if ident(f)}
    reached = getattr(fn, "reaches", None)          # a function judged from the sandbox
    for name in (reached if reached is not None else course_names(fn)):
        if tuple(name) in banned:
            return (f"{getattr(fn, '__name__', 'your function')} is or calls "
                    f"{name[0]}.{name[1]}, the package's own implementation of this task: the "
                    f"task is to write it yourself, so check.{task} does not accept it.")
    return None


def package_functions(package: str, *names: str) -> list[Any]:
    """Every function called one of ``names`` in ``package`` or its modules (wherever the
    package keeps it today), for ``refuse_package_copy``."""
    import importlib
    import pkgutil
    root = importlib.import_module(package)
    modules = [root] + [importlib.import_module(f"{package}.{m.name}")
                        for m in pkgutil.iter_modules(getattr(root, "__path__", []))]
    return [getattr(m, n) for m in modules for n in names if callable(getattr(m, n, None))]


def adagrad(theta: np.ndarray, g: np.ndarray, G: np.ndarray, lr: float, eps: float,
            inside: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The reference: G' = G + g², θ' = θ − lr·g/(√G' + eps) (or /√(G' + eps))."""
    G2 = G + g * g
    with np.errstate(all="ignore"):
        den = np.sqrt(G2 + eps) if inside else np.sqrt(G2) + eps
        return theta - lr * g / den, G2


def adagrad_diagnosis(got: Any, theta: np.ndarray, g: np.ndarray, G: np.ndarray, lr: float,
                      eps: float, name: str) -> str | None:
    """None if ``got`` is a right (θ', G') for these inputs (eps inside or outside the root,
    any float dtype), else the message naming the mistake of ``name`` (lesson 01's step)."""
    pair = "(theta, G): the new parameters and the new accumulated squared gradients"
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return returned_none(got, name, f"the pair {pair}", f"a pair {pair}.")
    got_t, got_G = as_array(got[0]), as_array(got[1])
    if got_t is None or got_G is None:
        return (f"{name} returned ({describe_value(got[0])}, {describe_value(got[1])}); "
                "return two arrays (numpy or torch).")
    want_t, want_G = adagrad(theta, g, G, lr, eps)
    if got_t.shape != theta.shape or got_G.shape != G.shape:
        return (f"{name} returned θ of shape {got_t.shape} and G of shape {got_G.shape}; "
                f"both keep the parameters' shape {theta.shape}.")
    if (g_diff := differs(want_G, got[1])) is not None:
        hint = explain(got[1], {
            "G accumulates over all steps: G + g², not just this one's g²": g * g,
            "accumulate the SQUARED gradient, g², not g (a negative g would make √G "
            "undefined)": G + g,
            "that is the old G: add g² to it": G,
            "that is G + |g|: square the gradient": G + np.abs(g)}
        ) or "G' = G + g², element by element"
        return f"the new G: {g_diff} — {hint}."
    if not np.all(np.isfinite(got_t)):
        bad = int(np.flatnonzero(~np.isfinite(got_t))[0])
        return (f"θ[{bad}] became {got_t[bad]} for a feature with G = {G[bad]:g} and g = "
                f"{g[bad]:g}: a feature not seen yet has √G = 0, and 0/0 is nan — add eps to the "
                "denominator (√G' + eps).")
    if same(want_t, got[0]) or same(adagrad(theta, g, G, lr, eps, inside=True)[0], got[0]):
        return None
    with np.errstate(all="ignore"):
        step = lr * g / (np.sqrt(want_G) + eps)
        mistakes = {
            f"it uses another eps than the one passed in (eps = {eps:g}): use the argument, "
            "not a constant such as 1e-8": lambda t: any(same(adagrad(theta, g, G, lr, e, i)[0], t)
                                          for e in (1e-6, 1e-7, 1e-8, 1e-10, 0.0)
                                          for i in (False, True) if e != eps),
            "it divides by G' + eps: take the square root, √G' + eps":
                theta - lr * g / (want_G + eps),
            "it divides by the OLD G: add g² to G first, then divide by √G'":
                theta - lr * g / (np.sqrt(G) + eps),
            "it is plain SGD with one global rate: divide each feature's step by its own "
            "√G' + eps":
                theta - lr * g,
            "it moves uphill: the update is θ − lr·g/(√G' + eps)": theta + step,
            f"lr is missing: multiply the step by lr (= {lr:g})": theta - step / lr,
        }
        hint = explain(got[0], mistakes)
        if hint is None:
            c = factor_of(step, theta - as_array(got[0]).astype(float), tolerance(got[0], theta))
            if c is not None:
                hint = (f"its step is {c:.4g} × lr·g/(√G' + eps): use the lr passed in "
                        f"({lr:g}), not a constant")
    return (f"the new θ is wrong — {hint}." if hint else
            f"the new θ: {differs(want_t, got[0])}; expected θ − lr·g/(√G' + eps).")
