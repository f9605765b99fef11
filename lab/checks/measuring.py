"""Checks for notebook 08's exercises on measurement method: a first call in a mean, a fair comparison of two times.

- `check_fair_comparison(fn)` : `fn(a, b, measure, rounds)` = time(a) / time(b), where `measure(f)` is the seconds of
  one timing of `f()`. Run on simulated machines with known costs: a quiet one, one where other programs start
  halfway through (a back-to-back harness measures a quiet and b busy), one where a single sample is caught by a
  descheduled thread (a mean or a single sample follows it), one whose first call is slow (each candidate must be
  called once before it is measured), and one where the second of two timings in a row runs faster (a harness
  that always times a before b is biased; one that alternates the order is not). A failure says what the harness
  did, read from the machine's log: one round only, no warm-up, all of a's rounds before b's, a before b in every
  round, a mean, one round's ratio. lab's own harness (`lab.time_interleaved`, `lab.time_rounds`) is refused.
- `check_warmup_calls(fn)` : `fn(cold, warm, tolerance)`, the fewest calls n ≥ 1 whose mean, one cold first call
  and n − 1 warm ones, is at most (1 + tolerance)·warm: how long a first call lingers in a mean without warm-up.
  The check's own answer (`_calls_reference`, `_lingers`) is refused.

Taught in: notebooks/08_hardware_runs.ipynb
"""

from __future__ import annotations

import math

import numpy as np

from ._support import _fresh, _refusal, _watching, watch_course

_COLD = 20.0  # a cold first call, this many times the warm one
_LOAD = 3.0  # other programs on every core: this many times slower
_STRAY = 30.0  # one sample caught by a descheduled thread
# the second timing of each pair: warm caches, a clock still up. Mild, so that a median of per-round ratios
# over alternated rounds (the mean of r/0.9 and 0.9·r, +0.6 %) passes while one fixed order (+11 %) does not
_SECOND = 0.9


class _Kernel:
    """A simulated candidate: calling it runs it once (and warms it); its cost is known only to its machine."""

    def __init__(self, machine, name):
        self.machine, self.name = machine, name

    def __call__(self):
        self.machine.log.append(("call", self.name))
        self.machine.warm.add(self.name)

    def __repr__(self):
        return f"<kernel {self.name}>"


class _Machine:
    """A machine whose timings follow a script: `load(step)` and `stray` (step -> factor) by measurement number."""

    def __init__(self, costs, *, busy_from=None, stray=None, cold=1.0, second=1.0):
        self.costs, self.busy_from, self.stray, self.cold = (
            costs,
            busy_from,
            stray or {},
            cold,
        )
        self.second = second  # factor on measurements 1, 3, 5, ...: each pair's second
        self.log, self.warm, self.steps = [], set(), 0
        self.samples = []  # (name, seconds) of every measurement, in order
        self.kernels = {n: _Kernel(self, n) for n in costs}

    def measure(self, f):
        """Seconds of one timing of `f()` on this machine."""
        if not isinstance(f, _Kernel) or f.machine is not self:
            raise ValueError(
                "measure(f) times the candidates the check gave you (a or b), not another function"
            )
        factor = (
            _LOAD
            if self.busy_from is not None and self.steps >= self.busy_from
            else 1.0
        )
        factor *= self.stray.get(self.steps, 1.0)
        if self.steps % 2 == 1:
            factor *= self.second
        if f.name not in self.warm:
            factor *= self.cold
            self.warm.add(f.name)
        self.log.append(("measure", f.name))
        self.steps += 1
        self.samples.append((f.name, self.costs[f.name] * factor))
        return self.costs[f.name] * factor

    def measured(self, name):
        return sum(1 for what, n in self.log if what == "measure" and n == name)

    def cold_measured(self):
        """The candidates whose first event was a measurement, not a call."""
        first = {}
        for what, n in self.log:
            first.setdefault(n, what)
        return sorted(n for n, what in first.items() if what == "measure")


