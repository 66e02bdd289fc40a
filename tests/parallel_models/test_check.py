"""Lesson 02's checks: right answers in several styles pass; races, serial "threads",
dropped remainders and locks in the wrong place fail with a message naming the fault —
the same verdict every run (the checks force the interleavings; no scheduling luck). The
Amdahl reasoning names 1 − efficiency, the parallel fraction, linear and Gustafson scaling;
the chunk design names too many claims, a static split in disguise and an uneven last round."""
import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed
from tests.learner_types import STYLES, in_learner_types

NB = "02_parallel_models"
IMPORTS = "import threading\nimport numpy as np\nfrom concurrent.futures import ThreadPoolExecutor\n"


@pytest.fixture
def define(cell):
    """A function defined as a notebook cell does (in __main__, travels by value)."""
    return lambda source, name: cell(IMPORTS + source)[name]


STUB = "def {name}(*args):\n    raise NotImplementedError('replace this line with your code')"

TEAM = """
def my_threaded_sum(x, num_threads):
    n = len(x)
    partials = [0.0] * num_threads
    def work(t):
        lo, hi = t * n // num_threads, (t + 1) * n // num_threads
        BODY
    team = [threading.Thread(target=work, args=(t,)) for t in range(num_threads)]
    for th in team:
        th.start()
    for th in team:
        th.join()
    return RESULT
"""


def team(body="partials[t] = x[lo:hi].sum()", result="float(sum(partials))", setup=""):
    src = TEAM.replace("BODY", body).replace("RESULT", result)
    return src.replace("    partials = [0.0] * num_threads\n",
                       "    partials = [0.0] * num_threads\n" + setup)


POOL = """
def my_threaded_sum(x, num_threads):
    blocks = np.array_split(x, num_threads)
    with ThreadPoolExecutor(max_workers=num_threads) as pool:
        return float(sum(pool.map(lambda b: sum(b), blocks)))
"""

CALLER_WORKS_TOO = """
def my_threaded_sum(x, num_threads):
    n, partials = len(x), [0.0] * num_threads
    def work(t):
        partials[t] = np.sum(x[t * n // num_threads:(t + 1) * n // num_threads])
    team = [threading.Thread(target=work, args=(t,)) for t in range(1, num_threads)]
    for th in team:
        th.start()
    work(0)                                  # the calling thread is thread 0
    for th in team:
        th.join()
    return np.float64(sum(partials))
"""

SERIAL = "def my_threaded_sum(x, num_threads):\n    return float(x.sum())"

START_JOIN_SAME_LOOP = """
def my_threaded_sum(x, num_threads):
    n, partials = len(x), [0.0] * num_threads
    def work(t):
        partials[t] = x[t * n // num_threads:(t + 1) * n // num_threads].sum()
    for t in range(num_threads):
        th = threading.Thread(target=work, args=(t,))
        th.start()
        th.join()
    return sum(partials)
"""

SORTS_X = """
def my_threaded_sum(x, num_threads):
    x.sort()                                 # "small numbers first, for accuracy"
    return sum(x[t * len(x) // num_threads:(t + 1) * len(x) // num_threads].sum()
               for t in range(num_threads))
"""


SUM_THEN_ADD = """
TOTAL = 0.0
def my_threaded_sum(x, num_threads):
    global TOTAL
    TOTAL = 0.0
    n = len(x)
    def work(t):
        global TOTAL
        s = x[t * n // num_threads:(t + 1) * n // num_threads].sum()
        GUARD
    team = [threading.Thread(target=work, args=(t,)) for t in range(num_threads)]
    for th in team:
        th.start()
    for th in team:
        th.join()
    return float(TOTAL)
"""

# issue 26: each thread sums its block, then `total += s` on a shared global — the check
# pauses each thread between that read and its write, so the lost update shows every time
GLOBAL_RACY = SUM_THEN_ADD.replace("GUARD", "TOTAL += s")
LOCKED_GLOBAL = "LOCK = threading.Lock()\n" + SUM_THEN_ADD.replace(
    "GUARD", "with LOCK:\n            TOTAL += s")          # a lock made before the check

NONLOCAL = """
def my_threaded_sum(x, num_threads):
    total, lock, n = 0.0, threading.Lock(), len(x)
    def work(t):
        nonlocal total
        s = x[t * n // num_threads:(t + 1) * n // num_threads].sum()
        GUARD
    team = [threading.Thread(target=work, args=(t,)) for t in range(num_threads)]
    for th in team:
        th.start()
    for th in team:
        th.join()
    return total
"""

