"""LDP primitives: k-RR, the exponential mechanism and the square wave (one module each)."""

from udfs.mechanisms.exponential import ExponentialMechanism
from udfs.mechanisms.krr import KRR
from udfs.mechanisms.square_wave import SquareWave

__all__ = ["KRR", "ExponentialMechanism", "SquareWave"]
