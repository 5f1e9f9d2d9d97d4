"""``python -m hbvm_workflow list [problems|methods|studies]``: what a config can name, and where its studies stand.

- problems: the built-in problems with their parameters (keywords of the factory, with defaults);
- methods: the method entries' ``method`` values with the keys each takes;
- studies: the config's studies with their runs, and how many are computed (by the last solve), reused
  (stored before it), failed, damaged or missing (never computed, or computed for other parameters).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os

from .layout import manifest_path
from .loading import load_studies
from .script_support import plural
from .store_kinds import store_kind


def _first_line(obj) -> str:
    """The first sentence of the docstring's first paragraph."""
    para = " ".join((inspect.getdoc(obj) or "").split("\n\n")[0].split())
    return para.split(". ")[0].split(": ")[0].rstrip(".")


def problems() -> list[str]:
    """One line per built-in problem: name, parameters with their defaults, and what it is."""
    from hbvm_core.problems import BUILTIN

    lines = []
    for name, factory in BUILTIN.items():
        params = ", ".join(
            f"{p.name}={p.default!r}" if p.default is not inspect.Parameter.empty else p.name
            for p in inspect.signature(factory).parameters.values()
        )
        lines.append(f"{name}({params})  {_first_line(factory)}")
    return lines


def method_keys(cls) -> list[str]:
    """The entry keys a method class takes (besides ``method``): those it declares (``ENTRY_KEYS``) where
    it does, else its dataclass fields; for HBVM those of each multiplier variant, and ``multiplier``."""
    from hbvm_core.methods.hbvm import HBVMBase

    variants = getattr(cls, "variants", None)
    classes = list(variants()) if callable(variants) else []
    if not classes:
        classes = list(HBVMBase.VARIANTS.values()) if cls is HBVMBase else [cls]
    keys = ["multiplier"] if cls is HBVMBase else []
    for c in [cls, *classes]:
        declared = getattr(c, "ENTRY_KEYS", None)
        if isinstance(declared, dict) and declared:
            names = list(declared)
        elif dataclasses.is_dataclass(c):
            names = [f.name for f in dataclasses.fields(c) if f.init and f.name != "rule"]  # rule: rtol, max_iter
        else:
            names = []
        keys += [k for k in names if k not in keys]
    return keys


def methods() -> list[str]:
    """One line per method: the entry's ``method`` value, its keys, and what it is."""
    from hbvm_core.methods import METHODS

    lines = []
    for method_name, cls in METHODS.items():
        keys = ", ".join(method_keys(cls))
        summary = getattr(cls, "SUMMARY", "") or _first_line(cls)
        lines.append(f"{method_name}: keys {keys or '(none)'}  {summary}")
    lines.append("(method: hbvm is the default: {k: 2, s: 2} is an HBVM entry)")
    return lines


def study_status(study) -> dict[str, int]:
    """Counts of the study's runs: computed (by the last solve), reused, failed, damaged, missing (its kind of
    store's ``counts`` of its manifest)."""

    try:
        with open(manifest_path(study.results, study.name)) as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        record = {}
    return store_kind(study).counts(record)


def studies(config: dict) -> list[str]:
    """One line per study of the config: name, kind, problem, runs and their status."""

    lines = []
    for name, study in load_studies(config).items():
        jobs = getattr(study, "jobs", {}) or {}
        counts = study_status(study)
        status = ", ".join(f"{n} {what}" for what, n in counts.items())
        lines.append(f"{name} ({study.study_kind}, {study.problem}): {plural(len(jobs), 'run')}: {status}")
    return lines


def load_config(path: str | None) -> dict:
    """The config file (default: config/config.yaml under the working directory), as the workflow reads it."""
    import yaml

    from hbvm_core.errors import ConfigError

    path = path or os.path.join("config", "config.yaml")
    try:
        with open(path) as fh:
            config = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise ConfigError(f"--configfile {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--configfile {path}: not YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(config, dict):
        raise ConfigError(f"--configfile {path}: expected a mapping of keys")
    return config
