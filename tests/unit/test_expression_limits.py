"""Expressions that cost too much are refused in one line within seconds: their nesting, their size with their
derivatives, the time sympy may spend on them; and a config that YAML aliases expand to a huge structure."""

from __future__ import annotations

import threading
import time

import pytest
import yaml

import hbvm_core as hc
from hbvm_core import expressions
from hbvm_core.errors import ConfigError
from hbvm_workflow.schema import MAX_CONFIG_VALUES, expanded_size, validate_config

CIRCLE = {"q0": [0.6, -0.8], "p0": [0.8, 0.6]}  # on x^2 + y^2 = 1, p tangent


def product(n: int) -> str:
    """A constraint whose d2g has some n^2 terms of n factors: (x + y)(x + 2y)...(x + (n-1)y) + x^2 + y^2 - 1 (its
    size is refused before the initial data are checked)."""
    return "*".join(f"(x + {i}*y)" for i in range(1, n)) + " + x**2 + y**2 - 1"


def timed(f):
    """Runs f; ``timed.seconds``: the CPU seconds it took (this process's CPU, not the wall clock: the bounds are
    on the work done, and hold on a loaded machine, or beside other test workers)."""
    t0 = time.process_time()
    try:
        f()
    finally:
        timed.seconds = time.process_time() - t0


def test_an_expression_nested_too_deep_is_refused_at_once():
    deep = "sin(" * (expressions.MAX_DEPTH + 5) + "y" + ")" * (expressions.MAX_DEPTH + 5)
    with pytest.raises(ConfigError, match=r"^problem\.potential: expression nested \d+ levels deep \(at most 40\)$"):
        timed(lambda: hc.from_expressions("p", ["x", "y"], deep, [0, -1], [0, 0]))
    assert timed.seconds < 1


def test_a_long_sum_is_one_level_not_deep():
    import sympy

    x = sympy.Symbol("x", real=True)
    terms = " + ".join(f"{i}*x" for i in range(1, 400))  # 399 terms written flat, within MAX_LENGTH
    assert expressions.parse(terms, {"x": x}, "problem.potential") == sum(range(1, 400)) * x  # by hand: 79800 x


def test_expressions_whose_derivatives_are_too_large_are_refused(monkeypatch):
    monkeypatch.setattr(expressions, "MAX_SECONDS", 120.0)  # the size limit under test, not the (wall) time limit
    with pytest.raises(ConfigError, match=r"^problem 'p': its expressions and their derivatives take \d+ operations"):
        timed(lambda: hc.from_expressions("p", ["x", "y"], "y", constraints=[product(24)], **CIRCLE))
    assert timed.seconds < 10


def test_sympy_work_is_bounded_in_time(monkeypatch):
    monkeypatch.setattr(expressions, "MAX_SECONDS", 1.0)
    with pytest.raises(ConfigError, match=r"^problem 'p': sympy took more than 1 s to derive and simplify it"):
        timed(lambda: hc.from_expressions("p", ["x", "y"], "y", constraints=[product(60)], **CIRCLE))
    assert timed.seconds < 4  # 1 s and the time to unwind
    # outside the main thread (a Dask worker's) there is no alarm: a small problem builds there as here
    out = {}
    worker = threading.Thread(
        target=lambda: out.update(
            pb=hc.from_expressions("c", ["x", "y"], "y", constraints=["x**2 + y**2 - 1"], **CIRCLE)
        )
    )
    worker.start()
    worker.join(60)
    assert out["pb"].nu == 1


BILLION_LAUGHS = """
a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
studies:
  t: {problem: planar_pendulum, methods: [{k: 1, s: 1}], errors: {reference: exact}, title: *h}
"""


def test_a_config_that_aliases_expand_to_a_huge_structure_is_refused():
    config = yaml.safe_load(BILLION_LAUGHS)
    with pytest.raises(ConfigError, match=r"^config: expands to 2\.35e\+08 values, more than 100000 \(YAML anchors"):
        timed(lambda: validate_config(config))
    assert timed.seconds < 1
    # the count, by hand: h holds 10 g's ..., a holds 10 scalars: 1 + 10 + ... + 10^8 lists and scalars under h;
    # the config holds a to h and h once more as the title: about 2 x 1.11e8 + 1.23e7 = 2.35e8
    assert expanded_size(config["h"]) == sum(10**i for i in range(9))
    small = {
        "studies": {
            "t": {"problem": "planar_pendulum", "methods": [{"k": 1, "s": 1}], "errors": {"reference": "exact"}}
        }
    }
    assert expanded_size(small) < MAX_CONFIG_VALUES and validate_config(small)["studies"]["t"]["kind"] == "convergence"
