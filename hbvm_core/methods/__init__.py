"""Integration methods. Each one is a small object that builds a per-problem stepper."""

from .hbvm import HBVM, HBVMStepper

__all__ = ["HBVM", "HBVMStepper"]
