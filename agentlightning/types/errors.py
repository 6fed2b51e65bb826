"""Exception types shared by the data types and the layers above them."""

from __future__ import annotations

__all__ = ["ArgumentTypeError"]


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type: a `TypeError`, and also the `ValueError` v0.3 raised in these places.

    So code written for v0.3 (`except ValueError`) and code expecting Python's convention (`except TypeError`)
    both catch it.
    """
