"""docs/baselines.md's table of methods, generated from the methods' own declarations.

    python -m hbvm_core.methods.table      # prints the table (tests/unit/test_docs.py checks the page has it)

One row per entry a registered method declares in ``EXAMPLES``: the entry, its ``summary``, its claimed
orders (``orders``: q, p, lambda) and what it conserves to round-off (``conserves``).
"""

from __future__ import annotations

from . import method_from_entry, registered

NAMES = {"H": "H", "g": "g", "hidden": "hidden constraint"}


def _value(v) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def entry_yaml(entry: dict) -> str:
    """An entry as a config writes it: {method: dop853, rtol: 1e-08, projection: false}."""
    return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in entry.items()) + "}"


def markdown() -> str:
    """The table, one row per example entry of every registered method."""
    lines = [
        "| entry | method | orders in h of q, p, lambda | conserved to round-off |",
        "|---|---|---|---|",
    ]
    for cls in registered():
        for entry in cls.EXAMPLES:
            method = method_from_entry(entry)
            orders = method.orders
            if all(v is None for v in orders.values()):
                claimed = "none: the error follows rtol"
            else:
                claimed = ", ".join(_value(orders[key]) for key in ("q", "p", "lam"))
            kept = ", ".join(NAMES[key] for key in NAMES if key in method.conserves) or "none"
            lines.append(f"| `{entry_yaml(entry)}` | {method.summary} | {claimed} | {kept} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
