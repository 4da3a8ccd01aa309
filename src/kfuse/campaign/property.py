"""The property every campaign example checks, shared by `kfuse campaign` and kfuse's tests.

One example is a random fusion of one kind (kfuse.testing.fusions) with random inputs
(kfuse.testing.inputs_for). It must give the float64 reference's results
(kfuse.testing.assert_outputs_close) on every one of three calls (or, for an ill-conditioned
result or a NaN or infinity that depends on the precision, the reference computed in the
kernel's precision: see assert_close's `alternative`; for a sum that cancels, its terms'
magnitudes: `magnitude`):

1. the first call schedules, generates and compiles;
2. the second, with new values in the same layout, finds everything cached;
3. the third, again with new values, takes the host fast path on a GPU.

One example in OTHER_INPUTS_ONE_IN also has a second set of inputs of other sizes and
layouts: a fourth call runs on those (a new signature of the same definition, compiled
again where it must be), and a fifth on the first inputs again, which must find their own
Program cached, not the fourth call's. So a cache that hands back something of an earlier
call, of another signature or of another fusion, is a mismatch too; the calls of all earlier
examples run in the same process before it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from kfuse.dtypes import DataType
from kfuse.errors import KfuseError
from kfuse.ir.ops import OPS
from kfuse.testing import assert_outputs_close, fusions, inputs_for
from kfuse.testing.inputs import refill
from kfuse.testing.strategies import DEFAULT_DTYPES, KINDS, one_in

CALLS = 3
"""Calls of each example: compile, cached, fast path."""

OUTCOMES = ("passed", "mismatch", "kfuse_error", "raw_error")
"""What one example can end in: a kfuse error (KfuseError) on a generated fusion is a bug too,
but not a wrong result; a raw error is any other exception."""


OTHER_INPUTS_ONE_IN = 5
"""One example in this many also runs on inputs of other sizes and layouts (calls 4 and 5)."""

LONG_ROWS_ONE_IN = 8
LONG_ROWS_ELEMENTS = 8
LONG_ROWS_AT_LEAST = 1 << 18
"""One example in LONG_ROWS_ONE_IN has one long axis and up to LONG_ROWS_ELEMENTS times the
space's max_elements per input, and at least LONG_ROWS_AT_LEAST (2^21 on a GPU, 2^18 on the
emulator): without them, no GPU-sized example of 2^18 elements reached a kernel whose rows
live in shared memory, in a cluster's blocks, partly reloaded or in registers of an
inner-outer kernel (H200 heuristics over 500 examples), and no emulated one a cluster."""


def long_rows_elements(space_max_elements: int) -> int:
    """Elements per input of an example with a long axis."""
    return max(LONG_ROWS_ELEMENTS * space_max_elements, LONG_ROWS_AT_LEAST)


@dataclass(frozen=True)
class ExampleSpace:
    """What a campaign draws from."""

    kinds: tuple[str, ...] = tuple(sorted(KINDS))
    dtypes: tuple[DataType, ...] = DEFAULT_DTYPES
    max_rank: int = 4
    max_ops: int = 10
    max_elements: int = 1 << 18
    special_values: str = "mix"  # "on", "off", or "mix" (drawn per example)
    layouts: bool = True
    long_rows: bool = True  # some examples with one long axis (LONG_ROWS_ONE_IN)
    framework: str = "torch"  # torch or numpy (numpy only on the emulator)
    device: str = "cuda"  # a torch device string, "cpu" for the emulator
    # Pointwise ops drawn twice as often as all the others together (a campaign on new ops).
    favored_ops: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown_ops = sorted(set(self.favored_ops) - set(OPS))
        if unknown_ops:
            raise ValueError(f"unknown ops {unknown_ops}")
        unknown = sorted(set(self.kinds) - KINDS)
        if not self.kinds or unknown:
            raise ValueError(f"unknown kinds {unknown}; kinds are {', '.join(sorted(KINDS))}")
        if self.special_values not in ("on", "off", "mix"):
            raise ValueError("special_values must be on, off or mix")
        if self.max_rank < 1 or self.max_ops < 1 or self.max_elements < 1:
            raise ValueError("max_rank, max_ops and max_elements must be at least 1")


@dataclass
class Example:
    """One drawn example."""

    kind: str
    fd: Any
    inputs: list[Any]
    special_values: bool
    refill_seeds: tuple[int, ...] = field(default=())
    other_inputs: list[Any] | None = None  # calls 4 and 5 (see the module docstring)


def drawn_ops(space: ExampleSpace) -> tuple[str, ...]:
    """The pointwise ops a fusion draws from, uniformly: every op once, and the favored ops
    repeated until they are about two thirds of the list (drawn about twice as often as all
    the others together)."""
    if not space.favored_ops:
        return tuple(OPS)
    repeat = -(-2 * len(OPS) // len(space.favored_ops))
    return (*OPS, *(space.favored_ops * repeat))


@st.composite
def examples(draw: Any, space: ExampleSpace) -> Example:
    """A strategy of Examples from `space`."""
    kind = draw(st.sampled_from(space.kinds))
    fd = draw(
        fusions(
            kinds={kind},
            max_rank=space.max_rank,
            max_ops=space.max_ops,
            dtypes=space.dtypes,
            ops=drawn_ops(space),
            aliases=True,
        )
    )
    special = space.special_values == "on" or (
        space.special_values == "mix" and draw(st.booleans())
    )
    long = space.long_rows and one_in(draw, LONG_ROWS_ONE_IN)
    drawn_inputs = inputs_for(
        fd,
        framework=space.framework,
        device=space.device,
        max_elements=long_rows_elements(space.max_elements) if long else space.max_elements,
        layouts=space.layouts,
        special_values=special,
        long_axis=long,
    )
    inputs = draw(drawn_inputs)
    seeds = tuple(draw(st.integers(0, 2**32 - 1)) for _ in range(CALLS - 1))
    other = draw(drawn_inputs) if one_in(draw, OTHER_INPUTS_ONE_IN) else None
    return Example(kind, fd, inputs, special, seeds, other)


PHASES = ("draw", "repro", "refill", "first_call", "later_calls", "reference", "compare")
"""Where an example's time goes, as the campaign's summary reports it: drawing it, writing its
in-flight repro, new values for the later calls, the first call (schedule, generate, compile,
run), the later calls (cached), the float64 reference, and the comparison."""


@contextmanager
def timed(phases: dict[str, float] | None, phase: str) -> Iterator[None]:
    """Within: the seconds spent are added to `phases[phase]` (nothing when None)."""
    if phases is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        phases[phase] = phases.get(phase, 0.0) + time.perf_counter() - started


class Mismatch(AssertionError):
    """A call's outputs differ from the reference's."""


def check(
    example: Example,
    phases: dict[str, float] | None = None,
    schedulers: set[str] | None = None,
) -> None:
    """Run the example's calls and compare every output of each with the reference; the
    seconds of each of PHASES are added to `phases` when given, and the schedulers the first
    call ran (SchedulerType values) to `schedulers`, as soon as it has run.

    Raises Mismatch (naming the call), or whatever kfuse raised."""
    fd = example.fd
    with timed(phases, "refill"):
        calls = [example.inputs] + [
            refill(fd, example.inputs, seed, special_values=example.special_values)
            for seed in example.refill_seeds
        ]
    # (inputs, phase, what the call is): the first compiles, the others find it cached.
    plan = [(calls[0], "first_call", "")] + [(c, "later_calls", "") for c in calls[1:]]
    if example.other_inputs is not None:
        plan += [
            (example.other_inputs, "first_call", " (the other inputs)"),
            (example.inputs, "later_calls", " (the first inputs again)"),
        ]
    for number, (inputs, phase, what) in enumerate(plan, 1):
        try:
            check_outputs(fd, inputs, phases, phase, schedulers if number == 1 else None)
        except Mismatch as exc:
            raise Mismatch(f"call {number} of {len(plan)}{what}: {exc}") from None


def check_outputs(
    fd: Any,
    inputs: list[Any],
    phases: dict[str, float] | None = None,
    phase: str = "first_call",
    schedulers: set[str] | None = None,
) -> None:
    """One call of `fd` on `inputs` (its time added to `phases[phase]`, the schedulers it ran
    to `schedulers`), every output compared with the reference; Mismatch saying which output
    differs and how."""
    from kfuse.reference import conditioning, evaluate
    from kfuse.testing.aliases import before_call, every_output

    # Outputs written into inputs: the reference reads the inputs as they were, and those
    # outputs are compared as the inputs' storage after the call.
    called_on = inputs
    inputs = before_call(fd, inputs)
    with timed(phases, phase):
        outputs = every_output(fd, fd.execute(called_on), called_on)
    if schedulers is not None:
        schedulers.update(s.value for s in fd.last_program().schedulers())
    with timed(phases, "reference"):
        expected = evaluate(fd.fusion, inputs)
    try:
        with timed(phases, "compare"):
            assert_outputs_close(fd, outputs, expected, inputs)
    except AssertionError:
        # What float64 cannot judge alone (ill-conditioned results, where NaN and infinities
        # arise) is judged with the reference in the kernel's precision, and sums that
        # cancel by the magnitudes of their terms (and infinities whose sign such a
        # cancellation decides are left to it, as are products whose order decides them).
        with timed(phases, "reference"):
            same = evaluate(fd.fusion, inputs, accumulate="same")
            cond = conditioning(fd.fusion, inputs)
        try:
            with timed(phases, "compare"):
                assert_outputs_close(
                    fd,
                    outputs,
                    expected,
                    inputs,
                    alternative=same,
                    magnitudes=cond.magnitudes,
                    indeterminate=cond.indeterminate,
                    order_decides=cond.order_decides,
                )
        except AssertionError as exc:
            raise Mismatch(str(exc)) from None


def outcome_of(exc: BaseException | None) -> str:
    """The OUTCOMES entry an example that raised `exc` (None: nothing) ends in."""
    if exc is None:
        return "passed"
    if isinstance(exc, AssertionError):
        return "mismatch"
    if isinstance(exc, KfuseError):
        return "kfuse_error"
    return "raw_error"