def _scenarios(rng):
    """(label, machine, rounds, hint when the ratio is wrong), costs drawn afresh."""
    out = []
    for label, rounds, kw, hint in (
        ("a quiet machine", 5, {}, None),
        (
            "other programs start halfway through",
            6,
            {"busy_from": 6},
            "the machine got busy between your timings of a and of b: measure them in alternating "
            "rounds (a, b, a, b, ...), so a change of load hits both alike",
        ),
        (
            "one sample caught by a descheduled thread",
            5,
            {"stray": {1: _STRAY}},
            f"one of b's samples came out {_STRAY:.0f}x slow: a mean, or a single sample, follows it; "
            "the median over the rounds does not",
        ),
        (
            "a slow first call",
            5,
            {"cold": _COLD},
            f"each candidate's first call was {_COLD:.0f}x slower: call (or measure) each once before "
            "the rounds, leave that warm-up's time out, and keep the median",
        ),
        (
            "the second timing of each pair faster",
            6,
            {"second": _SECOND},
            f"on this machine the second of two timings in a row runs {1 / _SECOND:.2g}x faster "
            "(caches still warm, a clock still up), and yours timed them in the same order every "
            "round: alternate which goes first (a, b, then b, a), so each is second as often",
        ),
    ):
        a, b = (float(f"{10 ** rng.uniform(-3, -1):.3g}") for _ in range(2))
        out.append((label, _Machine({"a": a, "b": b}, **kw), rounds, hint))
    return out


def check_fair_comparison(fn, *, seed: int | None = None) -> None:
    """Check `fn(a, b, measure, rounds)` = time(a) / time(b) on five simulated machines; print one verdict.

    Costs are drawn afresh on each run (`seed` draws the same again). Each candidate must be called before it is
    first measured (a warm-up) and measured at least `rounds` times. Taught in: notebooks/08_hardware_runs.ipynb
    """
    rng, seed = _fresh(seed)
    name = getattr(fn, "__name__", "your function")
    again = f"  (cases drawn with seed={seed}: pass seed={seed} to ask the same again)"
    for i, (label, machine, rounds, hint) in enumerate(_scenarios(rng)):
        a, b = machine.kernels["a"], machine.kernels["b"]
        want = machine.costs["a"] / machine.costs["b"]
        shown = f"case {i} ({label}, rounds = {rounds}, true ratio {want:.4g})"
        try:
            with watch_course(["time_interleaved", "time_rounds", "time_call"]) as used:
                got = fn(a, b, machine.measure, rounds)
        except NotImplementedError:
            print(
                f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
            )
            return
        except Exception as exc:  # a learner's bug: report it, do not stop the notebook
            print(f"{name}: ✗ {shown} raised {type(exc).__name__}: {exc}")
            return
        if used:
            print(
                f"{name}: ✗ {shown}: it ran lab's own timing ({', '.join(used)}); write the rounds, "
                "the warm-up and the median yourself, around `measure`"
            )
            return
        problem = _problem(got, want, machine, rounds, hint)
        if problem:
            print(f"{name}: ✗ {shown}: {problem}")
            print(again)
            return
    print(
        f"{name}: ✓ passed 5 simulated machines (quiet, busy, a stray sample, a cold start, order)"
    )


def _problem(got, want, machine, rounds, hint) -> str | None:
    """What is wrong with `got` on `machine`, in words, else None."""
    try:
        got = float(got)
    except (TypeError, ValueError):
        return f"returned {type(got).__name__}, expected one number: time(a) / time(b)"
    # a warm-up may be a measurement whose time is dropped: one more than `rounds`, when it came first
    allowed = {n: rounds + (n in machine.cold_measured()) for n in ("a", "b")}
    few = [n for n in ("a", "b") if machine.measured(n) < rounds]
    if few:
        once = min(machine.measured(n) for n in few) == 1
        return ("one round only: " if once else "") + (
            f"measured {' and '.join(few)} {min(machine.measured(n) for n in few)} time(s); "
            f"measure each candidate once per round, {rounds} rounds"
        )
    many = [n for n in ("a", "b") if machine.measured(n) > allowed[n]]
    if many:
        return (
            f"measured {' and '.join(many)} {max(machine.measured(n) for n in many)} times; "
            f"`rounds` = {rounds} is as many as you may: once per round, beside one warm-up "
            "(a plain call, a(), or one measurement whose time you drop)"
        )
    cold = [n for n in machine.cold_measured() if machine.measured(n) == rounds]
    if cold:
        return (
            f"{' and '.join(cold)}: measured cold, the first measurement before any call; call (or "
            f"measure) each candidate once before the {rounds} rounds and drop that time (the first call "
            f"pays for what later calls reuse); a first round dropped as the warm-up leaves only "
            f"{rounds - 1}"
        )
    if math.isclose(got, want, rel_tol=0.02):
        return None
    # the inverse is named on the quiet machine only: elsewhere a biased ratio can come near 1 / want by chance
    if hint is None and math.isclose(got, 1 / want, rel_tol=0.02):
        return "yours is time(b) / time(a): the question is how many times slower a is than b"
    return f"yours is {got:.4g}; " + (
        _observed(machine, rounds, got, want)
        or hint
        or "time(a) / time(b): the median of a's rounds over the median of b's"
    )


