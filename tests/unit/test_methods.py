"""The method interface: one base class, the METHODS registry, labels and entries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

import hbvm_core as hc
from hbvm_core.errors import ConfigError
from hbvm_core.methods import DOP853, HBVM, METHODS, RATTLE, Method, PolynomialHBVM, method_from_entry, method_label

ENTRIES = [
    ({"k": 6, "s": 2}, HBVM, "hbvm_k6_s2", "HBVM(6,2)"),
    ({"k": 6, "s": 2, "solver": "blended"}, HBVM, "hbvm_k6_s2_blended", "HBVM(6,2)"),
    ({"k": 4, "s": 2, "warm_start": "p0"}, HBVM, "hbvm_k4_s2_ws-p0", "HBVM(4,2)"),
    ({"k": 6, "s": 3, "multiplier": "polynomial", "projection": True}, PolynomialHBVM, "hbvm_k6_s3_poly_proj",
     "HBVM(6,3)-poly-proj"),
    ({"method": "rattle"}, RATTLE, "rattle", "RATTLE"),
    ({"method": "dop853", "rtol": 1e-8, "projection": True}, DOP853, "dop853_rtol1e-08_proj", "DOP853(1e-08)-proj"),
]  # fmt: skip


@pytest.mark.parametrize("entry,cls,label,name", ENTRIES, ids=[e[2] for e in ENTRIES])
def test_every_method_implements_the_interface(entry, cls, label, name):
    method = method_from_entry(entry)
    assert type(method) is cls and isinstance(method, Method)
    assert method.name == name and method.label() == label == method_label(entry)
    assert method_from_entry(method.entry()) == method
    assert method.attrs()["method"] == entry.get("method", "hbvm")


def test_compiled_runner_is_none_where_there_is_no_compiled_loop(planar):
    assert DOP853().compiled_runner(planar) is None
    assert RATTLE().compiled_runner(planar) is not None  # the planar pendulum has a compiled g
    user = hc.get_problem("tests.user_problems:double_pendulum")
    assert RATTLE().compiled_runner(user) is None
    assert HBVM(2, 2).compiled_runner(hc.get_problem("tests.user_problems:double_pendulum")) is None


def test_registry_names_the_methods_in_its_error():
    assert set(METHODS) == {"hbvm", "rattle", "dop853", "ida"}
    with pytest.raises(ConfigError, match=r"method = 'euler': unknown method \(expected hbvm, rattle, dop853 or ida\)"):
        method_from_entry({"method": "euler"})


def test_the_schema_method_entry_is_built_from_what_the_methods_declare(monkeypatch):
    """A method's ENTRY_KEYS are the config schema's method entry keys: a new method's keys are checked at once."""
    from hbvm_core.methods import EntryKey
    from hbvm_workflow.schema import schema, validate_config

    props = schema()["$defs"]["method"]["properties"]
    assert {key for cls in METHODS.values() for key in cls.ENTRY_KEYS} | {"method", "label"} <= set(props)

    @dataclass(frozen=True)
    class Damped(RATTLE):
        theta: float = 0.5
        method_name: ClassVar[str] = "damped"
        ENTRY_KEYS: ClassVar[dict] = {"theta": EntryKey({"type": "number", "minimum": 0}, 0.5, "damping")}

    monkeypatch.setitem(METHODS, "damped", Damped)
    assert schema()["$defs"]["method"]["properties"]["theta"] == {"description": "damping (default 0.5)",
                                                                   "type": "number", "minimum": 0}  # fmt: skip
    study = {"problem": "planar_pendulum", "t_end": 1, "h": [0.1], "errors": {"reference": "exact"}}
    config = {"studies": {"s": {**study, "methods": [{"method": "damped", "theta": 0.1}]}}}
    validate_config(config)
    assert config["studies"]["s"]["methods"][0] == {"method": "damped", "theta": 0.1}  # no default filled in
    bad = {"studies": {"s": {**study, "methods": [{"method": "damped", "theta": -1}]}}}
    with pytest.raises(ConfigError, match=r"methods\[0\]\.theta = -1"):
        validate_config(bad)
    assert method_from_entry({"method": "damped", "theta": 0.25}).theta == 0.25
