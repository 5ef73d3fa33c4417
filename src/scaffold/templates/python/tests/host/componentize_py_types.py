"""The types componentize-py gives handlers (`Ok`, `Err`, `Some`, `Result`), for tests
outside a component."""

from dataclasses import dataclass
from typing import Generic, TypeVar, Union

S = TypeVar("S")


@dataclass
class Some(Generic[S]):
    """The present case of a nested option."""

    value: S


T = TypeVar("T")


@dataclass
class Ok(Generic[T]):
    """The success case of a `result`."""

    value: T


E = TypeVar("E")


@dataclass(frozen=True)
class Err(Generic[E], Exception):
    """The failure case of a `result`: raised for an error, `value` is its message."""

    value: E


Result = Union[Ok[T], Err[E]]