def _rounds_of(machine, rounds) -> list:
    """The (name, seconds) samples of the rounds: every measurement but a warm-up one (a candidate's first, taken
    before any call of it, when the candidate was measured `rounds` + 1 times)."""
    dropped = {
        next(k for k, (name, _) in enumerate(machine.samples) if name == n)
        for n in machine.cold_measured()
        if machine.measured(n) == rounds + 1
    }
    return [s for k, s in enumerate(machine.samples) if k not in dropped]


def _observed(machine, rounds, got, want) -> str | None:
    """What the harness did, read from the machine's log of measurements, in words, where that explains a wrong
    ratio: its order (blocks, or a before b in every round) or its statistic (a mean, one round's ratio)."""
    samples = _rounds_of(machine, rounds)
    names = [n for n, _ in samples]
    t = {n: [s for m, s in samples if m == n] for n in ("a", "b")}
    if not t["a"] or not t["b"]:
        return None
    close = lambda x: math.isclose(got, x, rel_tol=1e-6)  # noqa: E731
    switches = sum(1 for x, y in zip(names, names[1:]) if x != y)
    if switches == 1 and len(names) > 2:
        first, second = names[0], names[-1]
        where = (
            f" (on this machine other programs started at measurement {machine.busy_from + 1})"
            if machine.busy_from is not None
            else ""
        )
        return (
            f"your harness measured all of {first}'s rounds, then all of {second}'s: when the machine "
            f"changes between the two{where}, the ratio measures the machine; measure them in "
            "alternating rounds (a, b, a, b, ...), so a change of load hits both alike"
        )
    pairs = [tuple(names[k : k + 2]) for k in range(0, len(names) - 1, 2)]
    if machine.second != 1 and len(set(pairs)) == 1 and len(pairs) > 1:
        x, y = pairs[0]
        return (
            f"your rounds time {x} before {y} every time, and on this machine the second of two "
            f"timings in a row runs {1 / machine.second:.2g}x faster (caches still warm, a clock "
            f"still up), so {y} gains in every round: alternate which goes first (a, b, then b, a), "
            "so each is second as often"
        )
    mean = float(np.mean(t["a"]) / np.mean(t["b"]))
    if close(mean) and not math.isclose(mean, want, rel_tol=0.02):
        slow = [
            f"{machine.samples[k][0]}'s measurement {k + 1}"
            for k, f in sorted(machine.stray.items())
            if k < len(machine.samples)
        ]
        caught = f" ({', '.join(slow)}, {_STRAY:.0f}x slow)" if slow else ""
        return (
            f"yours is the mean of a's rounds over the mean of b's, {mean:.4g}: one sample caught "
            f"by a descheduled thread{caught} pulls a mean (and a single sample) with it; "
            "the median over the rounds does not follow it"
        )
    singles = [s_a / s_b for s_a, s_b in zip(t["a"], t["b"])]
    if any(close(r) for r in singles) and len(singles) > 1:
        return (
            "yours is one round's ratio, where the rounds disagree: keep every round and "
            "take the median, which a stray sample does not move"
        )
    return None


# ---------------------------------------------------------------------------------------- how long a first call lingers


def _lingers(cold, warm, tolerance, n) -> bool:
    """Whether the mean of n calls, the first `cold` and the rest `warm`, is still above (1 + tolerance)·warm."""
    return (cold + (n - 1) * warm) / n > (1 + tolerance) * warm * (1 + 1e-12)


