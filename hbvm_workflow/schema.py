"""The config schema (``schema.yaml``, shipped in this package): its defaults and one validation.

The schema is the only place config defaults live; ``defaults`` reads them back for the
code that needs them, and ``validate_config`` fills them in. ``loading.load_studies`` is
the entry point that uses both. A method entry's own keys are not in the file: ``schema``
adds those the registered methods declare (``Method.ENTRY_KEYS``, ``method_entry_keys``),
and the study's ``kind`` and ``plot`` values of the study kinds (``kinds.KINDS``).
"""

from __future__ import annotations

import copy
import os
from functools import cache
from pathlib import Path
from typing import Any

from hbvm_core.errors import ConfigError, did_you_mean

from .kinds import KINDS, plot_names

#: The config schema, shipped inside the package.
SCHEMA = Path(__file__).resolve().parent / "schema.yaml"


@cache
def _schema(path: str) -> dict:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, where PyYAML has it: 10x faster
    with open(path) as fh:
        return yaml.load(fh, Loader=loader)  # noqa: S506 - a safe loader (the shipped schema)


def schema(path: str | os.PathLike | None = None) -> dict:
    """The schema as a dict (a copy: callers may not change the cached one), with the method entry's keys
    of every registered method."""
    path = Path(path) if path is not None else SCHEMA
    if not path.exists():
        raise ConfigError(f"config schema {str(path)!r} not found")
    doc = copy.deepcopy(_schema(str(path)))
    method = doc.get("$defs", {}).get("method")
    if method is not None:
        method["properties"] = {**method_entry_keys(), **method.get("properties", {})}
    study = doc.get("$defs", {}).get("study", {}).get("properties", {})
    if "kind" in study and "plot" in study:  # the study kinds' registry (hbvm_workflow.kinds)
        study["kind"]["enum"] = list(KINDS)
        study["plot"]["enum"] = plot_names()
    return doc


def method_entry_keys() -> dict[str, dict]:
    """key -> schema fragment of every key a registered method's entry takes (``Method.ENTRY_KEYS``); a key
    two methods type differently takes either type."""
    from hbvm_core.methods import METHODS

    found: dict[str, list[dict]] = {}
    for cls in METHODS.values():
        for key, declared in cls.ENTRY_KEYS.items():
            fragment = declared.schema()
            types = found.setdefault(key, [])
            if all(f != fragment for f in types):
                types.append(fragment)
    return {key: types[0] if len(types) == 1 else {"anyOf": types} for key, types in found.items()}


def defaults(section: str) -> dict[str, Any]:
    """The schema's defaults of one section: ``top`` (top-level keys) or a ``$defs`` name (study, limits, ...)."""
    doc = schema()
    node = doc if section == "top" else doc.get("$defs", {}).get(section) or doc["properties"][section]
    return {k: v["default"] for k, v in node.get("properties", {}).items() if isinstance(v, dict) and "default" in v}


def _validator(doc: dict):
    """A Draft 2020-12 validator that fills in each ``properties`` default it passes (as Snakemake's validate)."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    check_properties = base.VALIDATORS["properties"]

    def properties(validator, props, instance, subschema):
        if isinstance(instance, dict):
            for key, sub in props.items():
                if isinstance(sub, dict) and "default" in sub:
                    instance.setdefault(key, copy.deepcopy(sub["default"]))
        yield from check_properties(validator, props, instance, subschema)

    return jsonschema.validators.extend(base, {"properties": properties})(doc)


#: the most values (mappings, lists and scalars, each alias counted as the copy it stands for) a config may hold
MAX_CONFIG_VALUES = 100_000


def expanded_size(value, memo: dict | None = None) -> int:
    """The number of values ``value`` holds once every YAML alias is a copy (a block aliased k times counts k
    times): computed once per distinct object, so a 'billion laughs' file is measured in the time of its text."""
    memo = {} if memo is None else memo
    key = id(value)
    if key in memo:
        return memo[key]
    memo[key] = 1  # a cycle (not from YAML) counts once
    if isinstance(value, dict):
        n = 1 + sum(expanded_size(k, memo) + expanded_size(v, memo) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        n = 1 + sum(expanded_size(v, memo) for v in value)
    else:
        n = 1
    memo[key] = n
    return n


def validate_config(config: dict, schema_path: str | os.PathLike | None = None) -> dict:
    """Check ``config`` against the schema and fill in its defaults (in place); ConfigError naming the key."""
    import jsonschema

    try:
        size = expanded_size(config)
    except RecursionError:
        raise ConfigError("config: nested too deeply (thousands of levels of mappings or lists)") from None
    if size > MAX_CONFIG_VALUES:
        raise ConfigError(
            f"config: expands to {size:.3g} values, more than {MAX_CONFIG_VALUES} (YAML anchors and aliases repeating "
            "a block many times?): write the studies out, or split the config"
        )
    error = jsonschema.exceptions.best_match(_validator(schema(schema_path)).iter_errors(config))
    if error is not None:
        raise ConfigError(describe(_deepest(error)))
    return config


def _deepest(error):
    """Where ``best_match`` stops at a oneOf/anyOf whose alternatives fail equally (two errors at one key: a
    missing and an unknown key), the deepest of them, an unknown key first: the line names the key at fault."""
    while error.validator in ("oneOf", "anyOf") and error.context:
        error = max(error.context, key=lambda e: (len(e.absolute_path), e.validator == "additionalProperties"))
    return error


def describe(error) -> str:
    """A one-line description of a jsonschema error: 'config: studies.t1.methods[0]: ...'."""
    where = "config"
    for part in error.absolute_path:
        where += f"[{part}]" if isinstance(part, int) else f".{part}"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        what = "unknown key" if len(extra) == 1 else "unknown keys"
        hint = f" (expected one of {', '.join(allowed)})" if allowed else ""
        return f"{where}: {what} {', '.join(map(repr, extra))}{hint}{did_you_mean(extra[0], allowed)}"
    if error.validator == "propertyNames" or "propertyNames" in error.schema_path:
        return f"{where}: bad name {error.instance!r} (letters, digits, _ and -, starting with a letter or digit)"
    if error.validator == "required":
        return f"{where}: {error.message}"
    if error.validator == "pattern" and "description" in error.schema:
        return f"{where} = {error.instance!r}: expected {error.schema['description']}"
    return f"{where} = {error.instance!r}: {error.message}"