POOL_ATTRIBUTE = """
class Acc:
    total = 0.0
def my_threaded_sum(x, num_threads):
    acc = Acc()
    def work(block):
        s = block.sum()
        acc.total += s
    with ThreadPoolExecutor(max_workers=num_threads) as pool:
        list(pool.map(work, np.array_split(x, num_threads)))
    return acc.total
"""

JOINED_AFTERWARDS = team(setup="    results = []\n", body="results.append(x[lo:hi].sum())",
                         result="float(sum(results))")


@pytest.mark.parametrize("source", [POOL, CALLER_WORKS_TOO, team(body="partials[t] = float(sum(x[lo:hi]))"),
                                    NONLOCAL.replace("GUARD", "with lock:\n            total += s"),
                                    LOCKED_GLOBAL, JOINED_AFTERWARDS])
def test_threaded_sum_right_answers_pass(source, define, solution, capsys):
    check.threaded_sum(define(source, "my_threaded_sum"))
    assert capsys.readouterr().out.count("✔ threaded_sum: passed") == 1


RACY = team(setup="    total = np.zeros(1)\n", body="total[0] += x[lo:hi].sum()", result="float(total[0])")


@pytest.mark.parametrize("source, hint", [
    (RACY, "lost update"),
    (team(setup="    total = np.zeros(1)\n",
          body="total[0] = total[0] + x[lo:hi].sum()", result="float(total[0])"), "lost update"),
    (GLOBAL_RACY, "lost update.*paused each thread just before it wrote the global `TOTAL`"),
    (NONLOCAL.replace("GUARD", "total += s"),
     "lost update.*wrote `total`, a variable of the enclosing function"),
    (POOL_ATTRIBUTE, "lost update.*wrote the attribute `.total` of a shared object"),
    (team(setup="    lock = threading.Lock()\n", body="s = x[lo:hi].sum()\n        with lock:\n"
          "            old = partials[0]\n        partials[0] = old + s", result="partials[0]"),
     "lost update.*an element of a shared container"),   # read under the lock, write outside
    (SERIAL, "started 0 thread"),
    (START_JOIN_SAME_LOOP, "each thread was joined before the next one was started"),
    (team(setup="    lock, total = threading.Lock(), np.zeros(1)\n",
          body="with lock:\n            total[0] += x[lo:hi].sum()", result="float(total[0])"),
     "a lock held around the whole sum"),
    (team(body="partials[t] = x[t * (n // num_threads):(t + 1) * (n // num_threads)].sum()"),
     r"the last \d element\(s\) are missing"),
    (team(body="partials[t] = x[lo:hi - 1].sum()"), "the last element of every block is missing"),
    (team(result="None"), "returned None"),
    (SORTS_X, "changed its argument `x` in place"),
])
def test_threaded_sum_wrong_answers_are_named(source, hint, define):
    with pytest.raises(CheckFailed, match=hint):
        check.threaded_sum(define(source, "my_threaded_sum"))


def test_threaded_sum_refuses_the_package_s_parallel_for(define):
    src = ("from ddl_lab.parallel_models.threads import parallel_for\n"
           "def my_threaded_sum(x, num_threads):\n"
           "    return parallel_for(lambda i: x[i], len(x), num_threads, reduction='+').value\n")
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.threaded_sum(define(src, "my_threaded_sum"))


def test_threaded_sum_verdicts_are_the_same_20_times(define, solution):
    right, racy = solution(NB, "my_threaded_sum"), define(RACY, "my_threaded_sum")
    late = define(GLOBAL_RACY, "my_threaded_sum")
    for _ in range(20):
        check.threaded_sum(right)
        for wrong in (racy, late):
            with pytest.raises(CheckFailed, match="lost update"):
                check.threaded_sum(wrong)


# ------------------------------------------------------------------ task 2: next_chunk

CHUNK = """
def my_next_chunk(next_iter, lock, chunk, stop):
    lock.acquire()
    try:
        lo = next_iter[0].item()
        if lo >= stop:
            return None
        next_iter[0] = hi = min(lo + chunk, stop)
    finally:
        lock.release()
    return range(lo, hi)
"""

