"""Exceptions raised by Prism: every bad input ends in one of these, never a bare traceback."""

from __future__ import annotations

__all__ = [
    "PrismError",
    "GraphError",
    "ShapeError",
    "DTypeError",
    "MappingError",
    "ConstraintError",
    "InputError",
    "SerializationError",
    "VerificationError",
    "IllFormedTerm",
    "UnsupportedOp",
    "CodegenError",
    "check_positive",
]


class PrismError(Exception):
    """Base class: catch this to handle every error Prism raises on purpose."""


class GraphError(PrismError):
    """A graph is malformed: no output, a cycle, a tensor from another graph, a bad phase."""


class ShapeError(GraphError):
    """Operand shapes do not fit an op (inner dims of a matmul, broadcasting, ranks)."""


class DTypeError(GraphError):
    """An unknown dtype, or operands whose dtypes disagree."""


class MappingError(GraphError):
    """A block graph's imap/fmap/omap or grid/loop size is invalid for the tensors it maps."""


class ConstraintError(MappingError):
    """A graph's parallel sizes break a size constraint its proof needs (prism.ir.sizes): at those sizes it
    is not the program it was proved equal to, so it must not run. Also a constraint that is itself bad."""


class InputError(PrismError):
    """Tensors handed to a graph at run time do not match its inputs (count, shape, dtype, device)."""


class SerializationError(PrismError):
    """A serialized graph is corrupt, of an unknown version, or inconsistent with itself."""


class VerificationError(PrismError):
    """The verifier was asked something it cannot answer (as opposed to answering 'not equal')."""


class UnsupportedOp(PrismError):
    """A torch program uses an op, or an op in a way, that Prism cannot express (prism.from_torch). `node`: the
    FX node it failed at, where known (the backend then keeps what comes after it)."""

    node = None


class CodegenError(PrismError):
    """A graph, or a launch of it, that code generation cannot (yet) turn into Triton; the message says which
    part."""


class IllFormedTerm(VerificationError):
    """A verification term means nothing: a dim that is not there, a parallel dim split twice or combined
    when not live, operands that do not broadcast. Raised when the term is built, before any proof.

    `need`: where the term means something for some parallel sizes only, what those sizes must satisfy
    (a prism.verify.size_constraints.Need, from which a proof under size constraints starts); None otherwise."""

    def __init__(self, message: str, need: object = None) -> None:
        super().__init__(message)
        self.need = need


def check_positive(who: str, name: str, value: object, whole: bool = False) -> None:
    """Raise InputError unless `value` is a positive number (a positive int if `whole`): a zero or
    negative limit would silently do nothing, or be changed behind the caller's back."""
    kinds = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not value > 0:  # NaN fails `> 0` too
        raise InputError(f"{who}: {name} must be a positive {'whole number' if whole else 'number'}, got {value!r}")
