"""Loading a config into studies: ``load_studies(config)`` is the one entry point of the Snakefile and every job script.

It checks the config against the packaged schema once, filling in its defaults
(``schema.validate_config``), and expands every study into typed ``study.Study``
objects. A bad key or value is a ConfigError whose one line names it.
"""

from __future__ import annotations

import os

from hbvm_core.errors import ConfigError, did_you_mean

from .schema import SCHEMA, defaults, validate_config
from .study import Study, check_limits, expand_study

__all__ = ["SCHEMA", "defaults", "load_studies", "validate_config"]


def load_studies(config: dict, schema_path: str | os.PathLike | None = None, names=None) -> dict[str, Study]:
    """Validate ``config`` once (defaults filled in) and expand its studies (all, or ``names``) into
    ``study.Study`` objects; check the limits of the whole set. ConfigError naming the key on bad input.

    The modules of ``method_modules`` are imported first: the methods they register are part of the schema."""
    from hbvm_core.methods import load_method_modules

    if config.get("method_modules") is not None:
        load_method_modules(config["method_modules"])
    validate_config(config, schema_path)
    studies = config.get("studies") or {}
    if not isinstance(studies, dict) or not studies:
        raise ConfigError("config: studies: expected at least one study")
    for name in config.get("select") or []:
        if name not in studies:
            hint = did_you_mean(name, studies)
            raise ConfigError(f"config: select: unknown study {name!r} (studies are {', '.join(studies)}){hint}")
    results = config["results"]
    wanted = list(studies) if names is None else list(names)
    out = {name: expand_study(name, studies[name], results=results) for name in wanted}
    check_limits(out, config.get("limits") or {}, results)
    return out