READ_OUTSIDE = """
def my_next_chunk(next_iter, lock, chunk, stop):
    lo = int(next_iter[0])
    if lo >= stop:
        return None
    hi = min(lo + chunk, stop)
    with lock:
        next_iter[0] = hi
    return range(lo, hi)
"""

WRITE_OUTSIDE = """
def my_next_chunk(next_iter, lock, chunk, stop):
    with lock:
        lo = int(next_iter[0])
    if lo >= stop:
        return None
    hi = min(lo + chunk, stop)
    next_iter[0] = hi
    return range(lo, hi)
"""

NOT_RELEASED_ON_NONE = """
def my_next_chunk(next_iter, lock, chunk, stop):
    lock.acquire()
    lo = int(next_iter[0])
    if lo >= stop:
        return None
    next_iter[0] = hi = min(lo + chunk, stop)
    lock.release()
    return range(lo, hi)
"""


def solution_with(old, new):
    return CHUNK.replace(old, new)


def test_next_chunk_right_answers_pass(define, solution, capsys):
    check.next_chunk(define(CHUNK, "my_next_chunk"))
    assert capsys.readouterr().out.count("✔ next_chunk: passed") == 1


@pytest.mark.parametrize("source, hint", [
    (solution_with("lock.acquire()", "pass").replace("lock.release()", "pass"),
     "took the lock 0 times"),
    (READ_OUTSIDE, "race: .* read next_iter\\[0\\] BEFORE taking the lock"),
    (WRITE_OUTSIDE, "race: .* wrote next_iter\\[0\\] AFTER releasing the lock"),
    (solution_with("min(lo + chunk, stop)", "lo + chunk"), "the last chunk must stop at `stop`"),
    (solution_with("return range(lo, hi)", "return (lo, hi)"), "return a range object"),
    (solution_with("        if lo >= stop:\n            return None\n", ""), "return None"),
    (NOT_RELEASED_ON_NONE, "returned while still holding the lock"),
])
def test_next_chunk_wrong_answers_are_named(source, hint, define):
    with pytest.raises(CheckFailed, match=hint):
        check.next_chunk(define(source, "my_next_chunk"))


def test_next_chunk_verdicts_are_the_same_20_times(define, solution):
    """The race of a read outside the lock is caught by forcing the interleaving, not by
    hoping two processes collide; the right answer passes on real processes every time."""
    right, half = solution(NB, "my_next_chunk"), define(READ_OUTSIDE, "my_next_chunk")
    for _ in range(20):
        check.next_chunk(right)
        with pytest.raises(CheckFailed, match="BEFORE taking the lock"):
            check.next_chunk(half)


# ------------------------------------------------------------ task 3: Amdahl's bound

def amdahl_via_parallel_fraction(n, speedup, cores):
    p = (1 - 1 / speedup) / (1 - 1 / n)             # the lesson's p, then f = 1 − p
    return 1 - p, 1 / ((1 - p) + p / cores)


def amdahl_numpy(n, speedup, cores):
    f = np.float32((n / speedup - 1) / (n - 1)).astype(np.float64)   # any float type
    return np.array([f, 1 / (f + (1 - f) / cores)])


def right_f(n, s):
    return (n / s - 1) / (n - 1)


def amdahl_in_float32(n, speedup, cores):
    n, s, c = np.float32(n), np.float32(speedup), np.float32(cores)   # float32 all the way
    f = (n / s - 1) / (n - 1)
    return f, 1 / (f + (1 - f) / c)


@pytest.mark.parametrize("right", [amdahl_via_parallel_fraction, amdahl_numpy, amdahl_in_float32])
def test_amdahl_bound_right_answers_pass(right, solution, capsys):
    check.amdahl_bound(right)
    assert capsys.readouterr().out.count("✔ amdahl_bound: passed") == 1