def _calls_reference(cold, warm, tolerance) -> int:
    """The fewest calls n ≥ 1 whose mean is at most (1 + tolerance)·warm, by counting."""
    n = max(1, math.ceil((cold / warm - 1) / tolerance) - 1)
    while _lingers(cold, warm, tolerance, n):
        n += 1
    return n


# the check's own answer, refused by any route (`lab.checks.measuring._calls_reference`, an alias, its loop's test)
_OWN_ANSWER = {
    f.__code__: f"lab.checks.measuring.{f.__name__}"
    for f in (_calls_reference, _lingers)
}


def _warmup_cases(rng):
    """(cold, warm, tolerance): a first call about 25x at 5 %, one already within tolerance, one no slower than warm,
    and fresh draws whose answer is not near a rounding boundary."""
    cases = [(32.1e-3, 1.3e-3, 0.05), (1.03e-3, 1e-3, 0.05), (0.9e-3, 1e-3, 0.05)]
    while len(cases) < 8:
        warm = float(f"{10 ** rng.uniform(-4, -1):.3g}")
        cold = float(f"{warm * 10 ** rng.uniform(0.2, 2.0):.3g}")
        tolerance = float(rng.choice([0.01, 0.02, 0.05, 0.1, 0.2]))
        x = (cold / warm - 1) / tolerance
        if x > 2 and abs(x - round(x)) > 1e-3:
            cases.append((cold, warm, tolerance))
    return cases


def check_warmup_calls(fn, *, seed: int | None = None) -> None:
    """Check `fn(cold, warm, tolerance)`: the fewest calls n ≥ 1 whose mean, the first call `cold` seconds and
    every later one `warm`, is at most (1 + tolerance)·warm; print one verdict.

    Cases are drawn afresh on each run (`seed` draws the same again). Taught in: notebooks/08_hardware_runs.ipynb
    """
    rng, seed = _fresh(seed)
    name = getattr(fn, "__name__", "your function")
    cases = _warmup_cases(rng)
    for i, (cold, warm, tolerance) in enumerate(cases):
        shown = f"case {i} (cold = {cold:g} s, warm = {warm:g} s, tolerance = {tolerance:g})"
        try:
            with _watching(also=_OWN_ANSWER) as used:
                got = fn(cold, warm, tolerance)
        except NotImplementedError:
            print(
                f"{name}: not implemented yet (fill in the stub above, then run this cell again)"
            )
            return
        except Exception as exc:  # a learner's bug: report it, do not stop the notebook
            print(f"{name}: ✗ {shown} raised {type(exc).__name__}: {exc}")
            return
        if used:
            print(f"{name}: ✗ {shown}: {_refusal(used)}")
            return
        want = _calls_reference(cold, warm, tolerance)
        problem = _warmup_problem(got, want, cold, warm, tolerance)
        if problem:
            print(f"{name}: ✗ {shown}: {problem}")
            print(
                f"  (cases drawn with seed={seed}: pass seed={seed} to ask the same again)"
            )
            return
    print(f"{name}: ✓ passed {len(cases)} cases")


def _warmup_problem(got, want, cold, warm, tolerance) -> str | None:
    """What is wrong with `got` calls, in words, else None."""
    if isinstance(got, bool) or not isinstance(got, (int, np.integer)):
        return f"returned {type(got).__name__}, expected an int: a number of calls"
    got = int(got)
    if got == want:
        return None
    if got < 1:
        return f"yours is {got}: at least one call, the mean of no calls is no timing"
    if got == want - 1 and want > 1:
        return (
            f"yours is {got}, one call short: the mean of {got} calls is still above "
            f"(1 + tolerance)·warm; the count is the smallest whole n that gets there, so round up"
        )
    if got == want + 1:
        return (
            f"yours is {got}: {want} calls already bring the mean within the tolerance"
        )
    if abs(got - cold / warm / tolerance) <= 1:
        return (
            f"yours is {got}, about cold / (warm·tolerance): only the first call's excess over a "
            "warm call, cold − warm, has to be spread over the calls"
        )
    if abs(got - (cold - warm) / tolerance) <= 1:
        return f"yours is {got}: compare the excess with tolerance·warm, a time, not the bare tolerance"
    too = "many" if got > want else "few"
    return (
        f"yours is {got}, too {too}: write the mean of n calls, one cold and n − 1 warm, and ask "
        "when it falls to (1 + tolerance)·warm"
    )
