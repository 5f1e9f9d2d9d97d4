"""A user module that fails to import (the reliability tests: ``broken_problems:anything``)."""

raise RuntimeError("this module is broken on purpose")
