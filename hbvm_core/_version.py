"""The package version (one place; hbvm_core.__version__ re-exports it)."""

__version__ = "0.1.0"