@pytest.mark.parametrize("wrong, hint", [
    (lambda n, s, c: (1 - s / n, 1.0), "that is 1 − S/n, one minus the efficiency"),
    (lambda n, s, c: (1 - right_f(n, s), 1.0), "that is the parallel fraction p = 1 − f"),
    (lambda n, s, c: (right_f(n, s), s * c / n), "scales the measured speedup linearly"),
    (lambda n, s, c: (right_f(n, s), 1 / right_f(n, s)), "1/f is the limit"),
    (lambda n, s, c: (right_f(n, s), 1 / ((1 - right_f(n, s)) + right_f(n, s) / c)),
     "divides the serial part by the cores"),
    (lambda n, s, c: (right_f(n, s), right_f(n, s) + (1 - right_f(n, s)) * c),
     "Gustafson's scaled speedup"),
    (lambda n, s, c: right_f(n, s), r"must return a tuple \(serial_fraction, speedup\)"),
])
def test_amdahl_bound_wrong_answers_are_named(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.amdahl_bound(wrong)


def test_amdahl_bound_refuses_an_answer_that_calls_the_package():
    from ddl_lab.parallel_models.speedup import amdahl
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.amdahl_bound(lambda n, s, c: (right_f(n, s), float(amdahl(1 - right_f(n, s), c))))


# ------------------------------------------------------------ task 4: a dynamic chunk size

def chunk_with_least_imbalance(costs, num_threads, max_claims, max_imbalance):
    import heapq

    def imbalance(chunk):
        free = [(0, t) for t in range(num_threads)]
        for lo in range(0, len(costs), chunk):
            at, t = heapq.heappop(free)
            heapq.heappush(free, (at + int(costs[lo:lo + chunk].sum()), t))
        work = [at for at, _ in free]
        return max(work) * num_threads / sum(work)

    smallest = -(-len(costs) // max_claims)
    return min(range(smallest, len(costs) + 1), key=imbalance)


LOOKED_UP = {(120, 4, 30): 4, (120, 4, 10): 15}     # the prompt's two loops


def chunk_from_the_floor(costs, num_threads, max_claims, max_imbalance):
    """Searches up from ⌊n/max_claims⌋: right for the prompt's loops (120 = 4 × 30 =
    12 × 10), one claim too many where max_claims does not divide n."""
    for chunk in range(max(1, len(costs) // max_claims), len(costs) + 1):
        free_at = [0] * num_threads
        for lo in range(0, len(costs), chunk):
            free_at[free_at.index(min(free_at))] += int(costs[lo:lo + chunk].sum())
        if max(free_at) * num_threads <= max_imbalance * sum(free_at):
            return chunk


def test_dynamic_chunk_right_answers_pass(solution, capsys):
    check.dynamic_chunk(solution(NB, "my_dynamic_chunk"))
    check.dynamic_chunk(chunk_with_least_imbalance)
    check.dynamic_chunk(solution(NB, "my_dynamic_chunk"), seed=4)      # other drawn loops
    assert capsys.readouterr().out.count("✔ dynamic_chunk: passed — on real threads") == 3


@pytest.mark.parametrize("wrong, hint", [
    (lambda costs, t, mc, mi: -(-len(costs) // mc),
     "chunk 12: 10 claims.*10 is not a multiple of 4: in the last round 2 thread"),
    (lambda costs, t, mc, mi: len(costs) // t, "chunk 30: 4 claims.*a static split in disguise"),
    (lambda costs, t, mc, mi: 1, "handed out 120 chunks, more than max_claims = 30"),
    (lambda costs, t, mc, mi: 20, r"largest chunk costs \d+% of a thread's fair share"),
    (lambda costs, t, mc, mi: 0, "a whole number of iterations from 1 to n = 120"),
    (lambda costs, t, mc, mi: None, "returned None"),
    # issue 26: chunks that ignore their inputs (no one chunk meets both prompt loops)
    (lambda costs, t, mc, mi: 15, "chunk 15: .*It returned the same plan, 15, for all 7 budgets"
                                  ".*a plan must be a function of its inputs"),
    (chunk_from_the_floor, r"more than max_claims.*is enough only when max_claims divides n"),
    (lambda costs, t, mc, mi: LOOKED_UP[(len(costs), t, mc)],
     "raised KeyError.*for a random loop of .* budgets the prompt never showed"),
])
def test_dynamic_chunk_wrong_answers_are_named(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.dynamic_chunk(wrong)


# ------------------------------------------------------------ one rule for numbers (issue 26)

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("task, name", [
    ("threaded_sum", "my_threaded_sum"), ("next_chunk", "my_next_chunk"),
    ("amdahl_bound", "my_amdahl_bound"), ("dynamic_chunk", "my_dynamic_chunk")])
def test_solutions_pass_in_the_learner_s_number_types(task, name, style, solution, capsys):
    """next_chunk returns a range or None: the wrapper leaves them as they are."""
    getattr(check, task)(in_learner_types(solution(NB, name), style))
    assert f"✔ {task}: passed" in capsys.readouterr().out
