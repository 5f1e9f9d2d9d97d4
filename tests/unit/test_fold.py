"""``kernels.fold.fold_constants``: branches on compile-time constants taken out of a generated module's text.
The expected texts are written by hand: the branch each constant selects, at the ``if``'s indentation."""

from __future__ import annotations

import textwrap

from hbvm_core.kernels.fold import fold_constants

TEMPLATE = textwrap.dedent(
    """\
    FIXED_POINT, BLENDED = 0, 1
    HAS_M = False
    SOLVER = 0


    def step(x, y):
        if SOLVER == FIXED_POINT:  # the sweep
            y = 1
            if HAS_M:
                y += 2
            else:
                y -= 2
        elif SOLVER == BLENDED:
            y = 3
        else:
            y = 4
        if not HAS_M and NU_SIZE > 0:
            y *= 5
        if x > 0:  # a run-time test: kept
            y = 6
        return y
    """
)


def test_the_branch_the_constants_select_is_kept_at_the_if_s_indentation():
    got = fold_constants(TEMPLATE, {"SOLVER": 1, "HAS_M": True, "NU_SIZE": 3})
    body = got[got.index("def step") :]
    assert body == textwrap.dedent(
        """\
        def step(x, y):
            y = 3
            pass
            if x > 0:  # a run-time test: kept
                y = 6
            return y
        """
    )
    got = fold_constants(TEMPLATE, {"SOLVER": 0, "HAS_M": False, "NU_SIZE": 2})
    assert got[got.index("def step") :] == textwrap.dedent(
        """\
        def step(x, y):
            y = 1
            y -= 2
            y *= 5
            if x > 0:  # a run-time test: kept
                y = 6
            return y
        """
    )


def test_the_module_s_own_codes_count_as_constants_unless_a_function_assigns_them():
    # SOLVER not given: the template's own SOLVER = 0 selects (nothing rebinds it); NU_SIZE unbound: kept
    got = fold_constants(TEMPLATE, {"HAS_M": True})
    # and `not HAS_M and NU_SIZE > 0` is false whatever NU_SIZE is
    assert got[got.index("def step") :].startswith("def step(x, y):\n    y = 1\n    y += 2\n    pass\n    if x > 0")
    got = fold_constants(TEMPLATE.replace("HAS_M = False\n", ""), {})
    assert "    if HAS_M:\n" in got and "if not HAS_M and NU_SIZE > 0:" in got  # unbound names: kept
    none = "G = None\n\n\ndef f(x):\n    if G == None:\n        x = 2\n    return x\n"
    assert fold_constants(none, {}) == none  # a placeholder None (a callback the module binds later): kept
    # a name a function assigns is not a constant
    source = "A = 1\n\n\ndef f(x):\n    if A == 1:\n        x = 2\n    A = 3\n    return x\n"
    assert fold_constants(source, {}) == source
    twice = "A = 1\nA = 2\n\n\ndef f(x):\n    if A == 1:\n        x = 2\n    return x\n"
    assert fold_constants(twice, {}) == twice  # bound twice: no single value
    augmented = "A = 1\nA += 1\n\n\ndef f(x):\n    if A == 1:\n        x = 2\n    return x\n"
    assert fold_constants(augmented, {}) == augmented  # rebound at module level: not the literal


def test_an_elif_taken_becomes_an_if_and_a_continued_string_is_not_moved():
    source = "def f(x):\n    if C == 0:\n        x = 1\n    elif x > 2:\n        x = 3\n    return x\n"
    assert fold_constants(source, {"C": 1}) == "def f(x):\n    if x > 2:\n        x = 3\n    return x\n"
    text = 'def f(x):\n    if C:\n        s = """a\nb"""\n    return x\n'  # the string's second line at column 0
    assert fold_constants(text, {"C": True}) == text


def test_the_folded_function_computes_what_the_template_computes():
    for solver in (0, 1, 2):
        for has_m in (False, True):
            constants = {"SOLVER": solver, "HAS_M": has_m, "NU_SIZE": 1}
            results = []
            for text in (TEMPLATE, fold_constants(TEMPLATE, constants)):
                namespace: dict = {}
                exec(compile(text, "<template>", "exec"), namespace)  # noqa: S102
                namespace.update(constants)  # as the generated module binds them, after the template's text
                results.append([namespace["step"](x, 0) for x in (-1, 1)])
            assert results[0] == results[1], constants
