"""A config's ``problem:`` mapping of formulas: the plain form (``expressions.Model``: a list of coordinates) or the
indexed form (``indexed.IndexedModel``: ``coordinates`` a mapping of ranges), chosen by its ``coordinates``."""

from __future__ import annotations

from collections.abc import Callable

from . import expressions
from .indexed import KEYS, REQUIRED, IndexedModel, is_indexed
from .problem import Problem


def _form(mapping) -> tuple | None:
    return (IndexedModel, KEYS, REQUIRED) if is_indexed(mapping) else None


def model_from_mapping(mapping: dict):
    """The model of the mapping (``expressions.model_from_mapping``: checked, memoised by its text)."""
    return expressions.model_from_mapping(mapping, _form(mapping))


def factory(mapping: dict) -> Callable[..., Problem]:
    """A problem factory for the mapping: its keywords are the mapping's parameters (a study's ``grid`` keys)."""
    return expressions.factory(mapping, _form(mapping))


__all__ = ["factory", "model_from_mapping"]
